//! A failed setup step: which restriction could not be put in place, the syscall that failed,
//! and why. Each maps one libc/nix error to a specific, readable failure.

use serde::{Deserialize, Serialize};

/// A setup step that failed; nothing of the command ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    /// The restriction (e.g. "filesystem isolation (landlock)").
    pub restriction: String,
    /// The step, naming the syscall (e.g. "landlock_restrict_self").
    pub step: String,
    /// Why.
    pub reason: String,
    /// The errno, when a syscall failed.
    pub errno: Option<i32>,
}

impl StepFailure {
    /// A failure with a free-form reason.
    pub fn new(restriction: &str, step: &str, reason: impl Into<String>) -> Self {
        Self {
            restriction: restriction.to_owned(),
            step: step.to_owned(),
            reason: reason.into(),
            errno: None,
        }
    }

    /// A failed syscall reported by nix.
    pub fn nix(restriction: &str, step: &str, what: &str, err: nix::Error) -> Self {
        Self {
            restriction: restriction.to_owned(),
            step: step.to_owned(),
            reason: format!("failed to {what}: {} ({})", err.desc(), err),
            errno: Some(err as i32),
        }
    }

    /// A failed syscall reported as an `io::Error`.
    pub fn io(restriction: &str, step: &str, what: &str, err: &std::io::Error) -> Self {
        Self {
            restriction: restriction.to_owned(),
            step: step.to_owned(),
            reason: format!("failed to {what}: {err}"),
            errno: err.raw_os_error(),
        }
    }
}

/// The restriction names used in failures.
pub mod restriction {
    /// Namespaces.
    pub const NAMESPACES: &str = "namespaces";
    /// Mounts.
    pub const MOUNTS: &str = "the private filesystem view (mount namespace)";
    /// Network.
    pub const NETWORK: &str = "network isolation";
    /// The runner's gateway listeners inside the network namespace (`--network gateway`).
    pub const GATEWAY: &str = "network isolation (the runner's gateway)";
    /// Capabilities.
    pub const CAPABILITIES: &str = "dropping capabilities";
    /// Landlock.
    pub const LANDLOCK: &str = "filesystem isolation (landlock)";
    /// Seccomp.
    pub const SECCOMP: &str = "the syscall filter (seccomp)";
    /// Cgroups.
    pub const CGROUPS: &str = "resource limits (cgroups)";
    /// Rlimits.
    pub const RLIMITS: &str = "resource limits (rlimits)";
    /// Process setup.
    pub const PROCESS: &str = "process setup";
}
