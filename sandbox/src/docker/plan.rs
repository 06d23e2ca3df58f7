//! The container plan: a mode's [`Policy`] and a job's [`SandboxRequest`] resolved into what
//! the container gets — bind mounts (every path at its host path, so the round's environment
//! needs no translation), the user, network, limits and the seccomp profile — plus the
//! enforcement report. Pure data; every refusal happens here, before the engine is asked.

use std::path::{Path, PathBuf};

use crate::beneath::{self, TreePath};
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::mode::{BackendKind, Mode, Network};
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::admit::{self, admit};
use crate::policy::{Policy, WorkspaceAccess, kernel_paths};
use crate::protect::{self, Placeholder};
use crate::spec::SandboxRequest;

use super::seccomp::{self, Profile};

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

fn invalid(field: &str, message: String) -> SandboxError {
    SandboxError::invalid(field, message)
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
    let (uid, gid) = owner_ids(workspace, "workspace")?;
    if runner_euid == 0 && mode != Mode::FullAccess && (uid == 0 || gid == 0) {
        return crate::identity::agent_user(agent_user, Path::new("/etc")).map(|i| i.uid);
    }
    Ok(uid)
}

/// The owner (uid, gid) of `path`, a refusal naming `field` when it cannot be read.
fn owner_ids(path: &Path, field: &str) -> Result<(u32, u32), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path)
        .map(|m| (m.uid(), m.gid()))
        .map_err(|err| invalid(field, format!("`{}`: {err}", path.display())))
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

/// The checks every bind mount passes, whoever asked for it: its source is free of symlinks
/// (the engine would mount what they point to, and a round could have planted one), it is not
/// and does not contain an engine socket (a command that reaches one controls the host), and it
/// does not contain the runner's own state.
fn check_mount(
    m: &BindMount,
    sockets: &[PathBuf],
    forbidden: &[PathBuf],
) -> Result<(), SandboxError> {
    let flag = m.origin;
    if let Some(s) = sockets.iter().find(|s| s.starts_with(&m.path)) {
        return Err(invalid(
            flag,
            format!(
                "`{}` is or contains the container engine's socket `{}`: a command that can reach it controls the host; it is never mounted",
                m.path.display(),
                s.display()
            ),
        ));
    }
    if let Some(f) = forbidden.iter().find(|f| f.starts_with(&m.path)) {
        return Err(admit::state_visible(f, &m.path));
    }
    match beneath::first_symlink(&m.path) {
        Ok(None) => {}
        Ok(Some(link)) => {
            return Err(invalid(
                flag,
                format!(
                    "`{}` resolves through the symlink `{}`; the engine would mount what it points to, so every mounted path must be real",
                    m.path.display(),
                    link.display()
                ),
            ));
        }
        Err(e) => {
            return Err(invalid(
                flag,
                format!("cannot check `{}`: {e}", m.path.display()),
            ));
        }
    }
    Ok(())
}

