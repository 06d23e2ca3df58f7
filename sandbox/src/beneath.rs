//! Host-side file operations on paths inside a tree the sandboxed command can write (the
//! workspace, a `--write` root). Whatever such a tree holds was possibly made by the agent, so no
//! operation here follows a symlink: a path is a trusted root plus a relative path of plain
//! components ([`TreePath`]), walked one component at a time with `O_NOFOLLOW | O_DIRECTORY`
//! from a descriptor of the root; the last component is acted on with the `*at` call on its
//! parent's descriptor (`fstatat(AT_SYMLINK_NOFOLLOW)`, `mkdirat`, `unlinkat`). A symlink in
//! the way is reported, never resolved, so nothing done here for a round can land on a host path
//! the round pointed it at.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// A path inside a writable tree: the tree's root (an absolute host path the caller trusts, e.g.
/// the canonical workspace) and a relative path of plain components below it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TreePath {
    /// The tree's root (trusted: resolved by the caller, outside the agent's reach).
    pub root: PathBuf,
    /// The path below the root: plain components only, never empty.
    pub rel: PathBuf,
}

/// Why a relative path cannot name something inside a tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` {problem}")]
pub struct BadRelPath {
    /// The path as given.
    pub path: String,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl TreePath {
    /// `rel` below `root`; `rel` must be relative, non-empty and free of `..` (`.` components
    /// are dropped).
    pub fn new(root: impl Into<PathBuf>, rel: &Path) -> Result<Self, BadRelPath> {
        let bad = |problem| BadRelPath {
            path: rel.display().to_string(),
            problem,
        };
        let mut clean = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => clean.push(n),
                Component::CurDir => {}
                Component::ParentDir => return Err(bad("must not contain `..`")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(bad("must be relative to the workspace"));
                }
            }
        }
        if clean.as_os_str().is_empty() {
            return Err(bad("names the workspace itself"));
        }
        Ok(Self {
            root: root.into(),
            rel: clean,
        })
    }

    /// The host path (for messages and for paths the sandbox sees).
    pub fn full(&self) -> PathBuf {
        self.root.join(&self.rel)
    }

    /// The same tree, `rel` cut to its first `n` components.
    pub fn prefix(&self, n: usize) -> TreePath {
        TreePath {
            root: self.root.clone(),
            rel: self.rel.components().take(n).collect(),
        }
    }

    /// The number of components of `rel`.
    pub fn depth(&self) -> usize {
        self.rel.components().count()
    }

    /// Its parent inside the tree, `None` at the top.
    pub fn parent(&self) -> Option<TreePath> {
        let d = self.depth();
        (d > 1).then(|| self.prefix(d - 1))
    }
}

impl fmt::Display for TreePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.full().display())
    }
}

/// A failure of an operation inside a tree.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// A component of the path is a symlink (it is never followed).
    #[error("`{}` is a symlink (to {target}); it is never followed", at.full().display())]
    Symlink {
        /// The symlink.
        at: TreePath,
        /// Where it points, quoted and bounded (agent-controlled text).
        target: String,
    },
    /// A component that must be a directory is something else.
    #[error("`{}` is not a directory", at.full().display())]
    NotDirectory {
        /// The component.
        at: TreePath,
    },
    /// A component is missing.
    #[error("`{}` does not exist", at.full().display())]
    Missing {
        /// The first missing component.
        at: TreePath,
    },
    /// A system call failed.
    #[error("failed to {call} `{}`: {source}", path.display())]
    Io {
        /// The call (`openat`, `mkdirat`, ...).
        call: &'static str,
        /// The path it was made on.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// What kind of file a path is (never following a symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device node.
    Special,
}

/// What a path is, as `fstatat(AT_SYMLINK_NOFOLLOW)` saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// The kind.
    pub kind: Kind,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Link count.
    pub nlink: u64,
    /// Owner.
    pub uid: u32,
    /// Mode bits (type included).
    pub mode: u32,
}

