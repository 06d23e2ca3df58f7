//! `ralph sandbox exec --allow-host HOST[:PORT]` on the native backend: the command runs in the
//! `gateway` network (its own loopback only), and this process serves the egress proxy on a
//! listener the sandbox created inside it, letting the command reach the allowed hosts and
//! nothing else. Refusals are reported on stderr. Output is passed through; SIGINT, SIGTERM and
//! SIGHUP stop the command's tree.

use std::sync::Arc;

use ralph_runner::gateway::{
    AllowHost, EgressConfig, EgressDecision, GatewaySink, ModelRequest, serve_egress,
};
use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::outcome::ExecOutcome;
use ralph_sandbox::{ExecSpec, Sandbox, SandboxError};
use tokio_util::sync::CancellationToken;

use super::sandbox_docker::{passthrough_io, watch_signals};

/// The egress proxy's port on the command's private loopback.
pub const EGRESS_PORT: u16 = ralph_runner::engine::round_gateway::EGRESS_PORT;

/// Says each refusal on stderr.
struct StderrSink;

impl GatewaySink for StderrSink {
    fn model_request(&self, _r: &ModelRequest) {}

    fn egress(&self, e: &EgressDecision) {
        if !e.allowed {
            eprintln!(
                "ralph: egress refused: {} {}:{} ({})",
                e.method,
                e.host.escape_debug(),
                e.port,
                e.reason
            );
        }
    }

    fn budget_crossed(&self, _used: u64, _max: u64) {}
}

/// Runs `spec` (whose request asks for [`EGRESS_PORT`]) and serves the egress proxy for it.
pub fn exec(
    backend: &NativeBackend,
    spec: &ExecSpec,
    allow: Vec<AllowHost>,
) -> Result<ExecOutcome, SandboxError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SandboxError::Engine {
            message: format!("failed to start the runtime: {e}"),
        })?;
    let outcome = rt.block_on(async {
        let cancel = CancellationToken::new();
        watch_signals(&cancel);
        let mut run = backend.spawn(spec, passthrough_io()).await?;
        let stop = CancellationToken::new();
        let mut server = None;
        for (port, listener) in run.take_gateway_listeners() {
            if port != EGRESS_PORT {
                continue;
            }
            let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| {
                SandboxError::unavailable(
                    "network",
                    format!("failed to serve the egress proxy: {e}"),
                )
            });
            match listener {
                Ok(l) => {
                    let cfg = Arc::new(EgressConfig::new(allow.clone()));
                    let stop = stop.clone();
                    server = Some(tokio::spawn(async move {
                        let _ = serve_egress(l, cfg, Arc::new(StderrSink), stop).await;
                    }));
                }
                Err(e) => {
                    cancel.cancel();
                    let _ = run.wait(cancel).await;
                    return Err(e);
                }
            }
        }
        if server.is_none() {
            cancel.cancel();
            let _ = run.wait(cancel).await;
            return Err(SandboxError::unavailable(
                "network",
                "the sandbox did not hand over the egress proxy's listener",
            ));
        }
        let outcome = run.wait(cancel).await.map(|r| r.outcome);
        stop.cancel();
        if let Some(s) = server {
            let _ = s.await;
        }
        outcome
    });
    // A thread may still block reading a terminal on stdin: do not wait for it.
    rt.shutdown_background();
    outcome
}
