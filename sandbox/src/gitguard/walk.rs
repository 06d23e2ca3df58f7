//! One walk of a writable tree: every git directory, `.git` file and `.git` symlink in it, with
//! its identity. Directories are opened one level at a time from their parent's descriptor with
//! `O_NOFOLLOW | O_DIRECTORY` (a symlink is never descended), entries are typed by `d_type` (no
//! stat per file), and only the surfaces of git directories are read. Depth and entry count are
//! bounded; what a bound or an unreadable directory left out is recorded, never silently
//! skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::digest;
use super::quote::escape;
use crate::fsat::{self, Access, Kind};
use crate::outcome::git::Surface;

/// Bytes of a `.git` file read (git itself refuses larger ones).
pub const MAX_GITFILE: u64 = 64 * 1024;

/// Bytes of a `.git` file's content kept to restore it (a `gitdir:` line is short).
const KEEP_GITFILE: usize = 16 * 1024;

/// The bounds of one walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Directory levels below the tree's root.
    pub depth: usize,
    /// Directory entries in all.
    pub entries: u64,
}

impl Limits {
    /// Generous enough for real projects (a `node_modules` tree included), small enough that a
    /// walk stays well under a second or two on a 2-core machine.
    pub const DEFAULT: Limits = Limits {
        depth: 128,
        entries: 2_000_000,
    };
}

/// What stands at a repository's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// A git directory.
    Dir {
        /// Device.
        dev: u64,
        /// Inode.
        ino: u64,
        /// Its surfaces' digests.
        surfaces: digest::Surfaces,
    },
    /// A `.git` file.
    File {
        /// Device.
        dev: u64,
        /// Inode.
        ino: u64,
        /// A digest of its content.
        digest: u64,
        /// The content, when small enough to restore.
        content: Option<Vec<u8>>,
    },
    /// A `.git` symlink.
    Link {
        /// Its target.
        target: Vec<u8>,
    },
}

/// Everything one walk of one tree found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeInventory {
    /// The tree's root.
    pub root: PathBuf,
    /// What was found, by path below the root (empty: the root itself).
    pub repos: BTreeMap<PathBuf, Found>,
    /// Directories that could not be looked into (a bound, an error), with why.
    pub unchecked: BTreeMap<PathBuf, String>,
    /// The walk stopped early (the entry bound): everything not yet reached is unchecked.
    pub stopped: Option<String>,
    /// Entries seen.
    pub entries: u64,
    /// Unix sockets seen, by path below the root (the walk serves the socket scan of the tree
    /// too: [`crate::native::socket_walk`]).
    pub sockets: Vec<PathBuf>,
}

impl TreeInventory {
    /// Whether `rel` is a git directory found by this walk.
    pub fn is_git_dir(&self, rel: &Path) -> bool {
        matches!(self.repos.get(rel), Some(Found::Dir { .. }))
    }

    /// Paths that could not be looked into.
    pub fn unchecked_paths(&self) -> BTreeSet<&Path> {
        self.unchecked.keys().map(PathBuf::as_path).collect()
    }
}

/// Whether a directory with these entries is one git would take for a git directory
/// (`is_git_directory`: `HEAD`, and `objects/` and `refs/`, or a `commondir` pointing at them).
pub fn looks_like_git_dir(entries: &[fsat::Entry]) -> bool {
    let has = |n: &str| entries.iter().any(|e| e.name == OsStr::new(n));
    has("HEAD") && (has("commondir") || (has("objects") && has("refs")))
}

struct Walker<'a, K> {
    inv: TreeInventory,
    /// Protected paths of this tree (relative): read-only mounts, never looked at.
    protected: &'a [PathBuf],
    keys: &'a K,
    limits: Limits,
}

/// Walks the tree at `root`. `protected` are paths below it that are read-only mounts during
/// the run (nothing at or below them can change, so nothing there is looked at).
pub fn walk<K: BuildHasher>(
    root: &Path,
    protected: &[PathBuf],
    keys: &K,
    limits: Limits,
) -> TreeInventory {
    let mut w = Walker {
        inv: TreeInventory {
            root: root.to_owned(),
            ..TreeInventory::default()
        },
        protected,
        keys,
        limits,
    };
    // The root is a trusted path (canonical, outside the agent's reach).
    match fsat::open_root(root, Access::Read) {
        Ok(d) => {
            w.dir(d, PathBuf::new(), 0);
        }
        Err(e) => {
            w.inv.unchecked.insert(
                PathBuf::new(),
                format!("could not be opened: {}", e.cause()),
            );
        }
    }
    w.inv
}

