//! The native backend: the runner starts a helper (its own executable with [`HELPER_ARG`]) that
//! sets the process up and supervises it; the runner streams output and waits.
//!
//! ```text
//! runner (tokio) ──posix_spawn──▶ helper = supervisor (single-threaded; user ns, cgroups, CLONE_NEWPID)
//!    │  stdin: prompt            │ fork
//!    │  stdout/stderr ◀──────────┤──▶ init, pid 1 (mount/net/ipc ns, mounts, loopback; reaps)
//!    │  SIGTERM = cancel         │      │ fork
//!    │                           │      └─▶ command (setsid, rlimits, caps dropped, no_new_privs,
//!    │                           │             Landlock, seccomp, close fds, execve) + its tree
//!    └─ reads result.json ◀──────┘ writes result.json, exits
//! ```
//!
//! The helper is normally started ahead, between rounds ([`standby`]): the round then hands it
//! its spec and descriptors in one message instead of waiting for its `execve`.
//!
//! With `--network gateway` and ports, `spawn` also hands the helper one end of a socketpair;
//! the init, once loopback is up, makes a listener on `127.0.0.2:PORT` (`spec::GATEWAY_HOST`)
//! per port in the run's network namespace and sends them back on it before the command exists ([`gateway`]), and
//! `spawn` returns only once they arrived ([`crate::Running::take_gateway_listeners`]).

pub mod caps;
pub mod cgroup;
pub mod cgroup_owner;
pub mod child;
pub mod gateway;
pub mod handback;
pub mod hold;
pub mod idmap;
pub mod inherit;
pub mod init;
pub mod landlock;
pub mod late_masks;
pub mod leftovers;
pub mod mounts;
pub mod net;
pub mod ns;
pub mod ns_holder;
pub mod plan;
pub mod protocol;
pub mod seccomp;
pub mod socket_walk;
pub mod spawn;
pub mod spread;
pub mod standby;
pub mod step;
pub mod supervisor;
pub mod tree;
pub mod vfork;
pub mod zygote;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backend::{ExecIo, Running, Sandbox, SpawnFuture, WaitFuture};
use crate::capture::OutputSink;
use crate::error::SandboxError;
use crate::host::Host;
use crate::mode::BackendKind;
use crate::outcome::{CaptureSummary, ExecReport};
use crate::plan::SandboxPlan;
use crate::policy::PolicySet;
use crate::spec::{ExecSpec, SandboxRequest, StdinMode};
pub use protocol::{HELPER_ARG, HelperResult, HelperSpec, SPEC_ENV};
use std::sync::Arc;

/// Extra time the runner gives the helper beyond timeout + grace before killing it outright.
const HELPER_BACKSTOP: Duration = Duration::from_secs(10);

/// How long a round waits for a standby helper being started (normally well under a
/// millisecond: its `posix_spawn` returns once it is exec'd) before it starts its own.
const STANDBY_WAIT: Duration = Duration::from_millis(200);

/// How long output readers may run on after the helper exited (the tree is dead by then).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);

/// How long `spawn` waits for the gateway listeners (`--network gateway`): the helper's whole
/// set-up up to the init's network namespace, normally milliseconds.
const GATEWAY_HANDOVER_LIMIT: Duration = Duration::from_secs(60);

/// Runs commands through the native helper.
#[derive(Clone, Debug)]
pub struct NativeBackend {
    helper_exe: PathBuf,
    policies: Arc<PolicySet>,
    /// The helper started ahead for the next round ([`standby`]); killed when the last clone of
    /// the backend goes.
    standby: Arc<standby::Slot>,
}

impl NativeBackend {
    /// A backend that starts `helper_exe __sandbox-helper` for each run and enforces `policies`.
    /// Pass the `ralph` executable (`/proc/self/exe` keeps working even if the file is replaced).
    pub fn new(helper_exe: impl Into<PathBuf>, policies: PolicySet) -> Self {
        Self::with_shared_policies(helper_exe, Arc::new(policies))
    }

