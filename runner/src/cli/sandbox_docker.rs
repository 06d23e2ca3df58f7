//! `ralph sandbox exec --backend docker`: the command in a container, its output passed through
//! to this process's stdout and stderr, SIGINT/SIGTERM/SIGHUP cancelling it (the container is
//! killed and removed).

use std::io::Write;
use std::sync::Arc;

use ralph_sandbox::capture::OutputSink;
use ralph_sandbox::docker::DockerBackend;
use ralph_sandbox::outcome::{CaptureSummary, ExecOutcome};
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{ExecIo, ExecSpec, Sandbox, SandboxError};
use tokio_util::sync::CancellationToken;

/// Writes a stream straight to one of this process's own streams.
struct Passthrough<W: Write + Send> {
    to: W,
    seen: u64,
}

impl<W: Write + Send> OutputSink for Passthrough<W> {
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.seen += chunk.len() as u64;
        // A closed stdout (e.g. `| head`) must not stop the run: the rest is dropped.
        let _ = self.to.write_all(chunk).and_then(|()| self.to.flush());
        Ok(())
    }

    fn finish(self: Box<Self>) -> std::io::Result<CaptureSummary> {
        Ok(CaptureSummary {
            path: None,
            bytes_seen: self.seen,
            bytes_kept: self.seen,
            truncated: false,
            undrained: false,
            dropped: None,
        })
    }
}

/// Runs `spec` in a container and waits for it.
pub fn exec(policies: PolicySet, spec: &ExecSpec) -> Result<ExecOutcome, SandboxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SandboxError::Engine {
            message: format!("failed to start the runtime: {e}"),
        })?;
    let mut backend = DockerBackend::new(Arc::new(policies));
    // This static executable is the container's init (without it, the engine's).
    if let Ok(exe) = std::env::current_exe() {
        backend = backend.with_init_program(exe);
    }
    let outcome = rt.block_on(async {
        let cancel = CancellationToken::new();
        watch_signals(&cancel);
        let run = backend.spawn(spec, passthrough_io()).await?;
        run.wait(cancel).await.map(|r| r.outcome)
    });
    // A thread may still block reading a terminal on stdin: do not wait for it.
    rt.shutdown_background();
    outcome
}

/// The command's stdout and stderr passed straight to this process's own.
pub(super) fn passthrough_io() -> ExecIo {
    ExecIo {
        stdin: None,
        stdout: Box::new(Passthrough {
            to: std::io::stdout(),
            seen: 0,
        }),
        stderr: Box::new(Passthrough {
            to: std::io::stderr(),
            seen: 0,
        }),
    }
}

/// Cancels `cancel` on SIGINT, SIGTERM or SIGHUP.
pub(super) fn watch_signals(cancel: &CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    for kind in [
        SignalKind::interrupt(),
        SignalKind::terminate(),
        SignalKind::hangup(),
    ] {
        let Ok(mut s) = signal(kind) else { continue };
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if s.recv().await.is_some() {
                cancel.cancel();
            }
        });
    }
}
