//! The job's set-up step (SPEC §3, §12): `--setup CMD`, a runner-owned command run once per
//! job before round 1, as a runner step ([`super::runner_step`]: the job's sandbox on the
//! workspace, its egress through the proxy, no model gateway) with the variables `--setup-env`
//! names besides the rounds' — those reach the set-up only. Its output is kept in
//! `rounds/0/setup/output.log`.
//!
//! It comes from the immutable job spec: nothing a round writes (the workspace, `.ralph/`) can
//! change or skip it. Whether it runs is judged from the journal alone: a set-up that passed is
//! never run again (a resumed job goes on with its rounds); one that failed or never finished
//! (its runner died) runs again when the job is resumed. A failure ends the job `error` with
//! reason `setup_failed` (exit 5), its exit status and output's tail in the message; no round
//! starts. A command the shell cannot run (126/127) is a configuration error (exit 64), as a
//! verify or agent command's is.

use std::time::{Duration, Instant};

use super::EngineError;
use super::artifacts::AttemptDirs;
use super::job_run::JobRun;
use super::runner_step::{Step, StepEnd, StepVerdict};
use crate::job::{FinishReason, JobKind, Outcome};
use crate::store::EventKind;
use crate::store::event::RunnerStep;
use crate::store::projection::SetupState;

/// Bytes of the set-up's output quoted in the job's message.
const MESSAGE_TAIL_BYTES: usize = 2048;

/// Whether the loop may start after the set-up.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterSetup {
    /// It passed (now or in an earlier run of the job), or the job has none.
    Go,
    /// The job was finished by it (failed, cancelled, out of time, no room).
    Finished,
}

impl JobRun<'_> {
    /// Runs the job's set-up unless it has none or it already passed.
    pub(super) async fn setup(&mut self) -> Result<AfterSetup, EngineError> {
        let Some(setup) = self.spec.setup.clone() else {
            return Ok(AfterSetup::Go);
        };
        if self.journal.view().setup == SetupState::Passed {
            return Ok(AfterSetup::Go);
        }
        if let Some(why) = self.state_disk_full() {
            self.finish_disk_full(&why)?;
            return Ok(AfterSetup::Finished);
        }
        if self.cancel.is_draining() {
            self.finish_cancelled()?;
            return Ok(AfterSetup::Finished);
        }
        let (timeout, deadline_bound) = self.setup_timeout(setup.timeout.0);
        if deadline_bound && timeout.is_zero() {
            // No time left to run it in: the job ends as the deadline says, nothing started.
            self.finish_setup_deadline()?;
            return Ok(AfterSetup::Finished);
        }
        let dirs = AttemptDirs::setup(&self.job_dir);
        let step = Step {
            kind: RunnerStep::Setup,
            round: 0,
            command: &setup.command,
            dirs: &dirs,
            own_env: &setup.env,
            timeout: Some(timeout),
            deadline_bound,
        };
        let started = EventKind::SetupStarted {
            command: setup.command.clone(),
        };
        let v = self.run_step(step, started).await?;
        // A set-up that passed is followed by the first round (or the task).
        self.prepare_next_run(v.passed());
        self.journal.record(EventKind::SetupFinished {
            passed: v.passed(),
            exit: v.exit,
            ended_by: v.ended_by,
            output_tail: v.tail.clone(),
            duration_ms: v.duration_ms,
        })?;
        self.after_setup(&setup.command, setup.timeout.0, v)
    }

    /// The set-up's time limit: its own, or what is left of the job deadline if that is
    /// sooner (then the deadline is what bounds it).
    fn setup_timeout(&self, own: Duration) -> (Duration, bool) {
        match self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()))
        {
            Some(left) if left <= own => (left, true),
            _ => (own, false),
        }
    }

    /// Ends the job whose deadline passed before or during its set-up.
    fn finish_setup_deadline(&mut self) -> Result<(), EngineError> {
        let t = self
            .spec
            .job_timeout
            .map_or_else(String::new, |t| format!(" of {t}"));
        let msg = format!("the job timeout{t} passed before its set-up could finish");
        // A task ends by its command's status, never budget-limited by time (SPEC §3).
        let outcome = match self.spec.kind {
            JobKind::Loop => Outcome::BudgetLimited,
            JobKind::Task => Outcome::Failed,
        };
        self.finish(outcome, FinishReason::JobTimeout, &msg, None)
    }

    /// Ends the job as the set-up's end says, or lets the loop start.
    fn after_setup(
        &mut self,
        command: &str,
        limit: Duration,
        v: StepVerdict,
    ) -> Result<AfterSetup, EngineError> {
        match v.end {
            StepEnd::Passed => return Ok(AfterSetup::Go),
            StepEnd::Failed => {
                let how = crate::ci::verify_how(v.exit, v.ended_by);
                let how = match v.ended_by {
                    Some(ralph_sandbox::EndedBy::Timeout) => format!(
                        "{how} after its --setup-timeout of {}",
                        crate::util::units::HumanDuration(limit)
                    ),
                    _ => how,
                };
                let tail = crate::util::text::bounded_tail(v.tail.trim_end(), MESSAGE_TAIL_BYTES);
                let output = if tail.trim().is_empty() {
                    "it printed nothing".to_owned()
                } else {
                    format!("its output ends: {tail}")
                };
                let msg = format!(
                    "the set-up command `{command}` failed ({how}); no round was started; {output}"
                );
                self.finish(Outcome::Error, FinishReason::SetupFailed, &msg, None)?;
            }
            StepEnd::CannotRun(msg) => {
                self.finish(Outcome::Error, FinishReason::Configuration, &msg, None)?;
            }
            StepEnd::Cancelled => self.finish_cancelled()?,
            StepEnd::Deadline => self.finish_setup_deadline()?,
            StepEnd::SandboxFailed(e) => self.finish_sandbox_error(&e)?,
            StepEnd::DiskFull(why) => self.finish_disk_full(&why)?,
        }
        Ok(AfterSetup::Finished)
    }
}