/// The engine's masked paths ([`kernel_paths::MASKED`], in every mode) plus the policy's hidden
/// kernel paths (under `/proc` and `/sys`), in every mode but full-access.
fn masked_paths(policy: &Policy) -> Vec<String> {
    let mut out: Vec<String> = kernel_paths::MASKED
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    if !policy.filesystem.unrestricted {
        out.extend(
            policy
                .filesystem
                .hidden
                .iter()
                .filter(|p| p.starts_with("/proc") || p.starts_with("/sys"))
                .map(|p| p.display().to_string()),
        );
    }
    out.sort();
    out.dedup();
    out
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
    size: &crate::policy::host_share::HostSize,
) -> Result<ContainerPlan, SandboxError> {
    let admitted = admit(policy, req, BackendKind::Docker)?;
    let mode = req.mode;
    let fs = &policy.filesystem;
    let mut e = Enforcement::new(BackendKind::Docker, mode);
    let network = admitted.network;
    let meta = std::fs::metadata(&req.workspace)
        .map_err(|err| invalid("workspace", format!("`{}`: {err}", req.workspace.display())))?;
    let owner = {
        use std::os::unix::fs::MetadataExt;
        (meta.uid(), meta.gid())
    };
    // Who the command is: the workspace's owner, or on a root-owned workspace of a root runner
    // the agent user, the workspace (and each root-owned `--write` tree) bound idmapped so its
    // files are the agent's inside and what it creates is the owner's on the host (as
    // natively; Docker Engine 20.10 cannot idmap a bind, so the runner makes the idmapped
    // mount the bind takes as its source, `super::idmap`).
    let (mut uid, mut gid) = owner;
    let root_owned = uid == 0 || gid == 0;
    let mut idmapped = Vec::new();
    let workspace_rw = fs.unrestricted || fs.workspace == WorkspaceAccess::Write;
    if fs.unrestricted {
        e.record(
            Restriction::Identity,
            Level::NotRequested,
            format!("full-access: the workspace's owner, uid {uid} gid {gid}"),
        );
    } else if root_owned && runner_euid == 0 {
        let agent = crate::plan::command_identity(&crate::plan::probe::HostFs, req)?;
        let map = |(disk_uid, disk_gid): (u32, u32)| crate::plan::OwnerMap {
            disk_uid,
            disk_gid,
            uid: agent.uid,
            gid: agent.gid,
        };
        idmapped.push((req.workspace.clone(), map(owner), !workspace_rw));
        for w in &req.write {
            let o = owner_ids(w, "write")?;
            if o.0 == 0 || o.1 == 0 {
                idmapped.push((w.clone(), map(o), false));
            }
        }
        e.record(
            Restriction::Identity,
            Level::Full,
            format!(
                "{}, uid {} gid {}, never host uid 0: the workspace is root's and bound idmapped (its files are the agent's inside, what it creates is uid {} gid {} on the host)",
                agent.name, agent.uid, agent.gid, owner.0, owner.1
            ),
        );
        (uid, gid) = (agent.uid, agent.gid);
    } else if root_owned {
        e.record(
            Restriction::Identity,
            Level::Partial,
            format!(
                "the workspace is root's: uid {uid} gid {gid} without any capability, with the set-id, device and init guards (an unprivileged runner cannot idmap it; chown the workspace to an unprivileged user)"
            ),
        );
    } else {
        e.record(
            Restriction::Identity,
            Level::Full,
            format!("the workspace's owner, uid {uid} gid {gid}, never host uid 0"),
        );
    }

    // Mounts: the workspace, the job's paths, the run's private directories.
    let mut mounts = vec![BindMount {
        path: req.workspace.clone(),
        read_only: !workspace_rw,
        origin: "workspace",
    }];
    for p in &req.read {
        if std::fs::symlink_metadata(p).is_err() {
            return Err(invalid("read", format!("`{}` does not exist", p.display())));
        }
        mounts.push(BindMount {
            path: p.clone(),
            read_only: true,
            origin: "read",
        });
    }
    for p in &req.write {
        if !p.is_dir() {
            return Err(invalid(
                "write",
                format!("`{}` is not a directory", p.display()),
            ));
        }
        mounts.push(BindMount {
            path: p.clone(),
            read_only: false,
            origin: "write",
        });
    }
    // Granted sockets: mounted where no other mount shows them already.
    for s in &req.sockets {
        if !crate::sockets::is_socket(s) {
            return Err(invalid(
                "socket",
                format!("`{}` is not a unix socket", s.display()),
            ));
        }
        let shown = std::iter::once(&req.workspace)
            .chain(&req.read)
            .chain(&req.write)
            .any(|t| s.starts_with(t));
        if !shown {
            mounts.push(BindMount {
                path: s.clone(),
                read_only: true,
                origin: "socket",
            });
        }
    }
    // HOME and TMPDIR are size-limited tmpfs mounts (see `scratch`), not binds.
    mounts.extend(req.private.writable.iter().map(|p| BindMount {
        path: p.clone(),
        read_only: false,
        origin: "private directory",
    }));
    mounts.extend(req.private.readable.iter().map(|p| BindMount {
        path: p.clone(),
        read_only: true,
        origin: "private directory",
    }));
    let chown = if runner_euid == 0 && uid != 0 {
        [&req.private.home, &req.private.tmp]
            .into_iter()
            .chain(&req.private.writable)
            .chain(&req.private.readable)
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let requested = mounts.len();
    e.record(
        Restriction::Filesystem,
        if fs.unrestricted {
            Level::Partial
        } else {
            Level::Full
        },
        format!(
            "read-only image root, tmpfs /tmp, {requested} bind mount(s) ({} read-only); nothing else of the host{}",
            mounts.iter().filter(|m| m.read_only).count(),
            if fs.unrestricted {
                "; full-access in docker: workspace writable, no host filesystem"
            } else {
                ""
            }
        ),
    );

    // Protected paths, resolved without following a symlink: each parent directory bound onto
    // itself (a mount point cannot be renamed), the path itself bound read-only.
    let mut placeholders = Vec::new();
    let mut absent = Vec::new();
    let mut watch = Vec::new();
    let mut protected_paths = Vec::new();
    let mut git = None;
    if fs.unrestricted {
        e.record(
            Restriction::ProtectedPaths,
            Level::NotRequested,
            "full-access",
        );
    } else if fs.workspace == WorkspaceAccess::Write {
        let set = protect::resolve(policy, req)?;
        let (anchors, protected) = (set.anchors, set.protected);
        protected_paths.extend(protected.iter().cloned());
        let guard = GitGuard::new(
            &req.workspace,
            &req.write,
            protected.iter().map(TreePath::full).collect(),
        );
        placeholders.extend(set.placeholders);
        absent.extend(set.absent);
        watch.extend(set.watch);
        e.record(
            Restriction::ProtectedPaths,
            Level::Full,
            format!(
                "{} path(s) bound read-only, their parents pinned against rename; {} path(s) kept absent; git repositories the run creates or changes in {} writable tree(s) made safe after it",
                protected.len(),
                absent.len(),
                guard.trees.len()
            ),
        );
        git = Some(guard);
        mounts.extend(anchors.iter().map(|at| BindMount {
            path: at.full(),
            read_only: false,
            origin: "protected path's parent",
        }));
        mounts.extend(protected.iter().map(|at| BindMount {
            path: at.full(),
            read_only: true,
            origin: "protected path",
        }));
    } else {
        e.record(
            Restriction::ProtectedPaths,
            Level::Full,
            "the whole workspace is read-only",
        );
    }
    // Parents before children; the same path twice is writable only if every mount says so
    // (a protected path stays read-only whatever else names it).
    mounts.sort_by(|a, b| a.path.cmp(&b.path));
    mounts.dedup_by(|later, earlier| {
        let same = later.path == earlier.path;
        if same {
            earlier.read_only |= later.read_only;
        }
        same
    });
    // Every mount, whatever asked for it, passes the same checks: the engine resolves a source
    // path itself (following symlinks), so a source must be free of them; no engine socket and
    // none of the runner's own state may be in what is mounted.
    for m in &mounts {
        check_mount(m, sockets, &req.forbidden)?;
    }
    let mut masked = masked_paths(policy);
    // Unix sockets in the mounted trees: masked unless granted.
    let candidates = std::iter::once(req.workspace.clone())
        .chain(req.read.iter().cloned())
        .chain(req.write.iter().cloned())
        .collect();
    let found = crate::sockets::scan(&crate::sockets::roots(candidates));
    let before = masked.len();
    masked.extend(
        found
            .sockets
            .iter()
            .filter(|s| !req.sockets.contains(s))
            .map(|s| s.display().to_string()),
    );
    e.record(
        Restriction::UnixSockets,
        if found.incomplete.is_empty() {
            Level::Full
        } else {
            Level::Partial
        },
        crate::plan::sockets_detail(
            masked.len() - before,
            req.sockets.len(),
            &found.incomplete,
            None,
        ),
    );
    let scratch_size = admitted.scratch_size;
    e.record(
        Restriction::ScratchSpace,
        Level::Full,
        format!("HOME, TMPDIR and /tmp: a tmpfs of {scratch_size} bytes each"),
    );
    if let Some(dir) = &req.private.report {
        e.record(
            Restriction::ReportDir,
            Level::Full,
            crate::report_dir::describe(dir),
        );
    }
    e.record(
        Restriction::HiddenSecrets,
        Level::Full,
        format!(
            "the host's /etc, /root and home directories are not mounted (the image has its own); {} kernel path(s) masked",
            masked.len()
        ),
    );

    // Network. `--network gateway`: the container's own network namespace with loopback only
    // (network mode none), where ralph's init makes the gateway's listeners and hands them to
    // the runner before the command exists (`super::gateway`), as the native init does.
    let families = admitted.socket_families;
    match network {
        Network::None => e.record(
            Restriction::Network,
            Level::Full,
            "network mode none (loopback only), non-AF_UNIX sockets refused",
        ),
        Network::Gateway => {
            e.record(
                Restriction::Network,
                Level::Full,
                crate::plan::gateway_detail(&req.gateway_ports, families.unwrap_or(&[]))
                    .replace("private network namespace", "network mode none"),
            );
            e.network = Some(crate::outcome::NetworkEnforced {
                network,
                gateway_ports: req.gateway_ports.clone(),
            });
        }
        Network::Full => e.record(Restriction::Network, Level::NotRequested, "bridge network"),
    }

    let seccomp =
        seccomp::profile(policy, families).map_err(|m| SandboxError::invalid("policy", m))?;
    e.record(
        Restriction::Syscalls,
        Level::Full,
        format!(
            "seccomp profile: {} rule(s), io_uring refused",
            seccomp.syscalls.len()
        ),
    );
    e.record(Restriction::Capabilities, Level::Full, "cap_drop ALL");
    e.record(
        Restriction::NoNewPrivs,
        Level::Full,
        "security_opt no-new-privileges",
    );
    e.record(
        Restriction::Environment,
        Level::Full,
        "only the request's environment",
    );
    e.record(
        Restriction::Descriptors,
        Level::Full,
        "a fresh container: only stdin, stdout and stderr",
    );
    e.record(
        Restriction::ProcessTree,
        Level::Full,
        "own pid namespace with an init; the container is killed and removed at the end",
    );
    e.record(Restriction::CoreDumps, Level::Full, "ulimit core 0");
    e.record(
        Restriction::Scoping,
        Level::Full,
        "own pid, ipc and network namespaces",
    );

    let memory = req
        .limits
        .memory_bytes
        .or(policy.limits.memory.and_then(|m| m.bytes(size)));
    let default_note = |asked: bool| if asked { "" } else { " (policy default)" };
    match memory {
        Some(m) => e.record(
            Restriction::Memory,
            Level::Full,
            format!(
                "cgroup memory {m} bytes, memory-swap the same{}",
                default_note(req.limits.memory_bytes.is_some())
            ),
        ),
        None => e.record(Restriction::Memory, Level::NotRequested, "no memory limit"),
    }
    let cpu_millis = req
        .limits
        .cpu_millis
        .or(policy.limits.cpus.map(|c| c.millis(size)));
    match cpu_millis {
        Some(m) => e.record(
            Restriction::Cpu,
            Level::Full,
            format!(
                "NanoCpus {}{}",
                m.saturating_mul(1_000_000),
                default_note(req.limits.cpu_millis.is_some())
            ),
        ),
        None => e.record(Restriction::Cpu, Level::NotRequested, "no cpu limit"),
    }
    let pids = req.limits.pids.or(policy.limits.pids);
    match pids {
        Some(n) => e.record(Restriction::Pids, Level::Full, format!("pids_limit {n}")),
        None => e.record(Restriction::Pids, Level::NotRequested, "no process limit"),
    }
    let open_files = req
        .limits
        .open_files
        .or(policy.limits.open_files)
        .map(|n| n.min(nofile_hard));
    match open_files {
        Some(n) => e.record(
            Restriction::OpenFiles,
            Level::Full,
            format!("ulimit nofile {n}"),
        ),
        None => e.record(
            Restriction::OpenFiles,
            Level::NotRequested,
            "engine default",
        ),
    }
    let file_size = req
        .limits
        .file_size_bytes
        .or(policy.limits.file_size.map(|s| s.0));
    match file_size {
        Some(n) => e.record(
            Restriction::FileSize,
            Level::Full,
            format!("ulimit fsize {n}"),
        ),
        None => e.record(Restriction::FileSize, Level::NotRequested, "engine default"),
    }
    if let Some(n) = memory.filter(|m| *m < 6 * 1024 * 1024) {
        return Err(invalid(
            "memory",
            format!("the docker engine needs at least 6 MiB of memory; {n} bytes requested"),
        ));
    }

    Ok(ContainerPlan {
        mode,
        image: req
            .image
            .clone()
            .unwrap_or_else(|| DEFAULT_IMAGE.to_owned()),
        uid,
        gid,
        mounts,
        placeholders,
        absent,
        watch,
        protected: protected_paths,
        git,
        chown,
        idmapped,
        scratch: vec![req.private.home.clone(), req.private.tmp.clone()],
        scratch_size,
        report_dir: req.private.report.clone(),
        gateway_ports: req.gateway_ports.clone(),
        masked,
        read_only: kernel_paths::read_only().map(str::to_owned).collect(),
        network,
        memory,
        pids,
        cpu_millis,
        open_files,
        file_size,
        seccomp,
        enforcement: e,
    })
}

#[cfg(test)]
mod tests;