    /// Like [`NativeBackend::new`], with policies shared with another backend.
    pub fn with_shared_policies(helper_exe: impl Into<PathBuf>, policies: Arc<PolicySet>) -> Self {
        Self {
            helper_exe: helper_exe.into(),
            policies,
            standby: Arc::new(standby::Slot::default()),
        }
    }

    /// This backend with `slot` as its standby's (one started before the backend was made:
    /// [`standby::Slot::start_early`]).
    pub fn with_standby(mut self, slot: Arc<standby::Slot>) -> Self {
        self.standby = slot;
        self
    }

    /// Starts a helper ahead for the next round whose kill grace is `grace`, unless one waits
    /// or is being started already. A failure is not an error: that round starts its own helper.
    pub fn prestart(&self, grace: Duration) {
        if let Some(begun) = self.standby.begin() {
            begun.run(|| self.standby.start_standby(&self.helper_exe, grace));
        }
    }

    /// [`Self::prestart`] on a blocking thread of the current runtime (if any): `posix_spawn`
    /// suspends its caller until the child's `execve`, which must not hold up a runtime thread
    /// (the round's durable record, its output) on a busy host. The start is marked under way
    /// here, before that thread runs ([`standby::Slot::begin`]), so the next round waits for it.
    fn prestart_in_background(&self, grace: Duration) {
        let Some(begun) = self.standby.begin() else {
            return;
        };
        let exe = self.helper_exe.clone();
        let slot = self.standby.clone();
        let start = move || begun.run(|| slot.start_standby(&exe, grace));
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn_blocking(start);
            }
            Err(_) => start(),
        }
    }

    /// The pid of the helper waiting for the next round, if one does.
    pub fn standby_pid(&self) -> Option<u32> {
        self.standby.waiting_pid()
    }

    /// The pid of the zygote its standbys are forked from ([`zygote`]), if one runs.
    pub fn zygote_pid(&self) -> Option<u32> {
        self.standby.zygote_pid()
    }

    /// What this host can enforce (probed once per process: [`crate::host::probed`]).
    pub fn host(&self) -> &Host {
        crate::host::probed()
    }

    /// The policies in force.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// Resolves the plan for `req`, failing closed when it cannot be enforced here.
    pub fn plan(&self, req: &SandboxRequest) -> Result<SandboxPlan, SandboxError> {
        self.plan_seen(&crate::plan::probe::HostFs, req)
    }

    /// [`Self::plan`] with the host's filesystem seen through `probe`.
    fn plan_seen(
        &self,
        probe: &dyn crate::plan::probe::FsProbe,
        req: &SandboxRequest,
    ) -> Result<SandboxPlan, SandboxError> {
        let policy = self.policies.for_request(req.mode)?;
        plan::resolve_with(probe, policy, req, self.host())
    }
}

/// Shape checks every backend applies.
pub fn validate(spec: &ExecSpec) -> Result<(), SandboxError> {
    if spec.argv.is_empty() {
        return Err(SandboxError::invalid("argv", "the command is empty"));
    }
    if !spec.cwd.is_absolute() {
        return Err(SandboxError::invalid(
            "cwd",
            format!("`{}` is not an absolute path", spec.cwd.display()),
        ));
    }
    if !spec.sandbox.workspace.is_absolute() {
        return Err(SandboxError::invalid(
            "workspace",
            format!(
                "`{}` is not an absolute path",
                spec.sandbox.workspace.display()
            ),
        ));
    }
    Ok(())
}

/// A run of the native backend in progress.
#[derive(Debug)]
pub struct NativeRun {
    child: spawn::HelperChild,
    pid: u32,
    result_path: PathBuf,
    timeout: Option<Duration>,
    grace: Duration,
    readers: Vec<JoinHandle<std::io::Result<CaptureSummary>>>,
    stdin_writer: Option<JoinHandle<()>>,
    merged: bool,
    gateway: Vec<(u16, std::net::TcpListener)>,
    /// A held run's release, until sent ([`hold`]).
    hold: Option<OwnedFd>,
    /// The runner's end of the run's hand-back, on which the helper sends its view back
    /// ([`handback`]): released once the helper exited.
    handback: Option<OwnedFd>,
}

