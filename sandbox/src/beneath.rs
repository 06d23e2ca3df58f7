//! Host-side file operations on paths inside a tree the sandboxed command can write (the
//! workspace, a `--write` root). Whatever such a tree holds was possibly made by the agent, so no
//! operation here follows a symlink: a path is a trusted root plus a relative path of plain
//! components ([`TreePath`]), walked one component at a time with `O_NOFOLLOW | O_DIRECTORY`
//! from a descriptor of the root; the last component is acted on with the `*at` call on its
//! parent's descriptor (`fstatat(AT_SYMLINK_NOFOLLOW)`, `mkdirat`, `unlinkat`). A symlink in
//! the way is reported, never resolved, so nothing done here for a round can land on a host path
//! the round pointed it at.
//!
//! The calls themselves are [`crate::fsat`]'s (this module has no `unsafe`); what it adds is the
//! [`TreePath`] level: walks that say where they ended ([`Found`]) or which component was in the
//! way ([`BeneathError`], a symlink named with its target), and errors naming host paths.

use std::ffi::OsStr;
use std::fmt;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsat::{self, Access, FsError};
pub use crate::fsat::{Kind, Stat};

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
    /// A system call failed (the error names the call and the host path).
    #[error(transparent)]
    Fs(#[from] FsError),
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

/// The target of the symlink `name` in `dir`, quoted and bounded for messages (`?` when it
/// cannot be read).
fn link_target(dir: BorrowedFd<'_>, name: &OsStr) -> String {
    let Ok(target) = fsat::read_link(dir, name) else {
        return "?".into();
    };
    let text = String::from_utf8_lossy(target.get(..LINK_SHOWN).unwrap_or(&target));
    let cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Bytes of a symlink's target looked at for a message.
const LINK_SHOWN: usize = 512;

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
            fd: fsat::open_root(root, Access::Path)?,
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
        match self.stat(name)? {
            None => Err(BeneathError::Missing { at: child.clone() }),
            Some(st) if st.kind == Kind::Symlink => Err(BeneathError::Symlink {
                at: child.clone(),
                target: link_target(self.fd.as_fd(), name),
            }),
            Some(st) if st.kind != Kind::Dir => {
                Err(BeneathError::NotDirectory { at: child.clone() })
            }
            Some(_) => {
                let fd = fsat::open_dir(self.fd.as_fd(), name, Access::Path).map_err(|e| {
                    match e.errno() {
                        // Replaced by a symlink or a file between the check and the open.
                        Some(libc::ELOOP | libc::ENOTDIR) => {
                            BeneathError::NotDirectory { at: child.clone() }
                        }
                        _ => e.at(child.full()).into(),
                    }
                })?;
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
        fsat::lstat(self.fd.as_fd(), name).map_err(|e| e.under(&self.here()).into())
    }

    /// The target of symlink `name`, quoted and bounded.
    pub fn link_target(&self, name: &OsStr) -> String {
        link_target(self.fd.as_fd(), name)
    }

    /// `mkdirat(name, mode)`; `Ok(false)` when something already exists there.
    pub fn mkdir(&self, name: &OsStr, mode: u32) -> Result<bool, BeneathError> {
        match fsat::mkdir(self.fd.as_fd(), name, mode) {
            Ok(()) => Ok(true),
            Err(e) if e.is(libc::EEXIST) => Ok(false),
            Err(e) => Err(e.under(&self.here()).into()),
        }
    }

    /// `unlinkat(name)` (with `AT_REMOVEDIR` for an empty directory). A symlink is removed
    /// itself.
    pub fn unlink(&self, name: &OsStr, dir: bool) -> Result<(), BeneathError> {
        let removed = if dir {
            fsat::rmdir(self.fd.as_fd(), name)
        } else {
            fsat::unlink(self.fd.as_fd(), name)
        };
        removed.map_err(|e| e.under(&self.here()).into())
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
    let fd = fsat::open_path(dir.fd(), name).map_err(|e| match e.errno() {
        Some(libc::ENOENT) => BeneathError::Missing { at: p.clone() },
        _ => e.at(p.full()).into(),
    })?;
    let st = fsat::fstat(fd.as_fd()).map_err(|e| e.at(p.full()))?;
    if st.kind == Kind::Symlink {
        return Err(BeneathError::Symlink {
            at: p.clone(),
            target: dir.link_target(name),
        });
    }
    Ok((fd, st))
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
        Err(BeneathError::Fs(e))
            if matches!(
                e.errno(),
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
    let mut dir = fsat::open_root(Path::new("/"), Access::Path)?;
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
        match fsat::lstat(dir.as_fd(), name).map_err(|e| e.at(&here))? {
            None => return Ok(None),
            Some(st) if st.kind == Kind::Symlink => return Ok(Some(here)),
            Some(st) if st.kind != Kind::Dir => return Ok(None),
            Some(_) if i + 1 == comps.len() => return Ok(None),
            Some(_) => {
                dir = fsat::open_dir(dir.as_fd(), name, Access::Path).map_err(|e| e.at(&here))?;
            }
        }
    }
    Ok(None)
}

pub mod tree;

#[cfg(test)]
mod tests;
