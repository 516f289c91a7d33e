//! The only module with `unsafe`: thin, documented wrappers over system calls
//! that no safe crate covers the way the spawn path needs.

pub mod probe;
