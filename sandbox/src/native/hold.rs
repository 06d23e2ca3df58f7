//! Holding a run's command until the runner says go ([`crate::Sandbox::spawn_held`]): the runner
//! starts the helper while it commits the round's start to its journal, so the sandbox's set-up
//! (snapshot, walks, cgroups, namespaces, mounts) overlaps the commit; the command's `execve`
//! waits for [`release`], which the runner sends only once the start is durable.
//!
//! ```text
//! runner ──pipe (write end kept)──▶ helper (read end inherited, HelperSpec::hold_fd)
//!   release: one byte, then closed    supervisor: set-up ─▶ await_release ─▶ `go` to the init
//!   dropped unreleased: end-of-file   ─▶ the set-up is undone, nothing of the command ran
//! ```
//!
//! The read end is inherited by the helper alone (made inheritable in the helper only, by the
//! spawn's `dup2` of it onto itself, [`super::spawn`]) and close-on-exec again
//! as soon as the helper adopts it. A runner that dies closes its end: end-of-file, so a held
//! command never runs without the runner that journalled it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{OwnedFd, RawFd};

use nix::fcntl::OFlag;

/// The pipe of one held run: (the runner's write end, the helper's read end), both
/// close-on-exec.
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((w, r))
}

/// Lets the held command go (the runner's side). A helper already gone is not an error here:
/// its result says why it ended.
pub fn release(w: OwnedFd) {
    let _ = File::from(w).write_all(b"r");
}

/// Waits for [`release`] (the helper's side): `true` once released, `false` when the runner's
/// end was closed without it (the start was not journalled, or the runner is gone).
pub fn await_release(r: OwnedFd) -> bool {
    let mut end = File::from(r);
    let mut byte = [0u8; 1];
    loop {
        match end.read(&mut byte) {
            Ok(1) => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            _ => return false,
        }
    }
}

/// Takes the helper's inherited read end (`fd`): checks that it is a pipe and makes it
/// close-on-exec again.
pub fn adopt_inherited(fd: RawFd) -> Result<OwnedFd, String> {
    super::inherit::adopt(fd, super::inherit::Kind::Pipe)
}
