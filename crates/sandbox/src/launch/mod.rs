//! The launcher: the single-threaded process that forks one supervisor per
//! daemon run, so no sandbox is ever cloned from the daemon's threads.
pub mod launcher;
pub mod protocol;
pub mod supervisor;
pub mod warm;
pub mod wire;