impl Stat {
    fn of(st: &libc::stat) -> Self {
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Special,
        };
        Self {
            kind,
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
            uid: st.st_uid,
            mode: st.st_mode,
        }
    }
}

/// Where a walk of a [`TreePath`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Every component exists, none is a symlink; this is the last one.
    Exists(Stat),
    /// Everything before `at` is a real directory; `at` does not exist.
    Missing {
        /// The first missing component.
        at: TreePath,
    },
    /// `at` is a symlink (everything before it is a real directory).
    Symlink {
        /// The symlink.
        at: TreePath,
    },
    /// `at` is not a directory, yet the path goes on below it.
    NotDirectory {
        /// The component.
        at: TreePath,
    },
}

fn cstr(name: &OsStr, path: &Path) -> Result<CString, BeneathError> {
    CString::new(name.as_bytes()).map_err(|_| BeneathError::Io {
        call: "encode",
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"),
    })
}

fn last_error(call: &'static str, path: &Path) -> BeneathError {
    BeneathError::Io {
        call,
        path: path.to_owned(),
        source: io::Error::last_os_error(),
    }
}

/// `openat(dir, name, flags | O_CLOEXEC | O_NOFOLLOW)`.
fn openat(dir: BorrowedFd<'_>, name: &OsStr, flags: i32) -> io::Result<OwnedFd> {
    let c = CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))?;
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when it does not exist.
fn lstatat(dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<Option<Stat>, BeneathError> {
    let c = cstr(name, path)?;
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated name and a stat buffer of the right size, all
    // alive for the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT) => Ok(None),
            _ => Err(BeneathError::Io {
                call: "fstatat",
                path: path.to_owned(),
                source: e,
            }),
        };
    }
    // SAFETY: fstatat returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    Ok(Some(Stat::of(&st)))
}

/// The target of the symlink `name` in `dir`, quoted and bounded for messages.
fn link_target(dir: BorrowedFd<'_>, name: &OsStr) -> String {
    let Ok(c) = CString::new(name.as_bytes()) else {
        return "?".into();
    };
    let mut buf = [0u8; 512];
    // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of the given length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            c.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let Ok(n) = usize::try_from(n) else {
        return "?".into();
    };
    let text = String::from_utf8_lossy(&buf[..n]);
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Opens the root of a tree (trusted path) as an `O_PATH` directory descriptor.
fn open_root(root: &Path) -> Result<OwnedFd, BeneathError> {
    let c = cstr(root.as_os_str(), root)?;
    // SAFETY: a NUL-terminated path alive for the call.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(last_error("open", root));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A directory inside a tree, reached without following any symlink.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    at: Option<TreePath>,
    root: PathBuf,
}

impl Dir {
    /// The tree's root itself.
    pub fn root(root: &Path) -> Result<Dir, BeneathError> {
        Ok(Dir {
            fd: open_root(root)?,
            at: None,
            root: root.to_owned(),
        })
    }

    /// The directory `dir` (a [`TreePath`]), every component a real directory.
    pub fn open(dir: &TreePath) -> Result<Dir, BeneathError> {
        let mut d = Dir::root(&dir.root)?;
        for n in 1..=dir.depth() {
            d = d.child(&dir.prefix(n))?;
        }
        Ok(d)
    }

    /// The parent directory of `p` (the root when `p` is at the top).
    pub fn parent_of(p: &TreePath) -> Result<Dir, BeneathError> {
        match p.parent() {
            Some(parent) => Dir::open(&parent),
            None => Dir::root(&p.root),
        }
    }

    fn here(&self) -> PathBuf {
        self.at
            .as_ref()
            .map_or_else(|| self.root.clone(), TreePath::full)
    }

