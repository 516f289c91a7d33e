//! The Model Context Protocol face of `sandbox serve --mcp`.
pub mod shell;
