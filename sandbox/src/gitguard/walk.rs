//! One walk of a writable tree: every git directory, `.git` file and `.git` symlink in it, with
//! its identity. Directories are opened one level at a time from their parent's descriptor with
//! `O_NOFOLLOW | O_DIRECTORY` (a symlink is never descended), entries are typed by `d_type` (no
//! stat per file), and only the surfaces of git directories are read. Depth and entry count are
//! bounded; what a bound or an unreadable directory left out is recorded, never silently
//! skipped.
//!
//! A walk keeps the listing of each plain directory it lists (no git directory, no `.git`, no
//! special file in it) that had been quiet for [`QUIET`] when the walk began: its device, inode,
//! change time and the names of its subdirectories ([`Listings`]). A later walk given those
//! listings (the check after the run, [`walk_again`]) reaches a directory with an `O_PATH` open
//! and a `fstat` (a kept directory with no subdirectory: one `fstatat` of its entry, no
//! descriptor), and lists it again only when it is not that directory at that change time any
//! more: an entry made, removed or renamed in a directory moves its change time, which nothing
//! can set back. A directory unchanged since is never opened for reading (on an overlay, opening
//! a merged directory for reading merges its layers' listings).
//!
//! A walk of an overlay whose layers are known ([`walk_layered`]: a provisioned workspace on a
//! base tree) does not even look at a directory its upper layer does not hold: that directory
//! and everything below it are the lower layer's, unchanged, and come from its listings
//! (`walk/lower.rs`). Each kept listing names its subdirectories' inode numbers for that.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::hash::BuildHasher;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

mod lower;

pub use lower::Layers;

use super::digest;
use super::quote::escape;
use crate::fsat::{self, Access, Kind};
use crate::kept_file;
use crate::outcome::git::Surface;

/// How long a directory must have been unchanged when a walk began for its listing to be kept:
/// a change time is read from a coarse clock, so a change in the same tick as the listing could
/// leave it where it was.
pub const QUIET: std::time::Duration = std::time::Duration::from_secs(1);

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
    /// The listings kept for a later walk (module doc).
    pub listings: Listings,
    /// Directories this walk did not list again, their kept listing still theirs.
    pub reused: u64,
}

/// Kept listings of plain directories, by device and inode (module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listings(std::collections::HashMap<(u64, u64), Kept>);

/// The first bytes of a file of kept listings ([`Listings::save`]).
const LISTINGS_MAGIC: &[u8; 8] = b"rlwalk2\n";

/// Directories a file of kept listings may hold, at most (a bigger or malformed one is not
/// read: the walk lists everything, as without one).
const LISTINGS_MAX: u64 = 2_000_000;

/// Bytes a file of kept listings may be, at most.
const LISTINGS_MAX_BYTES: u64 = 512 << 20;

impl Listings {
    /// Adds `other`'s listings.
    pub fn extend(&mut self, other: &Listings) {
        self.0.extend(other.0.iter().map(|(k, v)| (*k, v.clone())));
    }

    /// The listings of the directories on device `from`, as seen on device `to` (the same
    /// inodes and change times): an overlay shows a directory only its lower layer has with
    /// the overlay's device and the lower directory's inode and change time. The rest is left
    /// out.
    pub fn moved(&self, from: u64, to: u64) -> Listings {
        Listings(
            self.0
                .iter()
                .filter(|((dev, _), _)| *dev == from)
                .map(|((_, ino), kept)| ((to, *ino), kept.clone()))
                .collect(),
        )
    }

    /// Writes the listings to `path` (a runner-owned file: through a temporary file renamed
    /// over it, so a reader sees the old file or the new one).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let mut w = kept_file::Writer::new(LISTINGS_MAGIC, 64 * self.0.len() + 8);
        w.u64(self.0.len() as u64);
        for ((dev, ino), kept) in &self.0 {
            w.u64(*dev);
            w.u64(*ino);
            w.i64(kept.ctime.0);
            w.i64(kept.ctime.1);
            w.u64(kept.entries);
            w.u64(kept.subdirs.len() as u64);
            for (name, ino) in &kept.subdirs {
                w.bytes(name.as_bytes());
                w.u64(*ino);
            }
        }
        w.save(path)
    }

    /// Whether `path` starts as a file of listings in this format does.
    pub fn current(path: &Path) -> bool {
        use std::io::Read;
        let mut magic = [0u8; 8];
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .is_ok_and(|()| &magic == LISTINGS_MAGIC)
    }

    /// The listings in `path`; `None` when there is no such file or it is not one.
    pub fn load(path: &Path) -> Option<Listings> {
        let bytes = kept_file::read(path, LISTINGS_MAX_BYTES)?;
        let mut r = kept_file::Reader::new(&bytes, LISTINGS_MAGIC)?;
        let count = r.u64()?;
        if count > LISTINGS_MAX {
            return None;
        }
        let mut map = std::collections::HashMap::new();
        for _ in 0..count {
            let key = (r.u64()?, r.u64()?);
            let ctime = (r.i64()?, r.i64()?);
            let entries = r.u64()?;
            let n = r.u64()?;
            if n > entries {
                return None;
            }
            let mut subdirs = Vec::new();
            for _ in 0..n {
                let name = std::ffi::OsString::from(OsStr::from_bytes(r.name()?));
                subdirs.push((name, r.u64()?));
            }
            map.insert(
                key,
                Kept {
                    ctime,
                    entries,
                    subdirs,
                },
            );
        }
        r.done().then_some(Listings(map))
    }
}

