//! The sandbox plan: a mode's [`Policy`], a job's [`SandboxRequest`] and the [`Host`] resolved
//! into exactly what the helper will do — namespaces, mounts, Landlock rules, the seccomp deny
//! list, limits — plus the enforcement report that says how much of it holds. Pure data: this
//! module never touches the process, and every refusal (fail closed) happens here, before
//! anything runs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::beneath::TreePath;
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::host::Host;
use crate::identity::{self, Ids};
use crate::mode::{BackendKind, Mode, Network};
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::admit::{self, admit};
use crate::policy::guards::Switches;
use crate::policy::network::{self, SocketFamily};
use crate::policy::{Policy, WorkspaceAccess, kernel_paths, syscalls};
use crate::protect::{self, Placeholder};
use crate::sockets;
use crate::spec::{ReportDir, SandboxRequest};

pub use crate::policy::admit::DEFAULT_SCRATCH_SIZE;

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

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// The enforcement line of the socket scan.
pub(crate) fn sockets_detail(
    masked: usize,
    granted: usize,
    incomplete: &[PathBuf],
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

/// The first Landlock ABI taken to govern connecting to a named unix socket (SPEC §5; below it
/// only the scan-and-mask before each run holds).
pub const LANDLOCK_ABI_UNIX_SOCKETS: i32 = 9;

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

/// The owner (uid, gid) of a path.
fn owner_of(p: &Path) -> Result<(u32, u32), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p)
        .map(|m| (m.uid(), m.gid()))
        .map_err(|e| SandboxError::invalid("workspace", format!("`{}`: {e}", p.display())))
}

/// Who a root runner's command runs as: the workspace's owner when that is not root, else the
/// agent user ([`identity::agent_user`]).
/// The ids a run of `req` has on the host when they are not the runner's own: a root runner's
/// confined modes run as [`command_identity`]; `None` otherwise (the runner's uid, or
/// full-access). What the runner gives a run's own directories to.
pub fn run_owner(req: &SandboxRequest) -> Result<Option<(u32, u32)>, SandboxError> {
    if !nix::unistd::geteuid().is_root() || req.mode == Mode::FullAccess {
        return Ok(None);
    }
    command_identity(req).map(|i| Some((i.uid, i.gid)))
}

pub(crate) fn command_identity(req: &SandboxRequest) -> Result<Ids, SandboxError> {
    let (uid, gid) = owner_of(&req.workspace)?;
    if uid != 0 && gid != 0 {
        return Ok(Ids {
            uid,
            gid,
            name: "the workspace's owner".into(),
        });
    }
    identity::agent_user(req.agent_user.as_deref(), Path::new("/etc"))
}

