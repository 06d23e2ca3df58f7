//! One container's life: create, attach, start; then wait (killing it on timeout or cancel),
//! drain its output, inspect it and remove it. The container is removed with force on every
//! path out once it exists, errors included (see [`super::handle`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard::models::ContainerWaitResponse;
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::client::{Engine, EngineError, bounded};
use super::handle::Container;
use super::plan::ContainerPlan;
use super::streams::{forward_own_stdin, pump};
use super::{container, image};
use crate::backend::{ExecIo, Running, WaitFuture};
use crate::beneath::{self, TreePath};
use crate::error::SandboxError;
use crate::gitguard::{self, GitGuard, Inventory};
use crate::outcome::git::GitCheck;
use crate::outcome::{CaptureSummary, EndedBy, Enforcement, ExecOutcome, ExecReport, Termination};
use crate::protect::{self, Placeholder};
use crate::snapshot::Snapshot;
use crate::spec::{ExecSpec, StderrMode, StdinMode};

/// How long output may still arrive after the container stopped.
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// A container running one command.
#[derive(Debug)]
pub struct DockerRun {
    container: Container,
    started: Instant,
    /// From the request to create the container until it was started.
    setup: Duration,
    timeout: Option<Duration>,
    grace: Duration,
    pump: JoinHandle<std::io::Result<(CaptureSummary, CaptureSummary)>>,
    stdin: Option<JoinHandle<()>>,
    enforcement: Enforcement,
    placeholders: Vec<TreePath>,
    absent: Vec<TreePath>,
    watch: Vec<TreePath>,
    snapshot: Snapshot,
    /// The git check: what it covers and what the trees held before the run.
    git: Option<Box<(GitGuard, Inventory)>>,
    control_dir: PathBuf,
    /// Ralph's init in the container: its liveness FIFO, held open while the runner lives.
    init: Option<Box<super::init::InitSetup>>,
    /// The report directory, copied out of the tmpfs the init handed over once the container
    /// is gone ([`crate::report_dir`]).
    report_dir: Option<Box<crate::spec::ReportDir>>,
    /// `--network gateway`: the listeners the init made in the container's namespace, until
    /// the caller takes them (boxed: most runs have none).
    gateway: Option<Box<[(u16, std::net::TcpListener)]>>,
}

impl DockerRun {
    /// The container's id.
    pub fn id(&self) -> &str {
        &self.container.id
    }
}

/// Creates the host paths the plan needs: placeholders (returns those to remove afterwards),
/// and the run's own directories handed to the container's user.
fn prepare_host(plan: &ContainerPlan) -> Result<Vec<TreePath>, SandboxError> {
    let mut remove_after = Vec::new();
    for Placeholder {
        at,
        remove_after: remove,
    } in &plan.placeholders
    {
        // Never through a symlink: one planted in its parent fails the run closed.
        match beneath::mkdir(at, 0o555) {
            Ok(true) if *remove => remove_after.push(at.clone()),
            Ok(_) => {}
            Err(e) => {
                cleanup_host(&remove_after);
                return Err(SandboxError::invalid(
                    "protect",
                    format!("failed to create the protected placeholder: {e}"),
                ));
            }
        }
    }
    for p in &plan.chown {
        std::os::unix::fs::chown(p, Some(plan.uid), Some(plan.gid)).map_err(|source| {
            SandboxError::Io {
                action: "hand over",
                path: p.clone(),
                source,
            }
        })?;
    }
    Ok(remove_after)
}

fn cleanup_host(placeholders: &[TreePath]) {
    for p in placeholders.iter().rev() {
        let _ = beneath::rmdir_if_empty(p);
    }
}

