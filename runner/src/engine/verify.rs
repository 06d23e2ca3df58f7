//! The runner's own check of a `complete` claim: the `--verify` command, run in the same sandbox
//! as the rounds, in the workspace. Its exit status decides; the agent has no say.

use std::time::Instant;

use ralph_sandbox::capture::{CappedFile, Discard};
use ralph_sandbox::outcome::EndedBy;
use ralph_sandbox::{ExecIo, ExecSpec, SandboxError, StderrMode, StdinMode};

use super::artifacts::AttemptDirs;
use super::job_run::JobRun;
use super::round::tail_of;
use super::{EngineError, env};
use crate::store::EventKind;

/// Bytes of verify output kept for the next round's note.
pub const VERIFY_TAIL_BYTES: usize = 4096;

/// How a verify run ended.
#[derive(Debug)]
pub enum VerifyEnd {
    /// Exit status 0.
    Passed,
    /// Anything else.
    Failed,
    /// A cancel stopped it.
    Cancelled,
    /// The job deadline stopped it.
    Deadline,
    /// The sandbox could not be set up.
    SandboxFailed(SandboxError),
    /// The shell could not run the command (exit 126 or 127: not found or not executable in
    /// the sandbox): a configuration error, not a verdict (SPEC §3). The message says the fix.
    CannotRun(String),
}

impl JobRun<'_> {
    /// Runs the verify command after round `round` reported complete.
    pub(super) async fn verify(
        &mut self,
        round: u32,
        command: &str,
    ) -> Result<VerifyEnd, EngineError> {
        let dirs = AttemptDirs::verify(&self.job_dir, round);
        dirs.create()
            .map_err(|e| EngineError::io("create", &dirs.root, e))?;
        let _scratch = dirs.private_scratch();
        let vars = [
            ("RALPH_JOB_ID", self.journal.view().id.clone()),
            ("RALPH_ROUND", round.to_string()),
            ("RALPH_WORKSPACE", self.spec.workspace.display().to_string()),
        ];
        let env = env::build_round(
            &self.engine.env,
            &dirs.home,
            &dirs.tmp,
            &self.toolchain.env(&dirs.home),
            &self.spec.env,
            &vars,
            &[],
        )
        .map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        let (timeout, deadline_bound) = self.attempt_timeout();
        let spec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), command.to_owned()],
            cwd: self.spec.workspace.clone(),
            env,
            stdin: StdinMode::Null,
            stderr: StderrMode::MergedIntoStdout,
            timeout,
            kill_grace: self.spec.kill_grace.0,
            sandbox: self.sandbox_request(&dirs, Vec::new(), Vec::new()),
            control_dir: dirs.root.clone(),
        };
        let log = dirs.output_log();
        let out = CappedFile::create(&log, self.spec.sandbox.output_cap.0)
            .map_err(|e| EngineError::io("create", &log, e))?;
        let io = ExecIo {
            stdin: None,
            stdout: Box::new(out),
            stderr: Box::new(Discard::default()),
        };

        let known = self.known_trees()?;
        self.journal.record(EventKind::VerifyStarted { round })?;
        let started = Instant::now();
        let spawned = match self.paths_unchanged(&known) {
            Ok(()) => {
                self.engine
                    .spawner
                    .spawn(self.spec.sandbox.backend, &spec, io)
                    .await
            }
            Err(e) => Err(e),
        };
        let outcome = match spawned {
            Ok(run) => run.wait(self.cancel.token()).await,
            Err(e) => Err(e),
        };
        let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let _ = dirs.remove_private();
        let outcome_captures;
        let (end, exit, ended_by, violations) = match outcome {
            Err(e) => {
                let message = e.to_string();
                self.journal.record(EventKind::VerifyFinished {
                    round,
                    passed: false,
                    command: command.to_owned(),
                    exit: None,
                    ended_by: None,
                    output_tail: message,
                    duration_ms,
                })?;
                return Ok(VerifyEnd::SandboxFailed(e));
            }
            Ok(r) => {
                outcome_captures = Some(r.stdout);
                let o = r.outcome;
                self.record_git_check(round, None, &o.git)?;
                let violations = o.violations;
                let end = match o.ended_by {
                    EndedBy::Cancel | EndedBy::RunnerGone => VerifyEnd::Cancelled,
                    EndedBy::Timeout if deadline_bound => VerifyEnd::Deadline,
                    // What runs as verify comes from the workspace too: if it broke the
                    // sandbox's rules (undone by now), its verdict is not trusted.
                    _ if !violations.is_empty() => VerifyEnd::Failed,
                    EndedBy::Timeout | EndedBy::MemoryLimit => VerifyEnd::Failed,
                    EndedBy::Exit if o.termination.success() => VerifyEnd::Passed,
                    EndedBy::Exit => VerifyEnd::Failed,
                };
                (end, Some(o.termination), Some(o.ended_by), violations)
            }
        };
        if matches!(end, VerifyEnd::Cancelled) {
            self.note_cancel()?;
        }
        // Output not fully read is said: the marker ends the capture, so its tail (the note
        // and the journal) carries it.
        if let Some(c) = &outcome_captures {
            let _ = super::undrained::mark(&[("output", c, &log)]);
        }
        let mut tail = tail_of(&log, VERIFY_TAIL_BYTES);
        if ended_by == Some(EndedBy::Timeout) {
            tail.push_str("\n[ralph: the verify command timed out and was killed]");
        }
        for v in &violations {
            tail.push_str(&format!(
                "\n[ralph: verify failed: it left what the sandbox forbids: {v}]"
            ));
        }
        // 126/127 from the shell: the command is not there (or not runnable) inside the sandbox;
        // every later round would fail the same way.
        let end = match (&end, exit) {
            (VerifyEnd::Failed, Some(ralph_sandbox::Termination::Exited { code }))
                if (code == 126 || code == 127) && violations.is_empty() =>
            {
                VerifyEnd::CannotRun(super::preset_check::cannot_run_message(
                    "the verify command",
                    command,
                    code,
                    &tail,
                    &self.spec,
                    &self.engine.env,
                ))
            }
            _ => end,
        };
        self.journal.record(EventKind::VerifyFinished {
            round,
            passed: matches!(end, VerifyEnd::Passed),
            command: command.to_owned(),
            exit,
            ended_by,
            output_tail: tail,
            duration_ms,
        })?;
        Ok(end)
    }
}
