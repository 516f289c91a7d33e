//! Installing seccomp filters compiled by [`crate::seccomp`].

/// Set no_new_privs and install each BPF program, in order.
pub fn install_filters(programs: &[Vec<libc::sock_filter>]) -> nix::Result<()> {
    nix::sys::prctl::set_no_new_privs()?;
    for program in programs {
        let prog = libc::sock_fprog {
            len: program.len() as libc::c_ushort,
            filter: program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `prog` points at `program`, which is alive for the call; the
        // kernel copies the filter and keeps no pointer to it.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &prog as *const libc::sock_fprog,
            )
        };
        nix::errno::Errno::result(ret)?;
    }
    Ok(())
}
