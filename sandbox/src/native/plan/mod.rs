//! The native plan: a mode's [`Policy`], a job's [`SandboxRequest`] and the [`Host`] resolved
//! into exactly what the helper will do — namespaces, mounts, Landlock rules, the seccomp deny
//! list, limits — plus the enforcement report that says how much of it holds. Pure data: this
//! module never touches the process, and every refusal (fail closed) happens here, before
//! anything runs. [`resolve`] admits the request ([`crate::policy::admit`]), then plans each
//! concern in its own module, in the order of the enforcement report: `ns`, `fs` (the host's
//! view, or a root of its own: `root`, `identity`, `masks`), `report`, `net`, `seccomp`,
//! `limits`. The host's filesystem is read only through [`FsProbe`].

mod fs;
mod identity;
mod limits;
mod masks;
mod net;
mod ns;
mod report;
mod root;
mod seccomp;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::beneath::TreePath;
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::host::Host;
use crate::identity::Ids;
use crate::mode::{BackendKind, Mode, Network};
use crate::native::socket_walk::SocketWalk;
use crate::outcome::Enforcement;
use crate::plan::OwnerMap;
use crate::plan::probe::{FsProbe, HostFs};
use crate::policy::Policy;
use crate::policy::admit::admit;
use crate::policy::guards::Switches;
use crate::policy::network::SocketFamily;
use crate::protect::Placeholder;
use crate::spec::{ReportDir, SandboxRequest};

/// Lowest Landlock ABI whose filesystem rules cover every write path (ABI 3 adds truncate).
pub const MIN_LANDLOCK_ABI_FS: i32 = 3;

/// A uid/gid mapping for a user namespace (the runner's own ids, mapped to themselves).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMap {
    /// The runner's uid.
    pub uid: u32,
    /// The runner's gid.
    pub gid: u32,
}

/// A tree or file of the host bound into the sandbox's root at its own path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bind {
    /// The path (the same inside and outside).
    pub path: PathBuf,
    /// Writable, or read-only.
    pub write: bool,
    /// Mounted idmapped: files its owner owns on disk appear as the command's, and what the
    /// command creates is its owner's on disk.
    #[serde(default)]
    pub idmap: Option<OwnerMap>,
}

/// The sandbox's own root: a tmpfs holding only what the mode allows. Everything else of the
/// host does not exist inside (no paths to probe, no unix sockets to connect to).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootPlan {
    /// Bound trees and files, parents before children.
    pub binds: Vec<Bind>,
    /// Top-level symlinks recreated as on the host (`/bin -> usr/bin` on merged-/usr systems).
    pub symlinks: Vec<(PathBuf, PathBuf)>,
    /// Device files bound into a private `/dev`.
    pub devices: Vec<PathBuf>,
    /// The private TMPDIR: a tmpfs at `/tmp`, also bound at this path.
    pub tmp: PathBuf,
    /// The private HOME: a tmpfs at this path.
    pub home: PathBuf,
    /// The size of each of the two tmpfs, in bytes.
    pub scratch_size: u64,
    /// Who owns them (the command's ids).
    pub scratch_owner: (u32, u32),
}

/// One step after the root is built (or, without a new root, on the host's view), in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountStep {
    /// Bind a directory inside the workspace onto itself, so that it cannot be renamed or
    /// replaced (ancestors of protected paths, e.g. `.git` above `.git/hooks`). Reached without
    /// following a symlink.
    Anchor {
        /// The directory.
        at: TreePath,
    },
    /// Bind a path inside the workspace over itself, read-only (recursively). Reached without
    /// following a symlink.
    ProtectReadOnly {
        /// The path.
        at: TreePath,
    },
    /// An empty mode-000 file over a secret file.
    HideFile {
        /// The secret.
        path: PathBuf,
    },
    /// An empty mode-000 directory over a secret directory.
    HideDir {
        /// The secret.
        path: PathBuf,
    },
    /// Make an existing mount tree read-only (full-access: `/sys`, so cgroup limits hold).
    ReadOnly {
        /// The mount point.
        path: PathBuf,
    },
    /// Bind a path over itself, read-only (full-access: `/proc/sys` and the other kernel paths a
    /// default `docker run` mounts read-only, the init's `/proc/1`).
    BindReadOnly {
        /// The path.
        path: PathBuf,
    },
    /// A fresh procfs for the pid namespace at `/proc` (without a new root; a new root always
    /// gets one).
    Proc,
}

