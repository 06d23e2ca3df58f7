//! What earlier socket scans of this process listed, per directory: its identity (device,
//! inode), its change time, its subdirectories and sockets. A directory whose identity and change
//! time are what they were is not listed again: an entry created, removed or renamed in it
//! changes its change time (the kernel sets it; no process can set it back).
//!
//! The change time has the kernel's coarse clock granularity (milliseconds): a change in the
//! same tick as the listing could leave it equal. So a listing is kept only when the directory's
//! change time is older than the listing's start by [`MARGIN`]; a directory changed just before
//! is listed again next time, until it has been quiet that long. The memo is bounded
//! ([`MAX_DIRS`]): past that it starts over.
//!
//! A runner keeps the memo across its processes ([`Memo::save`], [`Memo::load`]: the state
//! directory's `socket-listings`): the first scan of a `ralph run` then stats the toolchains'
//! directories instead of listing them. A loaded listing is never trusted without a stat.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How much older than the listing a directory's change time must be for the listing to be kept.
pub const MARGIN: Duration = Duration::from_secs(1);

/// Directories remembered, at most (a few hundred bytes each).
pub const MAX_DIRS: usize = 1_000_000;

/// The memo of this process's scans.
pub static PROCESS: Mutex<Memo> = Mutex::new(Memo::new());

/// One directory's listing, as a scan needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    /// When the listing began.
    at: Duration,
    /// Entries in all.
    pub entries: usize,
    /// The names of its subdirectories.
    pub subdirs: Vec<OsString>,
    /// The names of its sockets.
    pub sockets: Vec<OsString>,
}

impl Listing {
    /// An empty listing of `dir` with its identity and change time (`None`: not a directory).
    pub fn stat(dir: &Path) -> Option<Listing> {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        let m = std::fs::symlink_metadata(dir).ok()?;
        m.is_dir().then(|| Listing {
            dev: m.dev(),
            ino: m.ino(),
            ctime: (m.ctime(), m.ctime_nsec()),
            at,
            ..Listing::default()
        })
    }

    /// An empty listing of the directory `fd` stands for, with its identity and change time
    /// (`None`: not a directory, or it cannot be statted).
    pub fn of_fd(fd: std::os::fd::BorrowedFd<'_>) -> Option<Listing> {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        Self::of_stat(&crate::fsat::fstat(fd).ok()?, at)
    }

    /// An empty listing of the directory `name` in `dir`, not following a link (`None`: not a
    /// directory, or nothing of that name).
    pub fn stat_at(dir: std::os::fd::BorrowedFd<'_>, name: &std::ffi::OsStr) -> Option<Listing> {
        let at = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
        Self::of_stat(&crate::fsat::lstat(dir, name).ok()??, at)
    }

    fn of_stat(st: &crate::fsat::Stat, at: Duration) -> Option<Listing> {
        (st.kind == crate::fsat::Kind::Dir).then(|| Listing {
            dev: st.dev,
            ino: st.ino,
            ctime: st.ctime,
            at,
            ..Listing::default()
        })
    }

    /// The device it is on.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Its device, inode and change time.
    pub fn identity(&self) -> (u64, u64, (i64, i64)) {
        (self.dev, self.ino, self.ctime)
    }

    fn ctime(&self) -> Duration {
        let secs = u64::try_from(self.ctime.0).unwrap_or(0);
        let nanos = u32::try_from(self.ctime.1).unwrap_or(0);
        Duration::new(secs, nanos)
    }
}

/// Listings by directory path (its bytes: a `Path` compares and hashes by components, which
/// cost more than the rest of a scan that lists nothing).
#[derive(Debug)]
pub struct Memo {
    dirs: Option<HashMap<OsString, Kept>>,
    /// What the last scan of each tree found, whole ([`TreeFound`]).
    trees: std::collections::BTreeMap<std::path::PathBuf, TreeFound>,
    /// Trees taken whole from [`TreeFound`] (tests).
    pub trees_reused: u64,
    /// Listings reused after a stat (tests).
    pub reused: u64,
    /// Listings found current by a check on other threads ([`super::precheck`]) and reused
    /// without a stat of the scan's own (tests).
    pub checked: u64,
    /// Kept directories from which a scan checks them on other threads first (tests lower it).
    pub check_from: usize,
    /// Listings reused without one, nothing having been heard of them (tests).
    pub heard: u64,
    /// Whether a listing was kept or dropped since the memo was made, loaded or saved.
    pub changed: bool,
    /// Checks begun ([`Memo::begin_check`]).
    checks: u64,
    /// Whether what the last check found stands in for stats ([`Memo::reuse`]).
    checking: bool,
}