/// The walk before the run, off the runtime's threads (a large tree takes a while).
async fn walk_before(
    guard: GitGuard,
    kept: Option<PathBuf>,
    layers: Option<crate::spec::WorkspaceLayers>,
) -> Result<(GitGuard, Inventory), SandboxError> {
    tokio::task::spawn_blocking(move || {
        let before = gitguard::inventory_kept(&guard, kept.as_deref(), layers.as_ref());
        (guard, before)
    })
    .await
    .map_err(|e| SandboxError::Engine {
        message: format!("the git check before the run failed: {e}"),
    })
}

/// The idmapped clones of `plan`'s root-owned trees, when it has any; refused (exit 69) when
/// the engine would not see them (another mount namespace).
async fn make_idmapped(
    engine: &Engine,
    plan: &ContainerPlan,
) -> Result<Option<super::idmap::IdmappedTrees>, SandboxError> {
    if plan.idmapped.is_empty() {
        return Ok(None);
    }
    let socket = engine.socket.clone();
    let trees = plan.idmapped.clone();
    tokio::task::spawn_blocking(move || {
        match super::idmap::engine_shares_mounts(&socket) {
            Ok(true) => {}
            Ok(false) => {
                return Err(SandboxError::unavailable(
                    "the round's identity (idmapped workspace)",
                    "the container engine does not share the runner's mount namespace, so it cannot see the idmapped workspace that keeps the round off uid 0 (run the root runner without private mounts, or chown the workspace to an unprivileged user)",
                ));
            }
            Err(why) => {
                return Err(SandboxError::unavailable(
                    "the round's identity (idmapped workspace)",
                    format!("cannot tell whether the container engine sees the runner's mounts: {why}"),
                ));
            }
        }
        super::idmap::IdmappedTrees::make(&trees).map(Some)
    })
    .await
    .map_err(|e| SandboxError::Engine {
        message: format!("the idmapped workspace task failed: {e}"),
    })?
}

/// The engine refused the container we asked for: the sandbox cannot be had.
fn refused(step: &str, e: &EngineError) -> SandboxError {
    SandboxError::unavailable(
        format!("the container sandbox (docker {step})"),
        e.to_string(),
    )
}