/// The Landlock ruleset.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockPlan {
    /// The running kernel's ABI.
    pub abi: i32,
    /// Read and execute.
    pub read: Vec<PathBuf>,
    /// Every filesystem right.
    pub write: Vec<PathBuf>,
    /// Device files: read, write, truncate, ioctl.
    pub devices: Vec<PathBuf>,
    /// Directories that may only be listed (the sandbox's own `/` and `/dev`, which hold nothing
    /// but what the plan put there).
    pub list: Vec<PathBuf>,
    /// Refuse all TCP bind/connect (ABI 4+), with `--network none` only.
    ///
    /// With `--network gateway` Landlock does not govern TCP at all, deliberately: the network
    /// namespace is the boundary (it holds only `lo`, so a connect can reach nothing but
    /// loopback inside the sandbox and the runner's gateway listeners bound there), while
    /// restricting connect to the gateway ports and denying bind would break ordinary local work
    /// — a test server the agent starts on `127.0.0.1` and its tests connecting to it. Such
    /// rules would add no confinement the namespace does not already give.
    pub deny_tcp: bool,
    /// Scope signals and abstract unix sockets to the sandbox (ABI 6+).
    pub scope: bool,
}

/// The seccomp filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPlan {
    /// The allow-list (x86_64 numbers, [`crate::policy::allow_list`]): a syscall not listed
    /// answers ENOSYS. `None`: no allow-list (full-access).
    #[serde(default)]
    pub allow: Option<Vec<i64>>,
    /// Syscalls refused with EPERM: (name, number).
    pub deny: Vec<(String, i64)>,
    /// socket()/socketpair() of any family not listed refused with EPERM; `None`: any family
    /// ([`crate::policy::network::socket_families`]).
    pub socket_families: Option<Vec<SocketFamily>>,
    /// personality(2) limited to PER_LINUX.
    pub restrict_personality: bool,
    /// clone(2) with namespace flags refused; clone3(2) answers ENOSYS.
    pub deny_namespace_clone: bool,
    /// The host-boundary guards ([`crate::policy::guards`]).
    pub guards: Switches,
}

/// The run's report directory as the helper makes it ([`crate::report_dir`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportDirPlan {
    /// What was asked for.
    pub dir: ReportDir,
    /// Who owns the tmpfs (the command's ids).
    pub owner: (u32, u32),
    /// A tmpfs in the run's mount namespace, handed to the supervisor; `false` without a mount
    /// namespace (full-access on a host without user namespaces): the host directory itself,
    /// checked after the run.
    pub tmpfs: bool,
}

/// Which cgroup limits to set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupLimit {
    /// Cgroup version of the site.
    pub version: u8,
    /// The parent directory the run's cgroup is created in.
    pub parent: PathBuf,
    /// The limit value.
    pub value: u64,
}

