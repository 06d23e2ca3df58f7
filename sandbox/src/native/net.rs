//! The private network namespace starts with loopback down; bring it up so local IPC over
//! 127.0.0.1 inside the sandbox keeps working (with `--network none` seccomp still refuses
//! non-AF_UNIX sockets; with `--network gateway` the runner's listeners live on it, see
//! [`super::gateway`]).
//!
//! Making a network namespace is the dearest step of a sandbox's set-up (the kernel registers
//! the loopback device and every per-namespace sysctl table: ~0.5 ms). [`Early`] makes it on a
//! thread of the supervisor while the supervisor does its own set-up outside (cgroups, the
//! snapshot, the git inventory, idmaps); the init then only enters it (`setns`). The thread is
//! joined before the supervisor forks, so the fork still happens in a single-threaded process.
//! A standby helper running as root makes one while it waits for its order (a round then only
//! enters it); the supervisor drops it for a plan that does not want it or has a user namespace
//! of its own.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::thread::JoinHandle;

use nix::sched::CloneFlags;

use super::step::{StepFailure, restriction};

/// A network namespace being made on a thread, with its loopback up.
#[derive(Debug)]
pub struct Early {
    thread: Option<JoinHandle<Option<OwnedFd>>>,
}

impl Early {
    /// Starts making the namespace. Nothing fails here: without a thread, or when the thread
    /// cannot make or open the namespace, [`Early::wait`] gives `None` and the init makes its
    /// own (and reports what fails).
    pub fn start() -> Early {
        let thread = std::thread::Builder::new()
            .name("ralph-netns".into())
            .stack_size(64 * 1024)
            .spawn(make)
            .ok();
        Early { thread }
    }

    /// Waits for the thread: the namespace (close-on-exec), or `None` (see [`Early::start`]).
    pub fn wait(mut self) -> Option<OwnedFd> {
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

impl Drop for Early {
    /// Never leaves the thread running (the supervisor forks only when single-threaded).
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// On the thread: a new network namespace for this thread only, loopback up, and a descriptor
/// of it. The thread's own reference goes when it exits.
fn make() -> Option<OwnedFd> {
    // No signal is ever delivered to this thread (a standby starts it before the supervisor
    // blocks the signals it reads from a descriptor: one delivered here would take its
    // default action on the whole process).
    let _ = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&nix::sys::signal::SigSet::all()),
        None,
    );
    super::spread::leave_this_cpu();
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).ok()?;
    loopback_up().ok()?;
    std::fs::File::open("/proc/thread-self/ns/net")
        .ok()
        .map(OwnedFd::from)
}

/// Enters the namespace `ns` made by [`Early`] (`setns(2)`, in the init).
pub fn enter(ns: &OwnedFd) -> Result<(), StepFailure> {
    nix::sched::setns(ns, CloneFlags::CLONE_NEWNET).map_err(|e| {
        StepFailure::nix(
            restriction::NAMESPACES,
            "setns(CLONE_NEWNET)",
            "enter the network namespace",
            e,
        )
    })
}

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
