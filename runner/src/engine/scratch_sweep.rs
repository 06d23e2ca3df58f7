//! Sweeping a state directory's leftover private scratch: the `home/` and `tmp/` of round
//! attempts and verify runs ([`super::artifacts`]) that no live run uses. An attempt removes its
//! own however it ends, but not when its runner is killed (`kill -9`, a host crash), and the host
//! that closes such a job may be another one, with another state directory. So every runner
//! sweeps its own state directory: at start, and the service periodically.
//!
//! A job whose hold file is locked is live (SQLite and PostgreSQL runs both lock it) and left
//! alone; any other job is swept while the sweeper holds that lock, so a run cannot start on it
//! meanwhile. The state directory is the runner's own (agents cannot write it), and the removal
//! ([`ralph_sandbox::beneath::tree::remove_tree`]) follows no symbolic link and holds a bounded
//! number of descriptors whatever the depth of what it removes.

use std::path::{Path, PathBuf};

use crate::store::hold::{Probe, probe_file};

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

/// Removes the private scratch of every job of `state_dir` that no live run holds.
pub fn sweep(state_dir: &Path) -> SweepReport {
    let mut report = SweepReport::default();
    for job in children(&state_dir.join("jobs")) {
        let Some(id) = job.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let scratch: Vec<PathBuf> = children(&job.join("rounds"))
            .iter()
            .flat_map(|round| children(round))
            .flat_map(|attempt| [attempt.join("home"), attempt.join("tmp")])
            .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()))
            .collect();
        if scratch.is_empty() {
            continue;
        }
        // Swept under the job's lock when it is free. A run that starts on the job afterwards
        // makes new attempt directories (a new round or attempt number), never these.
        let _guard = match probe_file(state_dir, id) {
            Ok(Probe::Held { .. }) | Err(_) => continue,
            Ok(Probe::Free { guard, .. }) => guard,
            Ok(Probe::Missing | Probe::Gone) => None,
        };
        for dir in scratch {
            if ralph_sandbox::beneath::tree::remove_tree(&dir).is_ok() {
                report.removed.push(dir);
            }
        }
    }
    report
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
}
