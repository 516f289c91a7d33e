//! `sandbox`: run untrusted code in a layered Linux sandbox.
//!
//! The library mirrors [`std::process::Command`]: build a [`Command`], pick a
//! [`Policy`] (a built-in profile such as `strict`, or your own), and call
//! [`Command::status`] or [`Command::spawn`]. Every layer the policy marks
//! `required` is applied or the run does not start; what was actually
//! enforced is returned in a [`Report`].
#![deny(missing_docs)]
// Every unsafe block lives in `sys`, where each one states its contract.
#![deny(unsafe_code)]

pub mod action;
pub mod broker;
pub mod caps;
pub mod cgroup;
pub mod clock;
pub mod daemon;
pub mod landlock;
pub mod launch;
pub mod mcp;
pub mod net;
pub mod oci;
pub(crate) mod poll_set;
pub mod probe;
pub mod profile;
pub mod project;
pub mod safe_file;
pub mod seccomp;
pub mod skill;
pub mod spawn;
#[allow(unsafe_code)]
pub mod sys;
pub mod sysctl;

pub mod command;
pub mod environment;
pub mod jsonl;

// The fuzz targets' entry points (fuzz/), not part of the documented API.
#[doc(hidden)]
pub mod fuzzing;

pub use command::{Child, Command, ExitStatus, Finished};
pub use profile::policy::Policy;
pub use spawn::{Report, SpawnError, Stdio};