/// A run dropped before its end was waited for: its socket goes off this thread too (a view in
/// flight on it would keep the runtime's thread for its teardown).
impl Drop for NativeRun {
    fn drop(&mut self) {
        if let Some(h) = self.handback.take() {
            handback::release(h);
        }
    }
}

impl Sandbox for NativeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Native
    }

    /// Resolves the plan for `req` on this host (fails closed), without starting anything.
    fn preflight(&self, req: &SandboxRequest) -> Result<(), SandboxError> {
        self.plan_seen(&crate::plan::probe::PreflightFs, req)
            .map(|_| ())
    }

    /// As the native plan shows the host ([`crate::plan::can_see`]).
    fn can_see(&self, req: &SandboxRequest, path: &Path) -> Result<bool, SandboxError> {
        let policy = self.policies.for_request(req.mode)?;
        Ok(crate::plan::can_see(policy, req, path))
    }

    fn spawn<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a> {
        Box::pin(async move {
            let run = self.start(spec, io, false).await?;
            Ok(Box::new(run) as Box<dyn Running>)
        })
    }

    fn prepare(&self, kill_grace: Duration) {
        self.prestart_in_background(kill_grace);
    }

    fn discard(&self) {
        self.standby.discard();
    }

    fn settle(&self) -> crate::backend::SettleFuture<'_> {
        Box::pin(self.standby.settled(STANDBY_WAIT))
    }

    fn holds(&self) -> bool {
        true
    }

    fn spawn_held<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a> {
        Box::pin(async move {
            let run = self.start(spec, io, true).await?;
            Ok(Box::new(run) as Box<dyn Running>)
        })
    }
}

