//! The tamper-evident audit: every audit file is a set of hash chains
//! (one per run, per container, per daemon run), each line sealed by the
//! one writer ([`chain::Chain`]) and checked by the one verifier
//! ([`verify::verify`], `sandbox audit verify`). docs/src/audit.md says
//! what a chain proves and what only an anchor does.

pub mod chain;
pub mod verify;

pub use chain::Chain;
