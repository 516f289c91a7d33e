//! Bring the loopback interface of a new network namespace up, and listen
//! on it.

use std::os::fd::AsRawFd;

use nix::errno::Errno;
use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};

/// Set IFF_UP on `lo` in the current network namespace.
pub fn loopback_up() -> nix::Result<()> {
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is a plain C struct for which all-zero bytes are valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface named in `req` and writes its
    // flags into the union; `req` is a valid, writable ifreq.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) })?;
    // SAFETY: the union's ifru_flags member was just filled in by the kernel.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads `req` (interface name and flags) only.
    Errno::result(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) })?;
    Ok(())
}

/// A listening TCP socket on 127.0.0.1:`port` of the current network
/// namespace, non-blocking and close-on-exec.
pub fn listen_on_loopback(port: u16) -> nix::Result<std::os::fd::OwnedFd> {
    use nix::sys::socket::{bind, listen, Backlog, SockaddrIn};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?;
    bind(sock.as_raw_fd(), &SockaddrIn::new(127, 0, 0, 1, port))?;
    listen(&sock, Backlog::new(1024).unwrap_or(Backlog::MAXCONN))?;
    Ok(sock)
}