/// Whether `name` in `dir` is a unix socket (never following a symlink).
fn is_socket(dir: BorrowedFd<'_>, name: &OsStr) -> bool {
    matches!(fsat::lstat(dir, name), Ok(Some(st)) if st.mode & libc::S_IFMT == libc::S_IFSOCK)
}

impl<K: BuildHasher> Walker<'_, K> {
    fn protected(&self, rel: &Path) -> bool {
        self.protected.iter().any(|p| rel.starts_with(p))
    }

    fn surface_protected(&self, rel: &Path, s: Surface) -> bool {
        self.protected(&rel.join(s.name()))
    }

    /// Looks at one directory (open for listing) and below. Returns false once the walk must
    /// stop.
    fn dir(&mut self, d: OwnedFd, rel: PathBuf, depth: usize) -> bool {
        let entries = match fsat::entries(d.as_fd()) {
            Ok(e) => e,
            Err(e) => {
                self.inv
                    .unchecked
                    .insert(rel, format!("could not be listed: {}", e.cause()));
                return true;
            }
        };
        self.inv.entries += entries.len() as u64;
        if self.inv.entries > self.limits.entries {
            self.inv.stopped = Some(format!(
                "the walk stopped at {} entries (its bound), in `{}`",
                self.limits.entries,
                escape(rel.as_os_str().as_bytes(), 256)
            ));
            return false;
        }
        let fd = d.as_fd();
        if looks_like_git_dir(&entries) {
            match fsat::fstat(fd) {
                Ok(st) => {
                    let surfaces = digest::surfaces(fd, &entries, self.keys, |s| {
                        self.surface_protected(&rel, s)
                    });
                    self.inv.repos.insert(
                        rel.clone(),
                        Found::Dir {
                            dev: st.dev,
                            ino: st.ino,
                            surfaces,
                        },
                    );
                }
                Err(e) => {
                    self.inv.unchecked.insert(
                        rel.clone(),
                        format!("could not be inspected: {}", e.cause()),
                    );
                }
            }
        }
        for e in entries {
            let dot_git = e.name == OsStr::new(".git");
            // A special file costs one more `fstatat`: is it a socket?
            if e.kind == Kind::Special && is_socket(fd, &e.name) {
                let child = rel.join(&e.name);
                if !self.protected(&child) {
                    self.inv.sockets.push(child);
                }
                continue;
            }
            // Ordinary files cost nothing more than their directory entry.
            if e.kind != Kind::Dir && !dot_git {
                continue;
            }
            let child = rel.join(&e.name);
            if self.protected(&child) {
                continue;
            }
            if dot_git {
                match e.kind {
                    Kind::File => self.git_file(fd, &e.name, child.clone()),
                    Kind::Symlink => self.git_link(fd, &e.name, child.clone()),
                    Kind::Dir | Kind::Special => {}
                }
            }
            if e.kind != Kind::Dir {
                continue;
            }
            if depth + 1 > self.limits.depth {
                self.inv.unchecked.insert(
                    child,
                    format!(
                        "deeper than {} levels (the walk's bound)",
                        self.limits.depth
                    ),
                );
                continue;
            }
            match fsat::open_dir(fd, &e.name, Access::Read) {
                Ok(sub) => {
                    if !self.dir(sub, child, depth + 1) {
                        return false;
                    }
                }
                Err(err) => {
                    self.inv
                        .unchecked
                        .insert(child, format!("could not be opened: {}", err.cause()));
                }
            }
        }
        true
    }

    fn git_file(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: PathBuf) {
        match fsat::open_regular(dir, name) {
            Ok((f, st)) => {
                use std::hash::Hasher;
                use std::io::Read;
                let mut content = Vec::new();
                let read = f.take(MAX_GITFILE + 1).read_to_end(&mut content);
                let mut h = self.keys.build_hasher();
                h.write_u64(st.size);
                h.write(&content);
                if let Err(e) = read {
                    h.write_i32(e.raw_os_error().unwrap_or(-1));
                }
                self.inv.repos.insert(
                    rel,
                    Found::File {
                        dev: st.dev,
                        ino: st.ino,
                        digest: h.finish(),
                        content: (content.len() <= KEEP_GITFILE).then_some(content),
                    },
                );
            }
            Err(e) => {
                self.inv
                    .unchecked
                    .insert(rel, format!("could not be read: {}", e.cause()));
            }
        }
    }

    fn git_link(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: PathBuf) {
        match fsat::read_link(dir, name) {
            Ok(target) => {
                self.inv.repos.insert(rel, Found::Link { target });
            }
            Err(e) => {
                self.inv
                    .unchecked
                    .insert(rel, format!("could not be read: {}", e.cause()));
            }
        }
    }
}
