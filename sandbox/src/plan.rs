//! The sandbox plan: a mode's [`Policy`], a job's [`SandboxRequest`] and the [`Host`] resolved
//! into exactly what the helper will do — namespaces, mounts, Landlock rules, the seccomp deny
//! list, limits — plus the enforcement report that says how much of it holds. Pure data: this
//! module never touches the process, and every refusal (fail closed) happens here, before
//! anything runs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::host::Host;
use crate::mode::{BackendKind, Mode, Network};
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::{Policy, WorkspaceAccess, syscalls};
use crate::spec::SandboxRequest;

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

/// One step of the mount setup, in order, inside the private mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountStep {
    /// Bind `path` over itself, read-only (recursively).
    ProtectReadOnly {
        /// The path.
        path: PathBuf,
    },
    /// Bind the private `from` directory over `to`, then bind each of `keep` (paths that lived
    /// under `to` and must stay visible, e.g. a workspace in /tmp) back at its own path.
    BindPrivate {
        /// The private directory.
        from: PathBuf,
        /// Where it appears.
        to: PathBuf,
        /// Paths under `to` to keep visible.
        keep: Vec<PathBuf>,
    },
    /// A fresh procfs for the pid namespace at `/proc`.
    Proc,
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
}

/// An empty directory created where a protected path does not exist yet, so the agent cannot
/// create it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// Where.
    pub path: PathBuf,
    /// Removed after the run (explicit `--protect`); the policy's own defaults (such as
    /// `.ralph/`) stay, empty, so they are not recreated every round.
    pub remove_after: bool,
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
    /// Refuse all TCP bind/connect (ABI 4+).
    pub deny_tcp: bool,
    /// Scope signals and abstract unix sockets to the sandbox (ABI 6+).
    pub scope: bool,
}

/// The seccomp filter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeccompPlan {
    /// Syscalls refused with EPERM: (name, number).
    pub deny: Vec<(String, i64)>,
    /// socket()/socketpair() of any family but AF_UNIX refused.
    pub deny_inet_sockets: bool,
    /// personality(2) limited to PER_LINUX.
    pub restrict_personality: bool,
    /// clone(2) with namespace flags refused; clone3(2) answers ENOSYS.
    pub deny_namespace_clone: bool,
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
    /// A pid namespace (the tree dies with its init).
    pub pid_namespace: bool,
    /// A private mount namespace.
    pub mount_namespace: bool,
    /// A private network namespace with only loopback.
    pub net_namespace: bool,
    /// A private IPC namespace.
    pub ipc_namespace: bool,
    /// Mount steps.
    pub mounts: Vec<MountStep>,
    /// Missing protected paths to create as empty read-only placeholders.
    pub placeholders: Vec<Placeholder>,
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
    /// What this plan enforces.
    pub enforcement: Enforcement,
}

