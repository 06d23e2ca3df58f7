//! The seam between the loop and the processes it starts: an agent attempt or a verify command
//! is started through a [`Spawner`], so the loop's orderings (retries, budget, deadline,
//! verify) can be driven by a scripted fake in tests. [`SandboxSpawner`] is the production
//! implementation over the sandbox [`Backends`].

use std::net::TcpListener;

use futures_util::future::BoxFuture;
use ralph_sandbox::{BackendKind, ExecIo, ExecReport, ExecSpec, SandboxError, SandboxRequest};
use tokio_util::sync::CancellationToken;

use super::backends::{Backends, Run};

/// Starts processes in the sandbox: the agent of an attempt and the verify command.
pub(crate) trait Spawner: Send + Sync {
    /// Fails closed when `kind` cannot enforce `req` on this host.
    fn preflight(&self, kind: BackendKind, req: &SandboxRequest) -> Result<(), SandboxError>;

    /// Whether the program `command` starts with can run in the sandbox of `spec` (native
    /// backend; [`super::command_check`]); `what` names the command in the message.
    fn program_visible(
        &self,
        what: &str,
        command: &str,
        spec: &crate::job::JobSpec,
        env: &super::env::RunnerEnv,
    ) -> Result<(), String>;

    /// Starts `spec` on `kind`, its output going to `io`.
    fn spawn<'a>(
        &'a self,
        kind: BackendKind,
        spec: &'a ExecSpec,
        io: ExecIo,
    ) -> BoxFuture<'a, Result<Box<dyn Spawned>, SandboxError>>;
}

/// A started process.
pub(crate) trait Spawned: Send {
    /// Host pid of the supervising process, if any.
    fn pid(&self) -> Option<u32>;
    /// The gateway listeners the sandbox created for the run.
    fn take_gateway_listeners(&mut self) -> Vec<(u16, TcpListener)>;
    /// Waits for the end; `cancel` stops the whole tree.
    fn wait(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ExecReport, SandboxError>>;
}

/// The production spawner: today's sandbox backends.
#[derive(Clone, Debug)]
pub(crate) struct SandboxSpawner(pub(crate) Backends);

impl Spawner for SandboxSpawner {
    fn preflight(&self, kind: BackendKind, req: &SandboxRequest) -> Result<(), SandboxError> {
        self.0.preflight(kind, req)
    }

    fn program_visible(
        &self,
        what: &str,
        command: &str,
        spec: &crate::job::JobSpec,
        env: &super::env::RunnerEnv,
    ) -> Result<(), String> {
        super::command_check::command_visible(what, command, spec, env, &self.0)
    }

    fn spawn<'a>(
        &'a self,
        kind: BackendKind,
        spec: &'a ExecSpec,
        io: ExecIo,
    ) -> BoxFuture<'a, Result<Box<dyn Spawned>, SandboxError>> {
        Box::pin(async move {
            let run = self.0.spawn(kind, spec, io).await?;
            Ok(Box::new(run) as Box<dyn Spawned>)
        })
    }
}

impl Spawned for Run {
    fn pid(&self) -> Option<u32> {
        Run::pid(self)
    }

    fn take_gateway_listeners(&mut self) -> Vec<(u16, TcpListener)> {
        Run::take_gateway_listeners(self)
    }

    fn wait(
        self: Box<Self>,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<ExecReport, SandboxError>> {
        Box::pin(Run::wait(*self, cancel))
    }
}
