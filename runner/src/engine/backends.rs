//! The backends a job can ask for, so the loop does not care which runs it.

use std::path::PathBuf;
use std::sync::Arc;

use ralph_sandbox::docker::DockerBackend;
use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    BackendKind, ExecIo, ExecSpec, Running, Sandbox, SandboxError, SandboxRequest,
};

/// Every backend this runner has.
#[derive(Clone, Debug)]
pub struct Backends {
    native: NativeBackend,
    docker: DockerBackend,
    /// This executable's real path (what a round runs for the built-in agent).
    self_exe: PathBuf,
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
    ) -> Result<Box<dyn Running>, SandboxError> {
        match kind {
            BackendKind::Native => self.native.spawn(spec, io).await,
            BackendKind::Docker => self.docker.spawn(spec, io).await,
        }
    }
}
