//! The private network namespace starts with loopback down; bring it up so local IPC over
//! 127.0.0.1 inside the sandbox keeps working (with `--network none` seccomp still refuses
//! non-AF_UNIX sockets; with `--network gateway` the runner's listeners live on it, see
//! [`super::gateway`]).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::step::{StepFailure, restriction};

/// Sets `lo` up (`ioctl(SIOCGIFFLAGS/SIOCSIFFLAGS)`).
pub fn loopback_up() -> Result<(), StepFailure> {
    // SAFETY: socket() takes plain integers and returns a new descriptor or -1.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(StepFailure::io(
            restriction::NETWORK,
            "socket",
            "open a socket for loopback",
            &std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `raw` is a descriptor we just received and own.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: ifreq is plain old data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq for the duration of both ioctls.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) };
    if rc < 0 {
        return Err(StepFailure::io(
            restriction::NETWORK,
            "ioctl(SIOCGIFFLAGS)",
            "read the loopback flags",
            &std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: ifru_flags is the active union member after SIOCGIFFLAGS.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: as above.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) };
    if rc < 0 {
        return Err(StepFailure::io(
            restriction::NETWORK,
            "ioctl(SIOCSIFFLAGS)",
            "bring the loopback up",
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}
