//! The init's system calls that std and the landlock crate do not wrap.

use sandbox_oci_init::Instruction;

/// Set no_new_privs: required before an unprivileged process may install a
/// seccomp filter or restrict itself with Landlock.
pub fn set_no_new_privs() -> std::io::Result<()> {
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only and changes
    // nothing but this process's no_new_privs bit.
    let ret = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The Landlock ABI version the kernel has (0 when it has none).
pub fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, a size of 0 and the VERSION
    // flag, landlock_create_ruleset reads no memory and returns a number.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0_usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    ret.max(0)
}

/// Install one seccomp program on this thread (the init has no other).
pub fn install_filter(program: &[Instruction]) -> std::io::Result<()> {
    let filter: Vec<libc::sock_filter> = program.iter().copied().map(Into::into).collect();
    // A length that does not fit would be truncated into a different,
    // shorter program; the kernel's own limit is 4096 instructions.
    let len = libc::c_ushort::try_from(filter.len())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `filter`, alive for the call; the kernel
    // copies the program and keeps no pointer to it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            &prog as *const libc::sock_fprog,
        )
    };
    if ret == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Write all of `bytes` to descriptor `fd`, which this process did not open
/// and must not close (the broker channel the container keeps).
pub fn write_all_to(fd: i32, mut bytes: &[u8]) -> std::io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice of `bytes.len()` bytes; write(2)
        // only reads it. A bad `fd` is an EBADF, not undefined behaviour.
        let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if written < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        bytes = bytes.get(written as usize..).unwrap_or_default();
    }
    Ok(())
}

/// Open `path` (absolute) with O_PATH, refusing a symbolic link at any
/// component: the image decides what its `/tmp` or working directory is,
/// and a link there (`/tmp -> /usr`) must not turn a write grant into one
/// on what it points at. None when a component is missing or is a link.
pub fn open_without_links(path: &str) -> std::io::Result<Option<std::os::fd::OwnedFd>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let Some(relative) = path.strip_prefix('/') else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let open_at = |dir: libc::c_int, name: &[u8]| -> std::io::Result<Option<OwnedFd>> {
        let name = std::ffi::CString::new(name)
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `name` is a NUL-terminated string alive for the call and
        // `dir` an open descriptor (or AT_FDCWD is never passed: the walk
        // starts from "/" opened below).
        let fd = unsafe {
            libc::openat(
                dir,
                name.as_ptr(),
                libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::ENOTDIR) => Ok(None),
                _ => Err(err),
            };
        }
        // SAFETY: openat just returned this descriptor, owned by nobody else.
        Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
    };
    let Some(mut current) = open_at(libc::AT_FDCWD, b"/")? else {
        return Ok(None);
    };
    for component in relative.split('/').filter(|c| !c.is_empty() && *c != ".") {
        if component == ".." {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        let Some(next) = open_at(current.as_raw_fd(), component.as_bytes())? else {
            return Ok(None);
        };
        let file = std::fs::File::from(next);
        if file.metadata()?.file_type().is_symlink() {
            return Ok(None);
        }
        current = OwnedFd::from(file);
    }
    Ok(Some(current))
}

/// The interfaces of this process's network namespace that are up, other
/// than loopbacks: what a process could reach a network through. A fresh
/// namespace holds `lo`, and perhaps the kernel's fallback tunnels (`sit0`,
/// `tunl0`), which stay down without CAP_NET_ADMIN.
pub fn interfaces_up() -> std::io::Result<Vec<String>> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    const SIOCGIFFLAGS: libc::Ioctl = 0x8913;
    // SAFETY: socket(2) takes integer arguments only.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socket just returned this descriptor, owned by nobody else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: if_nameindex takes no argument and returns a list the caller
    // frees with if_freenameindex, or null.
    let list = unsafe { libc::if_nameindex() };
    if list.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    let mut up = Vec::new();
    let mut failed = None;
    let mut at = list;
    loop {
        // SAFETY: `at` points into the list if_nameindex returned, which
        // ends with an entry of index 0 and a null name; the walk stops
        // there and never reads past it.
        let entry = unsafe { &*at };
        if entry.if_index == 0 || entry.if_name.is_null() {
            break;
        }
        // SAFETY: `at` is not the terminator, so the entry after it exists.
        at = unsafe { at.add(1) };
        // SAFETY: if_name is a NUL-terminated string owned by the list,
        // alive until if_freenameindex below; it is copied here.
        let name = unsafe { std::ffi::CStr::from_ptr(entry.if_name) }
            .to_bytes()
            .to_vec();
        if name.len() >= libc::IFNAMSIZ {
            failed = Some(std::io::Error::from_raw_os_error(libc::ENAMETOOLONG));
            break;
        }
        // SAFETY: an ifreq is integers, byte arrays and a pointer, all
        // valid as zeroes (the name then ends with a NUL).
        let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
        for (slot, byte) in request.ifr_name.iter_mut().zip(&name) {
            *slot = *byte as libc::c_char;
        }
        // SAFETY: SIOCGIFFLAGS reads ifr_name and writes ifr_ifru of
        // `request`, which is alive and writable for the call.
        let ret = unsafe { libc::ioctl(socket.as_raw_fd(), SIOCGIFFLAGS, &mut request) };
        if ret < 0 {
            let err = std::io::Error::last_os_error();
            // Gone since the list was read: nothing to reach through.
            if err.raw_os_error() == Some(libc::ENODEV) {
                continue;
            }
            failed = Some(err);
            break;
        }
        // SAFETY: SIOCGIFFLAGS succeeded, so ifru_flags holds the flags.
        let flags = libc::c_int::from(unsafe { request.ifr_ifru.ifru_flags } as u16);
        if flags & libc::IFF_UP != 0 && flags & libc::IFF_LOOPBACK == 0 {
            up.push(String::from_utf8_lossy(&name).into_owned());
        }
    }
    // SAFETY: `list` came from if_nameindex and is freed once; the names
    // were copied out of it.
    unsafe { libc::if_freenameindex(list) };
    match failed {
        Some(err) => Err(err),
        None => Ok(up),
    }
}

/// This process's effective group id and supplementary groups.
pub fn groups() -> std::io::Result<(u32, Vec<u32>)> {
    // SAFETY: getegid takes no argument and cannot fail.
    let effective = unsafe { libc::getegid() };
    // SAFETY: with a size of 0, getgroups writes nothing and returns how
    // many groups there are.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let Ok(size) = usize::try_from(count) else {
        return Err(std::io::Error::last_os_error());
    };
    let mut list: Vec<libc::gid_t> = vec![0; size];
    // SAFETY: `list` has room for `count` groups, the size passed, and is
    // alive and writable for the call.
    let got = unsafe { libc::getgroups(count, list.as_mut_ptr()) };
    let Ok(got) = usize::try_from(got) else {
        return Err(std::io::Error::last_os_error());
    };
    list.truncate(got);
    Ok((effective, list))
}