    /// Steps into `child` (whose last component is a name in this directory).
    fn child(&self, child: &TreePath) -> Result<Dir, BeneathError> {
        let name = last_name(child);
        match lstatat(self.fd.as_fd(), name, &child.full())? {
            None => Err(BeneathError::Missing { at: child.clone() }),
            Some(st) if st.kind == Kind::Symlink => Err(BeneathError::Symlink {
                at: child.clone(),
                target: link_target(self.fd.as_fd(), name),
            }),
            Some(st) if st.kind != Kind::Dir => {
                Err(BeneathError::NotDirectory { at: child.clone() })
            }
            Some(_) => {
                let fd = openat(self.fd.as_fd(), name, libc::O_PATH | libc::O_DIRECTORY).map_err(
                    |source| match source.raw_os_error() {
                        // Replaced by a symlink or a file between the check and the open.
                        Some(libc::ELOOP | libc::ENOTDIR) => {
                            BeneathError::NotDirectory { at: child.clone() }
                        }
                        _ => BeneathError::Io {
                            call: "openat",
                            path: child.full(),
                            source,
                        },
                    },
                )?;
                Ok(Dir {
                    fd,
                    at: Some(child.clone()),
                    root: self.root.clone(),
                })
            }
        }
    }

    /// The descriptor (an `O_PATH` directory descriptor).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What `name` in this directory is (not following a symlink); `None` when absent.
    pub fn stat(&self, name: &OsStr) -> Result<Option<Stat>, BeneathError> {
        lstatat(self.fd.as_fd(), name, &self.here().join(name))
    }

    /// The target of symlink `name`, quoted and bounded.
    pub fn link_target(&self, name: &OsStr) -> String {
        link_target(self.fd.as_fd(), name)
    }

    /// `mkdirat(name, mode)`; `Ok(false)` when something already exists there.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> Result<bool, BeneathError> {
        let path = self.here().join(name);
        let c = cstr(name, &path)?;
        // SAFETY: a valid descriptor and a NUL-terminated name alive for the call.
        let rc = unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), mode) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EEXIST) {
            return Ok(false);
        }
        Err(BeneathError::Io {
            call: "mkdirat",
            path,
            source: e,
        })
    }

    /// `unlinkat(name)` (with `AT_REMOVEDIR` for an empty directory). A symlink is removed
    /// itself.
    pub fn unlink(&self, name: &OsStr, dir: bool) -> Result<(), BeneathError> {
        let path = self.here().join(name);
        let c = cstr(name, &path)?;
        let flags = if dir { libc::AT_REMOVEDIR } else { 0 };
        // SAFETY: a valid descriptor and a NUL-terminated name alive for the call.
        let rc = unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), flags) };
        if rc != 0 {
            return Err(last_error("unlinkat", &path));
        }
        Ok(())
    }

    /// Removes `name` whatever it is: a symlink or file itself, a directory with everything in
    /// it (never following a symlink inside, with a bounded number of open descriptors whatever
    /// its depth: [`tree::remove_at`]).
    pub fn remove_all(&self, name: &OsStr) -> Result<bool, BeneathError> {
        let path = self.here().join(name);
        Ok(tree::remove_at(self.fd.as_fd(), name, &path)?.is_some())
    }
}

/// The last component of a [`TreePath`] (never empty: [`TreePath::new`] refuses that).
fn last_name(p: &TreePath) -> &OsStr {
    p.rel.file_name().unwrap_or_else(|| OsStr::new("."))
}

/// Walks `p` from its root without following anything: where it ends (see [`Found`]).
pub fn inspect(p: &TreePath) -> Result<Found, BeneathError> {
    let mut dir = Dir::root(&p.root)?;
    let depth = p.depth();
    for n in 1..=depth {
        let here = p.prefix(n);
        let name = last_name(&here);
        let st = match dir.stat(name)? {
            None => return Ok(Found::Missing { at: here }),
            Some(st) => st,
        };
        if st.kind == Kind::Symlink {
            return Ok(Found::Symlink { at: here });
        }
        if n == depth {
            return Ok(Found::Exists(st));
        }
        if st.kind != Kind::Dir {
            return Ok(Found::NotDirectory { at: here });
        }
        dir = match dir.child(&here) {
            Ok(d) => d,
            // Changed under us: say what it is now.
            Err(BeneathError::Symlink { at, .. }) => return Ok(Found::Symlink { at }),
            Err(BeneathError::NotDirectory { at }) => return Ok(Found::NotDirectory { at }),
            Err(BeneathError::Missing { at }) => return Ok(Found::Missing { at }),
            Err(e) => return Err(e),
        };
    }
    // `depth` is at least 1, so the loop returned.
    Ok(Found::Missing { at: p.clone() })
}

