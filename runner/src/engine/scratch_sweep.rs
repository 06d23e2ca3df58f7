//! Sweeping a state directory's leftover private scratch: the `home/` and `tmp/` of round
//! attempts and verify runs ([`super::artifacts`]) that no live run uses. An attempt removes its
//! own however it ends, but not when its runner is killed (`kill -9`, a host crash), and the host
//! that closes such a job may be another one, with another state directory. So every runner
//! sweeps its own state directory: at start, and the service periodically.
//!
//! Only jobs that may have some are looked at: a run marks its job (an empty file named by the
//! job in [`MARKS_DIR`]) before it makes any scratch and removes the mark at its end, once its
//! job has none left ([`Mark`]). A sweep reads the marks, not every job of the state directory:
//! its cost is the number of jobs running or killed while running, not the number of jobs ever
//! run (a state directory of 300 finished jobs made each `ralph run` 5 ms slower, and the
//! service swept all of them every 10 s). A state directory without [`MARKS_DIR`] (made before
//! marks) is swept whole once, then the directory is made.
//!
//! A job whose hold file is locked is live (SQLite and PostgreSQL runs both lock it) and left
//! alone; any other job is swept while the sweeper holds that lock, so a run cannot start on it
//! meanwhile, and its mark is removed under that lock (a run that takes the job afterwards
//! marks it again). The state directory is the runner's own (agents cannot write it), and the
//! removal ([`ralph_sandbox::beneath::tree::remove_tree`]) follows no symbolic link and holds a
//! bounded number of descriptors whatever the depth of what it removes.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::store::hold::{Probe, probe_file};

/// The directory of the marks, in the state directory.
pub const MARKS_DIR: &str = "scratch-marks";

/// What one sweep removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// The private directories removed.
    pub removed: Vec<PathBuf>,
}

fn children(p: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(p)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

fn marks_dir(state_dir: &Path) -> PathBuf {
    state_dir.join(MARKS_DIR)
}

/// The private directories of job `id` that exist.
fn scratch_of(state_dir: &Path, id: &str) -> Vec<PathBuf> {
    children(&state_dir.join("jobs").join(id).join("rounds"))
        .iter()
        .flat_map(|round| children(round))
        .flat_map(|attempt| [attempt.join("home"), attempt.join("tmp")])
        .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()))
        .collect()
}

fn remove_all(dirs: Vec<PathBuf>, report: &mut SweepReport) {
    for dir in dirs {
        if ralph_sandbox::beneath::tree::remove_tree(&dir).is_ok() {
            report.removed.push(dir);
        }
    }
}

/// Whether job `id` was swept (its hold free or gone: its scratch removed, its mark too),
/// or left to the live run that holds it.
fn sweep_job(state_dir: &Path, id: &str, report: &mut SweepReport) -> bool {
    // Swept under the job's lock when it is free. A run that starts on the job afterwards
    // makes new attempt directories (a new round or attempt number), never these.
    let _guard = match probe_file(state_dir, id) {
        Ok(Probe::Held { .. }) | Err(_) => return false,
        Ok(Probe::Free { guard, .. }) => guard,
        Ok(Probe::Missing | Probe::Gone) => None,
    };
    remove_all(scratch_of(state_dir, id), report);
    let _ = std::fs::remove_file(marks_dir(state_dir).join(id));
    true
}

/// Removes the private scratch of every marked job of `state_dir` that no live run holds
/// (every job's, the first time, in a state directory made before marks).
pub fn sweep(state_dir: &Path) -> SweepReport {
    let mut report = SweepReport::default();
    let marks = match std::fs::read_dir(marks_dir(state_dir)) {
        Ok(marks) => marks,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            sweep_all(state_dir, &mut report);
            let _ = make_marks_dir(state_dir);
            return report;
        }
        Err(_) => {
            sweep_all(state_dir, &mut report);
            return report;
        }
    };
    for m in marks.flatten() {
        if !m.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        if let Some(id) = m.file_name().to_str() {
            sweep_job(state_dir, id, &mut report);
        }
    }
    report
}

/// Every job's scratch (a state directory made before marks).
fn sweep_all(state_dir: &Path, report: &mut SweepReport) {
    for job in children(&state_dir.join("jobs")) {
        let Some(id) = job.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if scratch_of(state_dir, id).is_empty() {
            continue;
        }
        sweep_job(state_dir, id, report);
    }
}

