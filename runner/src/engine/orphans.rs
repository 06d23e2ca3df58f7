//! Closing orphaned jobs (SPEC §8): a running job whose run hold is free (SQLite: nobody holds
//! its `flock`) or whose lease expired (PostgreSQL) lost its runner. It is closed as
//! `interrupted` — its open round with the duration of the last heartbeat, the job with the time
//! it ran — and never re-run (`ralph resume` is explicit). Done at the start of `ralph run` and
//! `ralph serve`, and periodically by the service. The caller holds the job's hold while it
//! closes it, so two recoverers racing close it once; a job whose holder lives is left alone.

use std::path::Path;
use std::sync::Arc;

use super::AttemptDirs;
use crate::job::{FinishReason, Outcome};
use crate::store::hold::{Heartbeat, Probe};
use crate::store::{
    EventKind, JobState, JobView, Journal, Observer, RunnerInfo, Store, StoreError,
};

/// What a pass over the running jobs did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrphanReport {
    /// Jobs closed as interrupted.
    pub interrupted: Vec<String>,
    /// Running jobs left alone because their runner holds them.
    pub left_to_live_runners: Vec<String>,
}

/// Closes every running job of `store` whose runner is gone. `me` is the caller (a job
/// journalled as run by this very process, without a hold, is an earlier life's).
pub fn close_orphans(
    store: &Arc<Store>,
    state_dir: &Path,
    me: &RunnerInfo,
    observers: &[Arc<dyn Observer>],
) -> Result<OrphanReport, StoreError> {
    let mut report = OrphanReport::default();
    for id in store.job_ids_in_state(JobState::Running)? {
        let (who, last, guard) = match store.probe_hold(state_dir, &id)? {
            Probe::Held { .. } => {
                report.left_to_live_runners.push(id);
                continue;
            }
            Probe::Gone => continue,
            Probe::Free { who, last, guard } => (who, last, guard),
            Probe::Missing => {
                let view = store.load(&id)?;
                if !legacy_dead(&view, me) {
                    report.left_to_live_runners.push(id);
                    continue;
                }
                (who_ran(&view), None, None)
            }
        };
        // Read under the hold: a job closed or finished meanwhile is left as it is.
        let mut journal = Journal::open(store.clone(), &id, observers.to_vec())?;
        if journal.view().state != JobState::Running {
            continue;
        }
        match close(&mut journal, state_dir, &who, last.as_ref()) {
            Ok(()) => report.interrupted.push(id),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
        drop(guard);
    }
    Ok(report)
}

/// A job journalled by an older ralph (no hold): its runner is judged by pid, boot and start
/// time, on this host only.
fn legacy_dead(view: &JobView, me: &RunnerInfo) -> bool {
    match &view.runner {
        Some(r)
            if r.pid == me.pid && r.boot_id == me.boot_id && r.start_ticks == me.start_ticks =>
        {
            true
        }
        Some(r) => r.is_alive() == Some(false),
        None => true,
    }
}

fn who_ran(view: &JobView) -> String {
    view.runner.as_ref().map_or_else(
        || "an unknown runner".to_owned(),
        |r| format!("`ralph {}` (pid {} on {})", r.role, r.pid, r.host),
    )
}

/// Journals the end of a job whose runner `who` died, from its last heartbeat.
fn close(
    journal: &mut Journal,
    state_dir: &Path,
    who: &str,
    last: Option<&Heartbeat>,
) -> Result<(), StoreError> {
    let view = journal.view().clone();
    let id = view.id.clone();
    let in_setup = view.setup == crate::store::projection::SetupState::Running;
    let at = match view.open_attempt {
        Some((r, a)) => format!("in round {r} (attempt {a})"),
        // Its set-up never finished: a resume runs it again.
        None if in_setup => "during the set-up".to_owned(),
        None => "between rounds".to_owned(),
    };
    // One event, one account: the same words in both entries.
    journal.record(EventKind::Interrupted {
        message: format!("the runner {who} died {at}; its hold was found free"),
    })?;
    let open_attempt_ms = match view.open_attempt {
        Some((round, attempt)) => {
            let dirs = AttemptDirs::new(&super::job_dir(state_dir, &id), round, attempt);
            let _ = dirs.remove_private();
            last.and_then(|h| h.attempt)
                .filter(|(r, a, _)| (*r, *a) == (round, attempt))
                .map_or(0, |(_, _, ms)| ms)
        }
        None => 0,
    };
    if in_setup {
        let _ = AttemptDirs::setup(&super::job_dir(state_dir, &id)).remove_private();
    }
    let end = super::close::Ending {
        ran_ms: last.map(|h| h.ran_ms),
        open_attempt_ms,
        ..super::close::Ending::new(
            Outcome::Interrupted,
            FinishReason::RunnerDied,
            format!(
                "the runner {who} died {at}; nothing was re-run; `ralph resume {id}` continues with the remaining budget"
            ),
        )
    };
    super::close::close_job(journal, end, &super::job_dir(state_dir, &id))?;
    Ok(())
}