/// Creates, attaches and starts the container for `spec`.
pub async fn start(
    engine: &Engine,
    plan: ContainerPlan,
    spec: &ExecSpec,
    io: ExecIo,
    labels: HashMap<String, String>,
    init_program: Option<&std::path::Path>,
) -> Result<DockerRun, SandboxError> {
    let setup_began = Instant::now();
    if plan.report_dir.is_some() && init_program.is_none() {
        return Err(SandboxError::unavailable(
            "the report directory",
            "only ralph's container init can hand its tmpfs over (the backend has no init program)",
        ));
    }
    let gateway = !plan.gateway_ports.is_empty();
    if gateway && init_program.is_none() {
        return Err(SandboxError::unavailable(
            crate::native::step::restriction::GATEWAY,
            "only ralph's container init can make the gateway's listeners in the container (the backend has no init program)",
        ));
    }
    let mut init = match init_program {
        Some(p) => Some(
            super::init::prepare(p, &spec.control_dir, plan.uid, plan.gid, gateway).map_err(
                |e| SandboxError::Engine {
                    message: e.to_string(),
                },
            )?,
        ),
        None => None,
    };
    // A root runner's root-owned trees, idmapped for the agent user (`super::idmap`): made
    // before the container, detached once it has started (it holds its own copies).
    let mut idmapped = make_idmapped(engine, &plan).await?;
    let body = container::body(&plan, spec, labels, init.as_ref(), idmapped.as_ref())
        .map_err(|m| SandboxError::invalid("policy", m))?;
    let placeholders = prepare_host(&plan)?;
    // What the protected paths hold, to find and undo any change after the run.
    let snapshot = match Snapshot::take_kept(
        &plan.protected,
        &spec.control_dir.join("protected"),
        spec.protected_copies.as_deref(),
    ) {
        Ok(s) => s,
        Err(e) => {
            cleanup_host(&placeholders);
            return Err(SandboxError::Io {
                action: "record the protected paths",
                path: spec.control_dir.join("protected"),
                source: std::io::Error::other(e.to_string()),
            });
        }
    };
    // What git repositories the writable trees hold before the container exists.
    let git = match plan.git.clone() {
        Some(guard) => Some(Box::new(
            walk_before(guard, spec.listings.clone(), spec.layers.clone())
                .await
                .inspect_err(|_| {
                    cleanup_host(&placeholders);
                })?,
        )),
        None => None,
    };
    let created = bounded(
        "create the container",
        engine
            .docker
            .create_container(None::<CreateContainerOptions>, body),
    )
    .await;
    let created = match created {
        Ok(c) => c,
        Err(e) => {
            cleanup_host(&placeholders);
            return Err(if e.status() == Some(404) {
                image::missing(&plan.image)
            } else {
                refused("create", &e)
            });
        }
    };
    let mut c = Container {
        engine: engine.clone(),
        id: created.id,
        armed: true,
    };
    // The engine says when it dropped a limit (e.g. no memory cgroup): fail closed.
    let started = if created.warnings.is_empty() {
        let started = start_created(&mut c, spec, io).await;
        if let Some(t) = idmapped.as_mut() {
            t.detach();
        }
        started
    } else {
        Err(SandboxError::unavailable(
            "the container limits",
            format!("the engine warned: {}", created.warnings.join("; ")),
        ))
    };
    // The gateway's listeners, from the init in the container's namespace, before the command
    // exists; without them nothing runs.
    let handover = init.as_mut().and_then(|i| i.gateway.take());
    let started = match (started, handover) {
        (Ok(running), Some(h)) => {
            match receive_listeners(&c, h, plan.gateway_ports.clone()).await {
                Ok(listeners) => Ok((running, listeners)),
                Err(e) => {
                    running.0.abort();
                    if let Some(w) = running.1 {
                        w.abort();
                    }
                    Err(e)
                }
            }
        }
        (Ok(running), None) => Ok((running, Vec::new())),
        (Err(e), _) => Err(e),
    };
    match started {
        Ok(((pump, stdin), gateway)) => Ok(DockerRun {
            container: c,
            started: Instant::now(),
            setup: setup_began.elapsed(),
            timeout: spec.timeout,
            grace: spec.kill_grace,
            pump,
            stdin,
            enforcement: plan.enforcement,
            placeholders,
            absent: plan.absent,
            watch: plan.watch,
            snapshot,
            git,
            control_dir: spec.control_dir.clone(),
            init: init.map(Box::new),
            report_dir: plan.report_dir.map(Box::new),
            gateway: (!gateway.is_empty()).then(|| gateway.into_boxed_slice()),
        }),
        Err(e) => {
            let _ = c.remove().await;
            cleanup_host(&placeholders);
            Err(e)
        }
    }
}

type Pump = JoinHandle<std::io::Result<(CaptureSummary, CaptureSummary)>>;

/// How long the init has to hand the gateway's listeners over once the container started.
const GATEWAY_HANDOVER_LIMIT: Duration = Duration::from_secs(60);

/// The init's hand-over of the gateway listeners ([`super::gateway`]), given up as soon as the
/// container ends without it; any failure is [`SandboxError::Unavailable`] (the caller removes
/// the container).
async fn receive_listeners(
    c: &Container,
    handover: super::gateway::GatewayHandover,
    ports: Vec<u16>,
) -> Result<Vec<(u16, std::net::TcpListener)>, SandboxError> {
    let unavailable = |reason: String| {
        SandboxError::unavailable(crate::native::step::restriction::GATEWAY, reason)
    };
    let given_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = std::sync::Arc::clone(&given_up);
    let mut receiving = tokio::task::spawn_blocking(move || {
        handover.receive(&ports, GATEWAY_HANDOVER_LIMIT, &flag)
    });
    let opts = WaitContainerOptions {
        condition: "not-running".into(),
    };
    let mut ended = c.engine.docker.wait_container(&c.id, Some(opts));
    let received = tokio::select! {
        r = &mut receiving => r,
        _ = ended.next() => {
            // The init may have handed them over just before it ended: what arrived counts.
            given_up.store(true, std::sync::atomic::Ordering::SeqCst);
            receiving.await
        }
    }
    .map_err(|e| unavailable(format!("the hand-over task failed: {e}")))?;
    received.map_err(|e| match e {
        crate::native::gateway::RecvError::Closed => unavailable(
            "ralph's container init ended before handing over the gateway listeners (its message is on the run's stderr)"
                .into(),
        ),
        other => unavailable(format!("the container's gateway listeners: {other}")),
    })
}

