//! Whether another sandbox run of the job follows the one that just ended, told as early as the
//! engine can (before the ended run's records are written), so the backend can start that
//! run's process ahead ([`ralph_sandbox::Sandbox::prepare`]) while the records are made, and
//! start none when the job is about to end: no helper started for nothing at a job's end, and
//! none left waiting in an idle service.
//!
//! A forecast, never a decision: the loop still decides (a cancel, the deadline, the budget or
//! the stall watch may end the job after all; a run announced and not started is then discarded
//! when the job's run ends, [`JobRun::announced`], [`ralph_sandbox::Sandbox::discard`]: what was
//! started for it is killed and reaped, not left waiting in an idle runner). The forecast is
//! pure data here.

use super::job_run::JobRun;
use super::round::AttemptEnd;
use crate::job::JobKind;
use crate::report::Status;

/// What of the job's spec the forecast reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    pub kind: JobKind,
    pub max_rounds: u32,
    pub round_retries: u32,
    pub has_verify: bool,
}

/// After attempt `attempt` of round `round` ended with `end` (`exited_zero`: its process exited
/// with status 0): whether another run of the job follows (the next round, a retry of this one,
/// or the verify command).
pub(super) fn after_attempt(
    shape: Shape,
    round: u32,
    attempt: u32,
    end: &AttemptEnd,
    exited_zero: bool,
) -> bool {
    match shape.kind {
        // A task runs once; only its verify may follow, after a clean exit.
        JobKind::Task => {
            shape.has_verify
                && exited_zero
                && matches!(end, AttemptEnd::Reported(_) | AttemptEnd::Exited)
        }
        JobKind::Loop => match end {
            AttemptEnd::Reported(r) => match r.status {
                Status::Continue => round < shape.max_rounds,
                Status::Complete => shape.has_verify,
                Status::Blocked => false,
            },
            AttemptEnd::Failed(..) => attempt <= shape.round_retries,
            AttemptEnd::Exited
            | AttemptEnd::Cancelled
            | AttemptEnd::Deadline
            | AttemptEnd::BudgetSpent
            | AttemptEnd::SandboxFailed(_)
            | AttemptEnd::CannotRun(_)
            | AttemptEnd::DiskFull(_) => false,
        },
    }
}

/// After the verify command ran (`failed`: it ended with a failing status, not a cancel or
/// an error) once `rounds_started` rounds had started: whether another round follows.
pub(super) fn after_verify(shape: Shape, failed: bool, rounds_started: u32) -> bool {
    shape.kind == JobKind::Loop && failed && rounds_started < shape.max_rounds
}

impl JobRun<'_> {
    /// The forecast's view of this job's spec.
    pub(super) fn shape(&self) -> Shape {
        Shape {
            kind: self.spec.kind,
            max_rounds: self.spec.max_rounds,
            round_retries: self.spec.round_retries,
            has_verify: self.spec.verify.is_some(),
        }
    }

    /// At the end of a run: announces the next one if `follows`.
    pub(super) fn prepare_next_run(&mut self, follows: bool) {
        if follows {
            self.announce();
        }
    }

    /// Tells the backend a run is coming ([`ralph_sandbox::Sandbox::prepare`]), unless the job
    /// is being drained or out of time (nothing is started for a run that cannot come).
    pub(super) fn announce(&mut self) {
        if self.cancel.is_draining() || self.deadline_passed() {
            return;
        }
        self.engine
            .sandboxes
            .get(self.spec.sandbox.backend)
            .prepare(self.spec.kill_grace.0);
        self.announced = true;
    }

    /// The run announced will not come: what was started for it is stopped
    /// ([`ralph_sandbox::Sandbox::discard`]).
    pub(super) fn discard_announced(&mut self) {
        if std::mem::take(&mut self.announced) {
            self.engine
                .sandboxes
                .get(self.spec.sandbox.backend)
                .discard();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::RoundFailure;
    use crate::report::Report;

    fn report(status: Status) -> AttemptEnd {
        AttemptEnd::Reported(Report {
            status,
            summary: "done".into(),
            evidence: Vec::new(),
            next_steps: Vec::new(),
            blocker: String::new(),
        })
    }

    const LOOP: Shape = Shape {
        kind: JobKind::Loop,
        max_rounds: 3,
        round_retries: 1,
        has_verify: true,
    };

    #[test]
    fn a_loop_goes_on_while_rounds_are_left_and_to_its_verify() {
        assert!(after_attempt(LOOP, 1, 1, &report(Status::Continue), true));
        assert!(after_attempt(LOOP, 2, 1, &report(Status::Continue), true));
        // The last round: nothing follows a `continue`.
        assert!(!after_attempt(LOOP, 3, 1, &report(Status::Continue), true));
        // `complete` is followed by the verify, even in the last round.
        assert!(after_attempt(LOOP, 3, 1, &report(Status::Complete), true));
        let unverified = Shape {
            has_verify: false,
            ..LOOP
        };
        assert!(!after_attempt(
            unverified,
            1,
            1,
            &report(Status::Complete),
            true
        ));
        assert!(!after_attempt(LOOP, 1, 1, &report(Status::Blocked), true));
    }

    #[test]
    fn a_failed_round_is_followed_by_its_retry_while_retries_are_left() {
        let failed = AttemptEnd::Failed(RoundFailure::NoReport, "no report".into());
        assert!(after_attempt(LOOP, 1, 1, &failed, false));
        assert!(!after_attempt(LOOP, 1, 2, &failed, false));
        let no_retries = Shape {
            round_retries: 0,
            ..LOOP
        };
        assert!(!after_attempt(no_retries, 1, 1, &failed, false));
    }

    #[test]
    fn an_attempt_that_ends_the_job_is_followed_by_nothing() {
        for end in [
            AttemptEnd::Cancelled,
            AttemptEnd::Deadline,
            AttemptEnd::BudgetSpent,
            AttemptEnd::CannotRun("sh: not found".into()),
            AttemptEnd::DiskFull("full".into()),
            AttemptEnd::Exited,
        ] {
            assert!(!after_attempt(LOOP, 1, 1, &end, true), "{end:?}");
        }
    }

    #[test]
    fn a_task_is_followed_by_its_verify_after_a_clean_exit_only() {
        let task = Shape {
            kind: JobKind::Task,
            ..LOOP
        };
        assert!(after_attempt(task, 1, 1, &AttemptEnd::Exited, true));
        assert!(after_attempt(task, 1, 1, &report(Status::Continue), true));
        assert!(!after_attempt(task, 1, 1, &AttemptEnd::Exited, false));
        let failed = AttemptEnd::Failed(RoundFailure::Crashed, "exit 1".into());
        assert!(!after_attempt(task, 1, 1, &failed, false));
        let unverified = Shape {
            has_verify: false,
            ..task
        };
        assert!(!after_attempt(unverified, 1, 1, &AttemptEnd::Exited, true));
    }

    #[test]
    fn a_failed_verify_is_followed_by_a_round_while_rounds_are_left() {
        assert!(after_verify(LOOP, true, 2));
        assert!(!after_verify(LOOP, true, 3));
        assert!(!after_verify(LOOP, false, 1));
        let task = Shape {
            kind: JobKind::Task,
            ..LOOP
        };
        assert!(!after_verify(task, true, 1));
    }
}
