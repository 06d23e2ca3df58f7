//! The backends a job can ask for, behind one enum so the loop does not care which runs it.

use std::path::PathBuf;
use std::sync::Arc;

use ralph_sandbox::docker::{DockerBackend, DockerRun};
use ralph_sandbox::native::{NativeBackend, NativeRun};
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    Backend, BackendKind, ExecIo, ExecReport, ExecSpec, Running, SandboxError, SandboxRequest,
};
use tokio_util::sync::CancellationToken;

/// Every backend this runner has.
#[derive(Clone, Debug)]
pub struct Backends {
    native: NativeBackend,
    docker: DockerBackend,
    /// This executable's real path (what a round runs for the built-in agent).
    self_exe: PathBuf,
}

/// A run in progress on some backend.
#[derive(Debug)]
pub enum Run {
    /// On the native backend.
    Native(NativeRun),
    /// In a container.
    Docker(DockerRun),
}

impl Backends {
    /// Backends whose native helper and container init is `helper_exe` (the static `ralph`
    /// binary), enforcing `policies`.
    /// The docker backend removes this host's leftover containers (of runners that are gone)
    /// when it starts its first container.
    pub fn new(helper_exe: impl Into<PathBuf>, policies: PolicySet) -> Self {
        let policies = Arc::new(policies);
        let helper_exe = helper_exe.into();
        let self_exe = std::fs::canonicalize(&helper_exe).unwrap_or_else(|_| helper_exe.clone());
        Self {
            self_exe: self_exe.clone(),
            native: NativeBackend::with_shared_policies(helper_exe.clone(), policies.clone()),
            // The same static executable is the containers' init, by its real path (the engine
            // resolves a mount's source itself: `/proc/self/exe` would be its own).
            docker: DockerBackend::new(policies)
                .reaping_leftovers()
                .with_init_program(self_exe),
        }
    }

    /// Where a round of `kind` finds this `ralph` executable, and the host path to show it at
    /// (native: its real path, shown read-only; docker: the init mounted in every container).
    pub fn ralph_in_round(&self, kind: BackendKind) -> (String, Option<PathBuf>) {
        match kind {
            BackendKind::Native => (
                self.self_exe.display().to_string(),
                Some(self.self_exe.clone()),
            ),
            BackendKind::Docker => (ralph_sandbox::docker::init::INIT_PATH.to_owned(), None),
        }
    }

    /// The native backend.
    pub fn native(&self) -> &NativeBackend {
        &self.native
    }

    /// The docker backend.
    pub fn docker(&self) -> &DockerBackend {
        &self.docker
    }

    /// Fails closed when `kind` cannot enforce `req` on this host.
    pub fn preflight(&self, kind: BackendKind, req: &SandboxRequest) -> Result<(), SandboxError> {
        match kind {
            BackendKind::Native => self.native.preflight(req),
            BackendKind::Docker => self.docker.preflight(req),
        }
    }

    /// Starts `spec` on `kind`.
    pub async fn spawn(
        &self,
        kind: BackendKind,
        spec: &ExecSpec,
        io: ExecIo,
    ) -> Result<Run, SandboxError> {
        match kind {
            BackendKind::Native => Ok(Run::Native(self.native.spawn(spec, io).await?)),
            BackendKind::Docker => Ok(Run::Docker(self.docker.spawn(spec, io).await?)),
        }
    }
}

impl Run {
    /// Host pid of the supervising process (none for a container).
    pub fn pid(&self) -> Option<u32> {
        match self {
            Run::Native(r) => r.pid(),
            Run::Docker(r) => r.pid(),
        }
    }

    /// The gateway listeners the sandbox created inside the run's network namespace (see
    /// `ralph_sandbox::Running::take_gateway_listeners`).
    pub fn take_gateway_listeners(&mut self) -> Vec<(u16, std::net::TcpListener)> {
        match self {
            Run::Native(r) => r.take_gateway_listeners(),
            Run::Docker(r) => r.take_gateway_listeners(),
        }
    }

    /// Waits for the end; `cancel` stops the whole tree.
    pub async fn wait(self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        match self {
            Run::Native(r) => r.wait(cancel).await,
            Run::Docker(r) => r.wait(cancel).await,
        }
    }
}
