//! One round attempt: prepare its directory, journal its start, run the agent in the sandbox,
//! read back the report and usage, journal how it ended.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ralph_sandbox::capture::{CappedFile, OutputSink};
use ralph_sandbox::outcome::EndedBy;
use ralph_sandbox::{
    ExecIo, ExecReport, ExecSpec, Network, PrivateDirs, SandboxError, SandboxRequest, StderrMode,
    StdinMode, Termination,
};

use super::artifacts::AttemptDirs;
use super::execute::Execution;
use super::job_run::JobRun;
use super::judge::{AttemptFacts, judge};
use super::prompt::{self, PromptInput};
use super::round_finished::{Concluded, round_finished};
use super::round_gateway::{GatewayEvent, GatewayPlan, RunningGateway};
use super::stdout_report::{ReportLineSink, Slot};
use super::{EngineError, env};
use crate::agent::output::{BudgetWatch, PresetOutput, PresetSink, ReaderSlot};
use crate::agent::{AgentOptions, RoundFiles};
use crate::job::RoundFailure;
use crate::report::{self, Report, ReportError};
use crate::store::{EventKind, RefusalCount};
use crate::usage::{self, RoundUsage};
use crate::util::text::{bounded, bounded_tail};

/// Where a round's report may come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportPolicy {
    /// Loop rounds: the report file, else the last JSON-object line of stdout; required.
    Required,
    /// Task jobs: the report file only, validated if present.
    OptionalFile,
}

/// How an attempt ended, for the loop to decide what comes next.
#[derive(Debug)]
pub enum AttemptEnd {
    /// A valid report.
    Reported(Report),
    /// No report and none required (task jobs).
    Exited,
    /// No valid report.
    Failed(RoundFailure, String),
    /// A cancel stopped it.
    Cancelled,
    /// The job deadline stopped it.
    Deadline,
    /// The job's token budget was crossed while it ran (the round was stopped).
    BudgetSpent,
    /// The sandbox could not be set up; the agent never ran.
    SandboxFailed(SandboxError),
    /// The agent command's shell could not run it (exit 126/127, no report): a configuration
    /// error (SPEC §3); the message says the fix.
    CannotRun(String),
    /// The state directory's disk is full (why): the attempt is recorded as interrupted and the
    /// job closed, never run on without room for its journal.
    DiskFull(String),
}

/// An attempt's end plus how the process terminated.
#[derive(Debug)]
pub struct Attempt {
    /// The end.
    pub end: AttemptEnd,
    /// The agent's termination, when it ran.
    pub exit: Option<Termination>,
}

/// Which run a gateway event belongs to: a round attempt, or a runner step (set-up: round 0;
/// verify: its round; attempt 0 for both).
#[derive(Clone, Copy, Debug)]
pub(super) struct Site {
    /// The round.
    pub round: u32,
    /// The attempt (0 for a runner step).
    pub attempt: u32,
    /// The runner step, if it is one.
    pub step: Option<crate::store::event::RunnerStep>,
}

/// An attempt made ready by [`JobRun::prepare_attempt`].
struct Prepared {
    dirs: AttemptDirs,
    /// HOME and TMPDIR are scratch space, not artifacts: gone however the attempt ends.
    _scratch: super::artifacts::PrivateScratch,
    spec: ExecSpec,
    /// Taken when the attempt is executed.
    io: Option<ExecIo>,
    /// Taken when the attempt is executed.
    plan: Option<GatewayPlan>,
    /// The last JSON-object line of stdout (a report on stdout).
    slot: Slot,
    /// The preset's reader of the agent's output.
    reader_slot: ReaderSlot,
    /// The round's own stop: a cancel of the job, or the token budget crossed mid-round.
    round_stop: tokio_util::sync::CancellationToken,
    budget_crossed: Arc<AtomicBool>,
    /// Whether the attempt's timeout is the job's deadline rather than the round timeout.
    deadline_bound: bool,
    known: crate::job::resolve::WritableTrees,
}

/// What [`JobRun::execute_attempt`] saw.
struct Executed {
    outcome: Result<ExecReport, SandboxError>,
    duration_ms: u64,
    /// The model API's usage, through the gateway.
    gateway_usage: Option<RoundUsage>,
    /// Why a journal write found the disk full while the round ran (it was stopped then).
    disk_stop: Option<String>,
    read: Option<PresetOutput>,
}

