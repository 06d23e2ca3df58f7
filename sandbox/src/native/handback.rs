//! The sandbox's view handed back to the runner at the end of a run (issue 30, item 2), so that
//! its teardown is not on the round's path.
//!
//! A view is a mount namespace; the last process to leave it tears it down, and the kernel then
//! waits for an expedited RCU grace period (`namespace_unlock`: 0.2-1 ms on this 2-CPU VM, more
//! when the previous round's network namespace is being cleaned up at the same time). That
//! process was the init, whose exit the supervisor waits for, whose exit the runner waits for:
//! the wait sat between the agent's end and the runner's next step. Now the runner makes a
//! socketpair per run that builds a view and hands the helper its end (inherited, or in a
//! standby's order: [`super::standby`]); the supervisor holds the view (`/proc/<init>/ns/mnt`,
//! opened once the command runs) and, at its end, sends it on that socket; the runner's end
//! holds it in flight, unread, and the runner closes that end on a blocking thread once the
//! helper exited ([`release`]): the teardown happens there, beside the runner's records.
//!
//! ```text
//! runner:     socketpair ──(helper end)──▶ helper
//! supervisor: command runs ─▶ open /proc/<init>/ns/mnt ─▶ … run, checks … ─▶ send(view) ─▶ exit
//! runner:     helper exited ─▶ spawn_blocking(close its end): the view torn down there
//! ```
//!
//! Nothing of the view is reachable meanwhile: no process is left in it, and the one reference
//! is a descriptor in a socket queue nobody reads (the init's copy of the helper's end is
//! closed when it forks; the command never has one). A runner that dies closes its end (the
//! kernel tears the view down then). Without the socket (`ralph sandbox exec`, or it could not
//! be made) or when the send fails, the view goes as before, with its last process.

use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use nix::unistd::Pid;

use crate::fd_pass;

/// The payload of the one message (the view's descriptor travels beside it).
const MESSAGE: &[u8] = b"view";

/// The socket of one run's hand-back: (the runner's end, the helper's end), both close-on-exec.
pub fn channel() -> std::io::Result<(OwnedFd, OwnedFd)> {
    fd_pass::channel()
}

/// Takes the helper's inherited end (`fd`, from [`crate::native::protocol::HelperSpec::handback_fd`]):
/// checks that it is a socket and makes it close-on-exec again.
pub fn adopt_inherited(fd: RawFd) -> Result<OwnedFd, String> {
    super::inherit::adopt(fd, super::inherit::Kind::Socket)
}

/// The mount namespace `init` runs in (the run's view), held so that the init's exit leaves it
/// standing; `None` when it cannot be opened (nothing depends on it: the view then goes with
/// its last process, as it did before).
pub fn hold_view(init: Pid) -> Option<OwnedFd> {
    let view = std::fs::File::open(format!("/proc/{init}/ns/mnt")).ok()?;
    // The host's own (an init that made no view of its own): nothing to hand back.
    let ours = std::fs::metadata("/proc/self/ns/mnt").ok()?;
    let theirs = view.metadata().ok()?;
    (theirs.ino() != ours.ino() || theirs.dev() != ours.dev()).then(|| OwnedFd::from(view))
}

/// Sends `view` to the runner on `chan` (the helper's end of its order socket). On a failure
/// (the runner's end is gone) the view is dropped here, torn down by this process as before.
pub fn send(chan: OwnedFd, view: OwnedFd) {
    let _ = fd_pass::send(chan.as_fd(), MESSAGE, &[view.as_fd()]);
}

/// The runner's side: closes its end of the socket (and the view in flight on it, if the helper
/// sent one) on a blocking thread, which the teardown then keeps instead of the round. Outside
/// a runtime, closed here.
pub fn release(ours: OwnedFd) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn_blocking(move || drop(ours));
        }
        Err(_) => drop(ours),
    }
}

#[cfg(test)]
mod tests;
