//! The interface every backend implements, object-safe so a caller can hold any of them (or a
//! test's fake, [`crate::testing`]) as `dyn` [`Sandbox`]: check a request up front, say what a
//! run would see of the host, spawn a command from an [`ExecSpec`] with its stdin and output
//! sinks, then wait for it (or cancel it) and get an [`ExecReport`].

use std::future::Future;
use std::path::Path;
use std::pin::Pin;

use tokio_util::sync::CancellationToken;

use crate::capture::OutputSink;
use crate::error::SandboxError;
use crate::mode::BackendKind;
use crate::outcome::ExecReport;
use crate::spec::{ExecSpec, SandboxRequest};

/// The caller's side of a run's standard streams.
pub struct ExecIo {
    /// Bytes written to the command's stdin (then closed); used with `StdinMode::Piped`.
    pub stdin: Option<Vec<u8>>,
    /// Receives standard output.
    pub stdout: Box<dyn OutputSink>,
    /// Receives standard error (unused when stderr is merged into stdout).
    pub stderr: Box<dyn OutputSink>,
}

impl std::fmt::Debug for ExecIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecIo")
            .field("stdin_bytes", &self.stdin.as_ref().map(Vec::len))
            .finish_non_exhaustive()
    }
}

/// What [`Sandbox::spawn`] returns: the run once it started.
pub type SpawnFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Box<dyn Running>, SandboxError>> + Send + 'a>>;

/// What [`Sandbox::settle`] returns.
pub type SettleFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// What [`Running::wait`] returns: the run's report once it ended.
pub type WaitFuture = Pin<Box<dyn Future<Output = Result<ExecReport, SandboxError>> + Send>>;

/// A way of running commands in isolation.
pub trait Sandbox: Send + Sync + std::fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Checks up front, without starting anything, that `req` can be enforced here. Fails
    /// closed, as [`Sandbox::spawn`] would: [`SandboxError::Unavailable`] when a requested
    /// restriction cannot be enforced, [`SandboxError::InvalidRequest`] when the request (or
    /// its mode's policy) is wrong. What only a run can find out (e.g. the container engine
    /// itself) is checked by the run.
    fn preflight(&self, req: &SandboxRequest) -> Result<(), SandboxError>;

    /// Whether a run of `req` sees `path` (absolute, as the host names it) of the host's
    /// filesystem, under the policy of `req`'s mode; [`SandboxError::InvalidRequest`] when that
    /// policy cannot be had.
    fn can_see(&self, req: &SandboxRequest, path: &Path) -> Result<bool, SandboxError>;

    /// Starts `spec`. Fails closed: if any requested restriction cannot be enforced, nothing runs
    /// and the error is [`SandboxError::Unavailable`].
    fn spawn<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a>;

    /// A run with this kill grace is coming: a backend that starts a process of its own per run
    /// may start it now, ahead ([`crate::native::standby`]). Nothing of any run starts; a
    /// failure is not reported (the run starts its own).
    fn prepare(&self, kill_grace: std::time::Duration) {
        let _ = kill_grace;
    }

    /// The run last announced with [`Sandbox::prepare`] will not come after all: a process
    /// started ahead for it is stopped (killed, reaped), one still being started as soon as it
    /// is, so that an idle runner keeps none. No run is affected: one that finds none starts its
    /// own.
    fn discard(&self) {}

    /// Resolves once what [`Sandbox::prepare`] started for the coming run is ready (or given
    /// up, within a bound of the backend's), so that a spawn then hands that run its process
    /// without waiting; at once when nothing is being started. The engine awaits it before it
    /// commits a run's start beside a held spawn: the commit blocks its thread, and a spawn that
    /// waited for its process meanwhile would send its order only after the commit's flush.
    fn settle(&self) -> SettleFuture<'_> {
        Box::pin(std::future::ready(()))
    }

    /// Whether [`Sandbox::spawn_held`] is supported.
    fn holds(&self) -> bool {
        false
    }

    /// Starts `spec` as [`Sandbox::spawn`] does, but the command itself is held before its
    /// `execve` until [`Running::release`]: the sandbox is set up meanwhile (how a runner
    /// overlaps the set-up with the durable record of the start). A run waited for without
    /// being released ends as [`SandboxError::Unavailable`] with nothing of the command run.
    /// A backend that cannot hold refuses ([`Sandbox::holds`] says so up front).
    fn spawn_held<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a> {
        let _ = (spec, io);
        Box::pin(async move {
            Err(SandboxError::unavailable(
                "process",
                format!("the {} backend cannot hold a command", self.kind()),
            ))
        })
    }
}

/// A command running under a [`Sandbox`].
pub trait Running: Send + std::fmt::Debug {
    /// The host pid of the process that supervises the run, when there is one.
    fn pid(&self) -> Option<u32>;

    /// The gateway listeners of a [`crate::Network::Gateway`] run, one per requested port
    /// ([`crate::SandboxRequest::gateway_ports`]), in the order requested; each time after the
    /// first (and for every other run) empty.
    ///
    /// Each is a TCP socket bound to `127.0.0.2:PORT` ([`crate::spec::GATEWAY_HOST`]) *inside
    /// the run's network namespace*, already listening (backlog at least 128), close-on-exec
    /// and non-blocking (ready for `tokio::net::TcpListener::from_std`). The caller accepts on
    /// it from the host: every connection the command makes to `127.0.0.2:PORT` arrives there,
    /// and nothing else of the host is reachable from inside. A listener keeps the
    /// (loopback-only) namespace alive: drop it when the run is over.
    fn take_gateway_listeners(&mut self) -> Vec<(u16, std::net::TcpListener)> {
        Vec::new()
    }

    /// Lets the command of a held run ([`Sandbox::spawn_held`]) go; nothing for any other run.
    fn release(&mut self) {}

    /// Waits for the end. Cancelling `cancel` stops the whole tree (TERM, grace, KILL).
    fn wait(self: Box<Self>, cancel: CancellationToken) -> WaitFuture;
}
