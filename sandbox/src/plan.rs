//! The sandbox plan: a mode's [`crate::policy::Policy`], a job's [`SandboxRequest`] and the host
//! resolved into exactly what a backend will do, plus the enforcement report that says how much
//! of it holds. Every refusal (fail closed) happens while planning, before anything runs.
//!
//! Planning starts with [`crate::policy::admit`] (the refusals that are pure policy decisions,
//! the same on both backends) and asks the host only through [`probe::FsProbe`]. The native
//! plan is [`crate::native::plan`], re-exported here ([`resolve`], [`SandboxPlan`], ...); the
//! docker one is [`crate::docker::plan`]. This module holds what both share.

pub(crate) mod paths;
pub mod probe;
pub mod visible;

#[cfg(test)]
pub(crate) mod fake;

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::identity::Ids;
use crate::mode::Mode;
use crate::policy::network::{self, SocketFamily};
use crate::sockets;
use crate::spec::SandboxRequest;

pub use crate::native::plan::{
    Bind, CgroupLimit, IdMap, LandlockPlan, MIN_LANDLOCK_ABI_FS, MountStep, ReportDirPlan,
    RootPlan, SandboxPlan, SeccompPlan, resolve,
};
pub use crate::policy::admit::DEFAULT_SCRATCH_SIZE;
use probe::{FsProbe, HostFs};
pub use visible::can_see;

/// What the protected paths of the writable trees make of a run, on either backend
/// ([`crate::protect::ProtectedSet`]); empty unless the workspace is writable.
#[derive(Debug, Default)]
pub(crate) struct Guarded {
    /// Missing protected paths to create as placeholders.
    pub placeholders: Vec<crate::protect::Placeholder>,
    /// Paths that must not be created.
    pub absent: Vec<crate::beneath::TreePath>,
    /// Paths on whose way no symlink may stand after the run.
    pub watch: Vec<crate::beneath::TreePath>,
    /// The protected paths bound read-only.
    pub protected: Vec<crate::beneath::TreePath>,
    /// The git check of the writable trees.
    pub git: Option<crate::gitguard::GitGuard>,
}

/// An idmapped bind: the tree's owner on disk ↔ the command's ids inside.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerMap {
    /// The owner's uid on disk.
    pub disk_uid: u32,
    /// The owner's gid on disk.
    pub disk_gid: u32,
    /// The command's uid.
    pub uid: u32,
    /// The command's gid.
    pub gid: u32,
}

/// The first Landlock ABI taken to govern connecting to a named unix socket (SPEC §5; below it
/// only the scan-and-mask before each run holds).
pub const LANDLOCK_ABI_UNIX_SOCKETS: i32 = 9;

/// The enforcement line of the socket scan.
pub(crate) fn sockets_detail(
    masked: usize,
    granted: usize,
    incomplete: &[std::path::PathBuf],
    landlock_abi: Option<i32>,
) -> String {
    let mut d =
        format!("{masked} unix socket(s) in visible trees masked, {granted} granted with --socket");
    if !incomplete.is_empty() {
        let trees: Vec<String> = incomplete.iter().map(|p| p.display().to_string()).collect();
        d.push_str(&format!(
            "; not walked to the end (over {} entries): {}",
            sockets::ENTRY_LIMIT,
            trees.join(", ")
        ));
    }
    match landlock_abi {
        Some(abi) if abi >= LANDLOCK_ABI_UNIX_SOCKETS => {}
        Some(abi) => d.push_str(&format!(
            "; sockets created after the start stay reachable (landlock abi {abi} does not govern connect)"
        )),
        None => d.push_str("; sockets created after the start stay reachable"),
    }
    d
}

/// The enforcement line of `--network gateway`.
pub(crate) fn gateway_detail(ports: &[u16], families: &[SocketFamily]) -> String {
    let listeners = if ports.is_empty() {
        "no gateway port requested".to_owned()
    } else {
        format!(
            "the runner's gateway on {} port(s) {} is the only route out",
            crate::spec::GATEWAY_HOST,
            crate::spec::port_list(ports)
        )
    };
    format!(
        "gateway: private network namespace (loopback only); {listeners}; sockets limited to {}",
        network::family_names(families)
    )
}

/// The ids a run of `req` has on the host when they are not the runner's own: a root runner's
/// confined modes run as [`command_identity`]; `None` otherwise (the runner's uid, or
/// full-access). What the runner gives a run's own directories to.
pub fn run_owner(req: &SandboxRequest) -> Result<Option<(u32, u32)>, SandboxError> {
    if !nix::unistd::geteuid().is_root() || req.mode == Mode::FullAccess {
        return Ok(None);
    }
    command_identity(&HostFs, req).map(|i| Some((i.uid, i.gid)))
}

/// Who a root runner's command runs as: the workspace's owner when that is not root, else the
/// agent user ([`crate::identity::agent_user`]).
pub(crate) fn command_identity(
    probe: &dyn FsProbe,
    req: &SandboxRequest,
) -> Result<Ids, SandboxError> {
    let (uid, gid) = paths::owner(probe, &req.workspace, "workspace")?;
    if uid != 0 && gid != 0 {
        return Ok(Ids {
            uid,
            gid,
            name: "the workspace's owner".into(),
        });
    }
    probe.agent_user(req.agent_user.as_deref())
}
