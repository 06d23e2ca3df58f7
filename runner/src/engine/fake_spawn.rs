//! A recording fake [`Spawner`] for the loop's unit tests: each agent attempt, set-up and verify
//! run plays a scripted outcome (report file, stdout, exit code, usage, time taken) and every
//! call is recorded with its timeout and stdin. Waiting honours the timeout the loop gave and
//! the cancel token, so deadline and cancel orderings are the loop's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;
use ralph_sandbox::outcome::{EndedBy, Enforcement, ExecOutcome};
use ralph_sandbox::{
    BackendKind, ExecIo, ExecReport, ExecSpec, SandboxError, SandboxRequest, Termination,
};
use tokio_util::sync::CancellationToken;

use super::spawn::{Spawned, Spawner};

/// What one scripted process does.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    /// Written to `$RALPH_REPORT_FILE` at the start (agent attempts only).
    pub report: Option<String>,
    /// Written to stdout.
    pub stdout: String,
    /// The exit code when it ends by itself.
    pub exit: i32,
    /// Lines appended to `$RALPH_USAGE_FILE` at the start.
    pub usage: Option<String>,
    /// How long it runs unless stopped.
    pub elapsed: Duration,
    /// Its stdout reader does not finish draining in time.
    pub undrained: bool,
    /// A cancel makes it fail as a sandbox error (a set-up torn down mid-way), not end.
    pub setup_fails_on_cancel: bool,
    /// It fills its report directory (no entry left at its end).
    pub fills_report_dir: bool,
    /// Files it writes in the workspace at the start (relative path, content).
    pub writes: Vec<(PathBuf, String)>,
}

impl Script {
    /// Writes `report` to the report file and exits 0 at once.
    pub fn report(report: serde_json::Value) -> Self {
        Self {
            report: Some(report.to_string()),
            ..Self::exit(0)
        }
    }

    /// Leaves no report and exits with `code` at once.
    pub fn exit(code: i32) -> Self {
        Self {
            report: None,
            stdout: String::new(),
            exit: code,
            usage: None,
            elapsed: Duration::ZERO,
            undrained: false,
            setup_fails_on_cancel: false,
            fills_report_dir: false,
            writes: Vec::new(),
        }
    }

    /// Also writes `content` to `rel` in the workspace.
    pub fn writing(mut self, rel: &str, content: &str) -> Self {
        self.writes.push((PathBuf::from(rel), content.to_owned()));
        self
    }

    /// Fills its report directory (its report, if any, is still written).
    pub fn filling_report_dir(mut self) -> Self {
        self.fills_report_dir = true;
        self
    }

    /// Also reports `tokens` input tokens used.
    pub fn spending(mut self, tokens: u64) -> Self {
        self.usage = Some(format!("{{\"model\":\"m\",\"input_tokens\":{tokens}}}\n"));
        self
    }

    /// Its stdout reader does not drain in time.
    pub fn undrained(mut self) -> Self {
        self.undrained = true;
        self
    }

    /// A cancel while it runs fails it as the sandbox's set-up would (a sandbox error).
    pub fn setup_fails_on_cancel(mut self) -> Self {
        self.setup_fails_on_cancel = true;
        self
    }

    /// Runs for `elapsed` before it ends by itself.
    pub fn taking(mut self, elapsed: Duration) -> Self {
        self.elapsed = elapsed;
        self
    }
}

/// Which process a call started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallKind {
    /// A round attempt of the agent.
    Agent,
    /// The verify command.
    Verify,
    /// The set-up command.
    Setup,
}

/// One recorded spawn.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    /// Agent or verify.
    pub kind: CallKind,
    /// `RALPH_ROUND`.
    pub round: Option<u32>,
    /// `RALPH_ATTEMPT` (agent attempts).
    pub attempt: Option<u32>,
    /// The timeout the loop gave the process.
    pub timeout: Option<Duration>,
    /// What the process got on stdin (the prompt, for an agent).
    pub stdin: String,
    /// Its environment.
    pub env: Vec<(String, String)>,
    /// Its network.
    pub network: Option<ralph_sandbox::Network>,
    /// The gateway ports opened for it.
    pub gateway_ports: Vec<u16>,
}

/// The fake: scripted agent attempts and verify runs, in order.
#[derive(Debug, Default)]
pub(crate) struct FakeSpawner {
    agent: Mutex<VecDeque<Script>>,
    verify: Mutex<VecDeque<Script>>,
    setup: Mutex<VecDeque<Script>>,
    calls: Mutex<Vec<Call>>,
}

impl FakeSpawner {
    /// A fake whose agent attempts play `agent` and verify runs play `verify`, in order; past
    /// the end of a script a process exits 1 with no report.
    pub fn new(agent: Vec<Script>, verify: Vec<Script>) -> Self {
        Self {
            agent: Mutex::new(agent.into()),
            verify: Mutex::new(verify.into()),
            setup: Mutex::default(),
            calls: Mutex::default(),
        }
    }

    /// The set-up runs play `setup`, in order (past its end a set-up exits 1).
    pub fn with_setup(self, setup: Vec<Script>) -> Self {
        *self.setup.lock().unwrap() = setup.into();
        self
    }

    /// Every spawn so far.
    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// The kinds of the spawns so far.
    pub fn kinds(&self) -> Vec<CallKind> {
        self.calls().iter().map(|c| c.kind).collect()
    }
}

fn var<'a>(spec: &'a ExecSpec, name: &str) -> Option<&'a str> {
    spec.env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

impl Spawner for FakeSpawner {
    fn preflight(&self, _kind: BackendKind, _req: &SandboxRequest) -> Result<(), SandboxError> {
        Ok(())
    }