impl NativeBackend {
    /// Starts `spec` ([`Sandbox::spawn`], as the concrete run); `held`: its command waits for
    /// [`Running::release`] ([`hold`]).
    async fn start(
        &self,
        spec: &ExecSpec,
        io: ExecIo,
        held: bool,
    ) -> Result<NativeRun, SandboxError> {
        validate(spec)?;
        let plan = self.plan(&spec.sandbox)?;
        std::fs::create_dir_all(&spec.control_dir).map_err(|source| SandboxError::Io {
            action: "create",
            path: spec.control_dir.clone(),
            source,
        })?;
        let result_path = spec.control_dir.join(protocol::RESULT_FILE);
        match std::fs::remove_file(&result_path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(SandboxError::Io {
                    action: "remove",
                    path: result_path,
                    source,
                });
            }
        }
        // `--network gateway` with ports: a hand-over whose helper end the helper inherits.
        let gateway_ports = plan.gateway_ports.clone();
        let handover = if gateway_ports.is_empty() {
            None
        } else {
            Some(gateway::channel().map_err(|e| {
                SandboxError::unavailable(
                    step::restriction::GATEWAY,
                    format!("failed to create the hand-over socketpair: {e}"),
                )
            })?)
        };
        let hold = if held {
            Some(hold::channel().map_err(|e| {
                SandboxError::unavailable(
                    step::restriction::PROCESS,
                    format!("failed to create the pipe that holds the command: {e}"),
                )
            })?)
        } else {
            None
        };
        // A run with a view of its own sends it back to be torn down here, off the round's path;
        // without the socket (it could not be made) the view goes as it always could.
        let handback = (plan.pid_namespace && plan.root.is_some())
            .then(|| handback::channel().ok())
            .flatten();
        let helper = HelperSpec {
            exec: spec.clone(),
            plan,
            result_path: result_path.clone(),
            parent_pid: Some(i32::try_from(std::process::id()).unwrap_or(i32::MAX)),
            gateway_fd: handover.as_ref().map(|(_, h)| h.as_raw_fd()),
            hold_fd: hold.as_ref().map(|(_, h)| h.as_raw_fd()),
            handback_fd: handback.as_ref().map(|(_, h)| h.as_raw_fd()),
        };
        let encoded = serde_json::to_string(&helper).map_err(|e| SandboxError::Helper {
            message: format!("failed to encode the spec: {e}"),
        })?;
        if encoded.len() > protocol::MAX_SPEC_BYTES {
            return Err(SandboxError::invalid(
                "argv/env",
                format!(
                    "the request is {} bytes encoded, over the limit of {}",
                    encoded.len(),
                    protocol::MAX_SPEC_BYTES
                ),
            ));
        }
        let stdin = match spec.stdin {
            StdinMode::Null => spawn::Stdin::Null,
            StdinMode::Piped => spawn::Stdin::Piped,
            StdinMode::Inherit => spawn::Stdin::Inherit,
        };
        // The helper started ahead, when one waits with this round's grace; else one of its own.
        let waiting = self
            .standby
            .take(STANDBY_WAIT)
            .await
            .filter(|s| s.fits(spec.kill_grace));
        let ordered = waiting.and_then(|s| {
            s.order(
                encoded.as_bytes(),
                stdin,
                handover.as_ref().map(|(_, h)| h.as_fd()),
                hold.as_ref().map(|(_, h)| h.as_fd()),
                handback.as_ref().map(|(_, h)| h.as_fd()),
            )
            .ok()
        });
        let started = match ordered {
            Some(started) => Ok(started),
            None => {
                let keep: Vec<i32> = handover
                    .iter()
                    .map(|(_, h)| h.as_raw_fd())
                    .chain(hold.iter().map(|(_, h)| h.as_raw_fd()))
                    .chain(handback.iter().map(|(_, h)| h.as_raw_fd()))
                    .collect();
                let mut env = std::ffi::OsString::from(format!("{SPEC_ENV}="));
                env.push(&encoded);
                spawn::start(&spawn::Spec {
                    program: &self.helper_exe,
                    args: standby::helper_args(spec.kill_grace),
                    env: vec![env],
                    stdin,
                    keep,
                })
            }
        };
        let spawned = started.and_then(spawn::Started::follow).map_err(|source| {
            SandboxError::SpawnHelper {
                exe: self.helper_exe.clone(),
                source,
            }
        })?;
        let spawn::Spawned {
            stdin: helper_stdin,
            stdout: helper_stdout,
            stderr: helper_stderr,
            child,
        } = spawned;
        let mut child = child;
        // The helper holds its ends now; ours must go, or end-of-file would never come.
        let handover = handover.map(|(runner_end, helper_end)| {
            drop(helper_end);
            runner_end
        });
        let hold = hold.map(|(runner_end, helper_end)| {
            drop(helper_end);
            runner_end
        });
        let handback = handback.map(|(runner_end, helper_end)| {
            drop(helper_end);
            runner_end
        });
        let pid = child.id();
        let stdin_writer = match (helper_stdin, io.stdin) {
            (Some(mut pipe), Some(bytes)) => Some(tokio::spawn(async move {
                // A command that does not read its stdin closes the pipe: that is fine.
                let _ = pipe.write_all(&bytes).await;
                let _ = pipe.shutdown().await;
            })),
            (Some(pipe), None) => {
                drop(pipe);
                None
            }
            (None, _) => None,
        };
        let readers = vec![
            tokio::spawn(pump(helper_stdout, io.stdout)),
            tokio::spawn(pump(helper_stderr, io.stderr)),
        ];
        let gateway = match handover {
            None => Vec::new(),
            Some(end) => {
                match receive_listeners(end, gateway_ports, &mut child, &result_path).await {
                    Ok(listeners) => listeners,
                    Err(e) => {
                        // Fail closed: nothing of the run goes on without its gateway.
                        let _ = child.start_kill();
                        let _ = tokio::time::timeout(HELPER_BACKSTOP, child.wait()).await;
                        if let Some(w) = stdin_writer {
                            w.abort();
                        }
                        for r in readers {
                            r.abort();
                        }
                        return Err(e);
                    }
                }
            }
        };
        Ok(NativeRun {
            child,
            pid,
            result_path,
            timeout: spec.timeout,
            grace: spec.kill_grace,
            readers,
            stdin_writer,
            merged: spec.stderr == crate::spec::StderrMode::MergedIntoStdout,
            gateway,
            hold,
            handback,
        })
    }
}

