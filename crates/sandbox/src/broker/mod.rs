//! The permission broker: the sandboxed process asks, over an inherited
//! socket, for actions it cannot do itself; the supervisor decides,
//! performs and audits them. [`server`] ties the parts together.
pub mod assemble;
pub mod audit;
pub mod decision;
pub mod fs;
pub mod grants;
pub mod http;
pub mod identity;
pub mod invoke;
pub mod network;
pub use crate::profile::permission;
pub mod prompt;
pub mod protocol;
mod redact;
pub mod secrets;
pub mod server;
pub mod terminal;
pub mod text;
pub mod transport;
