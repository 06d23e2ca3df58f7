//! The few raw syscalls the sandbox needs that `nix` does not wrap, each behind a small safe
//! function that maps the libc result to an `io::Error`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Opens a pidfd for `pid` (`pidfd_open(2)`, Linux 5.3+).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches no
    // memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd)
        .map_err(|_| io::Error::other("pidfd_open returned an out-of-range fd"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind `pidfd` (`pidfd_send_signal(2)`).
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: a valid pidfd, a signal number, a null siginfo (kernel fills a default) and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A reaped child: its pid, raw wait status and resource usage.
#[derive(Clone, Copy, Debug)]
pub struct Reaped {
    /// The child's pid.
    pub pid: i32,
    /// The raw `wait` status.
    pub status: i32,
}

/// Outcome of a non-blocking `wait4(-1, WNOHANG)`.
#[derive(Clone, Copy, Debug)]
pub enum WaitAny {
    /// A child was reaped.
    Reaped(Reaped),
    /// Children exist but none has changed state.
    StillRunning,
    /// There are no children left (`ECHILD`).
    NoChildren,
}

/// Reaps any one exited child without blocking.
pub fn wait_any_nohang() -> io::Result<WaitAny> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; a null rusage pointer is allowed.
        let pid = unsafe {
            libc::wait4(
                -1,
                &mut status,
                libc::WNOHANG | libc::__WALL,
                std::ptr::null_mut(),
            )
        };
        if pid > 0 {
            return Ok(WaitAny::Reaped(Reaped { pid, status }));
        }
        if pid == 0 {
            return Ok(WaitAny::StillRunning);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(WaitAny::NoChildren),
            _ => return Err(err),
        }
    }
}

/// Resource usage of all reaped children of this process (`getrusage(RUSAGE_CHILDREN)`).
pub fn rusage_children() -> io::Result<libc::rusage> {
    // SAFETY: rusage is plain old data; all-zero is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer for the duration of the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usage)
}

/// Marks every descriptor from `first` upwards close-on-exec (`close_range(2)` with
/// `CLOSE_RANGE_CLOEXEC`), so nothing the process inherited crosses the coming `execve`.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags of this process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // Older kernels: walk /proc/self/fd instead.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &RawFd| u32::try_from(*fd).is_ok_and(|fd| fd >= first))
        .collect();
    for fd in fds {
        // SAFETY: setting FD_CLOEXEC on a descriptor number is harmless even if it was closed
        // meanwhile (EBADF is ignored).
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Sets every catchable signal back to its default disposition and unblocks all signals, so the
/// command starts with a clean signal state whatever the runner inherited or ignored.
pub fn reset_signals() -> io::Result<()> {
    for sig in 1..=31 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no memory-safety implications.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an all-empty set is valid; sigprocmask reads it and writes no old set.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