    /// The fake world has every program (what runs is the script).
    fn program_visible(
        &self,
        _what: &str,
        _command: &str,
        _spec: &crate::job::JobSpec,
        _env: &super::env::RunnerEnv,
    ) -> Result<(), String> {
        Ok(())
    }

    fn spawn<'a>(
        &'a self,
        _kind: BackendKind,
        spec: &'a ExecSpec,
        io: ExecIo,
    ) -> BoxFuture<'a, Result<Box<dyn Spawned>, SandboxError>> {
        let report_file = var(spec, "RALPH_REPORT_FILE").map(PathBuf::from);
        let kind = match (&report_file, var(spec, "RALPH_STEP")) {
            (Some(_), _) => CallKind::Agent,
            (None, Some("setup")) => CallKind::Setup,
            (None, _) => CallKind::Verify,
        };
        let script = match kind {
            CallKind::Agent => self.agent.lock().unwrap().pop_front(),
            CallKind::Verify => self.verify.lock().unwrap().pop_front(),
            CallKind::Setup => self.setup.lock().unwrap().pop_front(),
        }
        .unwrap_or_else(|| Script::exit(1));
        self.calls.lock().unwrap().push(Call {
            kind,
            round: var(spec, "RALPH_ROUND").and_then(|v| v.parse().ok()),
            attempt: var(spec, "RALPH_ATTEMPT").and_then(|v| v.parse().ok()),
            timeout: spec.timeout,
            stdin: String::from_utf8_lossy(io.stdin.as_deref().unwrap_or_default()).into_owned(),
            env: spec.env.clone(),
            network: spec.sandbox.network,
            gateway_ports: spec.sandbox.gateway_ports.clone(),
        });
        if let (Some(path), Some(report)) = (&report_file, &script.report) {
            std::fs::write(path, report).unwrap();
        }
        for (rel, content) in &script.writes {
            std::fs::write(spec.cwd.join(rel), content).unwrap();
        }
        if let (Some(path), Some(usage)) = (var(spec, "RALPH_USAGE_FILE"), &script.usage) {
            std::fs::write(path, usage).unwrap();
        }
        // The gateway's listeners, as the sandbox hands them over (here on the host's loopback).
        let listeners = spec
            .sandbox
            .gateway_ports
            .iter()
            .map(|p| (*p, TcpListener::bind("127.0.0.1:0").unwrap()))
            .collect();
        let run = FakeRun {
            script,
            io,
            timeout: spec.timeout,
            mode: spec.sandbox.mode,
            report_dir: spec.sandbox.private.report.clone(),
            listeners,
        };
        Box::pin(async move { Ok(Box::new(run) as Box<dyn Spawned>) })
    }
}

#[derive(Debug)]
struct FakeRun {
    script: Script,
    io: ExecIo,
    timeout: Option<Duration>,
    mode: ralph_sandbox::Mode,
    report_dir: Option<ralph_sandbox::ReportDir>,
    listeners: Vec<(u16, TcpListener)>,
}

impl Spawned for FakeRun {
    fn pid(&self) -> Option<u32> {
        None
    }

    fn take_gateway_listeners(&mut self) -> Vec<(u16, TcpListener)> {
        std::mem::take(&mut self.listeners)
    }

    fn wait(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ExecReport, SandboxError>> {
        Box::pin(async move {
            let FakeRun {
                script,
                mut io,
                timeout,
                mode,
                report_dir,
                listeners: _,
            } = *self;
            io.stdout.write(script.stdout.as_bytes()).unwrap();
            let started = std::time::Instant::now();
            let limit = timeout.unwrap_or(Duration::MAX);
            let ended_by = tokio::select! {
                () = tokio::time::sleep(script.elapsed), if script.elapsed < limit => EndedBy::Exit,
                () = tokio::time::sleep(limit), if timeout.is_some() => EndedBy::Timeout,
                () = cancel.cancelled() => EndedBy::Cancel,
            };
            if script.setup_fails_on_cancel && matches!(ended_by, EndedBy::Cancel) {
                return Err(SandboxError::unavailable(
                    "mount namespace",
                    "the set-up was torn down".to_owned(),
                ));
            }
            let termination = match ended_by {
                EndedBy::Exit => Termination::Exited { code: script.exit },
                _ => Termination::Signaled { signal: 9 },
            };
            let mut stdout = io.stdout.finish().unwrap();
            if script.undrained {
                stdout = ralph_sandbox::outcome::CaptureSummary {
                    undrained: true,
                    ..Default::default()
                };
            }
            let stderr = io.stderr.finish().unwrap();
            Ok(ExecReport {
                outcome: ExecOutcome {
                    termination,
                    ended_by,
                    wall: started.elapsed(),
                    setup: None,
                    resources: Some(Default::default()),
                    leftovers_killed: 0,
                    exec_error: None,
                    violations: Vec::new(),
                    git: Default::default(),
                    report_dir: report_dir.map(|r| {
                        Box::new(ralph_sandbox::outcome::ReportDirEnd {
                            path: r.path.clone(),
                            bytes: r.bytes,
                            entries: r.entries,
                            free_bytes: Some(r.bytes / 2),
                            free_entries: Some(if script.fills_report_dir {
                                0
                            } else {
                                r.entries - 2
                            }),
                            ..Default::default()
                        })
                    }),
                    enforcement: Enforcement {
                        backend: BackendKind::Native,
                        mode,
                        restrictions: Vec::new(),
                        network: None,
                    },
                },
                stdout,
                stderr,
            })
        })
    }
}