/// An `O_PATH` descriptor of `p` itself (a directory, file or special file; never a symlink:
/// the kind is read from the descriptor, so a swap after the walk cannot slip one in).
pub fn open_path(p: &TreePath) -> Result<(OwnedFd, Stat), BeneathError> {
    let dir = Dir::parent_of(p)?;
    let name = last_name(p);
    let fd =
        openat(dir.fd(), name, libc::O_PATH).map_err(|source| match source.raw_os_error() {
            Some(libc::ENOENT) => BeneathError::Missing { at: p.clone() },
            _ => BeneathError::Io {
                call: "openat",
                path: p.full(),
                source,
            },
        })?;
    let st = fstat(&fd, &p.full())?;
    if st.kind == Kind::Symlink {
        return Err(BeneathError::Symlink {
            at: p.clone(),
            target: dir.link_target(name),
        });
    }
    Ok((fd, st))
}

fn fstat(fd: &OwnedFd, path: &Path) -> Result<Stat, BeneathError> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a stat buffer of the right size, alive for the call.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(last_error("fstat", path));
    }
    // SAFETY: fstat returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    Ok(Stat::of(&st))
}

/// Creates the directory `p` (its parent must exist, every component a real directory).
/// `Ok(false)` when something already exists at `p`.
pub fn mkdir(p: &TreePath, mode: u32) -> Result<bool, BeneathError> {
    Dir::parent_of(p)?.mkdir(last_name(p), mode)
}

/// Removes `p` (a symlink itself, a file, or a directory tree), never following a symlink on
/// the way; `Ok(false)` when it does not exist.
pub fn remove_all(p: &TreePath) -> Result<bool, BeneathError> {
    Dir::parent_of(p)?.remove_all(last_name(p))
}

/// Removes the directory `p` if it is empty (`Ok(false)` when it is not there or not empty).
pub fn rmdir_if_empty(p: &TreePath) -> Result<bool, BeneathError> {
    let dir = Dir::parent_of(p)?;
    match dir.unlink(last_name(p), true) {
        Ok(()) => Ok(true),
        Err(BeneathError::Io { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::ENOENT | libc::ENOTEMPTY | libc::EEXIST | libc::ENOTDIR)
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Every component of the absolute path `path` that is a symlink, from the top (`/` first):
/// the first one found, or `None` when the path is free of them. Used for paths a caller will
/// hand to something that resolves them (a bind mount by the container engine).
pub fn first_symlink(path: &Path) -> Result<Option<PathBuf>, BeneathError> {
    let mut dir = open_root(Path::new("/"))?;
    let mut here = PathBuf::from("/");
    let comps: Vec<_> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    for (i, name) in comps.iter().enumerate() {
        here.push(name);
        match lstatat(dir.as_fd(), name, &here)? {
            None => return Ok(None),
            Some(st) if st.kind == Kind::Symlink => return Ok(Some(here)),
            Some(st) if st.kind != Kind::Dir => return Ok(None),
            Some(_) if i + 1 == comps.len() => return Ok(None),
            Some(_) => {
                dir = openat(dir.as_fd(), name, libc::O_PATH | libc::O_DIRECTORY).map_err(
                    |source| BeneathError::Io {
                        call: "openat",
                        path: here.clone(),
                        source,
                    },
                )?;
            }
        }
    }
    Ok(None)
}

pub mod tree;

#[cfg(test)]
mod tests;