impl Listings {
    /// Directories kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One kept listing.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept {
    ctime: (i64, i64),
    /// Entries in the directory (the walk's entry bound counts them again).
    entries: u64,
    /// Its subdirectories' names and inode numbers (as its listing gave them).
    subdirs: Vec<(std::ffi::OsString, u64)>,
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
    /// Listings an earlier walk kept.
    earlier: Option<&'a Listings>,
    /// Directories changed after this are not kept (the walk's start less [`QUIET`]).
    quiet_before: (i64, i64),
    /// The tree is an overlay whose layers are known ([`walk_layered`]).
    lower: Option<lower::Lower<'a>>,
}

/// Walks the tree at `root`. `protected` are paths below it that are read-only mounts during
/// the run (nothing at or below them can change, so nothing there is looked at).
pub fn walk<K: BuildHasher>(
    root: &Path,
    protected: &[PathBuf],
    keys: &K,
    limits: Limits,
) -> TreeInventory {
    walk_with(root, protected, keys, limits, None, None)
}

/// [`walk`] of a tree that will never change again (a base tree once in place): the listing of
/// every plain directory is kept, however recently it changed ([`super::keep_lower_listings`]).
pub fn walk_finished<K: BuildHasher>(root: &Path, keys: &K, limits: Limits) -> TreeInventory {
    let mut w = Walker::new(root, &[], keys, limits, None);
    w.quiet_before = (i64::MAX, i64::MAX);
    w.run(root, None)
}

/// [`walk`], listing again only the directories that changed since `earlier` (another walk
/// of the same tree) kept their listing: what it finds is what [`walk`] would.
pub fn walk_again<K: BuildHasher>(
    root: &Path,
    protected: &[PathBuf],
    keys: &K,
    limits: Limits,
    earlier: &Listings,
) -> TreeInventory {
    walk_with(root, protected, keys, limits, Some(earlier), None)
}

/// [`walk_again`] of an overlay's merged tree whose `layers` are known: a directory the upper
/// layer does not hold is its lower layer's, unchanged, and so is everything below it (a change
/// anywhere copies the directory and all above it up first), so its subtree is taken from the
/// lower layer's listings without looking at it (module `lower`). What it finds is what
/// [`walk`] would.
pub fn walk_layered<K: BuildHasher>(
    root: &Path,
    protected: &[PathBuf],
    keys: &K,
    limits: Limits,
    earlier: Option<&Listings>,
    layers: &Layers<'_>,
) -> TreeInventory {
    walk_with(root, protected, keys, limits, earlier, Some(layers))
}

fn walk_with<K: BuildHasher>(
    root: &Path,
    protected: &[PathBuf],
    keys: &K,
    limits: Limits,
    earlier: Option<&Listings>,
    layers: Option<&Layers<'_>>,
) -> TreeInventory {
    Walker::new(root, protected, keys, limits, earlier).run(root, layers)
}

impl<'a, K: BuildHasher> Walker<'a, K> {
    fn new(
        root: &Path,
        protected: &'a [PathBuf],
        keys: &'a K,
        limits: Limits,
        earlier: Option<&'a Listings>,
    ) -> Self {
        let began = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_sub(QUIET);
        Walker {
            inv: TreeInventory {
                root: root.to_owned(),
                ..TreeInventory::default()
            },
            protected,
            keys,
            limits,
            earlier,
            quiet_before: (
                i64::try_from(began.as_secs()).unwrap_or(i64::MAX),
                i64::from(began.subsec_nanos()),
            ),
            lower: None,
        }
    }

    fn run(mut self, root: &Path, layers: Option<&Layers<'a>>) -> TreeInventory {
        // The root is a trusted path (canonical, outside the agent's reach).
        match fsat::open_root(root, Access::Read) {
            Ok(d) => {
                self.lower = layers.and_then(|l| lower::Lower::new(l, d.as_fd(), self.limits));
                self.dir(d, PathBuf::new(), 0);
            }
            Err(e) => {
                self.inv.unchecked.insert(
                    PathBuf::new(),
                    format!("could not be opened: {}", e.cause()),
                );
            }
        }
        self.inv
    }
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

