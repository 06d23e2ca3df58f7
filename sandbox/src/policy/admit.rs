//! Admission: the refusals that are pure policy decisions and the same on every backend — a
//! mode's [`Policy`] against a job's [`SandboxRequest`], decided without looking at the host (no
//! I/O at all). Each backend's plan calls [`admit`] first and builds on what it returns; what a
//! refusal depends on the host for (a path that does not exist, a missing kernel feature) stays
//! in that backend's plan.

use std::path::Path;

use crate::error::SandboxError;
use crate::mode::{BackendKind, Network};
use crate::policy::Policy;
use crate::policy::network::{self, SocketFamily};
use crate::spec::SandboxRequest;

/// Size of each private HOME and TMPDIR tmpfs when neither the job nor the policy sets one.
pub const DEFAULT_SCRATCH_SIZE: u64 = 1 << 30;

/// What admission decided for a request the policy allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// The network of the run: the job's choice, else the policy's default.
    pub network: Network,
    /// The socket families that network allows; `None`: any
    /// ([`crate::policy::network::socket_families`]).
    pub socket_families: Option<&'static [SocketFamily]>,
    /// The size of each private HOME and TMPDIR tmpfs (the job's, else the policy's, else
    /// [`DEFAULT_SCRATCH_SIZE`]).
    pub scratch_size: u64,
}

/// Admits `req` under `policy` on `backend`, or refuses it: `--network full` where the mode does
/// not allow it, gateway ports that are not valid for the network, `--write` where the mode has
/// no extra writable directories, `--protect` without a filesystem sandbox, a report directory
/// that is not valid. The refusals come in this order.
pub fn admit(
    policy: &Policy,
    req: &SandboxRequest,
    backend: BackendKind,
) -> Result<Admitted, SandboxError> {
    let mode = req.mode;
    let fs = &policy.filesystem;
    let network = req.network.unwrap_or(policy.network.default);
    if network == Network::Full && !policy.network.allow_full {
        return Err(SandboxError::invalid(
            "network",
            format!("mode `{mode}` does not allow `--network full`"),
        ));
    }
    req.check_gateway_ports(network)?;
    // The backends differ here, deliberately kept: natively an unrestricted mode binds nothing
    // (the command has the host's own view, every `--write` tree already in it), so `--write` is
    // not refused there whatever `extra_write` says; docker binds each `--write` tree into the
    // container, so it holds every mode to `extra_write`.
    let write_checked = !fs.unrestricted || backend == BackendKind::Docker;
    if write_checked && !req.write.is_empty() && !fs.extra_write {
        return Err(SandboxError::invalid(
            "write",
            format!("mode `{mode}` does not allow extra writable directories"),
        ));
    }
    if fs.unrestricted && !req.protect.is_empty() {
        return Err(SandboxError::invalid(
            "protect",
            "protected paths need a filesystem sandbox; mode `full-access` has none",
        ));
    }
    if let Some(dir) = &req.private.report {
        dir.check()?;
    }
    Ok(Admitted {
        network,
        socket_families: network::socket_families(network),
        scratch_size: req
            .limits
            .tmp_bytes
            .or(policy.limits.tmp_size.map(|t| t.0))
            .unwrap_or(DEFAULT_SCRATCH_SIZE),
    })
}

/// The refusal of a plan that would show the runner's own state `state` inside the
/// sandbox-visible tree `tree` (both backends, whichever tree it is).
pub fn state_visible(state: &Path, tree: &Path) -> SandboxError {
    SandboxError::invalid(
        "state-dir",
        format!(
            "the runner's state `{}` lies inside the sandbox-visible path `{}`; move the state directory elsewhere",
            state.display(),
            tree.display()
        ),
    )
}

#[cfg(test)]
mod tests;
