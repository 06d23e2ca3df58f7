//! The host's filesystem as planning sees it: the few questions a plan asks (what is at a path,
//! who owns it, which sockets a tree holds, ...) behind [`FsProbe`], so that every planning rule
//! can be tested against a fake host. [`HostFs`] answers them from the real filesystem,
//! [`PreflightFs`] too but for the socket scan.

use std::path::{Path, PathBuf};

use crate::error::SandboxError;
use crate::identity::{self, Ids};
use crate::policy::Policy;
use crate::protect::{self, ProtectedSet};
use crate::sockets;
use crate::spec::SandboxRequest;

/// What a path is, not following a symlink there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A symlink.
    Symlink,
    /// A unix socket.
    Socket,
    /// Anything else (a file, a device, a fifo).
    Other,
}

/// Everything a plan reads from the host's filesystem.
pub trait FsProbe {
    /// What is at `path`, not following a symlink there; `None` when nothing is (or it cannot
    /// be looked at).
    fn kind(&self, path: &Path) -> Option<Kind>;
    /// Whether `path` is a directory, following symlinks.
    fn is_dir(&self, path: &Path) -> bool;
    /// Where the symlink `path` points; `None` when it cannot be read.
    fn read_link(&self, path: &Path) -> Option<PathBuf>;
    /// The owner (uid, gid) of `path`, following symlinks.
    fn owner(&self, path: &Path) -> std::io::Result<(u32, u32)>;
    /// The first component of the absolute `path` that is a symlink, from the top
    /// ([`crate::beneath::first_symlink`]); the error in words.
    fn first_symlink(&self, path: &Path) -> Result<Option<PathBuf>, String>;
    /// The unix sockets in `trees` ([`crate::sockets::scan`]).
    fn scan_sockets(&self, trees: &[PathBuf]) -> sockets::Found;
    /// The protected paths of `policy` and `req` in the writable trees
    /// ([`crate::protect::resolve`]).
    fn protected(
        &self,
        policy: &Policy,
        req: &SandboxRequest,
    ) -> Result<ProtectedSet, SandboxError>;
    /// The agent user named by `spec` ([`crate::identity::agent_user`], with the host's `/etc`).
    fn agent_user(&self, spec: Option<&str>) -> Result<Ids, SandboxError>;

    /// Whether anything is at `path` (a dangling symlink counts).
    fn exists(&self, path: &Path) -> bool {
        self.kind(path).is_some()
    }
}

/// The real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFs;

impl FsProbe for HostFs {
    fn kind(&self, path: &Path) -> Option<Kind> {
        use std::os::unix::fs::FileTypeExt;
        let t = std::fs::symlink_metadata(path).ok()?.file_type();
        Some(if t.is_symlink() {
            Kind::Symlink
        } else if t.is_dir() {
            Kind::Dir
        } else if t.is_socket() {
            Kind::Socket
        } else {
            Kind::Other
        })
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        std::fs::read_link(path).ok()
    }

    fn owner(&self, path: &Path) -> std::io::Result<(u32, u32)> {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).map(|m| (m.uid(), m.gid()))
    }

    fn first_symlink(&self, path: &Path) -> Result<Option<PathBuf>, String> {
        crate::beneath::first_symlink(path).map_err(|e| e.to_string())
    }

    fn scan_sockets(&self, trees: &[PathBuf]) -> sockets::Found {
        sockets::scan(trees)
    }

    fn protected(
        &self,
        policy: &Policy,
        req: &SandboxRequest,
    ) -> Result<ProtectedSet, SandboxError> {
        protect::resolve(policy, req)
    }

    fn agent_user(&self, spec: Option<&str>) -> Result<Ids, SandboxError> {
        identity::agent_user(spec, Path::new("/etc"))
    }
}

/// The real filesystem for a preflight, whose plan is checked and thrown away: every answer
/// [`HostFs`] gives but the socket scan, which finds nothing. The scan's findings only ever
/// become masks and an enforcement line, never a refusal, so a preflight refuses exactly what the
/// run's own plan would; skipping it saves a walk of every visible tree, and keeps a process
/// that runs one round from scanning twice.
#[derive(Clone, Copy, Debug, Default)]
pub struct PreflightFs;

impl FsProbe for PreflightFs {
    fn kind(&self, path: &Path) -> Option<Kind> {
        HostFs.kind(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        HostFs.is_dir(path)
    }

    fn read_link(&self, path: &Path) -> Option<PathBuf> {
        HostFs.read_link(path)
    }

    fn owner(&self, path: &Path) -> std::io::Result<(u32, u32)> {
        HostFs.owner(path)
    }

    fn first_symlink(&self, path: &Path) -> Result<Option<PathBuf>, String> {
        HostFs.first_symlink(path)
    }

    fn scan_sockets(&self, _trees: &[PathBuf]) -> sockets::Found {
        sockets::Found::default()
    }

    fn protected(
        &self,
        policy: &Policy,
        req: &SandboxRequest,
    ) -> Result<ProtectedSet, SandboxError> {
        HostFs.protected(policy, req)
    }

    fn agent_user(&self, spec: Option<&str>) -> Result<Ids, SandboxError> {
        HostFs.agent_user(spec)
    }
}
