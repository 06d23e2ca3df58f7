//! The container plan: a mode's [`Policy`] and a job's [`SandboxRequest`] resolved into what
//! the container gets — bind mounts (every path at its host path, so the round's environment
//! needs no translation), the user, network, limits and the seccomp profile — plus the
//! enforcement report. Pure data; every refusal happens here, before the engine is asked.
//! [`resolve`] admits the request ([`crate::policy::admit`]), then plans each concern in its
//! own module, in the order of the enforcement report: `user`, `mounts`, `masks`, `process`
//! (network, syscalls and the process-wide restrictions), `limits`. The host's filesystem is
//! read only through [`FsProbe`]. [`visible`]: what a container sees of the host.

mod limits;
mod masks;
mod mounts;
mod process;
mod user;
pub mod visible;

use std::path::{Path, PathBuf};

use crate::beneath::TreePath;
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::mode::{BackendKind, Mode, Network};
use crate::outcome::Enforcement;
use crate::plan::paths;
use crate::plan::probe::{FsProbe, HostFs};
use crate::policy::Policy;
use crate::policy::admit::admit;
use crate::policy::host_share::HostSize;
use crate::policy::kernel_paths;
use crate::protect::Placeholder;
use crate::spec::SandboxRequest;

use super::seccomp::Profile;

pub use visible::can_see;

/// The image used when a request names none.
pub const DEFAULT_IMAGE: &str = "ralph-agent-base:latest";

/// One bind mount, at the same path inside as outside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindMount {
    /// The host path (= the path in the container).
    pub path: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
    /// What asked for it (the flag named in a refusal).
    pub origin: &'static str,
}

