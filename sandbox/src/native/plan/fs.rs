//! The filesystem of a native run: full-access keeps the host's view with what a default
//! `docker run` keeps from it; the other modes get a root of their own ([`super::root`]).

use std::path::PathBuf;

use super::{LandlockPlan, MountStep, RootPlan, root};
use crate::error::SandboxError;
use crate::host::Host;
use crate::identity::Ids;
use crate::native::socket_walk::SocketWalk;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::Guarded;
use crate::plan::probe::{FsProbe, Kind};
use crate::policy::admit::Admitted;
use crate::policy::{Policy, kernel_paths};
use crate::spec::SandboxRequest;

/// The filesystem part of a plan.
pub(super) struct FsPlan {
    /// Mount steps after the root is built.
    pub mounts: Vec<MountStep>,
    /// The protected paths.
    pub guarded: Guarded,
    /// The writable trees' sockets, left to the git check's walk.
    pub socket_walk: Option<SocketWalk>,
    /// The ids the command switches to.
    pub identity: Option<Ids>,
    /// Run-owned directories handed to it.
    pub hand_over: Vec<PathBuf>,
    /// The root of its own.
    pub root: Option<RootPlan>,
    /// The Landlock ruleset.
    pub landlock: Option<LandlockPlan>,
}

/// The filesystem of `req` under `policy`.
pub(super) fn filesystem(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    admitted: &Admitted,
    e: &mut Enforcement,
) -> Result<FsPlan, SandboxError> {
    if policy.filesystem.unrestricted {
        Ok(full_access(probe, host, e))
    } else {
        root::own_root(probe, policy, req, host, admitted, e)
    }
}

/// full-access: the host's view, no Landlock, the runner's own ids. Nothing is bound, so the
/// job's `--read`, `--write` and `--socket` paths are not checked on the host and no tree is
/// checked for the runner's state (the host's whole view is visible anyway); docker binds them
/// in every mode and checks them there (`crate::docker::plan`): a backend difference, kept.
fn full_access(probe: &dyn FsProbe, host: &Host, e: &mut Enforcement) -> FsPlan {
    let floor = full_access_mounts(probe);
    e.record(
        Restriction::Filesystem,
        Level::NotRequested,
        full_access_detail(&floor),
    );
    e.record(
        Restriction::ProtectedPaths,
        Level::NotRequested,
        "full-access",
    );
    e.record(
        Restriction::HiddenSecrets,
        Level::NotRequested,
        "full-access",
    );
    e.record(
        Restriction::Identity,
        Level::NotRequested,
        format!("full-access: the runner's uid {}", host.euid),
    );
    FsPlan {
        socket_walk: None,
        mounts: floor,
        guarded: Guarded::default(),
        identity: None,
        hand_over: Vec::new(),
        root: None,
        landlock: None,
    }
}

/// full-access's mounts: the host's view with what a default `docker run` keeps from it
/// ([`kernel_paths`]): a fresh `/proc` (the pid namespace's own), its read-only paths (and the
/// init's `/proc/1`) bound read-only, its masked paths masked, and `/sys` read-only (cgroup limits
/// cannot be left through `/sys/fs/cgroup`, nor firmware or kernel knobs changed, even by uid 0).
/// Paths this kernel does not have are skipped.
fn full_access_mounts(probe: &dyn FsProbe) -> Vec<MountStep> {
    let mut out = vec![MountStep::Proc];
    out.extend(
        kernel_paths::read_only()
            .map(PathBuf::from)
            .filter(|p| probe.exists(p))
            .map(|path| MountStep::BindReadOnly { path }),
    );
    for p in kernel_paths::MASKED.iter().map(PathBuf::from) {
        match probe.kind(&p) {
            Some(Kind::Dir) => out.push(MountStep::HideDir { path: p }),
            Some(_) => out.push(MountStep::HideFile { path: p }),
            None => {}
        }
    }
    out.push(MountStep::ReadOnly {
        path: PathBuf::from("/sys"),
    });
    out
}

/// The enforcement line of full-access's filesystem.
fn full_access_detail(mounts: &[MountStep]) -> String {
    let count = |f: fn(&MountStep) -> bool| mounts.iter().filter(|m| f(m)).count();
    format!(
        "full-access: the host's filesystem, but as in a default docker run {} kernel path(s) read-only (/proc/sys, the init's /proc/1, ...), {} masked (/proc/kcore, /proc/keys, ...), /sys read-only, private ipc and uts namespaces",
        count(|m| matches!(m, MountStep::BindReadOnly { .. })),
        count(|m| matches!(m, MountStep::HideFile { .. } | MountStep::HideDir { .. })),
    )
}