async fn start_created(
    c: &mut Container,
    spec: &ExecSpec,
    io: ExecIo,
) -> Result<(Pump, Option<JoinHandle<()>>), SandboxError> {
    let stdin = spec.stdin != StdinMode::Null;
    let opts = AttachContainerOptions {
        stdin,
        stdout: true,
        stderr: true,
        stream: true,
        logs: false,
        detach_keys: None,
    };
    let attached = bounded(
        "attach to the container",
        c.engine.docker.attach_container(&c.id, Some(opts)),
    )
    .await
    .map_err(|e| refused("attach", &e))?;
    let merged = spec.stderr == StderrMode::MergedIntoStdout;
    let pump = tokio::spawn(pump(attached.output, io.stdout, io.stderr, merged));
    let mut input = attached.input;
    let writer = match (spec.stdin, io.stdin) {
        (StdinMode::Null, _) => None,
        (StdinMode::Piped, bytes) => Some(tokio::spawn(async move {
            // A command that does not read its stdin may end first: that is fine.
            if let Some(bytes) = bytes {
                let _ = input.write_all(&bytes).await;
            }
            let _ = input.shutdown().await;
        })),
        (StdinMode::Inherit, _) => Some(tokio::spawn(forward_own_stdin(input))),
    };
    if let Err(e) = bounded(
        "start the container",
        c.engine.docker.start_container(&c.id, None),
    )
    .await
    {
        if let Some(w) = writer {
            w.abort();
        }
        pump.abort();
        return Err(refused("start", &e));
    }
    Ok((pump, writer))
}

/// The termination from the container's exit status: the init (ralph's or tini) exits 128 + n
/// when signal n killed the command, and the engine reports 128 + n when it killed the init.
pub fn termination(code: i64) -> Termination {
    match code {
        129..=192 => Termination::Signaled {
            signal: i32::try_from(code - 128).unwrap_or(9),
        },
        c => Termination::Exited {
            code: i32::try_from(c).unwrap_or(255),
        },
    }
}

impl Running for DockerRun {
    fn pid(&self) -> Option<u32> {
        None
    }

    fn take_gateway_listeners(&mut self) -> Vec<(u16, std::net::TcpListener)> {
        self.gateway.take().map(Vec::from).unwrap_or_default()
    }

    fn wait(self: Box<Self>, cancel: CancellationToken) -> WaitFuture {
        Box::pin(self.finish(cancel))
    }
}