    /// Counts `n` more entries: false (the walk stopped) past the bound.
    fn count(&mut self, n: u64, rel: &Path) -> bool {
        self.inv.entries += n;
        if self.inv.entries > self.limits.entries {
            self.inv.stopped = Some(format!(
                "the walk stopped at {} entries (its bound), in `{}`",
                self.limits.entries,
                escape(rel.as_os_str().as_bytes(), 256)
            ));
            return false;
        }
        true
    }

    /// Keeps the listing of the directory open at `fd` when it is plain and quiet.
    fn keep(&mut self, fd: BorrowedFd<'_>, entries: &[fsat::Entry]) {
        let plain = !entries
            .iter()
            .any(|e| e.kind == Kind::Special || e.name == OsStr::new(".git"));
        if !plain || looks_like_git_dir(entries) {
            return;
        }
        let Ok(st) = fsat::fstat(fd) else { return };
        if st.ctime >= self.quiet_before {
            return;
        }
        let subdirs = entries
            .iter()
            .filter(|e| e.kind == Kind::Dir)
            .map(|e| (e.name.clone(), e.ino))
            .collect();
        self.inv.listings.0.insert(
            (st.dev, st.ino),
            Kept {
                ctime: st.ctime,
                entries: entries.len() as u64,
                subdirs,
            },
        );
    }

    /// Goes into the subdirectory `name` of `parent` (`rel` below the root): through the
    /// earlier walk's listing while it is still the directory's, else by listing it. Returns
    /// false once the walk must stop.
    fn enter(&mut self, parent: BorrowedFd<'_>, name: &OsStr, rel: PathBuf, depth: usize) -> bool {
        // A directory the overlay's upper layer does not hold: its lower layer's, with all below.
        if let Some(key) = self.lower_dir(parent, name, &rel) {
            return self.lower_tree(key, rel, depth);
        }
        // A directory kept with no subdirectory needs no descriptor: its entry's `fstatat`
        // (never following a link) says whether the listing is still its own (most
        // directories of a tree are such leaves: an open and a close fewer each).
        if let Some(earlier) = self.earlier
            && let Ok(Some(st)) = fsat::lstat(parent, name)
            && st.kind == Kind::Dir
            && let Some(kept) = earlier.0.get(&(st.dev, st.ino))
            && kept.ctime == st.ctime
            && kept.subdirs.is_empty()
        {
            self.inv.reused += 1;
            if !self.count(kept.entries, &rel) {
                return false;
            }
            self.inv.listings.0.insert((st.dev, st.ino), kept.clone());
            return true;
        }
        if let Some(earlier) = self.earlier
            && let Ok(at) = fsat::open_path(parent, name)
            && let Ok(st) = fsat::fstat(at.as_fd())
            && st.kind == Kind::Dir
            && let Some(kept) = earlier.0.get(&(st.dev, st.ino))
            && kept.ctime == st.ctime
        {
            self.inv.reused += 1;
            if !self.count(kept.entries, &rel) {
                return false;
            }
            self.inv.listings.0.insert((st.dev, st.ino), kept.clone());
            for (sub, _) in &kept.subdirs {
                if !self.subdir(at.as_fd(), sub, rel.join(sub), depth) {
                    return false;
                }
            }
            return true;
        }
        match fsat::open_dir(parent, name, Access::Read) {
            Ok(sub) => self.dir(sub, rel, depth),
            Err(err) => {
                self.inv
                    .unchecked
                    .insert(rel, format!("could not be opened: {}", err.cause()));
                true
            }
        }
    }

    /// The subdirectory `name` (`child`) of a directory at `depth`: skipped when protected,
    /// unchecked past the depth bound, else entered.
    fn subdir(&mut self, fd: BorrowedFd<'_>, name: &OsStr, child: PathBuf, depth: usize) -> bool {
        if self.protected(&child) {
            return true;
        }
        if self.beyond_depth(&child, depth) {
            return true;
        }
        self.enter(fd, name, child, depth + 1)
    }

    /// Whether `child`, a subdirectory of a directory at `depth`, lies past the depth bound
    /// (then recorded as unchecked).
    fn beyond_depth(&mut self, child: &Path, depth: usize) -> bool {
        if depth < self.limits.depth {
            return false;
        }
        self.inv.unchecked.insert(
            child.to_owned(),
            format!(
                "deeper than {} levels (the walk's bound)",
                self.limits.depth
            ),
        );
        true
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
        if !self.count(entries.len() as u64, &rel) {
            return false;
        }
        let fd = d.as_fd();
        self.keep(fd, &entries);
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
            if !self.subdir(fd, &e.name, child, depth) {
                return false;
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
