//! The backends a job can ask for, behind one enum so the loop does not care which runs it.

use std::path::PathBuf;

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
}

/// A run in progress on some backend.
#[derive(Debug)]
pub enum Run {
    /// On the native backend.
    Native(NativeRun),
}

impl Backends {
    /// Backends whose native helper is `helper_exe` (the `ralph` binary), enforcing `policies`.
    pub fn new(helper_exe: impl Into<PathBuf>, policies: PolicySet) -> Self {
        Self {
            native: NativeBackend::new(helper_exe, policies),
        }
    }

    /// The native backend.
    pub fn native(&self) -> &NativeBackend {
        &self.native
    }

    /// Fails closed when `kind` cannot enforce `req` on this host.
    pub fn preflight(&self, kind: BackendKind, req: &SandboxRequest) -> Result<(), SandboxError> {
        match kind {
            BackendKind::Native => self.native.preflight(req),
            BackendKind::Docker => Err(SandboxError::unavailable(
                "the docker backend",
                "this build does not include the docker backend yet",
            )),
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
            BackendKind::Docker => Err(SandboxError::unavailable(
                "the docker backend",
                "this build does not include the docker backend yet",
            )),
        }
    }
}

impl Run {
    /// Host pid of the supervising process.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Run::Native(r) => r.pid(),
        }
    }

    /// Waits for the end; `cancel` stops the whole tree.
    pub async fn wait(self, cancel: CancellationToken) -> Result<ExecReport, SandboxError> {
        match self {
            Run::Native(r) => r.wait(cancel).await,
        }
    }
}