/// A kept listing and the watch's generation it is current for.
#[derive(Debug)]
struct Kept {
    /// The watch's generation when the listing was made or last found current by a stat
    /// ([`super::watch`]); 0: never under a watch.
    generation: u64,
    listing: Arc<Listing>,
    /// What a check on other threads ([`super::precheck`]) found: `check << 1 | current`; 0:
    /// never checked. Read only while that check is [`Memo::checking`].
    checked: AtomicU64,
}

impl Kept {
    fn new(generation: u64, listing: Arc<Listing>) -> Kept {
        Kept {
            generation,
            listing,
            checked: AtomicU64::new(0),
        }
    }
}

/// What a scan found in one tree that the watch covers, when every directory in it had a kept
/// listing on a filesystem the watch hears: the next scan of the tree under the same generation
/// takes it whole, without walking the tree, when its root is the same directory with the same
/// change time and nothing was heard of any directory in it since (a change heard in the tree, or
/// a mount at, above or inside it, drops it: [`Memo::forget`], [`Memo::forget_under`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeFound {
    /// The watch's generation when it was found.
    pub generation: u64,
    /// The root's device, inode and change time.
    pub root: (u64, u64, (i64, i64)),
    /// The sockets in it.
    pub sockets: Vec<std::path::PathBuf>,
    /// Entries walked (counted again against the scan's bound).
    pub entries: usize,
    /// Directories walked.
    pub dirs: usize,
}

/// A kept listing being checked on another thread ([`Memo::checkable`]).
pub struct Checkable<'a> {
    /// The listing.
    pub listing: &'a Listing,
    slot: &'a AtomicU64,
}

impl Checkable<'_> {
    /// Records what check `check` ([`Memo::begin_check`]) found: `current` when the directory is
    /// still the one listed, with the same change time.
    pub fn record(&self, check: u64, current: bool) {
        self.slot
            .store(check << 1 | u64::from(current), Ordering::Release);
    }
}

/// What a scan trusts without a stat: a directory reached from a parent whose own listing was
/// reused (so it is the same directory it was), whose listing is of the watch's current
/// generation, on a filesystem the watch hears.
#[derive(Clone, Copy)]
pub struct Trust<'a> {
    /// The watch's generation.
    pub generation: u64,
    /// Whether the watch hears a device.
    pub hears: &'a dyn Fn(u64) -> bool,
}

impl Memo {
    /// An empty memo.
    pub const fn new() -> Self {
        Memo {
            dirs: None,
            trees: std::collections::BTreeMap::new(),
            trees_reused: 0,
            checks: 0,
            checking: false,
            reused: 0,
            checked: 0,
            check_from: super::precheck::MIN_DIRS,
            heard: 0,
            changed: false,
        }
    }

    /// The kept listing of `dir`: without a stat under `trust` when the parent's listing was
    /// reused (`parent_reused`), else if `dir` is still that directory with that change time,
    /// as `stat` finds it now (given the kept listing: [`Listing::stat`] or a stat relative to
    /// a descriptor).
    pub fn reuse(
        &mut self,
        dir: &Path,
        trust: Option<Trust<'_>>,
        parent_reused: bool,
        stat: impl FnOnce(&Listing) -> Option<Listing>,
    ) -> Option<Arc<Listing>> {
        let kept = self.dirs.as_mut()?.get_mut(dir.as_os_str())?;
        if let Some(t) = trust
            && parent_reused
            && kept.generation == t.generation
            && (t.hears)(kept.listing.dev)
        {
            self.heard += 1;
            return Some(kept.listing.clone());
        }
        if self.checking {
            let c = kept.checked.load(Ordering::Acquire);
            if c >> 1 == self.checks {
                if c & 1 == 0 {
                    return None;
                }
                kept.generation = trust.map_or(0, |t| t.generation);
                self.checked += 1;
                return Some(kept.listing.clone());
            }
        }
        let was = &kept.listing;
        let now = stat(was)?;
        if (now.dev, now.ino, now.ctime) != (was.dev, was.ino, was.ctime) {
            return None;
        }
        kept.generation = trust.map_or(0, |t| t.generation);
        self.reused += 1;
        Some(kept.listing.clone())
    }

