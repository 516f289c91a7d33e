//! `sandbox`: run untrusted code in a layered Linux sandbox.
//!
//! The library mirrors [`std::process::Command`]: build a [`Command`], pick a
//! [`Policy`] (a built-in profile such as `strict`, or your own), and call
//! [`Command::status`] or [`Command::spawn`]. Every layer the policy marks
//! `required` is applied or the run does not start; what was actually
//! enforced is returned in a [`Report`].
//!
//! This is the core of the workspace: the layers, the spawn path, the
//! broker and its protocol, profiles and skills. The faces (the `sandbox`
//! command line, the daemon, the MCP server and the OCI runtime) are
//! crates of their own built on it, so this one links no HTTP server,
//! database or MCP SDK.
#![deny(missing_docs)]
// Every unsafe block lives in `sys`, where each one states its contract.
#![deny(unsafe_code)]

pub mod action;
pub mod attest;
pub mod audit;
pub mod broker;
pub mod caps;
pub mod cgroup;
pub mod clock;
pub mod landlock;
pub mod launch;
pub mod learn;
pub mod mountinfo;
pub mod net;
pub mod probe;
pub mod profile;
pub mod project;
pub mod recipe;
pub mod review;
pub mod safe_file;
pub mod seccomp;
pub mod skill;
pub mod spawn;
// Private: each wrapper's safety contract is kept inside this crate. The
// faces reach the few they need through [`os`]; the workspace's own tests
// reach the rest with the `test-internals` feature, which nothing shipped
// enables.
pub mod os;
pub mod poll_set;
#[allow(unsafe_code)]
#[cfg(not(feature = "test-internals"))]
mod sys;
#[allow(unsafe_code)]
#[cfg(feature = "test-internals")]
#[doc(hidden)]
pub mod sys;
pub mod sysctl;

pub mod command;
pub mod environment;
pub mod exposure;
pub mod installed;
pub mod jsonl;
mod read_buffer;
pub mod text;

// The fuzz targets' entry points (fuzz/), not part of the documented API.
#[doc(hidden)]
pub mod fuzzing;

pub use command::{Child, Command, ExitStatus, Finished};
pub use profile::policy::Policy;
pub use spawn::{Report, SpawnError, Stdio};
