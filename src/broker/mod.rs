//! The permission broker: the sandboxed process asks, over an inherited
//! socket, for actions it cannot do itself; the supervisor decides, performs
//! and audits them. This module holds the wire protocol so far.
pub mod grants;
pub mod permission;
pub mod prompt;
pub mod protocol;
pub mod server;
