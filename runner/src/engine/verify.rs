//! The runner's own check of a `complete` claim: the `--verify` command, run as a runner step
//! ([`super::runner_step`]: the rounds' sandbox and network, never more: with `--allow-host`
//! the egress proxy and its variables, no model gateway) in the workspace. Its exit status
//! decides; the agent has no say.

use super::EngineError;
use super::artifacts::AttemptDirs;
use super::job_run::JobRun;
use super::runner_step::{Step, StepEnd};
use crate::store::EventKind;
use crate::store::event::RunnerStep;

/// How a verify run ended.
pub type VerifyEnd = StepEnd;

impl JobRun<'_> {
    /// Runs the verify command after round `round` reported complete.
    pub(super) async fn verify(
        &mut self,
        round: u32,
        command: &str,
    ) -> Result<VerifyEnd, EngineError> {
        let dirs = AttemptDirs::verify(&self.job_dir, round);
        let (timeout, deadline_bound) = self.attempt_timeout();
        let step = Step {
            kind: RunnerStep::Verify,
            round,
            command,
            dirs: &dirs,
            own_env: &[],
            timeout,
            deadline_bound,
        };
        let v = self
            .run_step(step, EventKind::VerifyStarted { round })
            .await?;
        // A failed verify sends the loop to its next round, if one is left.
        self.prepare_next_run(super::next_run::after_verify(
            self.shape(),
            matches!(v.end, StepEnd::Failed),
            self.journal.view().rounds_started,
        ));
        self.journal.record(EventKind::VerifyFinished {
            round,
            passed: v.passed(),
            command: command.to_owned(),
            exit: v.exit,
            ended_by: v.ended_by,
            output_tail: v.tail,
            duration_ms: v.duration_ms,
        })?;
        Ok(v.end)
    }
}