fn unavailable(restriction: impl Into<String>, reason: impl Into<String>) -> SandboxError {
    SandboxError::unavailable(restriction, reason)
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

/// Resolves a plan, failing closed when the host cannot enforce what the mode needs.
pub fn resolve(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
) -> Result<SandboxPlan, SandboxError> {
    let mode = req.mode;
    let mut e = Enforcement::new(BackendKind::Native, mode);
    let fs = &policy.filesystem;

    // Network.
    let network = req.network.unwrap_or(policy.network.default);
    if network == Network::Full && !policy.network.allow_full {
        return Err(SandboxError::invalid(
            "network",
            format!("mode `{mode}` does not allow `--network full`"),
        ));
    }
    let net_off = network == Network::None;

    // Namespaces: root creates them directly; anyone else needs a user namespace first.
    let root = host.euid == 0;
    let need_mount_ns = !fs.unrestricted;
    let need_userns = !root;
    if need_userns {
        if let Err(reason) = &host.user_namespaces {
            if mode != Mode::FullAccess || net_off {
                return Err(unavailable(
                    "namespaces (user namespace needed by a non-root runner)",
                    reason.clone(),
                ));
            }
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
    let landlock = if fs.unrestricted {
        e.record(
            Restriction::Filesystem,
            Level::NotRequested,
            "full-access: no filesystem restriction",
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
        if !req.protect.is_empty() {
            return Err(SandboxError::invalid(
                "protect",
                "protected paths need a filesystem sandbox; mode `full-access` has none",
            ));
        }
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
        let mut read: Vec<PathBuf> = Vec::new();
        let mut skipped: Vec<String> = Vec::new();
        for p in &fs.read {
            if exists(p) {
                read.push(p.clone());
            } else {
                skipped.push(p.display().to_string());
            }
        }
        for p in &req.read {
            if !exists(p) {
                return Err(SandboxError::invalid(
                    "read",
                    format!("`{}` does not exist", p.display()),
                ));
            }
            read.push(p.clone());
        }
        read.push(PathBuf::from("/proc"));
        read.extend(req.private.readable.iter().cloned());
        let mut write: Vec<PathBuf> = vec![req.private.home.clone(), req.private.tmp.clone()];
        write.extend(req.private.writable.iter().cloned());
        match fs.workspace {
            WorkspaceAccess::Write => write.push(req.workspace.clone()),
            WorkspaceAccess::Read => read.push(req.workspace.clone()),
        }
        if !req.write.is_empty() {
            if !fs.extra_write {
                return Err(SandboxError::invalid(
                    "write",
                    format!("mode `{mode}` does not allow extra writable directories"),
                ));
            }
            for p in &req.write {
                if !p.is_dir() {
                    return Err(SandboxError::invalid(
                        "write",
                        format!("`{}` is not a directory", p.display()),
                    ));
                }
                write.push(p.clone());
            }
        }
        // The runner's own state stays unreadable: no rule may cover it.
        for f in &req.forbidden {
            if let Some(p) = read.iter().chain(write.iter()).find(|p| f.starts_with(p)) {
                return Err(SandboxError::invalid(
                    "state-dir",
                    format!(
                        "the runner's state `{}` lies inside the sandbox-visible path `{}`; move the state directory elsewhere",
                        f.display(),
                        p.display()
                    ),
                ));
            }
        }
        let devices: Vec<PathBuf> = fs.devices.iter().filter(|p| exists(p)).cloned().collect();
        let detail = if skipped.is_empty() {
            format!(
                "landlock abi {abi}: {} readable and {} writable trees",
                read.len(),
                write.len()
            )
        } else {
            format!(
                "landlock abi {abi}: {} readable and {} writable trees (absent, skipped: {})",
                read.len(),
                write.len(),
                skipped.join(", ")
            )
        };
        e.record(Restriction::Filesystem, Level::Full, detail);

        // Mounts: protected paths first (they live in the workspace), then the hidden secrets,
        // the private /tmp, and the pid namespace's /proc.
        let mut protected = 0;
        if fs.workspace == WorkspaceAccess::Write {
            for (rel, explicit) in policy
                .protect
                .paths
                .iter()
                .map(|p| (p, false))
                .chain(req.protect.iter().map(|p| (p, true)))
            {
                match protect_step(&req.workspace, rel, explicit)? {
                    Protect::Bind(path) => {
                        mounts.push(MountStep::ProtectReadOnly { path });
                        protected += 1;
                    }
                    Protect::Placeholder(path) => {
                        placeholders.push(Placeholder {
                            path: path.clone(),
                            remove_after: explicit,
                        });
                        mounts.push(MountStep::ProtectReadOnly { path });
                        protected += 1;
                    }
                    Protect::Skip => {}
                }
            }
            e.record(
                Restriction::ProtectedPaths,
                Level::Full,
                format!("{protected} path(s) bind-mounted read-only"),
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
            match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => mounts.push(MountStep::HideDir { path: p.clone() }),
                Ok(_) => mounts.push(MountStep::HideFile { path: p.clone() }),
                Err(_) => continue,
            }
            hidden += 1;
        }
        // The private TMPDIR also appears at /tmp; whatever the sandbox needs under the host's
        // /tmp (a workspace, the round's directories) is bound back at its own path.
        let tmp = PathBuf::from("/tmp");
        let mut keep: Vec<PathBuf> = read
            .iter()
            .chain(write.iter())
            .filter(|p| p.starts_with(&tmp) && **p != tmp)
            .cloned()
            .collect();
        keep.sort();
        keep.dedup();
        // A kept path inside another kept path comes along with it.
        let keep: Vec<PathBuf> = keep
            .iter()
            .filter(|p| !keep.iter().any(|q| q != *p && p.starts_with(q)))
            .cloned()
            .collect();
        mounts.push(MountStep::BindPrivate {
            from: req.private.tmp.clone(),
            to: tmp,
            keep,
        });
        mounts.push(MountStep::Proc);
        e.record(
            Restriction::HiddenSecrets,
            Level::Full,
            format!("{hidden} secret path(s) masked with empty mode-000 mounts"),
        );
        Some(LandlockPlan {
            abi,
            read,
            write,
            devices,
            deny_tcp: net_off && abi >= 4,
            scope: abi >= 6,
        })
    };
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
    if net_off {
        if !can_ns {
            return Err(unavailable(
                "network isolation",
                "no network namespace can be created",
            ));
        }
        let tcp = if landlock.as_ref().is_some_and(|l| l.deny_tcp) {
            ", landlock denies tcp"
        } else {
            ""
        };
        e.record(
            Restriction::Network,
            Level::Full,
            format!("private network namespace (loopback only), non-AF_UNIX sockets refused{tcp}"),
        );
    } else {
        e.record(Restriction::Network, Level::NotRequested, "host network");
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
    let memory = match (req.limits.memory_bytes, policy.limits.memory.map(|m| m.0)) {
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

    Ok(SandboxPlan {
        mode,
        user_namespace,
        pid_namespace: can_ns,
        mount_namespace: need_mount_ns,
        net_namespace: net_off,
        ipc_namespace: need_mount_ns,
        mounts,
        placeholders,
        landlock,
        seccomp: SeccompPlan {
            deny,
            deny_inet_sockets: net_off,
            restrict_personality: policy.syscalls.restrict_personality,
            deny_namespace_clone: policy.syscalls.deny_namespace_clone,
        },
        drop_capabilities: true,
        open_files,
        file_size,
        nproc,
        memory,
        pids,
        enforcement: e,
    })
}

enum Protect {
    Bind(PathBuf),
    Placeholder(PathBuf),
    Skip,
}

/// How to protect `rel` inside `workspace`: bind what exists; for what does not exist yet,
/// create an empty read-only placeholder so it cannot be created. A policy default whose parent
/// is missing is skipped (protecting `.git/hooks` must not stop `git init`); an explicit
/// `--protect` gets its first missing component as the placeholder.
fn protect_step(workspace: &Path, rel: &Path, explicit: bool) -> Result<Protect, SandboxError> {
    let path = workspace.join(rel);
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if !meta.file_type().is_symlink() {
            return Ok(Protect::Bind(path));
        }
        // A symlinked protected path: protect what it points to, if that is in the workspace
        // (anything outside is not writable anyway).
        return match std::fs::canonicalize(&path) {
            Ok(target) if target.starts_with(workspace) => Ok(Protect::Bind(target)),
            Ok(_) | Err(_) => Ok(Protect::Skip),
        };
    }
    let mut first_missing = workspace.to_path_buf();
    for c in rel.components() {
        first_missing.push(c);
        if !exists(&first_missing) {
            break;
        }
    }
    if first_missing == path || explicit {
        Ok(Protect::Placeholder(first_missing))
    } else {
        Ok(Protect::Skip)
    }
}

#[cfg(test)]
mod tests;