/// Unreadable agent output lines journalled per attempt (the rest are only counted out).
const MAX_OUTPUT_PROBLEMS: usize = 5;

/// Bytes of stderr quoted in a failure message.
const STDERR_QUOTE: usize = 1024;

impl JobRun<'_> {
    /// Runs round `round`, attempt `attempt`: prepare, execute, conclude.
    pub(super) async fn attempt(
        &mut self,
        round: u32,
        attempt: u32,
        retry_note: Option<&str>,
        policy: ReportPolicy,
    ) -> Result<Attempt, EngineError> {
        let mut p = self.prepare_attempt(round, attempt, retry_note)?;
        let x = self.execute_attempt(round, attempt, &mut p).await?;
        self.conclude_attempt(round, attempt, policy, p, x)
    }

    /// Makes attempt `attempt` of round `round` ready to run: its directories and inputs
    /// (prompt, handoff, the preset's files), its environment, its gateway plan, its sandbox
    /// request and output sinks. Nothing is journalled and nothing runs yet.
    fn prepare_attempt(
        &mut self,
        round: u32,
        attempt: u32,
        retry_note: Option<&str>,
    ) -> Result<Prepared, EngineError> {
        let dirs = AttemptDirs::new(&self.job_dir, round, attempt);
        dirs.create()
            .map_err(|e| EngineError::io("create", &dirs.root, e))?;
        // HOME and TMPDIR are scratch space, not artifacts: gone however this attempt ends.
        let _scratch = dirs.private_scratch();
        // The job's caches: this attempt's own copy, discarded with its HOME (SPEC §12).
        let cache_binds = self.prepare_caches(&dirs)?;
        let prompt = self.write_attempt_inputs(&dirs, round, attempt, retry_note)?;
        let preset = self.agent.preset();
        let view = self.journal.view();
        let ralph_vars = self.ralph_vars(&dirs, round, attempt);
        // The attempt's way out (SPEC §9): its model gateway and egress proxy, if the job has
        // them; the budget they enforce starts from what the job has used so far.
        let plan = GatewayPlan::new(
            &self.spec,
            self.upstream.as_ref(),
            view.usage.budget_tokens(),
            &self.engine.gateway_pool,
        )
        .map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        let gateway_url = plan.as_ref().and_then(GatewayPlan::gateway_url);
        let access = &self.spec.model_access;
        // A preset that runs this executable finds it where the backend shows it.
        let runs_ralph = preset.is_some_and(|p| p.runs_ralph());
        let (ralph_exe, show_exe) = self
            .engine
            .sandboxes
            .ralph_in_round(self.spec.sandbox.backend);
        let options = AgentOptions {
            gateway_url: gateway_url.as_deref(),
            model: access.model.as_deref(),
            args: &access.agent_args,
            ralph_exe: runs_ralph.then_some(ralph_exe.as_str()),
            max_steps: access.agent_max_steps,
        };
        let mut owned_vars: Vec<(String, String)> = Vec::new();
        if let Some(p) = &plan {
            owned_vars.extend(p.env());
        }
        if let Some(p) = preset {
            owned_vars.extend(p.env(&options));
        }
        let env = env::build_round(
            &self.engine.env,
            &dirs.home,
            &dirs.tmp,
            &self.toolchain.env(&dirs.home),
            &self.spec.env,
            &ralph_vars,
            &owned_vars,
        )
        .map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        let (report_file, usage_file, prompt_file) =
            (dirs.report_file(), dirs.usage_file(), dirs.prompt_file());
        let argv = self.agent.argv(
            &RoundFiles {
                prompt: &prompt_file,
                report: &report_file,
                usage: &usage_file,
                workspace: &self.spec.workspace,
                input_dir: &dirs.input,
            },
            &options,
        );
        let (timeout, deadline_bound) = self.attempt_timeout();
        let spec = ExecSpec {
            argv,
            cwd: self.spec.workspace.clone(),
            env,
            stdin: StdinMode::Piped,
            stderr: StderrMode::Separate,
            timeout,
            kill_grace: self.spec.kill_grace.0,
            sandbox: {
                let mut req = self.sandbox_request(&dirs, vec![dirs.input.clone()], cache_binds);
                // The report directory is bounded: a small tmpfs whose report and usage files
                // only come back to `out/` (docs/agents.md).
                req.private.report = Some(dirs.report_dir(self.spec.handoff_cap));
                req.network = Some(self.spec.network());
                req.gateway_ports = plan.as_ref().map(GatewayPlan::ports).unwrap_or_default();
                if let (true, Some(exe)) = (runs_ralph, show_exe) {
                    super::preset_check::show_ralph(&mut req, exe);
                }
                req
            },
            control_dir: dirs.root.clone(),
            listings: Some(self.job_dir.join(super::artifacts::WALK_LISTINGS)),
            protected_copies: Some(self.job_dir.join(super::artifacts::PROTECTED_COPIES)),
            layers: self.layers(),
        };
        let cap = self.spec.sandbox.output_cap.0;
        let slot: Slot = Arc::default();
        let stdout = CappedFile::create(&dirs.stdout_log(), cap)
            .map_err(|e| EngineError::io("create", &dirs.stdout_log(), e))?;
        let stderr = CappedFile::create(&dirs.stderr_log(), cap)
            .map_err(|e| EngineError::io("create", &dirs.stderr_log(), e))?;
        let max_line = report::decode::raw_limit(self.spec.handoff_cap);
        let mut stdout: Box<dyn OutputSink> = Box::new(ReportLineSink::new(
            Box::new(stdout),
            max_line,
            slot.clone(),
        ));
        let reader_slot: ReaderSlot = Arc::default();
        // The round's own stop: a cancel of the job, or the token budget crossed mid-round.
        let round_stop = self.cancel.token().child_token();
        let budget_crossed = Arc::new(AtomicBool::new(false));
        if let Some(p) = preset {
            let watch = self.spec.max_tokens.map(|max| BudgetWatch {
                carry: self.carry.clone(),
                before: view.usage.budget_tokens(),
                max,
                stop: round_stop.clone(),
                crossed: budget_crossed.clone(),
            });
            stdout =
                Box::new(PresetSink::new(stdout, p.reader(), reader_slot.clone()).watching(watch));
        }
        let io = Some(ExecIo {
            stdin: Some(prompt.into_bytes()),
            stdout,
            stderr: Box::new(stderr),
        });

        let known = self.known_trees();
        Ok(Prepared {
            dirs,
            _scratch,
            spec,
            io,
            plan,
            slot,
            reader_slot,
            round_stop,
            budget_crossed,
            deadline_bound,
            known,
        })
    }
    /// Writes the attempt's inputs (the handoff, the prompt, git's system configuration, the
    /// preset's files) and returns the prompt.
    fn write_attempt_inputs(
        &self,
        dirs: &AttemptDirs,
        round: u32,
        attempt: u32,
        retry_note: Option<&str>,
    ) -> Result<String, EngineError> {
        let view = self.journal.view();
        let handoff = view.last_report.as_ref().map(Report::to_compact_json);
        if let Some(h) = &handoff {
            write_file(&dirs.handoff_file(), h.as_bytes())?;
        }
        let raised = (!view.raised_caps.is_empty()).then(|| view.raised_caps.describe());
        let prompt = prompt::render(&PromptInput {
            objective: &self.spec.objective,
            round,
            max_rounds: self.spec.max_rounds,
            attempt,
            workspace: &self.spec.workspace,
            handoff: handoff.as_deref(),
            resumed: view.resumes > 0,
            raised_caps: raised.as_deref(),
            report_file: &dirs.report_file(),
            usage_file: &dirs.usage_file(),
            cap: self.spec.handoff_cap,
            verify: self.spec.verify.as_deref(),
            verify_note: view.verify_note.as_ref(),
            git_notes: &view.git_notes,
            retry_note,
        });
        write_file(&dirs.prompt_file(), prompt.as_bytes())?;
        write_file(&dirs.git_system_config(), GIT_SYSTEM_CONFIG.as_bytes())?;
        let preset = self.agent.preset();
        for (name, content) in preset.map(|p| p.inputs()).unwrap_or_default() {
            write_file(&dirs.input.join(name), content.as_bytes())?;
        }
        Ok(prompt)
    }

    /// The `RALPH_*` variables (and git's system configuration) of the attempt.
    fn ralph_vars(
        &self,
        dirs: &AttemptDirs,
        round: u32,
        attempt: u32,
    ) -> Vec<(&'static str, String)> {
        vec![
            ("RALPH_JOB_ID", self.journal.view().id.clone()),
            ("RALPH_ROUND", round.to_string()),
            ("RALPH_ATTEMPT", attempt.to_string()),
            ("RALPH_MAX_ROUNDS", self.spec.max_rounds.to_string()),
            ("RALPH_WORKSPACE", self.spec.workspace.display().to_string()),
            (
                "RALPH_PROMPT_FILE",
                dirs.prompt_file().display().to_string(),
            ),
            (
                "RALPH_HANDOFF_FILE",
                dirs.handoff_file().display().to_string(),
            ),
            (
                "RALPH_REPORT_FILE",
                dirs.report_file().display().to_string(),
            ),
            ("RALPH_USAGE_FILE", dirs.usage_file().display().to_string()),
            (
                "GIT_CONFIG_SYSTEM",
                dirs.git_system_config().display().to_string(),
            ),
        ]
    }

    /// Runs a prepared attempt: journals its start (durably, before the process exists),
    /// spawns it, serves its gateway and waits for its end.
    async fn execute_attempt(
        &mut self,
        round: u32,
        attempt: u32,
        p: &mut Prepared,
    ) -> Result<Executed, EngineError> {
        let Prepared {
            dirs,
            spec,
            io,
            plan,
            reader_slot,
            round_stop,
            budget_crossed,
            known,
            ..
        } = p;
        let io = io.take().ok_or_else(|| EngineError::Internal {
            message: "an attempt was executed twice".into(),
        })?;
        let plan = plan.take();
        let ran = self
            .execute(Execution {
                started: EventKind::RoundStarted {
                    round,
                    attempt,
                    dir: dirs.root.clone(),
                },
                spawned: Some((round, attempt)),
                spec,
                io,
                plan,
                known,
                stop: round_stop,
                budget_crossed: budget_crossed.clone(),
                site: Site {
                    round,
                    attempt,
                    step: None,
                },
            })
            .await?;
        let read = reader_slot
            .lock()
            .ok()
            .and_then(|mut r| r.take())
            .map(|r| r.finish(&mut self.carry));
        Ok(Executed {
            outcome: ran.outcome,
            duration_ms: ran.duration_ms,
            gateway_usage: ran.gateway_usage,
            disk_stop: ran.disk_stop,
            read,
        })
    }

    /// Decides how an executed attempt ended (the report, the process's end, the policy, a
    /// full disk) and journals it: its usage, its git check and `round_finished` (decided by the
    /// pure [`round_finished`]).
    fn conclude_attempt(
        &mut self,
        round: u32,
        attempt: u32,
        policy: ReportPolicy,
        p: Prepared,
        x: Executed,
    ) -> Result<Attempt, EngineError> {
        let Executed {
            outcome,
            duration_ms,
            gateway_usage,
            disk_stop,
            read,
        } = x;
        let (end, exec) = self.attempt_end(&p, outcome, read.as_ref(), policy, disk_stop);
        // The next run's process starts while this attempt's records are written.
        let exited_zero = exec
            .as_ref()
            .is_some_and(|e| e.outcome.termination.shell_code() == 0);
        self.prepare_next_run(super::next_run::after_attempt(
            self.shape(),
            round,
            attempt,
            &end,
            exited_zero,
        ));
        let dirs = &p.dirs;
        if matches!(end, AttemptEnd::Cancelled) {
            self.note_cancel()?;
        }
        let (usage, agent_retries) =
            self.attempt_usage(round, attempt, dirs, read, exec.as_ref(), gateway_usage)?;
        if let Some(e) = &exec {
            self.record_git_check(round, Some(attempt), &e.outcome.git)?;
        }
        self.journal.record(round_finished(Concluded {
            round,
            attempt,
            end: &end,
            exec: exec.as_ref(),
            duration_ms,
            usage,
            agent_retries,
        })?)?;
        let exit = exec.as_ref().map(|e| e.outcome.termination);
        // HOME and TMPDIR are scratch space, not artifacts.
        let _ = dirs.remove_private();
        Ok(Attempt { end, exit })
    }
    /// How an attempt ended: the judge's verdict on its process and report, with what its
    /// capture could not read or write said, and a full state disk as the cause where it was.
    fn attempt_end(
        &self,
        p: &Prepared,
        outcome: Result<ExecReport, SandboxError>,
        read: Option<&PresetOutput>,
        policy: ReportPolicy,
        disk_stop: Option<String>,
    ) -> (AttemptEnd, Option<ExecReport>) {
        let (dirs, slot, budget_crossed) = (&p.dirs, &p.slot, &p.budget_crossed);
        let (end, exec) = match outcome {
            // A cancel that tore the sandbox down while it was being set up: the job was
            // cancelled, not broken.
            Err(_) if self.cancel.is_cancelled() => (AttemptEnd::Cancelled, None),
            Err(e) => (AttemptEnd::SandboxFailed(e), None),
            // The stream showed the budget crossed and the round was stopped for it (not a
            // cancel of the job).
            Ok(exec)
                if budget_crossed.load(Ordering::SeqCst)
                    && !self.cancel.token().is_cancelled()
                    && matches!(exec.outcome.ended_by, EndedBy::Cancel) =>
            {
                (AttemptEnd::BudgetSpent, Some(exec))
            }
            Ok(exec) => (
                self.judge(&exec, dirs, slot, read, policy, p.deadline_bound),
                Some(exec),
            ),
        };
        // Output not fully read is said, in the capture and in a failure's message.
        let undrained = exec.as_ref().and_then(|e| {
            super::undrained::mark(&[
                ("stdout", &e.stdout, &dirs.stdout_log()),
                ("stderr", &e.stderr, &dirs.stderr_log()),
            ])
        });
        let end = match (end, undrained) {
            (AttemptEnd::Failed(reason, message), Some(note)) => {
                AttemptEnd::Failed(reason, bounded(&format!("{message}; {note}"), 2048))
            }
            (end, _) => end,
        };
        // A capture that could not write its log (it still drained the stream) is said in a
        // failure's message; for lack of room, a failed round's cause is the disk, as below.
        let (dropped, dropped_for_space) = exec
            .as_ref()
            .map(|e| super::undrained::dropped(&[("stdout", &e.stdout), ("stderr", &e.stderr)]))
            .unwrap_or_default();
        let end = match (end, dropped) {
            (AttemptEnd::Failed(reason, message), Some(note)) => {
                AttemptEnd::Failed(reason, bounded(&format!("{message}; {note}"), 2048))
            }
            (end, _) => end,
        };
        // A round stopped, or left without its report or result, by a full state disk: the
        // disk is why (its files could not be written), not the agent.
        let end = match (end, disk_stop) {
            (_, Some(why)) => AttemptEnd::DiskFull(why),
            (end @ AttemptEnd::Failed(..), None) if dropped_for_space => {
                match self.state_disk_full() {
                    Some(why) => AttemptEnd::DiskFull(why),
                    None => end,
                }
            }
            (
                end @ (AttemptEnd::Failed(RoundFailure::NoReport | RoundFailure::Crashed, _)
                | AttemptEnd::SandboxFailed(_)),
                None,
            ) => match self.state_disk_full() {
                Some(why) => AttemptEnd::DiskFull(why),
                None => end,
            },
            (end, None) => end,
        };
        (end, exec)
    }

    /// The attempt's usage and the agent's request retries: the preset's reading of the CLI's
    /// output, or the usage file; through the gateway, the model API's own numbers (the
    /// agent's, when they differ, journalled as a mismatch).
    fn attempt_usage(
        &mut self,
        round: u32,
        attempt: u32,
        dirs: &AttemptDirs,
        read: Option<PresetOutput>,
        exec: Option<&ExecReport>,
        gateway_usage: Option<RoundUsage>,
    ) -> Result<(RoundUsage, std::collections::BTreeMap<String, u64>), EngineError> {
        let (usage, agent_retries) = match read {
            // A preset reads usage from the CLI's own output; the usage file is not read, so
            // nothing is counted twice.
            Some(out) => {
                for message in out.problems.iter().take(MAX_OUTPUT_PROBLEMS) {
                    self.journal.record(EventKind::UsageSkipped {
                        round,
                        attempt,
                        line: 0,
                        message: bounded(&format!("agent output: {message}"), 512),
                    })?;
                }
                (out.usage, out.retries)
            }
            None => {
                let refused = exec
                    .and_then(|e| e.outcome.report_dir.as_ref())
                    .and_then(|d| d.refused(super::artifacts::USAGE_FILE))
                    .map(str::to_owned);
                (
                    self.read_usage(dirs, refused, round, attempt)?,
                    Default::default(),
                )
            }
        };
        // Through the gateway, the model API's own numbers are the job's count; the agent's
        // are a cross-check.
        let usage = match gateway_usage {
            Some(wire) => {
                if !usage.total().is_zero() && usage.total() != wire.total() {
                    self.journal.record(EventKind::UsageMismatch {
                        round,
                        attempt,
                        gateway: wire.total(),
                        agent: usage.total(),
                    })?;
                }
                wire
            }
            None => usage,
        };
        Ok((usage, agent_retries))
    }

    /// Waits for the attempt while journalling what its gateway reports; then stops the
    /// gateway and returns the attempt's usage as the model API reported it. A journal write
    /// that finds the disk full (even after the reserve was freed) stops the round: the third
    /// value says why, and the rest of its gateway events are counted, not journalled.
    pub(super) async fn wait_with_gateway(
        &mut self,
        run: Box<dyn ralph_sandbox::Running>,
        mut gw: RunningGateway,
        round_stop: &tokio_util::sync::CancellationToken,
        site: Site,
    ) -> Result<(Result<ExecReport, SandboxError>, RoundUsage, Option<String>), EngineError> {
        let mut usage = RoundUsage::default();
        let mut full: Option<String> = None;
        let wait = run.wait(round_stop.clone());
        tokio::pin!(wait);
        // Once the servers are gone (their sink dropped) there is nothing more to wait for.
        let mut open = true;
        let outcome = loop {
            tokio::select! {
                r = &mut wait => break r,
                ev = gw.next(), if open => match ev {
                    Some(ev) => self.gateway_event_or_stop(ev, site, &mut usage, &mut full, round_stop)?,
                    None => open = false,
                },
            }
        };
        for ev in gw.stop().await {
            self.gateway_event_or_stop(ev, site, &mut usage, &mut full, round_stop)?;
        }
        Ok((outcome, usage, full))
    }

    /// [`Self::record_gateway_event`], except that a full disk stops the round (`full` says
    /// why) instead of failing the attempt while its process runs.
    fn gateway_event_or_stop(
        &mut self,
        ev: GatewayEvent,
        site: Site,
        usage: &mut RoundUsage,
        full: &mut Option<String>,
        round_stop: &tokio_util::sync::CancellationToken,
    ) -> Result<(), EngineError> {
        if full.is_some() {
            if let GatewayEvent::Model(r) = &ev {
                usage
                    .by_model
                    .entry(bounded(&r.model.escape_debug().to_string(), 128))
                    .or_default()
                    .add(&r.usage);
            }
            return Ok(());
        }
        match self.record_gateway_event(ev, site, usage) {
            Err(e) if e.is_disk_full() => {
                *full = Some(e.to_string());
                round_stop.cancel();
                Ok(())
            }
            other => other,
        }
    }

    /// Journals one gateway event (the agent's bytes in it escaped and bounded) and counts its
    /// tokens.
    fn record_gateway_event(
        &mut self,
        ev: GatewayEvent,
        site: Site,
        usage: &mut RoundUsage,
    ) -> Result<(), EngineError> {
        let Site {
            round,
            attempt,
            step,
        } = site;
        match ev {
            GatewayEvent::Model(r) => {
                let model = bounded(&r.model.escape_debug().to_string(), 128);
                if !r.usage.is_zero() {
                    usage
                        .by_model
                        .entry(model.clone())
                        .or_default()
                        .add(&r.usage);
                }
                self.journal.record(EventKind::ModelRequest {
                    round,
                    attempt,
                    api: r.api.as_str().to_owned(),
                    model,
                    status: r.status,
                    usage: r.usage,
                    duration_ms: u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
                    error: r.error.map(|e| bounded(&e, 512)),
                    refusal: r.refusal.map(|x| x.as_str().to_owned()),
                })?;
            }
            GatewayEvent::Refusals(s) => {
                self.journal.record(EventKind::ModelRefusals {
                    round,
                    attempt,
                    count: s.count,
                    by: s
                        .by
                        .iter()
                        .map(|c| RefusalCount {
                            api: c.api.as_str().to_owned(),
                            status: c.status,
                            reason: c.reason.as_str().to_owned(),
                            count: c.count,
                        })
                        .collect(),
                })?;
            }
            GatewayEvent::Egress(e) => {
                self.journal.record(EventKind::Egress {
                    round,
                    attempt,
                    step,
                    host: bounded(&e.host.escape_debug().to_string(), 256),
                    port: e.port,
                    method: bounded(&e.method.escape_debug().to_string(), 32),
                    allowed: e.allowed,
                    reason: (!e.allowed).then(|| bounded(&e.reason, 256)),
                })?;
            }
        }
        Ok(())
    }

    /// The sandbox request shared by rounds and the runner's steps (set-up, verify).
    pub(super) fn sandbox_request(
        &self,
        dirs: &AttemptDirs,
        readable: Vec<std::path::PathBuf>,
        writable: Vec<std::path::PathBuf>,
    ) -> SandboxRequest {
        let s = &self.spec.sandbox;
        // The gateway is set by whoever runs: an attempt its own (`attempt`), a runner step the
        // egress proxy alone (`runner_step`); without it nothing is reachable.
        let network = match self.spec.network() {
            Network::Gateway => Network::None,
            n => n,
        };
        let mut req = SandboxRequest {
            mode: s.mode,
            network: Some(network),
            gateway_ports: Vec::new(),
            workspace: self.spec.workspace.clone(),
            protect: s.protect.clone(),
            // A repository job's workspace shares its mirror's objects (read-only).
            read: s
                .read
                .iter()
                .cloned()
                .chain(self.shared_objects())
                .collect(),
            write: s.write.clone(),
            sockets: s.sockets.clone(),
            private: PrivateDirs {
                home: dirs.home.clone(),
                tmp: dirs.tmp.clone(),
                readable,
                writable,
                report: None,
            },
            limits: s.limits(),
            image: s.image.clone(),
            // The journal and other jobs' artifacts stay out of the agent's reach.
            forbidden: vec![self.engine.state_dir.clone()],
            agent_user: self.engine.agent_user.clone(),
        };
        // The runner's toolchains, read-only (SPEC §12).
        self.toolchain.apply(&mut req, self.spec.sandbox.backend);
        req
    }

    /// Reads what the agent left and decides how the attempt ended ([`super::judge::judge`]).
    fn judge(
        &self,
        exec: &ExecReport,
        dirs: &AttemptDirs,
        slot: &Slot,
        preset: Option<&PresetOutput>,
        policy: ReportPolicy,
        deadline_bound: bool,
    ) -> AttemptEnd {
        let cap = self.spec.handoff_cap;
        let stderr_tail = tail_of(&dirs.stderr_log(), STDERR_QUOTE);
        let command = match &self.agent {
            crate::agent::Agent::Command(c) => Some(c.as_str()),
            crate::agent::Agent::Preset(_) => None,
        };
        // A report the sandbox refused to copy out (a symlink, a FIFO) is refused as a report.
        let refused = exec
            .outcome
            .report_dir
            .as_ref()
            .and_then(|d| d.refused(super::artifacts::REPORT_FILE));
        let report_file = match refused {
            Some(why) => Some(Err(ReportError::NotJson {
                message: format!("`{}` is {why}", dirs.report_file().display()),
            })),
            None => read_report_file(&dirs.report_file(), cap),
        };
        let facts = AttemptFacts {
            outcome: &exec.outcome,
            report_file,
            stdout: slot.lock().ok().and_then(|s| s.clone()),
            preset,
            policy,
            deadline_bound,
            round_timeout: self.spec.round_timeout.map(|t| t.to_string()),
            cap,
            report_path: &dirs.report_file().display().to_string(),
            stderr_tail: &stderr_tail,
            agent_command: command,
        };
        let cannot_run = |code: i32, output: &str| {
            super::preset_check::cannot_run_message(
                "the agent command",
                command.unwrap_or_default(),
                code,
                output,
                &self.spec,
                &self.engine.env,
            )
        };
        judge(facts, &cannot_run)
    }

    /// The usage lines of the attempt (`refused`: why the sandbox did not copy the file out).
    fn read_usage(
        &mut self,
        dirs: &AttemptDirs,
        refused: Option<String>,
        round: u32,
        attempt: u32,
    ) -> Result<RoundUsage, EngineError> {
        let read = match refused {
            Some(why) => Some(Err(format!("`{}` is {why}", dirs.usage_file().display()))),
            None => read_agent_file(&dirs.usage_file(), usage::MAX_USAGE_FILE_BYTES + 1),
        };
        let Some(bytes) = read else {
            return Ok(RoundUsage::default());
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(message) => {
                self.journal.record(EventKind::UsageSkipped {
                    round,
                    attempt,
                    line: 0,
                    message,
                })?;
                return Ok(RoundUsage::default());
            }
        };
        let (usage, problems) = usage::parse(&bytes);
        for p in problems {
            self.journal.record(EventKind::UsageSkipped {
                round,
                attempt,
                line: p.line,
                message: p.message,
            })?;
        }
        Ok(usage)
    }
}

