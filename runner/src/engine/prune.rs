//! Artifact retention (`ralph prune`, the service's `retention`): the artifacts of jobs that
//! finished long enough ago (round directories with prompts, reports, logs) are removed from
//! this host's state directory; the journal keeps every event, and a provisioned job keeps its
//! `result.patch`. A pruned job's directory keeps
//! its run hold file and a [`PRUNED_FILE`] marker saying when and how much was removed, so
//! `ralph show` and `ralph logs --round` say "pruned" instead of failing obscurely.
//!
//! Safety: job ids come from the store and are checked ([`valid_job_id`]) before they become
//! paths; a job's directory must be a real directory under `<state-dir>/jobs` (not a symlink);
//! nothing is followed through a symlink (a link in the artifacts — one an older ralph let a
//! round plant in its `out/` — is removed as a link, its target untouched). Trees are measured
//! and removed by [`ralph_sandbox::beneath::tree`]: descriptor-relative, with a bounded number
//! of open descriptors and bounded memory whatever their depth (a 5,000-level tree, deeper than
//! `PATH_MAX`, goes like any other). A job is pruned under its run hold, so a run resumed
//! meanwhile cannot start on it, and only when it is still finished once the hold is taken.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ralph_sandbox::beneath::tree;
use serde::{Deserialize, Serialize};

use crate::store::hold::{HOLD_FILE, Probe, probe_file};
use crate::store::{JobState, Store, StoreError};

/// A provisioned job's result, kept when its other artifacts go (SPEC §11).
const RESULT_PATCH: &str = "result.patch";

/// The marker a pruned job's directory keeps.
pub const PRUNED_FILE: &str = "pruned.json";

/// What a pruned job's marker says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrunedMarker {
    /// When the artifacts were removed (RFC 3339 UTC).
    pub pruned_at: String,
    /// Files (and links) removed.
    pub files: u64,
    /// Bytes removed.
    pub bytes: u64,
}

/// One job whose artifacts were (or, in a dry run, would be) removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PrunedJob {
    /// The job id.
    pub id: String,
    /// When it finished.
    pub finished_at: String,
    /// Files (and links) removed.
    pub files: u64,
    /// Bytes removed.
    pub bytes: u64,
}

/// What one prune did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Whether nothing was removed on purpose (`--dry-run`).
    pub dry_run: bool,
    /// The jobs pruned.
    pub pruned: Vec<PrunedJob>,
    /// Files removed in all.
    pub files: u64,
    /// Bytes removed in all.
    pub bytes: u64,
    /// Jobs that could not be pruned, with why (a removal failed, the job runs again).
    pub skipped: Vec<String>,
}

/// A prune that could not run.
#[derive(Debug, thiserror::Error)]
pub enum PruneError {
    /// The store could not list or load the jobs.
    #[error("failed to read the finished jobs from the store: {0}")]
    Store(#[from] StoreError),
}

/// Whether `id` may become a path component: a store id (letters, digits, `-`, `_`).
pub fn valid_job_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The marker of a pruned job, if its artifacts were pruned.
pub fn pruned_marker(job_dir: &Path) -> Option<PrunedMarker> {
    let bytes = std::fs::read(job_dir.join(PRUNED_FILE)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Files and bytes below `path`, never through a symlink (what cannot be read counts nothing).
fn measure(path: &Path) -> (u64, u64) {
    match tree::measure(path) {
        Ok(Some(t)) => (t.files, t.bytes),
        Ok(None) | Err(_) => (0, 0),
    }
}

/// The entries of a job directory that are artifacts (all but the hold and the marker).
fn artifacts_of(job_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(job_dir)
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name() != HOLD_FILE
                        && e.file_name() != PRUNED_FILE
                        && e.file_name() != RESULT_PATCH
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes one entry without following a symlink, whatever its depth.
fn remove(path: &Path) -> Result<(), ralph_sandbox::beneath::BeneathError> {
    tree::remove_tree(path).map(drop)
}

/// When an RFC 3339 time was, or `None` when it does not parse.
fn parse_time(at: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(at).ok()
}

/// Prunes the artifacts of every job of `store` that finished more than `older_than` ago and
/// has artifacts in `state_dir` (see the module doc). `dry_run` removes nothing.
pub fn prune(
    store: &Store,
    state_dir: &Path,
    older_than: Duration,
    dry_run: bool,
) -> Result<PruneReport, PruneError> {
    let mut report = PruneReport {
        dry_run,
        ..Default::default()
    };
    let jobs_dir = state_dir.join("jobs");
    let cutoff = SystemTime::now()
        .checked_sub(older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    for id in store.job_ids_in_state(JobState::Finished)? {
        if !valid_job_id(&id) {
            report
                .skipped
                .push(format!("job `{}`: not a valid job id", id.escape_debug()));
            continue;
        }
        let job_dir = jobs_dir.join(&id);
        // A real directory of this state dir, never a link out of it.
        if !job_dir.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            continue;
        }
        if artifacts_of(&job_dir).is_empty() {
            continue;
        }
        let view = store.load(&id)?;
        if view.state != JobState::Finished {
            continue;
        }
        let Some(finished) = parse_time(&view.updated_at) else {
            continue;
        };
        if finished > cutoff {
            continue;
        }
        // Under the job's hold: a run resumed meanwhile cannot start on it.
        let _guard = match probe_file(state_dir, &id) {
            Ok(Probe::Held { holder }) => {
                report
                    .skipped
                    .push(format!("job {id}: its run hold is held by {holder}"));
                continue;
            }
            Err(e) => {
                report.skipped.push(format!("job {id}: {e}"));
                continue;
            }
            Ok(Probe::Free { guard, .. }) => guard,
            Ok(Probe::Missing | Probe::Gone) => None,
        };
        if store.load(&id)?.state != JobState::Finished {
            continue;
        }
        let entries = artifacts_of(&job_dir);
        let (mut files, mut bytes) = (0, 0);
        for e in &entries {
            let (f, b) = measure(e);
            files += f;
            bytes += b;
        }
        if !dry_run {
            let failed: Vec<String> = entries
                .iter()
                .filter_map(|e| {
                    remove(e)
                        .err()
                        .map(|err| format!("`{}`: {err}", e.display()))
                })
                .collect();
            if !failed.is_empty() {
                report
                    .skipped
                    .push(format!("job {id}: failed to remove {}", failed.join(", ")));
            }
            let previous = pruned_marker(&job_dir);
            let marker = PrunedMarker {
                pruned_at: crate::store::now_rfc3339(),
                files: files + previous.as_ref().map_or(0, |p| p.files),
                bytes: bytes + previous.as_ref().map_or(0, |p| p.bytes),
            };
            if let Ok(text) = serde_json::to_vec(&marker) {
                let _ = std::fs::write(job_dir.join(PRUNED_FILE), text);
            }
            // The copies a shared store kept for the other hosts go with them.
            if let Err(e) = store.drop_job_files(&id) {
                report
                    .skipped
                    .push(format!("job {id}: its files kept in the store stay: {e}"));
            }
        }
        report.files += files;
        report.bytes += bytes;
        report.pruned.push(PrunedJob {
            id,
            finished_at: view.updated_at,
            files,
            bytes,
        });
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_ids_become_paths() {
        assert!(valid_job_id("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"));
        for bad in ["", "..", "a/b", "../x", "a\nb", ".hidden", "a b"] {
            assert!(!valid_job_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn times_of_the_journal_parse() {
        assert!(parse_time("2026-01-02T03:04:05.678Z").is_some());
        assert!(parse_time("not a time").is_none());
    }
}
