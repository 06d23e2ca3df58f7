//! Descriptors the runner hands the helper by inheritance (the gateway's socket, the hold's
//! pipe): made inheritable in the helper alone (the spawn's `dup2` of each onto itself,
//! [`super::spawn`]), then taken by the helper, which checks their kind and makes them
//! close-on-exec again at once ([`adopt`]), so none reaches the command.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// What an inherited descriptor must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A unix socket (the gateway's hand-over).
    Socket,
    /// A pipe (the hold).
    Pipe,
}

impl Kind {
    fn mode(self) -> libc::mode_t {
        match self {
            Kind::Socket => libc::S_IFSOCK,
            Kind::Pipe => libc::S_IFIFO,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Socket => "a socket",
            Kind::Pipe => "a pipe",
        }
    }
}

/// Takes the descriptor `fd` the helper inherited: checks that it is open, above the standard
/// streams and of `kind`, and makes it close-on-exec again.
pub fn adopt(fd: RawFd, kind: Kind) -> Result<OwnedFd, String> {
    if fd <= 2 {
        return Err(format!("descriptor {fd} is a standard stream"));
    }
    // SAFETY: fstat fills a stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `fd` is only read.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(format!(
            "descriptor {fd} is not open: {}",
            io::Error::last_os_error()
        ));
    }
    if st.st_mode & libc::S_IFMT != kind.mode() {
        return Err(format!("descriptor {fd} is not {}", kind.name()));
    }
    // SAFETY: fcntl on a descriptor number.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(format!(
            "cannot mark descriptor {fd} close-on-exec: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: the runner handed this descriptor to this process for it alone; nothing else in the
    // helper refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