/// Waits for the sandbox's init to hand over the gateway listeners. When it closes the hand-over
/// without them, the helper's own result says why (read once it has exited); every failure is
/// [`SandboxError::Unavailable`].
async fn receive_listeners(
    end: std::os::fd::OwnedFd,
    ports: Vec<u16>,
    child: &mut spawn::HelperChild,
    result_path: &Path,
) -> Result<Vec<(u16, std::net::TcpListener)>, SandboxError> {
    let gateway_unavailable =
        |reason: String| SandboxError::unavailable(step::restriction::GATEWAY, reason);
    let received =
        tokio::task::spawn_blocking(move || gateway::recv(&end, &ports, GATEWAY_HANDOVER_LIMIT))
            .await
            .map_err(|e| gateway_unavailable(format!("the hand-over task failed: {e}")))?;
    match received {
        Ok(listeners) => Ok(listeners),
        Err(gateway::RecvError::Closed) => {
            // The sandbox ended before the hand-over: its result names the step that failed.
            let status = match tokio::time::timeout(HELPER_BACKSTOP, child.wait()).await {
                Ok(Ok(status)) => status,
                Ok(Err(e)) => {
                    return Err(gateway_unavailable(format!(
                        "the gateway listeners were not handed over, and waiting for the helper failed: {e}"
                    )));
                }
                Err(_) => {
                    return Err(gateway_unavailable(
                        "the gateway listeners were not handed over, and the helper did not exit"
                            .into(),
                    ));
                }
            };
            match read_result(result_path, &status) {
                Ok(HelperResult::SetupFailed { failure }) => Err(SandboxError::Unavailable {
                    restriction: failure.restriction,
                    reason: format!("{} ({})", failure.reason, failure.step),
                }),
                Ok(HelperResult::Internal { message }) => Err(gateway_unavailable(format!(
                    "the sandbox helper failed before handing over the gateway listeners: {message}"
                ))),
                Ok(HelperResult::Ran { .. }) => Err(gateway_unavailable(
                    "the command ran, but the gateway listeners were never handed over".into(),
                )),
                Err(e) => Err(gateway_unavailable(format!(
                    "the sandbox ended before handing over the gateway listeners: {e}"
                ))),
            }
        }
        Err(e) => Err(gateway_unavailable(e.to_string())),
    }
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut sink: Box<dyn OutputSink>,
) -> std::io::Result<CaptureSummary> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        sink.write(&buf[..n])?;
    }
    sink.finish()
}

impl Running for NativeRun {
    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn take_gateway_listeners(&mut self) -> Vec<(u16, std::net::TcpListener)> {
        std::mem::take(&mut self.gateway)
    }

    fn release(&mut self) {
        if let Some(w) = self.hold.take() {
            hold::release(w);
        }
    }

    fn wait(self: Box<Self>, cancel: CancellationToken) -> WaitFuture {
        Box::pin(self.finish(cancel))
    }
}