fn make_marks_dir(state_dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new()
        .mode(0o700)
        .create(marks_dir(state_dir))
    {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// A run's mark on its job: made before the run makes any private scratch, removed when the
/// run ends (dropped) once the job has none left. Taken only by the run that holds the job.
#[derive(Debug)]
pub struct Mark {
    state_dir: PathBuf,
    id: String,
}

impl Mark {
    /// Marks job `id` of `state_dir`. A mark that cannot be made is said (a killed run's
    /// scratch would then stay until removed by hand); the run goes on.
    pub fn take(state_dir: &Path, id: &str) -> std::io::Result<Self> {
        make_marks_dir(state_dir)?;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(marks_dir(state_dir).join(id))?;
        Ok(Self {
            state_dir: state_dir.to_owned(),
            id: id.to_owned(),
        })
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        // What the run could not remove (an attempt's removal failed) is tried once more; the
        // mark stays while any is left, for the sweeps.
        let left = scratch_of(&self.state_dir, &self.id);
        let mut report = SweepReport::default();
        let n = left.len();
        remove_all(left, &mut report);
        if report.removed.len() == n {
            let _ = std::fs::remove_file(marks_dir(&self.state_dir).join(&self.id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::hold::RunHold;
    use crate::store::{RunnerInfo, Store};
    use std::sync::Arc;

    fn scratch(state: &Path, id: &str, attempt: &str) -> [PathBuf; 2] {
        let a = state.join("jobs").join(id).join("rounds/1").join(attempt);
        let dirs = [a.join("home"), a.join("tmp")];
        for d in &dirs {
            std::fs::create_dir_all(d.join("sub")).unwrap();
        }
        dirs
    }

    #[test]
    fn a_dead_runs_scratch_goes_and_a_live_ones_stays() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let store = Arc::new(Store::open_sqlite(state).unwrap());
        let me = RunnerInfo::current("test");
        let live = "live-job";
        let _hold = RunHold::try_file(state, live, &me).unwrap();
        let live_dirs = scratch(state, live, "1");
        let dead_dirs = scratch(state, "dead-job", "1");
        let verify_dirs = scratch(state, "dead-job", "verify");
        // A link planted where scratch would be is not followed.
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        let linked = state.join("jobs/other-job/rounds/1/1");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(&outside, linked.join("home")).unwrap();

        let r = sweep(state);
        assert_eq!(r.removed.len(), 4, "{r:?}");
        for d in dead_dirs.iter().chain(&verify_dirs) {
            assert!(!d.exists(), "{}", d.display());
        }
        for d in &live_dirs {
            assert!(
                d.join("sub").exists(),
                "a live run's scratch: {}",
                d.display()
            );
        }
        assert!(outside.join("keep").exists());
        drop(store);
    }

    #[test]
    fn once_marks_exist_only_marked_jobs_are_swept_and_a_live_ones_mark_stays() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let store = Arc::new(Store::open_sqlite(state).unwrap());
        let me = RunnerInfo::current("test");
        // A state directory made before marks: swept whole once, then marks are made.
        let old = scratch(state, "old-job", "1");
        assert_eq!(sweep(state).removed.len(), 2);
        assert!(old.iter().all(|d| !d.exists()));
        assert!(state.join(MARKS_DIR).is_dir());

        let live = "live-job";
        let hold = RunHold::try_file(state, live, &me).unwrap();
        let live_mark = Mark::take(state, live).unwrap();
        let live_dirs = scratch(state, live, "1");
        let dead_mark = Mark::take(state, "dead-job").unwrap();
        let dead_dirs = scratch(state, "dead-job", "2");
        // A killed run never drops its mark.
        std::mem::forget(dead_mark);
        let unmarked = scratch(state, "unmarked-job", "1");

        let r = sweep(state);
        assert_eq!(r.removed.len(), 2, "{r:?}");
        assert!(dead_dirs.iter().all(|d| !d.exists()));
        assert!(live_dirs.iter().all(|d| d.join("sub").exists()));
        assert!(unmarked.iter().all(|d| d.exists()), "only marks are read");
        let marked: Vec<_> = std::fs::read_dir(state.join(MARKS_DIR))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(marked, vec![std::ffi::OsString::from(live)]);

        // The live run ends: what it left is removed with its mark, while it holds the job.
        drop(live_mark);
        assert!(live_dirs.iter().all(|d| !d.exists()));
        assert_eq!(std::fs::read_dir(state.join(MARKS_DIR)).unwrap().count(), 0);
        drop(hold);
        drop(store);
    }

    #[test]
    fn a_mark_is_a_private_file_and_is_never_followed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path();
        let m = Mark::take(state, "job").unwrap();
        let marks = state.join(MARKS_DIR);
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&marks), 0o700);
        assert_eq!(mode(&marks.join("job")), 0o600);
        drop(m);
        // A link where a mark would be is refused, never written through.
        let target = state.join("target");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, marks.join("linked")).unwrap();
        assert!(Mark::take(state, "linked").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