/// full-access's mounts: the host's view with what a default `docker run` keeps from it
/// ([`kernel_paths`]): a fresh `/proc` (the pid namespace's own), its read-only paths (and the
/// init's `/proc/1`) bound read-only, its masked paths masked, and `/sys` read-only (cgroup limits
/// cannot be left through `/sys/fs/cgroup`, nor firmware or kernel knobs changed, even by uid 0).
/// Paths this kernel does not have are skipped.
fn full_access_mounts() -> Vec<MountStep> {
    let mut out = vec![MountStep::Proc];
    out.extend(
        kernel_paths::read_only()
            .map(PathBuf::from)
            .filter(|p| exists(p))
            .map(|path| MountStep::BindReadOnly { path }),
    );
    for p in kernel_paths::MASKED.iter().map(PathBuf::from) {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => out.push(MountStep::HideDir { path: p }),
            Ok(_) => out.push(MountStep::HideFile { path: p }),
            Err(_) => {}
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

/// The report directory's plan: a tmpfs owned by the command where a mount namespace exists.
fn report_dir_plan(
    req: &SandboxRequest,
    identity: &Option<Ids>,
    host: &Host,
    can_ns: bool,
    e: &mut Enforcement,
) -> Result<Option<ReportDirPlan>, SandboxError> {
    let Some(dir) = &req.private.report else {
        return Ok(None);
    };
    if can_ns {
        e.record(
            Restriction::ReportDir,
            Level::Full,
            crate::report_dir::describe(dir),
        );
    } else {
        e.record(
            Restriction::ReportDir,
            Level::Partial,
            "no mount namespace: the command writes the host directory itself; it is measured after the run and emptied when over its bound",
        );
    }
    Ok(Some(ReportDirPlan {
        dir: dir.clone(),
        owner: identity
            .as_ref()
            .map_or((host.euid, host.egid), |i| (i.uid, i.gid)),
        tmpfs: can_ns,
    }))
}

/// Resolves a plan, failing closed when the host cannot enforce what the mode needs.
pub fn resolve(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
) -> Result<SandboxPlan, SandboxError> {
    let admitted = admit(policy, req, BackendKind::Native)?;
    let mode = req.mode;
    let mut e = Enforcement::new(BackendKind::Native, mode);
    let fs = &policy.filesystem;

    // Network.
    let network = admitted.network;
    let net_off = network == Network::None;
    let net_private = network.private_namespace();

    // Namespaces: root creates them directly; anyone else needs a user namespace first.
    let root = host.euid == 0;
    // Every mode gets a mount namespace: the filesystem modes for their own root, full-access for
    // a fresh /proc and the kernel paths a default `docker run` masks or keeps read-only.
    let need_mount_ns = true;
    let need_userns = !root;
    // full-access too: its mount, ipc and uts namespaces are what keeps it at least as confined
    // as a default `docker run` (SPEC §5); without them it does not run, rather than weaker.
    if need_userns {
        if let Err(reason) = &host.user_namespaces {
            return Err(unavailable(
                "namespaces (user namespace needed by a non-root runner)",
                reason.clone(),
            ));
        }
    }
    let can_ns = root || host.user_namespaces.is_ok();
    let user_namespace = (!root && can_ns).then_some(IdMap {
        uid: host.euid,
        gid: host.egid,
    });
    if can_ns {
        e.record(
            Restriction::ProcessTree,
            Level::Full,
            "private pid namespace: the tree dies with its init",
        );
    } else {
        e.record(
            Restriction::ProcessTree,
            Level::Partial,
            "no pid namespace: child subreaper, the tree is killed while the supervisor lives",
        );
    }

    // Filesystem.
    let mut mounts = Vec::new();
    let mut placeholders = Vec::new();
    let mut absent = Vec::new();
    let mut watch = Vec::new();
    let mut protected_paths = Vec::new();
    let mut identity = None;
    let mut hand_over = Vec::new();
    let mut git = None;
    let mut root = None;
    let landlock = if fs.unrestricted {
        let floor = full_access_mounts();
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
        mounts.extend(floor);
        None
    } else {
        let abi = host.landlock.abi().ok_or_else(|| {
            unavailable("filesystem isolation (landlock)", host.landlock.reason())
        })?;
        if abi < MIN_LANDLOCK_ABI_FS {
            return Err(unavailable(
                "filesystem isolation (landlock)",
                format!(
                    "landlock abi {abi} cannot restrict truncate(2); abi {MIN_LANDLOCK_ABI_FS} (Linux 6.2) or newer is needed"
                ),
            ));
        }
        let mut binds: Vec<Bind> = Vec::new();
        let mut symlinks: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut skipped: Vec<String> = Vec::new();
        for p in &fs.read {
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.file_type().is_symlink() => match std::fs::read_link(p) {
                    Ok(target) => symlinks.push((p.clone(), target)),
                    Err(_) => skipped.push(p.display().to_string()),
                },
                Ok(_) => binds.push(Bind {
                    path: p.clone(),
                    write: false,
                    idmap: None,
                }),
                Err(_) => skipped.push(p.display().to_string()),
            }
        }
        for p in &req.read {
            if !exists(p) {
                return Err(SandboxError::invalid(
                    "read",
                    format!("`{}` does not exist", p.display()),
                ));
            }
            binds.push(Bind {
                path: p.clone(),
                write: false,
                idmap: None,
            });
        }
        // Granted sockets: made visible where no bound tree shows them already (a socket needs
        // no write permission on its mount; one in the workspace stays in its idmapped view).
        for s in &req.sockets {
            if !sockets::is_socket(s) {
                return Err(SandboxError::invalid(
                    "socket",
                    format!("`{}` is not a unix socket", s.display()),
                ));
            }
            let shown = std::iter::once(&req.workspace)
                .chain(&req.read)
                .chain(&req.write)
                .chain(&fs.read)
                .any(|t| s.starts_with(t));
            if shown {
                continue;
            }
            binds.push(Bind {
                path: s.clone(),
                write: false,
                idmap: None,
            });
        }
        binds.extend(req.private.readable.iter().map(|p| Bind {
            path: p.clone(),
            write: false,
            idmap: None,
        }));
        binds.push(Bind {
            path: req.workspace.clone(),
            write: fs.workspace == WorkspaceAccess::Write,
            idmap: None,
        });
        for p in &req.write {
            if !p.is_dir() {
                return Err(SandboxError::invalid(
                    "write",
                    format!("`{}` is not a directory", p.display()),
                ));
            }
            binds.push(Bind {
                path: p.clone(),
                write: true,
                idmap: None,
            });
        }
        binds.extend(req.private.writable.iter().map(|p| Bind {
            path: p.clone(),
            write: true,
            idmap: None,
        }));
        // Parents before children; a path asked for twice is writable if any asks so.
        binds.sort_by(|a, b| a.path.cmp(&b.path));
        binds.dedup_by(|later, earlier| {
            let same = later.path == earlier.path;
            if same {
                earlier.write |= later.write;
            }
            same
        });
        // The runner's own state stays invisible: no bound tree may contain it.
        for f in &req.forbidden {
            if let Some(b) = binds.iter().find(|b| f.starts_with(&b.path)) {
                return Err(admit::state_visible(f, &b.path));
            }
        }
        // Who the command is: a root runner's round never holds host uid 0.
        if host.euid == 0 {
            let agent = command_identity(req)?;
            for b in binds
                .iter_mut()
                .filter(|b| b.path == req.workspace || req.write.contains(&b.path))
            {
                let (disk_uid, disk_gid) = owner_of(&b.path)?;
                if (disk_uid, disk_gid) != (agent.uid, agent.gid) {
                    b.idmap = Some(OwnerMap {
                        disk_uid,
                        disk_gid,
                        uid: agent.uid,
                        gid: agent.gid,
                    });
                }
            }
            hand_over.extend(
                [&req.private.home, &req.private.tmp]
                    .into_iter()
                    .chain(&req.private.readable)
                    .chain(&req.private.writable)
                    .cloned(),
            );
            let mapped = binds.iter().filter(|b| b.idmap.is_some()).count();
            e.record(
                Restriction::Identity,
                Level::Full,
                format!(
                    "uid {} gid {} ({}), never host uid 0; {mapped} tree(s) idmapped so that what it writes belongs to their owner",
                    agent.uid, agent.gid, agent.name
                ),
            );
            identity = Some(agent);
        } else {
            e.record(
                Restriction::Identity,
                Level::Full,
                format!("the runner's own uid {} (in a user namespace)", host.euid),
            );
        }
        let devices: Vec<PathBuf> = fs.devices.iter().filter(|p| exists(p)).cloned().collect();
        let read: Vec<PathBuf> = binds
            .iter()
            .filter(|b| !b.write)
            .map(|b| b.path.clone())
            .chain([PathBuf::from("/proc")])
            .collect();
        let write: Vec<PathBuf> = binds
            .iter()
            .filter(|b| b.write)
            .map(|b| b.path.clone())
            .chain([
                PathBuf::from("/tmp"),
                req.private.tmp.clone(),
                req.private.home.clone(),
            ])
            .chain(req.private.report.iter().map(|r| r.path.clone()))
            .collect();
        let ro = binds.iter().filter(|b| !b.write).count();
        let skipped = if skipped.is_empty() {
            String::new()
        } else {
            format!(" (absent on this host: {})", skipped.join(", "))
        };
        e.record(
            Restriction::Filesystem,
            Level::Full,
            format!("own root with {} bound trees ({ro} read-only) and nothing else of the host; landlock abi {abi}{skipped}", binds.len()),
        );

        // Protected paths: their ancestors anchored (no rename), then bound read-only.
        if fs.workspace == WorkspaceAccess::Write {
            let set = protect::resolve(policy, req)?;
            let protected = set.protected.len();
            protected_paths.extend(set.protected.iter().cloned());
            git = Some(GitGuard::new(
                &req.workspace,
                &req.write,
                set.protected.iter().map(TreePath::full).collect(),
            ));
            placeholders.extend(set.placeholders);
            mounts.extend(set.anchors.into_iter().map(|at| MountStep::Anchor { at }));
            mounts.extend(
                set.protected
                    .into_iter()
                    .map(|at| MountStep::ProtectReadOnly { at }),
            );
            absent.extend(set.absent);
            watch.extend(set.watch);
            e.record(
                Restriction::ProtectedPaths,
                Level::Full,
                format!("{protected} path(s) read-only, their parents pinned against rename; {} path(s) kept absent; git repositories the run creates or changes in {} writable tree(s) made safe after it", absent.len(), git.as_ref().map_or(0, |g| g.trees.len())),
            );
        } else {
            e.record(
                Restriction::ProtectedPaths,
                Level::Full,
                "the whole workspace is read-only",
            );
        }
        let mut hidden = 0;
        for p in &fs.hidden {
            // Under a bound tree, or in the sandbox's own /proc (whose entries are the host's).
            if !binds.iter().any(|b| p.starts_with(&b.path)) && !p.starts_with("/proc") {
                continue;
            }
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => mounts.push(MountStep::HideDir { path: p.clone() }),
                Ok(_) => mounts.push(MountStep::HideFile { path: p.clone() }),
                Err(_) => continue,
            }
            hidden += 1;
        }
        e.record(
            Restriction::HiddenSecrets,
            Level::Full,
            format!("{hidden} secret path(s) masked with empty mode-000 mounts"),
        );
        // Unix sockets in visible trees: masked unless granted.
        let mut candidates: Vec<PathBuf> = fs
            .scan_sockets
            .iter()
            .filter(|p| binds.iter().any(|b| p.starts_with(&b.path)))
            .cloned()
            .collect();
        candidates.push(req.workspace.clone());
        candidates.extend(req.read.iter().cloned());
        candidates.extend(req.write.iter().cloned());
        let found = sockets::scan(&sockets::roots(candidates));
        let masked: Vec<PathBuf> = found
            .sockets
            .into_iter()
            .filter(|s| !req.sockets.contains(s))
            .collect();
        mounts.extend(
            masked
                .iter()
                .map(|path| MountStep::HideFile { path: path.clone() }),
        );
        e.record(
            Restriction::UnixSockets,
            if found.incomplete.is_empty() {
                Level::Full
            } else {
                Level::Partial
            },
            sockets_detail(
                masked.len(),
                req.sockets.len(),
                &found.incomplete,
                Some(abi),
            ),
        );
        let scratch_size = admitted.scratch_size;
        let scratch_owner = identity
            .as_ref()
            .map_or((host.euid, host.egid), |i: &Ids| (i.uid, i.gid));
        e.record(
            Restriction::ScratchSpace,
            Level::Full,
            format!("HOME and TMPDIR: a tmpfs of {scratch_size} bytes each"),
        );
        root = Some(RootPlan {
            binds,
            symlinks,
            devices: devices.clone(),
            tmp: req.private.tmp.clone(),
            home: req.private.home.clone(),
            scratch_size,
            scratch_owner,
        });
        Some(LandlockPlan {
            abi,
            read,
            write,
            devices,
            list: vec![PathBuf::from("/"), PathBuf::from("/dev")],
            deny_tcp: net_off && abi >= 4,
            scope: abi >= 6,
        })
    };
    let report_dir = report_dir_plan(req, &identity, host, can_ns, &mut e)?;
    if let Some(ll) = &landlock {
        if ll.scope {
            e.record(
                Restriction::Scoping,
                Level::Full,
                "landlock scopes signals and abstract unix sockets to the sandbox",
            );
        } else {
            e.record(Restriction::Scoping, Level::Partial, format!("landlock abi {} has no scoping (abi 6+); the pid and network namespaces isolate instead", ll.abi));
        }
    }

    // Network.
    let socket_families = admitted.socket_families.map(<[SocketFamily]>::to_vec);
    if net_private && !can_ns {
        return Err(unavailable(
            "network isolation",
            "no network namespace can be created",
        ));
    }
    match network {
        Network::None => {
            let tcp = if landlock.as_ref().is_some_and(|l| l.deny_tcp) {
                ", landlock denies tcp"
            } else {
                ""
            };
            e.record(
                Restriction::Network,
                Level::Full,
                format!(
                    "private network namespace (loopback only), non-AF_UNIX sockets refused{tcp}"
                ),
            );
        }
        Network::Gateway => {
            e.record(
                Restriction::Network,
                Level::Full,
                gateway_detail(
                    &req.gateway_ports,
                    socket_families.as_deref().unwrap_or(&[]),
                ),
            );
            e.network = Some(crate::outcome::NetworkEnforced {
                network,
                gateway_ports: req.gateway_ports.clone(),
            });
        }
        Network::Full => e.record(Restriction::Network, Level::NotRequested, "host network"),
    }

    // Syscalls.
    host.seccomp
        .clone()
        .map_err(|reason| unavailable("the syscall filter (seccomp)", reason))?;
    let deny = policy
        .syscalls
        .deny
        .iter()
        .map(|n| {
            syscalls::number(n)
                .map(|nr| (n.clone(), nr))
                .ok_or_else(|| SandboxError::invalid("policy", format!("unknown syscall `{n}`")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let allow = if policy.syscalls.allow_list {
        let list = crate::policy::allow_list::embedded()
            .map_err(|m| SandboxError::invalid("policy", m))?;
        Some(list.iter().map(|(_, nr)| *nr).collect())
    } else {
        None
    };
    e.record(
        Restriction::Syscalls,
        Level::Full,
        format!("seccomp: {} syscalls refused with EPERM", deny.len()),
    );
    e.record(
        Restriction::Capabilities,
        Level::Full,
        "effective, permitted, inheritable, ambient and bounding sets emptied",
    );
    e.record(
        Restriction::NoNewPrivs,
        Level::Full,
        "prctl PR_SET_NO_NEW_PRIVS",
    );
    e.record(Restriction::CoreDumps, Level::Full, "RLIMIT_CORE 0");

    // Limits.
    let open_files = policy.limits.open_files.map(|n| n.min(host.nofile_hard));
    let file_size = policy.limits.file_size.map(|s| s.0.min(host.fsize_hard));
    match open_files {
        Some(n) => e.record(
            Restriction::OpenFiles,
            Level::Full,
            format!("RLIMIT_NOFILE {n}"),
        ),
        None => e.record(Restriction::OpenFiles, Level::NotRequested, "inherited"),
    }
    match file_size {
        Some(n) => e.record(
            Restriction::FileSize,
            Level::Full,
            format!("RLIMIT_FSIZE {n}"),
        ),
        None => e.record(Restriction::FileSize, Level::NotRequested, "inherited"),
    }
    let memory_default = policy.limits.memory.and_then(|m| m.bytes(&host.size));
    let memory = match (req.limits.memory_bytes, memory_default) {
        (Some(bytes), _) => match &host.memory {
            Ok(site) => {
                e.record(
                    Restriction::Memory,
                    Level::Full,
                    format!("cgroup v{} memory {bytes} bytes", site.version),
                );
                Some(CgroupLimit {
                    version: site.version,
                    parent: site.dir.clone(),
                    value: bytes,
                })
            }
            Err(reason) => return Err(unavailable("the memory limit (--memory)", reason.clone())),
        },
        (None, Some(bytes)) => match &host.memory {
            Ok(site) => {
                e.record(
                    Restriction::Memory,
                    Level::Full,
                    format!(
                        "cgroup v{} memory {bytes} bytes (policy default)",
                        site.version
                    ),
                );
                Some(CgroupLimit {
                    version: site.version,
                    parent: site.dir.clone(),
                    value: bytes,
                })
            }
            Err(reason) => {
                e.record(
                    Restriction::Memory,
                    Level::Partial,
                    format!("policy default not enforced: {reason}"),
                );
                None
            }
        },
        (None, None) => {
            e.record(Restriction::Memory, Level::NotRequested, "no memory limit");
            None
        }
    };
    let (pids, nproc) = match (req.limits.pids, policy.limits.pids) {
        (None, None) => {
            e.record(Restriction::Pids, Level::NotRequested, "no process limit");
            (None, None)
        }
        (asked, default) => {
            let n = asked.or(default).unwrap_or(u64::MAX);
            let default_note = if asked.is_some() {
                ""
            } else {
                " (policy default)"
            };
            match (&host.pids, user_namespace) {
                (Ok(site), _) => {
                    e.record(
                        Restriction::Pids,
                        Level::Full,
                        format!("cgroup v{} pids.max {n}{default_note}", site.version),
                    );
                    (
                        Some(CgroupLimit {
                            version: site.version,
                            parent: site.dir.clone(),
                            value: n,
                        }),
                        None,
                    )
                }
                (Err(_), Some(_)) => {
                    e.record(
                        Restriction::Pids,
                        Level::Full,
                        format!("RLIMIT_NPROC {n} in a private user namespace{default_note}"),
                    );
                    (None, Some(n))
                }
                (Err(reason), None) if asked.is_some() => {
                    return Err(unavailable("the process limit (--pids)", reason.clone()));
                }
                (Err(reason), None) => {
                    e.record(
                        Restriction::Pids,
                        Level::Partial,
                        format!("policy default not enforced: {reason}"),
                    );
                    (None, None)
                }
            }
        }
    };

    let cpu = match (
        req.limits.cpu_millis,
        policy.limits.cpus.map(|c| c.millis(&host.size)),
    ) {
        (None, None) => {
            e.record(Restriction::Cpu, Level::NotRequested, "no cpu limit");
            None
        }
        (asked, default) => {
            let millis = asked.or(default).unwrap_or(u64::MAX);
            let note = if asked.is_some() {
                ""
            } else {
                " (policy default)"
            };
            match &host.cpu {
                Ok(site) => {
                    let (quota, period) = crate::native::cgroup::cfs_quota(millis);
                    e.record(
                        Restriction::Cpu,
                        Level::Full,
                        format!(
                            "cgroup v{} cpu quota {quota}/{period} us{note}",
                            site.version
                        ),
                    );
                    Some(CgroupLimit {
                        version: site.version,
                        parent: site.dir.clone(),
                        value: millis,
                    })
                }
                Err(reason) if asked.is_some() => {
                    return Err(unavailable("the cpu limit (--cpus)", reason.clone()));
                }
                Err(reason) => {
                    e.record(
                        Restriction::Cpu,
                        Level::Partial,
                        format!("policy default not enforced: {reason}"),
                    );
                    None
                }
            }
        }
    };

    Ok(SandboxPlan {
        mode,
        user_namespace,
        identity,
        hand_over,
        pid_namespace: can_ns,
        mount_namespace: need_mount_ns && can_ns,
        net_namespace: net_private,
        network,
        gateway_ports: if network == Network::Gateway {
            req.gateway_ports.clone()
        } else {
            Vec::new()
        },
        ipc_namespace: true,
        uts_namespace: true,
        root,
        mounts,
        report_dir,
        absent,
        watch,
        protected: protected_paths,
        placeholders,
        git,
        landlock,
        seccomp: SeccompPlan {
            allow,
            deny,
            socket_families,
            restrict_personality: policy.syscalls.restrict_personality,
            deny_namespace_clone: policy.syscalls.deny_namespace_clone,
            guards: policy.syscalls.switches(),
        },
        drop_capabilities: true,
        open_files,
        file_size,
        nproc,
        memory,
        pids,
        cpu,
        enforcement: e,
    })
}

#[cfg(test)]
mod tests;
