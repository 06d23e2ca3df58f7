//! Running one prepared process in the job's sandbox, the step an agent attempt and a runner
//! step (set-up, verify) share: its start journalled durably before the process exists, the
//! job's paths checked unchanged, the spawn, its gateway (the model gateway and egress proxy
//! of an attempt, or a step's egress proxy) served until the end, failing closed when the
//! gateway cannot start.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use ralph_sandbox::{ExecIo, ExecReport, ExecSpec, SandboxError};
use tokio_util::sync::CancellationToken;

use super::EngineError;
use super::job_run::JobRun;
use super::round::Site;
use super::round_gateway::GatewayPlan;
use crate::job::resolve::WritableTrees;
use crate::store::EventKind;
use crate::usage::RoundUsage;

/// One process to run.
pub(super) struct Execution<'a> {
    /// Journalled (durably) before the process exists: `round_started`, `setup_started`,
    /// `verify_started`.
    pub started: EventKind,
    /// An agent attempt's (round, attempt): its `round_spawned` is journalled once it runs.
    pub spawned: Option<(u32, u32)>,
    /// The process.
    pub spec: &'a ExecSpec,
    /// Its stdin and output sinks.
    pub io: ExecIo,
    /// Its gateway, if its network has one.
    pub plan: Option<GatewayPlan>,
    /// The writable trees the job's paths are checked against before the spawn.
    pub known: &'a WritableTrees,
    /// Stops the process (and its gateway).
    pub stop: &'a CancellationToken,
    /// Set by the model gateway when the token budget is crossed.
    pub budget_crossed: Arc<AtomicBool>,
    /// Where its journalled gateway events belong.
    pub site: Site,
}

/// How it went.
pub(super) struct Ran {
    /// The sandbox's report, or why it did not run or could not be waited for.
    pub outcome: Result<ExecReport, SandboxError>,
    /// What the model gateway counted (an attempt's gateway only).
    pub gateway_usage: Option<RoundUsage>,
    /// Why it was stopped for a full state disk, if it was.
    pub disk_stop: Option<String>,
    /// From the journalled start to its end.
    pub duration_ms: u64,
}

impl JobRun<'_> {
    /// Runs `x` to its end ([`Execution`]).
    pub(super) async fn execute(&mut self, x: Execution<'_>) -> Result<Ran, EngineError> {
        // The start is durable before the process exists.
        self.journal.record(x.started)?;
        let started = Instant::now();
        let spawned = match self.paths_unchanged(x.known) {
            Ok(()) => {
                self.engine
                    .sandboxes
                    .get(self.spec.sandbox.backend)
                    .spawn(x.spec, x.io)
                    .await
            }
            Err(e) => Err(e),
        };
        let mut gateway_usage = None;
        let mut disk_stop = None;
        let outcome = match spawned {
            Ok(mut run) => {
                if let Some((round, attempt)) = x.spawned {
                    self.journal.record(EventKind::RoundSpawned {
                        round,
                        attempt,
                        pid: run.pid(),
                    })?;
                }
                match x.plan {
                    None => run.wait(x.stop.clone()).await,
                    Some(plan) => {
                        let listeners = run.take_gateway_listeners();
                        match plan.start(listeners, x.stop.clone(), x.budget_crossed) {
                            Ok(gw) => {
                                let (outcome, usage, full) =
                                    self.wait_with_gateway(run, gw, x.stop, x.site).await?;
                                gateway_usage = Some(usage);
                                disk_stop = full;
                                outcome
                            }
                            Err(e) => {
                                // Nothing may run without its gateway: stop it, fail closed.
                                x.stop.cancel();
                                let _ = run.wait(x.stop.clone()).await;
                                Err(SandboxError::unavailable("network", e.to_string()))
                            }
                        }
                    }
                }
            }
            Err(e) => Err(e),
        };
        Ok(Ran {
            outcome,
            gateway_usage,
            disk_stop,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    }
}
