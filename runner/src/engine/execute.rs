//! Running one prepared process in the job's sandbox, the step an agent attempt and a runner
//! step (set-up, verify) share: the job's paths checked unchanged, its start journalled durably
//! before the command runs (overlapping the sandbox's set-up where the backend can hold the
//! command until the record is durable), the spawn, its gateway (the model gateway and egress proxy
//! of an attempt, or a step's egress proxy) served until the end, failing closed when the
//! gateway cannot start.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use ralph_sandbox::{ExecIo, ExecReport, ExecSpec, Running, SandboxError};
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
    /// Journals `started` durably and starts `spec`, its command never running before the
    /// record is durable. Where the backend can hold a command ([`ralph_sandbox::Sandbox::spawn_held`]) the
    /// two overlap: the sandbox is set up while the record is committed, and the command is
    /// released once it is; a record that fails leaves the command unreleased (nothing of it
    /// runs, the set-up is undone) and is the error. Elsewhere the record comes first.
    async fn start_journalled(
        &mut self,
        started: EventKind,
        spec: &ExecSpec,
        io: ExecIo,
    ) -> Result<Result<Box<dyn Running>, SandboxError>, EngineError> {
        let sandbox = self.engine.sandboxes.get(self.spec.sandbox.backend);
        if !sandbox.holds() {
            self.journal.record(started)?;
            return Ok(sandbox.spawn(spec, io).await);
        }
        // A process the backend is still starting for this run (its standby) is waited for
        // first: else the spawn would wait for it inside the `join!` below while the commit's
        // flush held the thread, and the order would go out only after the flush.
        sandbox.settle().await;
        let journal = &mut self.journal;
        // `join!` polls the spawn first: the helper is started before the commit blocks.
        let (spawned, recorded) = tokio::join!(sandbox.spawn_held(spec, io), async {
            journal.record(started)
        });
        match (spawned, recorded) {
            (Ok(mut run), Ok(_)) => {
                run.release();
                Ok(Ok(run))
            }
            (Err(e), Ok(_)) => Ok(Err(e)),
            (Ok(run), Err(e)) => {
                // Never released: the helper undoes its set-up and ends; nothing of it ran.
                let _ = run.wait(CancellationToken::new()).await;
                Err(e.into())
            }
            (Err(_), Err(e)) => Err(e.into()),
        }
    }

    /// Runs `x` to its end ([`Execution`]).
    pub(super) async fn execute(&mut self, x: Execution<'_>) -> Result<Ran, EngineError> {
        let started = Instant::now();
        // What was announced is for this run, which takes it (or starts its own).
        self.announced = false;
        let spawned = match self.paths_unchanged(x.known) {
            Ok(()) => self.start_journalled(x.started, x.spec, x.io).await?,
            Err(e) => {
                self.journal.record(x.started)?;
                Err(e)
            }
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