impl DockerRun {
    /// Waits for the end ([`Running::wait`], on the concrete run), then removes the container.
    async fn finish(mut self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        let mut result = self.wait_inner(cancel).await;
        let removed = self.container.remove().await;
        // Nothing of the run is left once the container stopped (the wait said so) or is gone:
        // the git repositories it left are made safe now, whatever else went wrong.
        if result.is_ok() || removed.is_ok() {
            if let Some((guard, before)) = self.git.take().map(|b| *b) {
                let control = self.control_dir.clone();
                let checked = tokio::task::spawn_blocking(move || {
                    gitguard::check_after_run(&guard, &before, &control)
                })
                .await;
                match (checked, &mut result) {
                    (Ok((check, violations)), Ok(report)) => {
                        report.outcome.git = check;
                        report.outcome.violations.extend(violations);
                    }
                    (Ok(_), Err(_)) => {}
                    (Err(e), _) => {
                        result = Err(SandboxError::Engine {
                            message: format!("the git check after the run failed: {e}"),
                        });
                    }
                }
            }
        }
        if let Err(e) = removed {
            // The outcome is known; the container is not gone: say so (the reaper gets it).
            if result.is_ok() {
                return Err(e.into());
            }
        }
        cleanup_host(&self.placeholders);
        if let Some(init) = self.init.take() {
            let _ = std::fs::remove_file(&init.alive);
        }
        if let Ok(report) = &result {
            write_result(&self.control_dir, &report.outcome);
        }
        result
    }
}