    /// Keeps `listing` of `dir`, made under the watch's `generation` (0: none), when the
    /// directory had been quiet for `margin` when it began.
    /// Returns whether it was kept.
    pub fn keep(
        &mut self,
        dir: &Path,
        listing: &Arc<Listing>,
        margin: Duration,
        generation: u64,
    ) -> bool {
        let dirs = self.dirs.get_or_insert_with(HashMap::new);
        if listing.ctime() + margin >= listing.at {
            self.changed |= dirs.remove(dir.as_os_str()).is_some();
            self.trees.retain(|t, _| !dir.starts_with(t));
            return false;
        }
        if dirs.len() >= MAX_DIRS {
            dirs.clear();
            self.trees.clear();
        }
        self.changed = true;
        dirs.insert(
            dir.as_os_str().to_owned(),
            Kept::new(generation, listing.clone()),
        );
        true
    }

    /// What the last scan found in `tree` under the watch's `generation`, when its root `now` is
    /// the directory it was then, with the same change time.
    pub fn tree(&mut self, tree: &Path, generation: u64, now: &Listing) -> Option<&TreeFound> {
        let t = self.trees.get(tree)?;
        if t.generation != generation || t.root != now.identity() {
            return None;
        }
        self.trees_reused += 1;
        Some(t)
    }

    /// Keeps what a scan found in `tree` ([`TreeFound`]).
    pub fn keep_tree(&mut self, tree: &Path, found: TreeFound) {
        self.trees.insert(tree.to_path_buf(), found);
    }

    /// Drops the listings of each of `dirs` and everything below them (one pass).
    pub fn forget_under(&mut self, under: &[std::path::PathBuf]) {
        use std::os::unix::ffi::OsStrExt;
        let Some(dirs) = self.dirs.as_mut() else {
            return;
        };
        if under.is_empty() {
            return;
        }
        self.trees
            .retain(|t, _| !under.iter().any(|u| t.starts_with(u) || u.starts_with(t)));
        let below = |k: &[u8], p: &[u8]| {
            k.starts_with(p) && (k.len() == p.len() || k[p.len()] == b'/' || p.ends_with(b"/"))
        };
        let before = dirs.len();
        dirs.retain(|k, _| {
            !under
                .iter()
                .any(|p| below(k.as_bytes(), p.as_os_str().as_bytes()))
        });
        self.changed |= dirs.len() != before;
    }

    /// Begins a check of kept listings on other threads ([`super::precheck`]): until
    /// [`Memo::end_check`], what [`Memo::record`] records with the number returned stands in for
    /// [`Memo::reuse`]'s stat.
    pub fn begin_check(&mut self) -> u64 {
        self.checks += 1;
        self.checking = true;
        self.checks
    }

    /// Ends the check: what it recorded is never read again.
    pub fn end_check(&mut self) {
        self.checking = false;
    }

    /// The kept listing of `dir`, for a check on another thread.
    pub fn checkable(&self, dir: &Path) -> Option<Checkable<'_>> {
        let kept = self.dirs.as_ref()?.get(dir.as_os_str())?;
        Some(Checkable {
            listing: &kept.listing,
            slot: &kept.checked,
        })
    }

    /// Drops the listing of `dir` (the watch heard of a change in it).
    pub fn forget(&mut self, dir: &Path) {
        self.trees.retain(|t, _| !dir.starts_with(t));
        if let Some(dirs) = self.dirs.as_mut() {
            self.changed |= dirs.remove(dir.as_os_str()).is_some();
        }
    }
}

/// The first bytes of a file of kept socket listings ([`Memo::save`]).
const FILE_MAGIC: &[u8; 8] = b"rlsock1\n";

/// Bytes such a file may be, at most (a bigger one is not read).
const FILE_MAX_BYTES: u64 = 512 << 20;

