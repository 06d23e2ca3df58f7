//! The projection of a provisioned job on a fleet (SPEC §11): its workspace is under the state
//! directory of the host that runs it, whichever host accepted it, and stays where it was made
//! when the job is resumed (on whichever host).

use super::*;
use crate::job::{AgentSpec, JobSpec, WorkspaceSource};

fn ev(seq: u64, kind: EventKind) -> Event {
    Event {
        job_id: "j".into(),
        seq,
        at: "2026-12-02T00:00:00.000Z".into(),
        kind,
    }
}

fn host(state_dir: &str) -> RunnerInfo {
    RunnerInfo::current("serve").with_state_dir(std::path::Path::new(state_dir))
}

#[test]
fn a_provisioned_workspace_is_the_running_hosts_and_stays_there_on_resume() {
    let mut spec = JobSpec::new(
        "objective",
        "/a/workspaces/j",
        AgentSpec::Command {
            command: "true".into(),
        },
    );
    spec.source = Some(WorkspaceSource::Upload { upload: "u".into() });
    let mut v = JobView::project(&[
        ev(
            1,
            EventKind::JobSubmitted {
                spec: Box::new(spec.clone()),
            },
        ),
        ev(2, EventKind::JobStarted { runner: host("/b") }),
    ])
    .unwrap();
    assert_eq!(v.spec.workspace, std::path::Path::new("/b/workspaces/j"));
    v.apply(&ev(
        3,
        EventKind::WorkspaceProvisioned {
            repo: None,
            git_ref: None,
            commit: "c0ffee".into(),
            duration_ms: 1,
            layout: None,
        },
    ))
    .unwrap();
    assert_eq!(
        v.provisioned_by.as_ref().and_then(|r| r.state_dir.clone()),
        Some("/b".into())
    );
    v.apply(&ev(
        4,
        EventKind::JobFinished {
            outcome: crate::job::Outcome::Interrupted,
            reason: crate::job::FinishReason::RunnerDied,
            message: "m".into(),
            exit_code: None,
            ran_ms: None,
        },
    ))
    .unwrap();
    v.apply(&ev(
        5,
        EventKind::Resumed {
            message: "again".into(),
            by: None,
            caps: Default::default(),
        },
    ))
    .unwrap();
    v.apply(&ev(6, EventKind::JobStarted { runner: host("/c") }))
        .unwrap();
    assert_eq!(v.spec.workspace, std::path::Path::new("/b/workspaces/j"));
    // A job in a workspace of its own is never moved; nor is one whose runner has no state
    // directory (`ralph run`, or a journal older than the field).
    let mut own = spec.clone();
    own.source = None;
    for (spec, runner) in [(own, host("/b")), (spec, RunnerInfo::current("run"))] {
        let v = JobView::project(&[
            ev(
                1,
                EventKind::JobSubmitted {
                    spec: Box::new(spec),
                },
            ),
            ev(2, EventKind::JobStarted { runner }),
        ])
        .unwrap();
        assert_eq!(v.spec.workspace, std::path::Path::new("/a/workspaces/j"));
    }
}
