//! The commands the runner itself runs in the job's sandbox, outside any round attempt: the
//! set-up before round 1 ([`super::setup`]) and verify after a complete report
//! ([`super::verify`]). Both are `/bin/sh -c CMD` in the workspace with the rounds' sandbox
//! (mode, paths, limits, toolchain grant) and the rounds' network, never more (SPEC §12): with
//! `--allow-host`, a private network namespace whose one way out is the egress proxy with the
//! job's allow list and the proxy variables set; no model gateway and no model key (a step needs
//! no model). git in them trusts the workspace and the `--read` trees through the same
//! runner-written system configuration as a round's (`in/gitconfig`, `GIT_CONFIG_SYSTEM`).
//!
//! ```text
//! dirs + in/gitconfig ─▶ env (allowlist, toolchain, --env [+ --setup-env], proxy vars)
//!   ─▶ journal the step's start ─▶ spawn (egress listener made inside) ─▶ wait, journalling
//!   the proxy's decisions (egress {step}) ─▶ [workspace_sanitized] ─▶ verdict + output tail
//! ```

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ralph_sandbox::capture::{CappedFile, Discard};
use ralph_sandbox::outcome::EndedBy;
use ralph_sandbox::{
    ExecIo, ExecReport, ExecSpec, Network, SandboxError, StderrMode, StdinMode, Termination,
};

use super::artifacts::AttemptDirs;
use super::execute::Execution;
use super::job_run::JobRun;
use super::round::{GIT_SYSTEM_CONFIG, Site, tail_of};
use super::round_gateway::GatewayPlan;
use super::{EngineError, env};
use crate::store::EventKind;
use crate::store::event::RunnerStep;

/// Bytes of a step's output kept as its tail (the journal, the next round's note, the console).
pub const STEP_TAIL_BYTES: usize = 4096;

/// A runner step to run.
pub(super) struct Step<'a> {
    /// Which one.
    pub kind: RunnerStep,
    /// The round it belongs to (0 for the set-up).
    pub round: u32,
    /// The command line.
    pub command: &'a str,
    /// Its directories.
    pub dirs: &'a AttemptDirs,
    /// Names of runner variables this step alone gets (the set-up's `--setup-env`).
    pub own_env: &'a [String],
    /// Its time limit.
    pub timeout: Option<Duration>,
    /// Whether the job deadline (rather than the step's own limit) is what bounds it.
    pub deadline_bound: bool,
}

impl Step<'_> {
    /// `the verify command` / `the set-up command`.
    fn what(&self) -> &'static str {
        match self.kind {
            RunnerStep::Setup => "the set-up command",
            RunnerStep::Verify => "the verify command",
        }
    }
}

/// How a step ended.
#[derive(Debug)]
pub enum StepEnd {
    /// Exit status 0, nothing forbidden left behind.
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
    /// A journal write found the state disk full while it ran (why): it was stopped.
    DiskFull(String),
}

/// A step's end with what its journal event records.
#[derive(Debug)]
pub(super) struct StepVerdict {
    /// The end.
    pub end: StepEnd,
    /// How its process ended, when it ran.
    pub exit: Option<Termination>,
    /// Why it ended.
    pub ended_by: Option<EndedBy>,
    /// The bounded tail of its output (with the runner's notes), or why it could not run.
    pub tail: String,
    /// Wall-clock time.
    pub duration_ms: u64,
}

impl StepVerdict {
    /// Whether it passed.
    pub fn passed(&self) -> bool {
        matches!(self.end, StepEnd::Passed)
    }
}