impl Memo {
    /// Writes the kept listings to `path` (a runner-owned file, replaced whole).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let empty = HashMap::new();
        let dirs = self.dirs.as_ref().unwrap_or(&empty);
        let mut w = crate::kept_file::Writer::new(FILE_MAGIC, 96 * dirs.len() + 8);
        w.u64(dirs.len() as u64);
        for (dir, kept) in dirs {
            let l = &kept.listing;
            w.bytes(dir.as_bytes());
            w.u64(l.dev);
            w.u64(l.ino);
            w.i64(l.ctime.0);
            w.i64(l.ctime.1);
            w.u64(l.at.as_secs());
            w.u64(u64::from(l.at.subsec_nanos()));
            w.u64(l.entries as u64);
            for names in [&l.subdirs, &l.sockets] {
                w.u64(names.len() as u64);
                for n in names {
                    w.bytes(n.as_bytes());
                }
            }
        }
        w.save(path)
    }

    /// The listings kept in `path` (every one needing a stat before it is reused: generation
    /// 0); `None` when there is no such file or it is not one.
    pub fn load(path: &Path) -> Option<Memo> {
        use std::os::unix::ffi::OsStrExt;
        let bytes = crate::kept_file::read(path, FILE_MAX_BYTES)?;
        let mut r = crate::kept_file::Reader::new(&bytes, FILE_MAGIC)?;
        let count = usize::try_from(r.u64()?).ok()?;
        if count > MAX_DIRS {
            return None;
        }
        let mut dirs = HashMap::with_capacity(count);
        for _ in 0..count {
            let dir = r.bytes()?;
            if !dir.starts_with(b"/") || dir.contains(&0) {
                return None;
            }
            let dev = r.u64()?;
            let ino = r.u64()?;
            let ctime = (r.i64()?, r.i64()?);
            let at = Duration::new(r.u64()?, u32::try_from(r.u64()?).ok()?);
            let entries = usize::try_from(r.u64()?).ok()?;
            let mut names = [Vec::new(), Vec::new()];
            for list in &mut names {
                let n = usize::try_from(r.u64()?).ok()?;
                if n > entries {
                    return None;
                }
                for _ in 0..n {
                    list.push(OsString::from(std::ffi::OsStr::from_bytes(r.name()?)));
                }
            }
            let [subdirs, sockets] = names;
            let listing = Listing {
                dev,
                ino,
                ctime,
                at,
                entries,
                subdirs,
                sockets,
            };
            dirs.insert(
                OsString::from(std::ffi::OsStr::from_bytes(dir)),
                Kept::new(0, Arc::new(listing)),
            );
        }
        r.done().then_some(Memo {
            dirs: Some(dirs),
            trees: std::collections::BTreeMap::new(),
            trees_reused: 0,
            checks: 0,
            checking: false,
            reused: 0,
            checked: 0,
            check_from: super::precheck::MIN_DIRS,
            heard: 0,
            changed: false,
        })
    }

    /// Directories kept.
    pub fn len(&self) -> usize {
        self.dirs.as_ref().map_or(0, HashMap::len)
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for Memo {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_directory_has_one_identity_by_path_by_name_and_by_descriptor() {
        // Listings kept by path-stats are compared with stats relative to a descriptor: the
        // device is encoded alike, and a link or a file is no directory in either.
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().canonicalize().unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        std::fs::write(dir.join("file"), b"").unwrap();
        std::os::unix::fs::symlink(dir.join("sub"), dir.join("link")).unwrap();
        let parent = crate::fsat::open_root(&dir, crate::fsat::Access::Path).unwrap();
        let sub = crate::fsat::open_dir(
            parent.as_fd(),
            std::ffi::OsStr::new("sub"),
            crate::fsat::Access::Path,
        )
        .unwrap();
        let by_path = Listing::stat(&dir.join("sub")).unwrap().identity();
        let by_name = Listing::stat_at(parent.as_fd(), std::ffi::OsStr::new("sub"))
            .unwrap()
            .identity();
        let by_fd = Listing::of_fd(sub.as_fd()).unwrap().identity();
        assert_eq!(by_path, by_name);
        assert_eq!(by_path, by_fd);
        for name in ["file", "link", "missing"] {
            assert!(Listing::stat_at(parent.as_fd(), std::ffi::OsStr::new(name)).is_none());
            assert!(Listing::stat(&dir.join(name)).is_none());
        }
    }
}