/// The run's account in the control directory, as the native helper leaves it
/// (`sandbox-result.json`, for the round's artifacts). Best effort: the caller has the outcome.
fn write_result(control_dir: &std::path::Path, outcome: &ExecOutcome) {
    let result = crate::native::HelperResult::Ran {
        outcome: outcome.clone(),
    };
    let Ok(bytes) = serde_json::to_vec(&result) else {
        return;
    };
    if std::fs::create_dir_all(control_dir).is_err() {
        return;
    }
    let path = control_dir.join(crate::native::protocol::RESULT_FILE);
    let tmp = path.with_extension("json.tmp");
    if std::fs::write(&tmp, bytes).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

impl DockerRun {
    async fn wait_inner(&mut self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        let (waited, mut ended_by) = self.wait_for_stop(&cancel).await;
        let wall = self.started.elapsed();
        let code = self.exit_code(waited)?;
        if let Some(w) = self.stdin.take() {
            w.abort();
        }
        let (stdout, stderr) = self.drain_output().await?;
        // The container is gone: what its init said (ralph's init only; unknown without it).
        let (said, tmpfs) = self
            .init
            .as_ref()
            .and_then(|i| i.status.collect_with_dir())
            .unwrap_or_default();
        let state = match bounded(
            "inspect the container",
            self.container
                .engine
                .docker
                .inspect_container(&self.container.id, None),
        )
        .await
        {
            Ok(c) => c.state.unwrap_or_default(),
            // Removed by the engine already (AutoRemove): the init's report stands for it.
            Err(e) if e.status() == Some(404) && self.init.is_some() => Default::default(),
            Err(e) => return Err(e.into()),
        };
        let termination = match (said.status, state.exit_code.or(code)) {
            // The init's word: an exit of 137 is an exit, SIGKILL is a signal.
            (Some(t), _) => t,
            // The init itself was killed (the engine's SIGKILL after the grace) or is not
            // ralph's: the engine's status, 128 + n for signal n.
            (None, Some(code)) => termination(code),
            (None, None) => Termination::Signaled {
                signal: libc::SIGKILL,
            },
        };
        if ended_by == EndedBy::Exit && (said.oom_killed || state.oom_killed == Some(true)) {
            ended_by = EndedBy::MemoryLimit;
        }
        let mut violations = protect::check_after_run(&self.watch, &self.absent);
        violations.extend(self.snapshot.check_and_restore());
        // Nothing of the container is left: its report files are copied out of the tmpfs.
        let report_dir = self
            .report_dir
            .as_ref()
            .map(|r| Box::new(crate::report_dir::deliver(r, tmpfs)));
        Ok(ExecReport {
            outcome: ExecOutcome {
                termination,
                ended_by,
                wall,
                setup: Some(self.setup),
                resources: said.usage,
                leftovers_killed: 0,
                exec_error: said.exec_failed,
                violations,
                git: GitCheck::default(),
                report_dir,
                enforcement: self.enforcement.clone(),
            },
            stdout,
            stderr,
        })
    }
}

/// What the engine's wait for the container returned (`None`: its stream ended without a word).
type Waited = Option<Result<ContainerWaitResponse, bollard::errors::Error>>;

impl DockerRun {
    /// Waits until the container is no longer running: SIGTERM at the timeout or on `cancel`
    /// (once), SIGKILL a grace later. Returns what the wait said and why the run ended.
    async fn wait_for_stop(&self, cancel: &CancellationToken) -> (Waited, EndedBy) {
        let opts = WaitContainerOptions {
            condition: "not-running".into(),
        };
        let mut waiting = self
            .container
            .engine
            .docker
            .wait_container(&self.container.id, Some(opts));
        let deadline = self
            .timeout
            .map(|t| tokio::time::Instant::from_std(self.started) + t);
        let mut ended_by = EndedBy::Exit;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let waited = loop {
            let timeout = async {
                match deadline {
                    Some(d) if ended_by == EndedBy::Exit => tokio::time::sleep_until(d).await,
                    _ => std::future::pending().await,
                }
            };
            let escalate = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = waiting.next() => break r,
                () = timeout => {
                    ended_by = EndedBy::Timeout;
                    self.container.kill("SIGTERM").await;
                    kill_at = Some(tokio::time::Instant::now() + self.grace);
                }
                () = cancel.cancelled(), if ended_by == EndedBy::Exit => {
                    ended_by = EndedBy::Cancel;
                    self.container.kill("SIGTERM").await;
                    kill_at = Some(tokio::time::Instant::now() + self.grace);
                }
                () = escalate => {
                    self.container.kill("SIGKILL").await;
                    kill_at = None;
                }
            }
        };
        (waited, ended_by)
    }

    /// The container's exit code as the wait reported it; `None` when the engine removed it
    /// before the wait was heard and ralph's init reports instead.
    fn exit_code(&self, waited: Waited) -> Result<Option<i64>, SandboxError> {
        match waited {
            Some(Ok(r)) => Ok(Some(r.status_code)),
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                Ok(Some(code))
            }
            // Stopped and removed by the engine (AutoRemove) before the wait was heard: the
            // init's report says how the command ended.
            Some(Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404,
                ..
            })) if self.init.is_some() => Ok(None),
            Some(Err(e)) => Err(EngineError::Request {
                action: "wait for the container",
                source: e,
            }
            .into()),
            None => Err(SandboxError::Engine {
                message: "the wait for the container ended without a status".into(),
            }),
        }
    }

    /// The captured output, once the pump drained it (within [`DRAIN_LIMIT`]; past it the
    /// capture is marked undrained, never silently empty).
    async fn drain_output(&mut self) -> Result<(CaptureSummary, CaptureSummary), SandboxError> {
        match tokio::time::timeout(DRAIN_LIMIT, &mut self.pump).await {
            Ok(Ok(Ok(s))) => Ok(s),
            Ok(Ok(Err(e))) => Err(SandboxError::Engine {
                message: format!("failed to capture output: {e}"),
            }),
            Ok(Err(e)) => Err(SandboxError::Engine {
                message: format!("output capture task failed: {e}"),
            }),
            Err(_) => {
                self.pump.abort();
                // Said, never silently empty: the runner marks the capture and its message.
                let undrained = CaptureSummary {
                    undrained: true,
                    ..CaptureSummary::default()
                };
                Ok((undrained.clone(), undrained))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_statuses_map_like_a_shell() {
        assert_eq!(termination(0), Termination::Exited { code: 0 });
        assert_eq!(termination(42), Termination::Exited { code: 42 });
        assert_eq!(termination(127), Termination::Exited { code: 127 });
        assert_eq!(termination(128), Termination::Exited { code: 128 });
        assert_eq!(termination(137), Termination::Signaled { signal: 9 });
        assert_eq!(termination(143), Termination::Signaled { signal: 15 });
        assert_eq!(termination(255), Termination::Exited { code: 255 });
    }
}