impl JobRun<'_> {
    /// The network of a runner step: the rounds' (`none`, `full`), and for `gateway` the
    /// egress proxy alone — or nothing, when the job allows no host.
    fn step_network(&self, plan: Option<&GatewayPlan>) -> Network {
        match self.spec.network() {
            Network::Gateway if plan.is_some() => Network::Gateway,
            Network::Gateway => Network::None,
            n => n,
        }
    }

    /// Runs `step`: its directory, environment and sandbox; journals `started` before its
    /// process exists; runs it with its egress proxy (journalling each decision); then judges
    /// how it ended. The caller journals the end.
    pub(super) async fn run_step(
        &mut self,
        step: Step<'_>,
        started: EventKind,
    ) -> Result<StepVerdict, EngineError> {
        let dirs = step.dirs;
        dirs.create()
            .map_err(|e| EngineError::io("create", &dirs.root, e))?;
        let _scratch = dirs.private_scratch();
        let git_config = dirs.git_system_config();
        std::fs::write(&git_config, GIT_SYSTEM_CONFIG)
            .map_err(|e| EngineError::io("write", &git_config, e))?;
        let config = |message: String| EngineError::Config { message };
        let plan = GatewayPlan::egress_only(&self.spec).map_err(|e| config(e.message))?;
        let mut vars = vec![
            ("RALPH_JOB_ID", self.journal.view().id.clone()),
            ("RALPH_STEP", step.kind.as_str().to_owned()),
            ("RALPH_WORKSPACE", self.spec.workspace.display().to_string()),
            ("GIT_CONFIG_SYSTEM", git_config.display().to_string()),
        ];
        if step.kind == RunnerStep::Verify {
            vars.push(("RALPH_ROUND", step.round.to_string()));
        }
        let passthrough: Vec<String> = self.spec.env.iter().chain(step.own_env).cloned().collect();
        let env = env::build_round(
            &self.engine.env,
            &dirs.home,
            &dirs.tmp,
            &self.toolchain.env(&dirs.home),
            &passthrough,
            &vars,
            &plan.as_ref().map(GatewayPlan::env).unwrap_or_default(),
        )
        .map_err(|e| config(e.to_string()))?;
        // The job's caches: this step's own copy (a set-up that passes has it kept).
        let cache_binds = self.prepare_caches(dirs)?;
        let mut req = self.sandbox_request(dirs, vec![dirs.input.clone()], cache_binds);
        req.network = Some(self.step_network(plan.as_ref()));
        req.gateway_ports = plan.as_ref().map(GatewayPlan::ports).unwrap_or_default();
        let spec = ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), step.command.to_owned()],
            cwd: self.spec.workspace.clone(),
            env,
            stdin: StdinMode::Null,
            stderr: StderrMode::MergedIntoStdout,
            timeout: step.timeout,
            kill_grace: self.spec.kill_grace.0,
            sandbox: req,
            control_dir: dirs.root.clone(),
            listings: Some(self.job_dir.join(super::artifacts::WALK_LISTINGS)),
            protected_copies: Some(self.job_dir.join(super::artifacts::PROTECTED_COPIES)),
            layers: self.layers(),
        };
        let log = dirs.output_log();
        let out = CappedFile::create(&log, self.spec.sandbox.output_cap.0)
            .map_err(|e| EngineError::io("create", &log, e))?;
        let io = ExecIo {
            stdin: None,
            stdout: Box::new(out),
            stderr: Box::new(Discard::default()),
        };

        let known = self.known_trees();
        let stop = self.cancel.token().child_token();
        let ran = self
            .execute(Execution {
                started,
                spawned: None,
                spec: &spec,
                io,
                plan,
                known: &known,
                stop: &stop,
                // No budget can be crossed without a model gateway.
                budget_crossed: Arc::new(AtomicBool::new(false)),
                site: Site {
                    round: step.round,
                    attempt: 0,
                    step: Some(step.kind),
                },
            })
            .await?;
        let (outcome, disk_full, duration_ms) = (ran.outcome, ran.disk_stop, ran.duration_ms);
        let verdict = match outcome {
            Err(_) if self.cancel.is_cancelled() => StepVerdict {
                end: StepEnd::Cancelled,
                exit: None,
                ended_by: None,
                tail: "[ralph: cancelled before the command started]".to_owned(),
                duration_ms,
            },
            Err(e) => StepVerdict {
                tail: e.to_string(),
                end: StepEnd::SandboxFailed(e),
                exit: None,
                ended_by: None,
                duration_ms,
            },
            Ok(report) => self.judge_step(&step, report, disk_full, duration_ms)?,
        };
        // Only a set-up that passed writes the job's caches (SPEC §12); its HOME goes after.
        if step.kind == RunnerStep::Setup && verdict.passed() {
            self.keep_caches(dirs)?;
        }
        let _ = dirs.remove_private();
        if matches!(verdict.end, StepEnd::Cancelled) {
            self.note_cancel()?;
        }
        Ok(verdict)
    }

    /// How a step whose process ran ended, and its output's tail with the runner's notes.
    fn judge_step(
        &mut self,
        step: &Step<'_>,
        report: ExecReport,
        disk_full: Option<String>,
        duration_ms: u64,
    ) -> Result<StepVerdict, EngineError> {
        let log = step.dirs.output_log();
        let o = report.outcome;
        self.record_git_check(step.round, None, &o.git)?;
        let violations = o.violations;
        let end = match o.ended_by {
            _ if disk_full.is_some() => StepEnd::DiskFull(disk_full.clone().unwrap_or_default()),
            EndedBy::Cancel | EndedBy::RunnerGone => StepEnd::Cancelled,
            EndedBy::Timeout if step.deadline_bound => StepEnd::Deadline,
            // What runs as a step reads the workspace too: if it broke the sandbox's rules
            // (undone by now), its verdict is not trusted.
            _ if !violations.is_empty() => StepEnd::Failed,
            EndedBy::Timeout | EndedBy::MemoryLimit => StepEnd::Failed,
            EndedBy::Exit if o.termination.success() => StepEnd::Passed,
            EndedBy::Exit => StepEnd::Failed,
        };
        // Output not fully read is said: the marker ends the capture, so its tail carries it.
        let _ = super::undrained::mark(&[("output", &report.stdout, &log)]);
        let mut tail = tail_of(&log, STEP_TAIL_BYTES);
        let name = match step.kind {
            RunnerStep::Setup => "set-up",
            RunnerStep::Verify => "verify",
        };
        if o.ended_by == EndedBy::Timeout {
            tail.push_str(&format!(
                "\n[ralph: the {name} command timed out and was killed]"
            ));
        }
        if let Some(why) = &disk_full {
            tail.push_str(&format!(
                "\n[ralph: the {name} command was stopped: the state dir's disk is full: {why}]"
            ));
        }
        for v in &violations {
            tail.push_str(&format!(
                "\n[ralph: {name} failed: it left what the sandbox forbids: {v}]"
            ));
        }
        // 126/127 from the shell: the command is not there (or not runnable) inside the
        // sandbox; running it again would fail the same way.
        let end = match (end, o.termination) {
            (StepEnd::Failed, Termination::Exited { code })
                if (code == 126 || code == 127) && violations.is_empty() =>
            {
                StepEnd::CannotRun(super::preset_check::cannot_run_message(
                    step.what(),
                    step.command,
                    code,
                    &tail,
                    &self.spec,
                    &self.engine.env,
                ))
            }
            (end, _) => end,
        };
        Ok(StepVerdict {
            end,
            exit: Some(o.termination),
            ended_by: Some(o.ended_by),
            tail,
            duration_ms,
        })
    }
}