/// Everything the container is created with.
#[derive(Clone, Debug)]
pub struct ContainerPlan {
    /// The mode.
    pub mode: Mode,
    /// The image.
    pub image: String,
    /// `uid:gid` the command runs as (the workspace owner's).
    pub uid: u32,
    /// The group.
    pub gid: u32,
    /// Bind mounts, parents before children.
    pub mounts: Vec<BindMount>,
    /// Missing protected paths to create (empty directories) before the run.
    pub placeholders: Vec<Placeholder>,
    /// Paths that must not come into existence (removed after the run and reported).
    pub absent: Vec<TreePath>,
    /// Protected paths on whose way no symlink may stand after the run.
    pub watch: Vec<TreePath>,
    /// The protected paths, recorded before the run and restored after it if anything changed
    /// them.
    pub protected: Vec<TreePath>,
    /// The git check of the writable trees, taken before the run and after it.
    pub git: Option<GitGuard>,
    /// Run-owned directories and files handed to the container's user (root runner only).
    pub chown: Vec<PathBuf>,
    /// Root-owned trees a root runner binds idmapped (the owner's ids on disk are the agent
    /// user's inside; [`super::idmap`]): (tree, mapping, read-only). Every bind at or below one
    /// takes its source in the idmapped clone.
    pub idmapped: Vec<(PathBuf, crate::plan::OwnerMap, bool)>,
    /// The private HOME and TMPDIR (tmpfs mounts of [`ContainerPlan::scratch_size`] each,
    /// owned by the command's user).
    pub scratch: Vec<PathBuf>,
    /// The size of each scratch tmpfs, and of the container's `/tmp`.
    pub scratch_size: u64,
    /// The report directory: a tmpfs of its own, handed over by the init and its report files
    /// copied to the host after the run ([`crate::report_dir`]).
    pub report_dir: Option<crate::spec::ReportDir>,
    /// Kernel paths masked in the container (`MaskedPaths`; replaces the engine's default list,
    /// so it holds that list too).
    pub masked: Vec<String>,
    /// Kernel paths mounted read-only in the container (`ReadonlyPaths`; replaces the engine's
    /// default list, so it holds that list too, and `/proc/1`: the init), in every mode.
    pub read_only: Vec<String>,
    /// The network.
    pub network: Network,
    /// `--network gateway`: the ports ralph's init listens on (`127.0.0.2:PORT` in the
    /// container's loopback-only namespace) and hands to the runner.
    pub gateway_ports: Vec<u16>,
    /// Memory limit (memory-swap is the same: no swap).
    pub memory: Option<u64>,
    /// Process limit.
    pub pids: Option<u64>,
    /// CPU limit in thousandths of a CPU.
    pub cpu_millis: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`.
    pub file_size: Option<u64>,
    /// The seccomp profile.
    pub seccomp: Profile,
    /// What this plan enforces.
    pub enforcement: Enforcement,
}

/// Who a container round of `mode` on `workspace` runs as: the workspace's owner; for a root
/// runner's confined round on a root-owned workspace, the agent user (`agent_user`, the
/// workspace bound idmapped). What [`resolve`] decides, for callers that need it before a plan
/// (the toolchain grant: what the round can reach).
pub fn command_uid(
    mode: Mode,
    workspace: &Path,
    agent_user: Option<&str>,
    runner_euid: u32,
) -> Result<u32, SandboxError> {
    let probe = HostFs;
    let (uid, gid) = paths::owner(&probe, workspace, "workspace")?;
    if runner_euid == 0 && mode != Mode::FullAccess && (uid == 0 || gid == 0) {
        return probe.agent_user(agent_user).map(|i| i.uid);
    }
    Ok(uid)
}

/// The engine sockets a container must never see (the one in use and the usual ones).
pub fn engine_sockets(socket: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in [
        socket,
        Path::new("/var/run/docker.sock"),
        Path::new("/run/docker.sock"),
        Path::new("/run/containerd/containerd.sock"),
    ] {
        out.push(p.to_path_buf());
        if let Ok(c) = std::fs::canonicalize(p) {
            out.push(c);
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What the plan needs to know of the runner and its engine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Runner<'a> {
    /// The engine sockets ([`engine_sockets`]).
    pub sockets: &'a [PathBuf],
    /// The runner's effective uid: a root runner hands run-owned paths over and idmaps
    /// root-owned trees.
    pub euid: u32,
    /// The open-files hard limit (an engine cannot raise it above its own, which on the usual
    /// setup is the runner's too).
    pub nofile_hard: u64,
    /// The host's size, for the policy's limit defaults given as a share of it.
    pub size: &'a HostSize,
}

/// Resolves the plan for `req` under `policy`. `sockets` are the engine sockets
/// ([`engine_sockets`]); `runner_euid` decides whether run-owned paths are handed over;
/// `nofile_hard` caps the open-files limit (an engine cannot raise it above its own hard limit,
/// which on the usual setup is the runner's too); `size` resolves the policy's limit defaults given
/// as a share of the host.
pub fn resolve(
    policy: &Policy,
    req: &SandboxRequest,
    sockets: &[PathBuf],
    runner_euid: u32,
    nofile_hard: u64,
    size: &HostSize,
) -> Result<ContainerPlan, SandboxError> {
    let runner = Runner {
        sockets,
        euid: runner_euid,
        nofile_hard,
        size,
    };
    resolve_with(&HostFs, policy, req, &runner)
}

/// [`resolve`] with the host's filesystem seen through `probe`.
pub(crate) fn resolve_with(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    runner: &Runner<'_>,
) -> Result<ContainerPlan, SandboxError> {
    let admitted = admit(policy, req, BackendKind::Docker)?;
    let mut e = Enforcement::new(BackendKind::Docker, req.mode);
    let user = user::command_user(probe, policy, req, runner.euid, &mut e)?;
    let mut mounts = mounts::request_mounts(probe, policy, req, &mut e)?;
    let chown = mounts::hand_over(req, runner.euid, user.uid);
    let guarded = mounts::protected(probe, policy, req, &mut mounts, &mut e)?;
    mounts::sort_and_check(probe, &mut mounts, runner.sockets, &req.forbidden)?;
    let masked = masks::masked(probe, policy, req, &admitted, &mut e)?;
    let seccomp = process::process(policy, req, &admitted, &mut e)?;
    let limits = limits::limits(policy, req, runner, &mut e)?;
    Ok(ContainerPlan {
        mode: req.mode,
        image: req
            .image
            .clone()
            .unwrap_or_else(|| DEFAULT_IMAGE.to_owned()),
        uid: user.uid,
        gid: user.gid,
        mounts,
        placeholders: guarded.placeholders,
        absent: guarded.absent,
        watch: guarded.watch,
        protected: guarded.protected,
        git: guarded.git,
        chown,
        idmapped: user.idmapped,
        scratch: vec![req.private.home.clone(), req.private.tmp.clone()],
        scratch_size: admitted.scratch_size,
        report_dir: req.private.report.clone(),
        gateway_ports: req.gateway_ports.clone(),
        masked,
        read_only: kernel_paths::read_only().map(str::to_owned).collect(),
        network: admitted.network,
        memory: limits.memory,
        pids: limits.pids,
        cpu_millis: limits.cpu_millis,
        open_files: limits.open_files,
        file_size: limits.file_size,
        seccomp,
        enforcement: e,
    })
}

#[cfg(test)]
mod fake_tests;
#[cfg(test)]
mod tests;
