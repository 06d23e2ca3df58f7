//! The state directory's reserve: a file of [`RESERVE_BYTES`] real (allocated) blocks that a
//! full disk cannot take, so the journal is never wedged by one (SPEC §8).
//!
//! A round can fill the disk that holds the state directory (through its workspace, a `--write`
//! directory, anything on the same filesystem). The runner's next journal write then fails
//! with SQLite's "database or disk is full", and without room the job would stay `running`
//! with its journal ending at `round_spawned`. Instead, the first write that finds the disk
//! full ([`crate::store::StoreError::is_disk_full`]) removes the reserve and is tried again: the
//! freed blocks hold the round's end, the job's close and SQLite's own needs meanwhile (its
//! WAL frames and index; its temporary files go to the system's temporary directory, not the
//! state directory). The disk stays marked full ([`Reserve::full`]) until the reserve can be
//! made again with [`REPLENISH_MARGIN`] to spare, so a job does not start another round on a
//! disk with no room.
//!
//! The reserve is made when the SQLite store is opened and after each job ([`Reserve::replenish`]),
//! only when the disk has room for it: it never takes the last free blocks itself. A PostgreSQL
//! store keeps its journal elsewhere and has no reserve; its runner still marks the state disk
//! full when its artifacts cannot be written.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The reserve file's name in the state directory.
pub const RESERVE_FILE: &str = "reserve";

/// How much the reserve holds: a few thousand journal events with SQLite's WAL overhead (an
/// event is at most a few KiB; each commit writes a few 4 KiB pages), far more than a job's
/// closing events need.
pub const RESERVE_BYTES: u64 = 8 << 20;

/// Free space, besides the reserve itself, that the disk must have for a round to start (its
/// prompt, capped logs, report files and journal events) and for the reserve to be made again:
/// a disk with less is full, and one found full stays marked so until then.
pub const REPLENISH_MARGIN: u64 = 4 << 20;

/// Whether an OS error says the disk (or the user's quota) is full.
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
        || e.kind() == io::ErrorKind::StorageFull
        || e.kind() == io::ErrorKind::QuotaExceeded
}

/// The free bytes of the filesystem holding `dir`, as an unprivileged process may use them.
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(io::Error::from)?;
    Ok(st.blocks_available().saturating_mul(st.fragment_size()))
}

/// The reserve of one state directory (none for a store that keeps its journal elsewhere or is
/// only read).
#[derive(Debug)]
pub struct Reserve {
    path: Option<PathBuf>,
    /// Why the disk was found full, until the reserve is made again.
    full: Mutex<Option<String>>,
}

impl Reserve {
    /// The reserve of `state_dir` (not made yet: see [`Reserve::replenish`]).
    pub fn in_dir(state_dir: &Path) -> Self {
        Self {
            path: Some(state_dir.join(RESERVE_FILE)),
            full: Mutex::new(None),
        }
    }

    /// No reserve (PostgreSQL, read-only stores); the disk-full mark still works.
    pub fn none() -> Self {
        Self {
            path: None,
            full: Mutex::new(None),
        }
    }

    /// Why the state disk was found full, while it is marked so.
    pub fn full(&self) -> Option<String> {
        self.full.lock().ok().and_then(|f| f.clone())
    }

    /// The disk is full (`why`): the reserve is removed, so the writes that record the end of
    /// what was running fit. Returns whether it freed room (`false`: no reserve was there).
    pub fn release(&self, why: &str) -> bool {
        if let Ok(mut f) = self.full.lock() {
            f.get_or_insert_with(|| why.to_owned());
        }
        let Some(path) = &self.path else {
            return false;
        };
        std::fs::remove_file(path).is_ok()
    }

    /// Makes the reserve if it is missing and the disk of `state_dir` has room for it, and says
    /// whether the disk has room for more work: the reserve in place (where one is kept) and
    /// [`REPLENISH_MARGIN`] free besides. Then the disk is no longer marked full.
    pub fn replenish(&self, state_dir: &Path) -> bool {
        let reserved = match &self.path {
            Some(path) => make(path).unwrap_or(false),
            None => true,
        };
        let ok = reserved && free_bytes(state_dir).is_ok_and(|b| b >= REPLENISH_MARGIN);
        if ok {
            if let Ok(mut f) = self.full.lock() {
                *f = None;
            }
        }
        ok
    }
}