/// Everything the helper does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxPlan {
    /// The mode.
    pub mode: Mode,
    /// A user namespace mapping the runner's ids (when not root).
    pub user_namespace: Option<IdMap>,
    /// The ids the command switches to (a root runner's confined modes: never uid 0).
    pub identity: Option<Ids>,
    /// Run-owned directories handed to [`SandboxPlan::identity`] before the run.
    pub hand_over: Vec<PathBuf>,
    /// A pid namespace (the tree dies with its init).
    pub pid_namespace: bool,
    /// A private mount namespace.
    pub mount_namespace: bool,
    /// A private network namespace with only loopback.
    pub net_namespace: bool,
    /// The network setting resolved for this run.
    #[serde(default)]
    pub network: Network,
    /// `--network gateway`: the ports to listen on at `127.0.0.1` inside the namespace, whose
    /// listeners the init hands to the runner before the command starts.
    #[serde(default)]
    pub gateway_ports: Vec<u16>,
    /// A private IPC namespace (every mode: the host's SysV IPC and POSIX message queues are not
    /// the round's).
    pub ipc_namespace: bool,
    /// A private UTS namespace (every mode).
    #[serde(default)]
    pub uts_namespace: bool,
    /// A root of its own (read-only and workspace-write).
    pub root: Option<RootPlan>,
    /// Mount steps after the root is built.
    pub mounts: Vec<MountStep>,
    /// The report directory: a bounded tmpfs of its own ([`crate::report_dir`]).
    #[serde(default)]
    pub report_dir: Option<ReportDirPlan>,
    /// Paths in the workspace that must not be created (e.g. `.git/commondir`, which would
    /// redirect the host's git to agent-made hooks); removed after the run if they appear.
    pub absent: Vec<TreePath>,
    /// Protected paths checked after the run: a symlink planted where one of them or a parent
    /// should be is removed and reported.
    pub watch: Vec<TreePath>,
    /// The protected paths bound read-only, recorded before the run and restored after it if
    /// anything changed them ([`crate::snapshot`]).
    pub protected: Vec<TreePath>,
    /// Missing protected paths to create as empty read-only placeholders.
    pub placeholders: Vec<Placeholder>,
    /// The git check of the writable trees (workspace-write: the workspace and each `--write`
    /// root), taken before the run and after it.
    #[serde(default)]
    pub git: Option<GitGuard>,
    /// The unix sockets of the writable trees, found by the git check's walk (one walk for
    /// both) and masked by the helper ([`crate::native::socket_walk`]).
    #[serde(default)]
    pub socket_walk: Option<SocketWalk>,
    /// Landlock, unless unrestricted.
    pub landlock: Option<LandlockPlan>,
    /// Seccomp.
    pub seccomp: SeccompPlan,
    /// Drop every capability.
    pub drop_capabilities: bool,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`.
    pub file_size: Option<u64>,
    /// `RLIMIT_NPROC` (process limit inside a private user namespace).
    pub nproc: Option<u64>,
    /// Memory limit through a cgroup.
    pub memory: Option<CgroupLimit>,
    /// Process limit through a cgroup.
    pub pids: Option<CgroupLimit>,
    /// CPU limit through a cgroup (`cpu` controller), in thousandths of a CPU.
    #[serde(default)]
    pub cpu: Option<CgroupLimit>,
    /// What this plan enforces.
    pub enforcement: Enforcement,
}

fn unavailable(restriction: impl Into<String>, reason: impl Into<String>) -> SandboxError {
    SandboxError::unavailable(restriction, reason)
}

/// Resolves a plan, failing closed when the host cannot enforce what the mode needs.
pub fn resolve(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
) -> Result<SandboxPlan, SandboxError> {
    resolve_with(&HostFs, policy, req, host)
}

/// [`resolve`] with the host's filesystem seen through `probe`.
pub(crate) fn resolve_with(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
) -> Result<SandboxPlan, SandboxError> {
    let admitted = admit(policy, req, BackendKind::Native)?;
    let network = admitted.network;
    let mut e = Enforcement::new(BackendKind::Native, req.mode);
    let ns = ns::namespaces(host, &mut e)?;
    let fs = fs::filesystem(probe, policy, req, host, &admitted, &mut e)?;
    let report_dir = report::report_dir_plan(req, fs.identity.as_ref(), host, ns.can_ns, &mut e);
    root::record_scoping(fs.landlock.as_ref(), &mut e);
    net::network(req, &admitted, ns.can_ns, fs.landlock.as_ref(), &mut e)?;
    let seccomp = seccomp::seccomp_plan(policy, host, &admitted, &mut e)?;
    let limits = limits::limits(policy, req, host, ns.user_namespace, &mut e)?;
    Ok(SandboxPlan {
        mode: req.mode,
        user_namespace: ns.user_namespace,
        identity: fs.identity,
        hand_over: fs.hand_over,
        pid_namespace: ns.can_ns,
        mount_namespace: ns.need_mount_ns && ns.can_ns,
        net_namespace: network.private_namespace(),
        network,
        gateway_ports: if network == Network::Gateway {
            req.gateway_ports.clone()
        } else {
            Vec::new()
        },
        ipc_namespace: true,
        uts_namespace: true,
        root: fs.root,
        mounts: fs.mounts,
        report_dir,
        absent: fs.guarded.absent,
        watch: fs.guarded.watch,
        protected: fs.guarded.protected,
        placeholders: fs.guarded.placeholders,
        git: fs.guarded.git,
        socket_walk: fs.socket_walk,
        landlock: fs.landlock,
        seccomp,
        drop_capabilities: true,
        open_files: limits.open_files,
        file_size: limits.file_size,
        nproc: limits.nproc,
        memory: limits.memory,
        pids: limits.pids,
        cpu: limits.cpu,
        enforcement: e,
    })
}

#[cfg(test)]
mod fake_tests;
#[cfg(test)]
mod tests;
