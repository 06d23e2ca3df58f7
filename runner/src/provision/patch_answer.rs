//! What `GET /v1/jobs/{id}/patch` and `ralph diff JOB` answer for a job (SPEC §11), decided
//! in one place from its journal's view and what is on disk: the patch (a `partial` one too,
//! flagged), or the truth about why there is none — not a provisioned job, not ended yet, the
//! patch could not be built (and why), it was removed with the job's artifacts, it is on the
//! host that ran the job, the job ended before its result was written, its workspace was never
//! provisioned.

use std::path::Path;

use super::patch_status::{PatchState, PatchStatus, skipped_list};
use crate::store::{JobState, JobView};

/// The answer for a job's patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchAnswer {
    /// The patch file is there: send it. `status` says what it holds (`None` for a journal
    /// older than the patch states).
    Patch {
        /// What the patch holds.
        status: Option<PatchStatus>,
    },
    /// There is no patch, and why (`404 no_patch`; `ralph diff` exits 64).
    NoPatch(String),
    /// The patch could not be built, and why (`404 patch_failed`; `ralph diff` exits 70).
    Failed(String),
}

/// The answer for the patch of job `view`, whose `result.patch` would be `path` (in the job
/// directory `job_dir`) on this host, `this_host`.
pub fn answer(view: &JobView, path: &Path, job_dir: &Path, this_host: &str) -> PatchAnswer {
    let id = &view.id;
    if view.spec.source.is_none() {
        return PatchAnswer::NoPatch(format!(
            "job `{id}` ran in an existing workspace: only a provisioned job (`repo` or `upload`) has a patch"
        ));
    }
    let finished = view.state == JobState::Finished;
    let status = view.patch.as_ref();
    if let (true, Some(s)) = (finished, status) {
        if s.state == PatchState::Failed {
            return PatchAnswer::Failed(failed_message(id, s));
        }
    }
    if path.is_file() {
        return PatchAnswer::Patch {
            status: status.cloned(),
        };
    }
    if !finished {
        return PatchAnswer::NoPatch(format!(
            "job `{id}` is {}: its result.patch is written when it ends",
            view.state.as_str()
        ));
    }
    match status {
        Some(s) => {
            if let Some(m) = crate::engine::prune::pruned_marker(job_dir) {
                return PatchAnswer::NoPatch(format!(
                    "job `{id}`: its result.patch ({} file(s)) was removed with its artifacts at {} (retention)",
                    s.files, m.pruned_at
                ));
            }
            // Another host, or another state directory on this one (a fleet: SPEC §11).
            if let Some(r) = view.runner.as_ref().filter(|r| {
                r.host != this_host
                    || r.state_dir
                        .as_ref()
                        .is_some_and(|d| !job_dir.starts_with(d))
            }) {
                return PatchAnswer::NoPatch(format!(
                    "job `{id}`: its result.patch ({} file(s)) is on the host that ran it, {}, not on `{this_host}`",
                    s.files,
                    r.place()
                ));
            }
            PatchAnswer::NoPatch(format!(
                "job `{id}`: its result.patch ({} file(s)) was written but `{}` is gone",
                s.files,
                path.display()
            ))
        }
        None if view.base_commit.is_none() => PatchAnswer::NoPatch(format!(
            "job `{id}` has no result.patch: its workspace was never provisioned{}",
            ended(view)
        )),
        None => PatchAnswer::NoPatch(format!(
            "job `{id}` has no result.patch: it ended before its result was written{}",
            ended(view)
        )),
    }
}

/// ` (error, provision_failed: …)`: how the job ended, when it did.
fn ended(view: &JobView) -> String {
    view.finish.as_ref().map_or_else(String::new, |f| {
        format!(" ({}, {}: {})", f.outcome, f.reason.as_str(), f.message)
    })
}

/// `job `ID`: the result patch could not be built (out_of_memory): …`.
fn failed_message(id: &str, s: &PatchStatus) -> String {
    format!(
        "job `{id}`: the result patch could not be built{}: {}",
        s.failure
            .map_or_else(String::new, |f| format!(" ({})", f.as_str())),
        s.error.as_deref().unwrap_or("no reason was recorded")
    )
}