/// Makes the reserve at `path` unless it is there; `Ok(false)` when the disk lacks the room.
fn make(path: &Path) -> io::Result<bool> {
    if let Ok(m) = path.symlink_metadata() {
        // Its blocks, not only its length: a reserve whose allocation did not reach the disk
        // before a power cut (it is not flushed: see below) is made again.
        if m.is_file() && m.len() >= RESERVE_BYTES && m.blocks() * 512 >= RESERVE_BYTES {
            return Ok(true);
        }
        std::fs::remove_file(path)?;
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    if free_bytes(dir)? < RESERVE_BYTES + REPLENISH_MARGIN {
        return Ok(false);
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let written = (|| -> io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)?;
        allocate(&mut f)?;
        // Not flushed: the reserve holds no data, and one a crash left short of its blocks is
        // made again at the next open (above). A flush here cost a new state directory's first
        // job a journal commit of its own (issue 30).
        std::fs::rename(&tmp, path)
    })();
    match written {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            if is_no_space(&e) { Ok(false) } else { Err(e) }
        }
    }
}

/// Gives `f` [`RESERVE_BYTES`] of real blocks: `fallocate`, or zeroes written where the
/// filesystem cannot allocate (a sparse file would free nothing when removed).
fn allocate(f: &mut std::fs::File) -> io::Result<()> {
    let len = i64::try_from(RESERVE_BYTES).unwrap_or(i64::MAX);
    // SAFETY: fallocate on a descriptor we own; no memory is involved.
    if unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS)) {
        return Err(e);
    }
    let chunk = vec![0u8; 64 * 1024];
    let mut left = RESERVE_BYTES;
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_reserve_is_made_freed_and_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reserve::in_dir(dir.path());
        let file = dir.path().join(RESERVE_FILE);
        assert!(r.replenish(dir.path()));
        let m = file.metadata().unwrap();
        assert_eq!(m.len(), RESERVE_BYTES);
        // Real blocks, not a hole: removing it frees them.
        assert!(m.blocks() * 512 >= RESERVE_BYTES, "{} blocks", m.blocks());
        assert_eq!(r.full(), None);

        assert!(r.release("disk full: test"));
        assert!(!file.exists());
        assert_eq!(r.full().as_deref(), Some("disk full: test"));
        // A second release has nothing left to free; the first reason stays.
        assert!(!r.release("again"));
        assert_eq!(r.full().as_deref(), Some("disk full: test"));

        assert!(r.replenish(dir.path()));
        assert!(file.exists());
        assert_eq!(r.full(), None);
    }

    #[test]
    fn a_reserve_of_the_right_length_without_its_blocks_is_made_again() {
        // What a power cut can leave of a reserve that was renamed before its allocation
        // reached the disk: the length, a hole behind it (it is not flushed).
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(RESERVE_FILE);
        std::fs::File::create(&file)
            .unwrap()
            .set_len(RESERVE_BYTES)
            .unwrap();
        assert!(file.metadata().unwrap().blocks() * 512 < RESERVE_BYTES);
        let r = Reserve::in_dir(dir.path());
        assert!(r.replenish(dir.path()));
        let m = file.metadata().unwrap();
        assert_eq!(m.len(), RESERVE_BYTES);
        assert!(m.blocks() * 512 >= RESERVE_BYTES, "{} blocks", m.blocks());
    }

    #[test]
    fn without_a_reserve_the_mark_holds_until_the_disk_has_room() {
        let dir = tempfile::tempdir().unwrap();
        let r = Reserve::none();
        assert!(!r.release("the artifacts could not be written"));
        assert_eq!(
            r.full().as_deref(),
            Some("the artifacts could not be written")
        );
        // This test's disk has the margin free: the mark goes.
        assert!(r.replenish(dir.path()));
        assert_eq!(r.full(), None);
    }

    #[test]
    fn no_space_errors_are_recognised() {
        assert!(is_no_space(&io::Error::from_raw_os_error(libc::ENOSPC)));
        assert!(is_no_space(&io::Error::from_raw_os_error(libc::EDQUOT)));
        assert!(!is_no_space(&io::Error::from_raw_os_error(libc::EACCES)));
    }
}
