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

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How much older than the listing a directory's change time must be for the listing to be kept.
pub const MARGIN: Duration = Duration::from_secs(1);

/// Directories remembered, at most (a few hundred bytes each).
pub const MAX_DIRS: usize = 1_000_000;

/// The memo of this process's scans.
pub static PROCESS: Mutex<Memo> = Mutex::new(Memo {
    dirs: None,
    reused: 0,
});

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

    fn ctime(&self) -> Duration {
        let secs = u64::try_from(self.ctime.0).unwrap_or(0);
        let nanos = u32::try_from(self.ctime.1).unwrap_or(0);
        Duration::new(secs, nanos)
    }
}

/// Listings by directory path.
#[derive(Debug)]
pub struct Memo {
    dirs: Option<HashMap<PathBuf, Listing>>,
    /// Listings reused (tests).
    pub reused: u64,
}

impl Memo {
    /// An empty memo.
    pub const fn new() -> Self {
        Memo {
            dirs: None,
            reused: 0,
        }
    }

    /// The kept listing of `dir`, if `dir` is still that directory with that change time.
    pub fn reuse(&mut self, dir: &Path) -> Option<Listing> {
        let kept = self.dirs.as_ref()?.get(dir)?;
        let now = Listing::stat(dir)?;
        if (now.dev, now.ino, now.ctime) != (kept.dev, kept.ino, kept.ctime) {
            return None;
        }
        self.reused += 1;
        Some(kept.clone())
    }

    /// Keeps `listing` of `dir` when the directory had been quiet for `margin` when it began.
    pub fn keep(&mut self, dir: &Path, listing: &Listing, margin: Duration) {
        let dirs = self.dirs.get_or_insert_with(HashMap::new);
        if listing.ctime() + margin >= listing.at {
            dirs.remove(dir);
            return;
        }
        if dirs.len() >= MAX_DIRS {
            dirs.clear();
        }
        dirs.insert(dir.to_owned(), listing.clone());
    }
}

impl Default for Memo {
    fn default() -> Self {
        Self::new()
    }
}