/// The warning for a partial patch (stderr of `ralph diff`): which paths are not in it.
pub fn partial_warning(id: &str, s: &PatchStatus) -> Option<String> {
    (s.state == PatchState::Partial).then(|| {
        format!(
            "job `{id}`: the result patch is partial: {} path(s) were left out (the rest of the work is in it): {}",
            s.skipped_total,
            skipped_list(&s.skipped, s.skipped_total)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{AgentSpec, FinishReason, JobSpec, Outcome, WorkspaceSource};
    use crate::provision::patch_status::{PatchFailure, SkipReason, SkippedPath};
    use crate::store::{Event, EventKind, RunnerInfo};

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            job_id: "j".into(),
            seq,
            at: "2026-12-01T00:00:00.000Z".into(),
            kind,
        }
    }

    fn written(patch: Option<PatchState>, error: Option<&str>, skipped: usize) -> EventKind {
        EventKind::ResultWritten {
            bytes: if error.is_some() { 0 } else { 100 },
            files: if error.is_some() { 0 } else { 2 },
            pushed: None,
            error: error.map(str::to_owned),
            patch,
            failure: (patch == Some(PatchState::Failed)).then_some(PatchFailure::OutOfMemory),
            skipped: (0..skipped)
                .map(|i| SkippedPath {
                    path: format!(".GIT/{i}"),
                    reason: SkipReason::GitPath,
                    detail: None,
                })
                .collect(),
            skipped_total: skipped as u64,
            git_max_rss: Some(1 << 20),
        }
    }

    /// A provisioned job's view after `events` (submitted, started, then these), finished
    /// when `finish`; run on host `host`.
    fn view(provisioned: bool, events: Vec<EventKind>, finish: bool, host: &str) -> JobView {
        let mut spec = JobSpec::new(
            "o",
            "/ws",
            AgentSpec::Command {
                command: "true".into(),
            },
        );
        if provisioned {
            spec.source = Some(WorkspaceSource::Repo {
                repo: "git://h/r.git".into(),
                git_ref: None,
                push: None,
            });
        }
        let mut runner = RunnerInfo::current("serve");
        runner.host = host.into();
        let mut all = vec![
            EventKind::JobSubmitted {
                spec: Box::new(spec),
            },
            EventKind::JobStarted { runner },
        ];
        all.extend(events);
        if finish {
            all.push(EventKind::JobFinished {
                outcome: Outcome::Complete,
                reason: FinishReason::Reported,
                message: "worker reported completion".into(),
                exit_code: None,
                ran_ms: Some(1),
            });
        }
        let events: Vec<Event> = all
            .into_iter()
            .enumerate()
            .map(|(i, k)| ev(i as u64 + 1, k))
            .collect();
        JobView::project(&events).unwrap()
    }

    fn provisioned() -> EventKind {
        EventKind::WorkspaceProvisioned {
            repo: Some("git://h/r.git".into()),
            git_ref: None,
            commit: "c0ffee".into(),
            duration_ms: 1,
            layout: Some("clone".into()),
        }
    }

    fn no_patch(a: PatchAnswer) -> String {
        match a {
            PatchAnswer::NoPatch(m) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn every_job_gets_the_truth_about_its_patch() {
        let dir = tempfile::tempdir().unwrap();
        let job_dir = dir.path().join("j");
        std::fs::create_dir(&job_dir).unwrap();
        let path = job_dir.join("result.patch");
        let here = "here";
        let ask = |v: &JobView| answer(v, &path, &job_dir, here);

        let m = no_patch(ask(&view(false, vec![], true, here)));
        assert!(m.contains("existing workspace"), "{m}");
        let m = no_patch(ask(&view(true, vec![provisioned()], false, here)));
        assert!(m.contains("is running"), "{m}");
        let m = no_patch(ask(&view(true, vec![], true, here)));
        assert!(m.contains("never provisioned"), "{m}");
        let m = no_patch(ask(&view(true, vec![provisioned()], true, here)));
        assert!(m.contains("ended before its result was written"), "{m}");
        assert!(!m.contains("never provisioned"), "{m}");

        // Failed, now and in an older journal (an error and no file): never "never
        // provisioned", whatever is on disk.
        std::fs::write(&path, "stale").unwrap();
        let failed = view(
            true,
            vec![
                provisioned(),
                written(Some(PatchState::Failed), Some("boom"), 0),
            ],
            true,
            here,
        );
        assert_eq!(
            ask(&failed),
            PatchAnswer::Failed(
                "job `j`: the result patch could not be built (out_of_memory): boom".into()
            )
        );
        let older = view(
            true,
            vec![
                provisioned(),
                written(None, Some("failed to run `git add`"), 0),
            ],
            true,
            here,
        );
        let PatchAnswer::Failed(m) = ask(&older) else {
            panic!("{:?}", ask(&older));
        };
        assert!(
            m.contains("could not be built: failed to run `git add`"),
            "{m}"
        );

        // Partial: served, flagged, its paths named.
        let partial = view(
            true,
            vec![provisioned(), written(Some(PatchState::Partial), None, 2)],
            true,
            here,
        );
        let PatchAnswer::Patch { status: Some(s) } = ask(&partial) else {
            panic!("{:?}", ask(&partial));
        };
        assert_eq!(s.state, PatchState::Partial);
        let warning = partial_warning("j", &s).unwrap();
        assert!(
            warning.contains("2 path(s)") && warning.contains("`.GIT/1` (git_path)"),
            "{warning}"
        );

        // Written, but the file is not here: pruned, on another host, or gone.
        std::fs::remove_file(&path).unwrap();
        let ok = |host| {
            view(
                true,
                vec![provisioned(), written(Some(PatchState::Written), None, 0)],
                true,
                host,
            )
        };
        let m = no_patch(ask(&ok("there")));
        assert!(m.contains("on the host that ran it, `there`"), "{m}");
        let m = no_patch(ask(&ok(here)));
        assert!(m.contains("was written but"), "{m}");
        std::fs::write(
            job_dir.join(crate::engine::prune::PRUNED_FILE),
            r#"{"pruned_at":"2026-12-01T01:00:00Z","files":3,"bytes":10}"#,
        )
        .unwrap();
        let m = no_patch(ask(&ok(here)));
        assert!(
            m.contains("removed with its artifacts at 2026-12-01T01:00:00Z"),
            "{m}"
        );
    }
}