/// git's system-level configuration in a round (`GIT_CONFIG_SYSTEM`): an identity, so `git
/// commit` works although the round's HOME is private and empty (it failed: "unable to
/// auto-detect email address"), then the host's own `/etc/gitconfig`. The lowest level git has:
/// the repository's `user.*`, a `~/.gitconfig` the round writes and the GIT_AUTHOR_* /
/// GIT_COMMITTER_* variables passed with `--env` all rank above it.
pub(super) const GIT_SYSTEM_CONFIG: &str = "# Written by ralph for this round (GIT_CONFIG_SYSTEM).\n[user]\n\tname = ralph agent\n\temail = ralph-agent@localhost\n[include]\n\tpath = /etc/gitconfig\n# The round is the boundary: git trusts the workspace and --read trees (other owners').\n[safe]\n\tdirectory = *\n";

fn write_file(path: &Path, bytes: &[u8]) -> Result<(), EngineError> {
    std::fs::write(path, bytes).map_err(|e| EngineError::io("write", path, e))
}

/// Reads a file the agent controls, refusing symlinks, FIFOs and anything but a regular file,
/// and at most `limit` bytes. `None` when it does not exist.
fn read_agent_file(path: &Path, limit: usize) -> Option<Result<Vec<u8>, String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            return Some(Err(format!(
                "cannot open `{}`: {e} (symlinks are refused)",
                path.display()
            )));
        }
    };
    match file.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Some(Err(format!("`{}` is not a regular file", path.display()))),
        Err(e) => return Some(Err(format!("cannot inspect `{}`: {e}", path.display()))),
    }
    let mut buf = Vec::new();
    match file.take(limit as u64).read_to_end(&mut buf) {
        Ok(_) => Some(Ok(buf)),
        Err(e) => Some(Err(format!("cannot read `{}`: {e}", path.display()))),
    }
}

fn read_report_file(path: &Path, cap: usize) -> Option<Result<Report, ReportError>> {
    let limit = report::decode::raw_limit(cap) + 1;
    match read_agent_file(path, limit)? {
        Ok(bytes) => Some(report::decode(&bytes, cap)),
        Err(message) => Some(Err(ReportError::NotJson { message })),
    }
}

/// The last `bytes` bytes of a file, as text.
pub(super) fn tail_of(path: &Path, bytes: usize) -> String {
    use std::io::{Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(bytes as u64 * 2);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.take(bytes as u64 * 2).read_to_end(&mut buf);
    bounded_tail(&String::from_utf8_lossy(&buf), bytes)
}