impl NativeRun {
    /// Waits for the end ([`Running::wait`], on the concrete run).
    async fn finish(mut self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        // A held run waited for unreleased: its command never runs (the helper undoes the set-up).
        drop(self.hold.take());
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid).unwrap_or(0));
        let mut backstop = self
            .timeout
            .map(|t| tokio::time::Instant::now() + t + self.grace + HELPER_BACKSTOP);
        let mut cancel_sent = false;
        let status = loop {
            let sleep = async {
                match backstop {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                status = self.child.wait() => {
                    // The view the helper sent back (if it did) is torn down off the round's path.
                    if let Some(h) = self.handback.take() {
                        handback::release(h);
                    }
                    break status.map_err(|e| SandboxError::Helper { message: format!("failed to wait for the helper: {e}") })?;
                }
                () = cancel.cancelled(), if !cancel_sent => {
                    cancel_sent = true;
                    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                    backstop = Some(tokio::time::Instant::now() + self.grace + HELPER_BACKSTOP);
                }
                () = sleep => {
                    // The helper did not finish in time: kill it (its tree dies with it when it
                    // holds a pid namespace; otherwise its watchdog children see it gone).
                    let _ = self.child.start_kill();
                    backstop = None;
                }
            }
        };
        if let Some(w) = self.stdin_writer.take() {
            w.abort();
        }
        let mut captures = Vec::new();
        for r in self.readers.drain(..) {
            let summary = match tokio::time::timeout(DRAIN_LIMIT, r).await {
                Ok(Ok(Ok(s))) => s,
                Ok(Ok(Err(e))) => {
                    return Err(SandboxError::Helper {
                        message: format!("failed to capture output: {e}"),
                    });
                }
                Ok(Err(e)) => {
                    return Err(SandboxError::Helper {
                        message: format!("output capture task failed: {e}"),
                    });
                }
                // Said, never silently empty: the runner marks the capture and its message.
                Err(_) => CaptureSummary {
                    undrained: true,
                    ..CaptureSummary::default()
                },
            };
            captures.push(summary);
        }
        let mut captures = captures.into_iter();
        let stdout = captures.next().unwrap_or_default();
        let stderr = if self.merged {
            CaptureSummary::default()
        } else {
            captures.next().unwrap_or_default()
        };
        let result = read_result(&self.result_path, &status)?;
        match result {
            HelperResult::Ran { outcome } => Ok(ExecReport {
                outcome,
                stdout,
                stderr,
            }),
            HelperResult::SetupFailed { failure } => Err(SandboxError::Unavailable {
                restriction: failure.restriction,
                reason: format!("{} ({})", failure.reason, failure.step),
            }),
            HelperResult::Internal { message } => Err(SandboxError::Helper { message }),
        }
    }
}

