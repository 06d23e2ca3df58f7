//! Copies of protected files kept between the runs of one job ([`super::Snapshot::take_kept`]),
//! so that a run whose protected files did not change since the last one copies nothing (a git
//! project's `.git/hooks` holds a dozen sample hooks: each round copied them, then removed the
//! copies).
//!
//! A copy is named by the identity its file had when it was copied (device, inode, mode, size,
//! modification and change times) and reused for a file that has that identity now: a write, a
//! truncation, a rename over it or a `chmod` moves the change time, which no process can set
//! back. Two guards: a copy is kept only of a file whose change time was at least [`QUIET`] old
//! when it was copied (a write in the same tick of the coarse clock as the copy would leave the
//! change time where it was), and a copy is written under a temporary name and renamed once
//! whole (a runner killed mid-copy leaves no short copy under a file's name). Copies no file has
//! any more are removed at the next take. The directory is the runner's, in the job's own
//! directory, never visible to a run.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Ident;

/// How old a file's change time must be for its copy to be kept.
pub const QUIET: Duration = Duration::from_secs(1);

/// The job's kept copies, and which of them this take uses.
#[derive(Debug)]
pub(super) struct Kept {
    dir: PathBuf,
    used: HashSet<String>,
    /// Seconds and nanoseconds since the epoch when the take began.
    now: (i64, i64),
}

/// Where a file's copy comes from ([`Kept::place`]).
#[derive(Debug)]
pub(super) enum Place {
    /// A kept copy of it as it is now: nothing to copy.
    Kept(PathBuf),
    /// Copy it to the temporary path, then keep it under the final one.
    Copy(PathBuf, PathBuf),
    /// Copy it for this run only (its change time is too recent to trust a kept copy with).
    NotKept,
}

impl Kept {
    /// Where the copy of a file with `ident` comes from.
    pub(super) fn place(&mut self, ident: &Ident) -> Place {
        if let Some(copy) = self.reuse(ident) {
            return Place::Kept(copy);
        }
        match self.slot(ident) {
            Some((tmp, path)) => Place::Copy(tmp, path),
            None => Place::NotKept,
        }
    }

    /// The kept copies in `dir` (made, owner-only, when missing), for a take at `now`.
    pub(super) fn open(dir: &Path, now: SystemTime) -> std::io::Result<Self> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
        Ok(Self {
            dir: dir.to_owned(),
            used: HashSet::new(),
            now: (
                i64::try_from(now.as_secs()).unwrap_or(i64::MAX),
                i64::from(now.subsec_nanos()),
            ),
        })
    }

    /// The kept copy of a file with `ident`, if there is one (a regular file of its size).
    fn reuse(&mut self, ident: &Ident) -> Option<PathBuf> {
        let name = name_of(ident);
        let path = self.dir.join(&name);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.file_type().is_file() || meta.len() != ident.size {
            return None;
        }
        self.used.insert(name);
        Some(path)
    }

    /// Where to copy a file with `ident` so that the copy is kept (`Some((temporary, final))`),
    /// or `None` when its change time is too recent for a kept copy to be trusted.
    fn slot(&mut self, ident: &Ident) -> Option<(PathBuf, PathBuf)> {
        if !quiet(ident.ctime, self.now) {
            return None;
        }
        let name = name_of(ident);
        let tmp = format!("{name}.tmp");
        let (tmp_path, path) = (self.dir.join(&tmp), self.dir.join(&name));
        // Both are this take's: the temporary one stays this run's copy when the file changed
        // while it was copied (the next take sweeps it).
        self.used.insert(name);
        self.used.insert(tmp);
        Some((tmp_path, path))
    }

    /// Removes the copies this take did not use (and what a killed copy left).
    pub(super) fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let keep = name.to_str().is_some_and(|n| self.used.contains(n));
            if !keep && e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Whether a change time `ctime` was at least [`QUIET`] before `now`.
fn quiet(ctime: (i64, i64), now: (i64, i64)) -> bool {
    let nanos = |(s, n): (i64, i64)| i128::from(s) * 1_000_000_000 + i128::from(n);
    nanos(now) - nanos(ctime) >= i128::try_from(QUIET.as_nanos()).unwrap_or(i128::MAX)
}

/// A copy's name: the identity of the file it is a copy of.
fn name_of(i: &Ident) -> String {
    format!(
        "{:x}-{:x}-{:o}-{:x}-{}.{:09}-{}.{:09}",
        i.dev, i.ino, i.mode, i.size, i.mtime.0, i.mtime.1, i.ctime.0, i.ctime.1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(size: u64, ctime: (i64, i64)) -> Ident {
        Ident {
            kind: crate::beneath::Kind::File,
            dev: 1,
            ino: 2,
            mode: 0o100644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            mtime: ctime,
            ctime,
        }
    }

    #[test]
    fn a_copy_left_under_its_temporary_name_is_this_runs_until_the_next_take() {
        let dir = tempfile::tempdir().unwrap();
        let kept_dir = dir.path().join("kept");
        let at = UNIX_EPOCH + Duration::from_secs(1_000);
        let mut k = Kept::open(&kept_dir, at).unwrap();
        let i = ident(5, (990, 0));
        let (tmp, path) = k.slot(&i).unwrap();
        // The file changed while it was copied: the copy stays at its temporary name.
        std::fs::write(&tmp, "12345").unwrap();
        std::fs::write(kept_dir.join("stale"), "x").unwrap();
        k.sweep();
        assert!(tmp.exists(), "this run's copy was swept");
        assert!(!path.exists());
        assert!(!kept_dir.join("stale").exists());
        // The next take does not reuse it (it is not under the file's name) and sweeps it.
        let mut next = Kept::open(&kept_dir, at).unwrap();
        assert_eq!(next.reuse(&i), None);
        next.sweep();
        assert!(!tmp.exists());
        // A copy of a file changed less than a second before the take is not kept.
        assert_eq!(next.slot(&ident(5, (999, 500_000_000))), None);
    }

    #[test]
    fn a_change_time_is_quiet_a_second_after() {
        assert!(quiet((100, 0), (101, 0)));
        assert!(quiet((100, 500), (101, 500)));
        assert!(!quiet((100, 501), (101, 500)));
        assert!(
            !quiet((101, 0), (100, 0)),
            "a change time ahead of the clock"
        );
    }
}
