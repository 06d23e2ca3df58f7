//! The sandboxes a job can ask for, one per backend kind, each behind
//! [`ralph_sandbox::Sandbox`] so the loop does not care which runs it (and its tests put a
//! recording fake in their place), with the policies they enforce.

use std::path::PathBuf;
use std::sync::Arc;

use ralph_sandbox::docker::DockerBackend;
use ralph_sandbox::native::{NativeBackend, standby};
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{BackendKind, Sandbox};

/// Every sandbox this runner has.
#[derive(Clone, Debug)]
pub struct Sandboxes {
    native: Arc<dyn Sandbox>,
    docker: Arc<dyn Sandbox>,
    /// The policies both enforce.
    policies: Arc<PolicySet>,
    /// This executable's real path (what a round runs for the built-in agent).
    self_exe: PathBuf,
}

impl Sandboxes {
    /// Sandboxes whose native helper and container init is `helper_exe` (the static `ralph`
    /// binary), enforcing `policies`.
    /// The docker backend removes this host's leftover containers (of runners that are gone)
    /// when it starts its first container.
    pub fn new(helper_exe: impl Into<PathBuf>, policies: PolicySet) -> Self {
        Self::with_native_standby(helper_exe, policies, None)
    }

    /// [`Sandboxes::new`], the native backend's standby being `standby`'s when given (a helper
    /// started before the backend was made: [`standby::Slot::start_early`]).
    pub fn with_native_standby(
        helper_exe: impl Into<PathBuf>,
        policies: PolicySet,
        standby: Option<Arc<standby::Slot>>,
    ) -> Self {
        let policies = Arc::new(policies);
        let helper_exe = helper_exe.into();
        let self_exe = std::fs::canonicalize(&helper_exe).unwrap_or_else(|_| helper_exe.clone());
        let native = NativeBackend::with_shared_policies(helper_exe.clone(), policies.clone());
        let native = match standby {
            Some(slot) => native.with_standby(slot),
            None => native,
        };
        Self {
            self_exe: self_exe.clone(),
            native: Arc::new(native),
            // The same static executable is the containers' init, by its real path (the engine
            // resolves a mount's source itself: `/proc/self/exe` would be its own).
            docker: Arc::new(
                DockerBackend::new(policies.clone())
                    .reaping_leftovers()
                    .with_init_program(self_exe),
            ),
            policies,
        }
    }

    /// The sandbox of `kind`.
    pub fn get(&self, kind: BackendKind) -> &dyn Sandbox {
        match kind {
            BackendKind::Native => self.native.as_ref(),
            BackendKind::Docker => self.docker.as_ref(),
        }
    }

    /// The policies in force.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
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

    /// `sandbox` in place of every kind's (tests drive the loop with a fake); the policies
    /// and this executable stay.
    #[cfg(test)]
    pub(crate) fn replaced_by(mut self, sandbox: Arc<dyn Sandbox>) -> Self {
        self.native = sandbox.clone();
        self.docker = sandbox;
        self
    }
}
