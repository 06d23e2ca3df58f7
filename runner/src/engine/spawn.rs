//! The seam between the loop and the processes it starts: an agent attempt or a verify command
//! is started through a [`Spawner`], so the loop's orderings (retries, budget, deadline,
//! verify) can be driven by a scripted fake in tests. [`SandboxSpawner`] is the production
//! implementation over the sandbox [`Backends`].

use futures_util::future::BoxFuture;
use ralph_sandbox::{BackendKind, ExecIo, ExecSpec, SandboxError, SandboxRequest};

use super::backends::Backends;

/// A started process: the sandbox's own run.
pub(crate) use ralph_sandbox::Running as Spawned;

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
        Box::pin(self.0.spawn(kind, spec, io))
    }
}