fn read_result(
    path: &Path,
    status: &std::process::ExitStatus,
) -> Result<HelperResult, SandboxError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(SandboxError::HelperLost {
                status: status.to_string(),
            });
        }
        Err(e) => {
            return Err(SandboxError::BadResult {
                path: path.to_owned(),
                message: e.to_string(),
            });
        }
    };
    serde_json::from_slice(&bytes).map_err(|e| SandboxError::BadResult {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Entry point of the helper process (`ralph __sandbox-helper`). Call it first thing in `main`,
/// before any thread exists. Never returns.
pub fn helper_main() -> ! {
    let (spec, netns) = match std::env::var(protocol::STANDBY_ENV) {
        // Started ahead: its round comes on a socket, or the runner goes without one.
        Ok(fd) => match standby::adopt_orders(&fd) {
            Ok(orders) => wait_for_order(orders),
            Err(e) => (Err(e), None),
        },
        Err(_) => (
            std::env::var(SPEC_ENV)
                .map_err(|_| format!("{SPEC_ENV} is not set"))
                .and_then(|s| {
                    serde_json::from_str(&s).map_err(|e| format!("invalid {SPEC_ENV}: {e}"))
                }),
            None,
        ),
    };
    run_helper(spec, netns)
}

/// Entry point of the standbys' zygote (`ralph __sandbox-zygote`, [`zygote`]). Call it first
/// thing in `main`, before any thread exists. Never returns.
pub fn zygote_main() -> ! {
    match std::env::var(protocol::ZYGOTE_ENV) {
        Ok(fd) => zygote::serve(&fd),
        Err(_) => {
            eprintln!("ralph sandbox zygote: {} is not set", protocol::ZYGOTE_ENV);
            std::process::exit(70)
        }
    }
}

/// A standby forked by the zygote, its order socket in hand: waits for its order and runs it
/// as a helper started ahead does. Never returns.
fn standby_main(orders: std::os::fd::OwnedFd) -> ! {
    let (spec, netns) = wait_for_order(orders);
    run_helper(spec, netns)
}

/// A standby's wait for its one order on `orders` (as root, it makes its round's network
/// namespace meanwhile); exits quietly when the runner goes without one.
fn wait_for_order(
    orders: std::os::fd::OwnedFd,
) -> (Result<HelperSpec, String>, Option<net::Early>) {
    let netns = nix::unistd::geteuid().is_root().then(net::Early::start);
    match standby::receive_on(orders) {
        Ok(Some(spec)) => (Ok(spec), netns),
        Ok(None) => std::process::exit(0),
        Err(e) => (Err(e), netns),
    }
}

/// The helper's run of `spec` (or its report of why there is none).
fn run_helper(spec: Result<HelperSpec, String>, netns: Option<net::Early>) -> ! {
    let spec = match spec {
        Ok(s) => s,
        Err(message) => {
            eprintln!("ralph sandbox helper: {message}");
            std::process::exit(70);
        }
    };
    let gateway = match spec.gateway_fd.map(gateway::adopt_inherited).transpose() {
        Ok(g) => g,
        Err(reason) => {
            let result = HelperResult::SetupFailed {
                failure: protocol::SetupFailure {
                    restriction: step::restriction::GATEWAY.into(),
                    step: "gateway".into(),
                    reason: format!("the hand-over from the runner is unusable: {reason}"),
                },
            };
            // The runner reads the reason from the result (end-of-file on the hand-over).
            let code = match write_result(&spec.result_path, &result) {
                Ok(()) => 0,
                Err(_) => 70,
            };
            std::process::exit(code)
        }
    };
    let hold = match spec.hold_fd.map(hold::adopt_inherited).transpose() {
        Ok(h) => h,
        Err(reason) => {
            // Nothing may run that the runner cannot hold back.
            let result = HelperResult::SetupFailed {
                failure: protocol::SetupFailure {
                    restriction: step::restriction::PROCESS.into(),
                    step: "release".into(),
                    reason: format!("the runner's hold is unusable: {reason}"),
                },
            };
            let code = match write_result(&spec.result_path, &result) {
                Ok(()) => 0,
                Err(_) => 70,
            };
            std::process::exit(code)
        }
    };
    // Without its hand-back the view goes with its last process, as it always could: never a
    // reason to fail the run.
    let handback = spec
        .handback_fd
        .and_then(|fd| handback::adopt_inherited(fd).ok());
    let from_runner = supervisor::FromRunner {
        gateway,
        hold,
        netns,
        handback,
    };
    let result = supervisor::supervise(&spec.exec, &spec.plan, spec.parent_pid, from_runner);
    let code = match write_result(&spec.result_path, &result) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "ralph sandbox helper: failed to write `{}`: {e}",
                spec.result_path.display()
            );
            70
        }
    };
    std::process::exit(code)
}

fn write_result(path: &Path, result: &HelperResult) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let bytes = serde_json::to_vec(result).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Runs `spec` in this process (for `ralph sandbox exec`): output goes straight to this
/// process's stdout/stderr. Call only while the process is single-threaded.
pub fn exec_inline(
    backend: &NativeBackend,
    spec: &ExecSpec,
) -> Result<crate::outcome::ExecOutcome, SandboxError> {
    validate(spec)?;
    let plan = backend.plan(&spec.sandbox)?;
    std::fs::create_dir_all(&spec.control_dir).map_err(|source| SandboxError::Io {
        action: "create",
        path: spec.control_dir.clone(),
        source,
    })?;
    if !plan.gateway_ports.is_empty() {
        return Err(SandboxError::unavailable(
            step::restriction::GATEWAY,
            "a run inside this process has no runner to serve the gateway listeners; start it \
             with NativeBackend::spawn",
        ));
    }
    match supervisor::supervise(spec, &plan, None, supervisor::FromRunner::default()) {
        HelperResult::Ran { outcome } => Ok(outcome),
        HelperResult::SetupFailed { failure } => Err(SandboxError::Unavailable {
            restriction: failure.restriction,
            reason: format!("{} ({})", failure.reason, failure.step),
        }),
        HelperResult::Internal { message } => Err(SandboxError::Helper { message }),
    }
}
