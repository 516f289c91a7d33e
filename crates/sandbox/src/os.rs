//! The operating-system helpers the faces share with the core: each a safe
//! function whose contract holds for any caller, chosen one by one from the
//! private `sys` module (whose other wrappers only the spawn path may use,
//! under contracts it keeps). Adding one here is a decision about the
//! core's public surface.

#[cfg(feature = "tokio")]
pub use crate::sys::epoll::WaitSet;
pub use crate::sys::fd::{
    adopt_inherited, adopt_inherited_socket, cloexec_from, dup_at_or_above, ensure_stdio_open,
    exec_with_placed, for_each_received_fd, redirect_standard_stream, standard_stream,
};
pub use crate::sys::fork::{die_with_spawner, fork_keeping_only, ForkError};
pub use crate::sys::fs_identity::with_fs_identity;
pub use crate::sys::reap::wait_for_prompt as reap_children_before_exit;
pub use crate::sys::signal::process_exists;
