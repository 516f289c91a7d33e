//! `sandbox-net`: a run's net process, the one way out of a sandbox with
//! an allowlist, and the client of the broker's `net.http`.
//!
//! The supervisor starts it (`sandbox::net::process`) as a program of its
//! own, outside the sandbox, in the supervisor's network namespace, and
//! speaks to it over a link (`sandbox::net::link`). It accepts the
//! sandbox's connections on the listening socket init hands over, speaks
//! HTTP CONNECT, plain HTTP forwarding and SOCKS5 ([`proxy`]), decides on
//! the name the client asked for (the core's allowlist), resolves it
//! itself and refuses addresses a name must not lead to ([`address`],
//! [`resolve`]), relays ([`splice`]), and performs the `net.http` requests
//! the broker allowed ([`fetch`]). Everything here parses what the sandbox
//! sends, so it runs confined ([`serve`]): no capabilities, files
//! read-only, the run's system call filter with exec refused.
#![deny(missing_docs)]

pub mod address;
pub mod fetch;
pub mod proxy;
pub mod resolve;
pub mod serve;
pub mod splice;

// The fuzz targets' entry points (fuzz/), not part of the documented API.
#[doc(hidden)]
pub mod fuzzing;

pub use serve::main;
