//! One scripted run of the fake: its writes at the start, its gateway listeners (on the host's
//! loopback), and its wait, which plays the script against the spec's timeout and the cancel
//! token and reports as a real run would.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::script::Script;
use super::var;
use crate::backend::{ExecIo, Running, WaitFuture};
use crate::error::SandboxError;
use crate::mode::{BackendKind, Mode};
use crate::outcome::{
    CaptureSummary, EndedBy, Enforcement, ExecOutcome, ExecReport, ReportDirEnd, Termination,
};
use crate::spec::{ExecSpec, ReportDir};

/// A started fake run.
#[derive(Debug)]
pub(super) struct FakeRun {
    kind: BackendKind,
    script: Script,
    io: ExecIo,
    timeout: Option<Duration>,
    mode: Mode,
    report_dir: Option<ReportDir>,
    listeners: Vec<(u16, TcpListener)>,
}

fn write(path: &Path, content: &str) -> Result<(), SandboxError> {
    std::fs::write(path, content).map_err(|source| SandboxError::Io {
        action: "write",
        path: path.to_owned(),
        source,
    })
}

fn capture_failed(e: std::io::Error) -> SandboxError {
    SandboxError::Helper {
        message: format!("the fake's output capture failed: {e}"),
    }
}

impl FakeRun {
    /// Does what `script` does at the start of `spec` and hands over its gateway listeners.
    pub(super) fn start(
        kind: BackendKind,
        script: Script,
        spec: &ExecSpec,
        io: ExecIo,
    ) -> Result<Self, SandboxError> {
        for (name, content) in &script.writes_at_var {
            if let Some(path) = var(&spec.env, name) {
                write(Path::new(path), content)?;
            }
        }
        for (rel, content) in &script.writes {
            write(&spec.cwd.join(rel), content)?;
        }
        // The gateway's listeners, as the sandbox hands them over (here on the host's loopback).
        let listeners = spec
            .sandbox
            .gateway_ports
            .iter()
            .map(|p| {
                TcpListener::bind("127.0.0.1:0")
                    .map(|l| (*p, l))
                    .map_err(|source| SandboxError::Io {
                        action: "bind a gateway listener on",
                        path: PathBuf::from("127.0.0.1:0"),
                        source,
                    })
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            kind,
            script,
            io,
            timeout: spec.timeout,
            mode: spec.sandbox.mode,
            report_dir: spec.sandbox.private.report.clone(),
            listeners,
        })
    }

    async fn play(self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        let FakeRun {
            kind,
            script,
            mut io,
            timeout,
            mode,
            report_dir,
            listeners: _,
        } = self;
        io.stdout
            .write(script.stdout.as_bytes())
            .map_err(capture_failed)?;
        let started = Instant::now();
        let limit = timeout.unwrap_or(Duration::MAX);
        let ended_by = tokio::select! {
            () = tokio::time::sleep(script.elapsed), if script.elapsed < limit => EndedBy::Exit,
            () = tokio::time::sleep(limit), if timeout.is_some() => EndedBy::Timeout,
            () = cancel.cancelled() => EndedBy::Cancel,
        };
        if script.fails_on_cancel && ended_by == EndedBy::Cancel {
            return Err(SandboxError::unavailable(
                "mount namespace",
                "the set-up was torn down",
            ));
        }
        let termination = match ended_by {
            EndedBy::Exit => Termination::Exited { code: script.exit },
            _ => Termination::Signaled { signal: 9 },
        };
        let mut stdout = io.stdout.finish().map_err(capture_failed)?;
        if script.undrained {
            stdout = CaptureSummary {
                undrained: true,
                ..CaptureSummary::default()
            };
        }
        let stderr = io.stderr.finish().map_err(capture_failed)?;
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
                    Box::new(ReportDirEnd {
                        path: r.path.clone(),
                        bytes: r.bytes,
                        entries: r.entries,
                        free_bytes: Some(r.bytes / 2),
                        free_entries: Some(if script.fills_report_dir {
                            0
                        } else {
                            r.entries.saturating_sub(2)
                        }),
                        ..Default::default()
                    })
                }),
                enforcement: Enforcement {
                    backend: kind,
                    mode,
                    restrictions: Vec::new(),
                    network: None,
                },
            },
            stdout,
            stderr,
        })
    }
}

impl Running for FakeRun {
    fn pid(&self) -> Option<u32> {
        None
    }

    fn take_gateway_listeners(&mut self) -> Vec<(u16, TcpListener)> {
        std::mem::take(&mut self.listeners)
    }

    fn wait(self: Box<Self>, cancel: CancellationToken) -> WaitFuture {
        Box::pin(self.play(cancel))
    }
}
