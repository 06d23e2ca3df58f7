//! A container's bind mounts, every one at its host path: the workspace, the job's `--read`,
//! `--write` and `--socket` paths, the run's private directories, the protected paths (their
//! parents pinned); sorted, merged, and each checked the same way whoever asked for it.

use std::path::PathBuf;

use super::BindMount;
use crate::beneath::TreePath;
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::Guarded;
use crate::plan::paths;
use crate::plan::probe::FsProbe;
use crate::policy::admit;
use crate::policy::{Policy, WorkspaceAccess};
use crate::spec::SandboxRequest;

/// Whether the workspace is mounted writable (full-access's is: it has no filesystem sandbox).
pub(super) fn workspace_writable(policy: &Policy) -> bool {
    let fs = &policy.filesystem;
    fs.unrestricted || fs.workspace == WorkspaceAccess::Write
}

fn mount(path: &std::path::Path, read_only: bool, origin: &'static str) -> BindMount {
    BindMount {
        path: path.to_path_buf(),
        read_only,
        origin,
    }
}

/// The workspace, the job's paths (each checked on the host) and the run's private
/// directories; records the filesystem line. In every mode, full-access included (natively a
/// full-access round binds nothing and checks none of them): a backend difference, kept.
pub(super) fn request_mounts(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    e: &mut Enforcement,
) -> Result<Vec<BindMount>, SandboxError> {
    let unrestricted = policy.filesystem.unrestricted;
    let mut mounts = vec![mount(
        &req.workspace,
        !workspace_writable(policy),
        "workspace",
    )];
    for p in &req.read {
        paths::check_read(probe, p)?;
        mounts.push(mount(p, true, "read"));
    }
    for p in &req.write {
        paths::check_write(probe, p)?;
        mounts.push(mount(p, false, "write"));
    }
    // Granted sockets: mounted where no other mount shows them already.
    for s in &req.sockets {
        paths::check_socket(probe, s)?;
        let shown = std::iter::once(&req.workspace)
            .chain(&req.read)
            .chain(&req.write)
            .any(|t| s.starts_with(t));
        if !shown {
            mounts.push(mount(s, true, "socket"));
        }
    }
    // HOME and TMPDIR are size-limited tmpfs mounts (see `scratch`), not binds.
    mounts.extend(
        req.private
            .writable
            .iter()
            .map(|p| mount(p, false, "private directory")),
    );
    mounts.extend(
        req.private
            .readable
            .iter()
            .map(|p| mount(p, true, "private directory")),
    );
    let requested = mounts.len();
    e.record(
        Restriction::Filesystem,
        if unrestricted {
            Level::Partial
        } else {
            Level::Full
        },
        format!(
            "read-only image root, tmpfs /tmp, {requested} bind mount(s) ({} read-only); nothing else of the host{}",
            mounts.iter().filter(|m| m.read_only).count(),
            if unrestricted {
                "; full-access in docker: workspace writable, no host filesystem"
            } else {
                ""
            }
        ),
    );
    Ok(mounts)
}

/// Run-owned directories and files handed to the container's user: a root runner's, when that
/// user is not root.
pub(super) fn hand_over(req: &SandboxRequest, runner_euid: u32, uid: u32) -> Vec<PathBuf> {
    if runner_euid != 0 || uid == 0 {
        return Vec::new();
    }
    [&req.private.home, &req.private.tmp]
        .into_iter()
        .chain(&req.private.writable)
        .chain(&req.private.readable)
        .cloned()
        .collect()
}

/// Protected paths, resolved without following a symlink: each parent directory bound onto
/// itself (a mount point cannot be renamed), the path itself bound read-only.
pub(super) fn protected(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    mounts: &mut Vec<BindMount>,
    e: &mut Enforcement,
) -> Result<Guarded, SandboxError> {
    if policy.filesystem.unrestricted {
        e.record(
            Restriction::ProtectedPaths,
            Level::NotRequested,
            "full-access",
        );
        return Ok(Guarded::default());
    }
    if policy.filesystem.workspace != WorkspaceAccess::Write {
        e.record(
            Restriction::ProtectedPaths,
            Level::Full,
            "the whole workspace is read-only",
        );
        return Ok(Guarded::default());
    }
    let set = probe.protected(policy, req)?;
    let (anchors, protected) = (set.anchors, set.protected);
    let guard = GitGuard::new(
        &req.workspace,
        &req.write,
        protected.iter().map(TreePath::full).collect(),
    );
    e.record(
        Restriction::ProtectedPaths,
        Level::Full,
        format!(
            "{} path(s) bound read-only, their parents pinned against rename; {} path(s) kept absent; git repositories the run creates or changes in {} writable tree(s) made safe after it",
            protected.len(),
            set.absent.len(),
            guard.trees.len()
        ),
    );
    mounts.extend(
        anchors
            .iter()
            .map(|at| mount(&at.full(), false, "protected path's parent")),
    );
    mounts.extend(
        protected
            .iter()
            .map(|at| mount(&at.full(), true, "protected path")),
    );
    Ok(Guarded {
        placeholders: set.placeholders,
        absent: set.absent,
        watch: set.watch,
        protected,
        git: Some(guard),
    })
}

/// Parents before children; the same path twice is writable only if every mount says so (a
/// protected path stays read-only whatever else names it). Then every mount, whatever asked for
/// it, passes the same checks ([`check_mount`]).
pub(super) fn sort_and_check(
    probe: &dyn FsProbe,
    mounts: &mut Vec<BindMount>,
    sockets: &[PathBuf],
    forbidden: &[PathBuf],
) -> Result<(), SandboxError> {
    mounts.sort_by(|a, b| a.path.cmp(&b.path));
    mounts.dedup_by(|later, earlier| {
        let same = later.path == earlier.path;
        if same {
            earlier.read_only |= later.read_only;
        }
        same
    });
    for m in mounts.iter() {
        check_mount(probe, m, sockets, forbidden)?;
    }
    Ok(())
}

/// The checks every bind mount passes, whoever asked for it: its path is UTF-8 (the engine
/// takes a mount's paths as strings: a lossy one would name another path, or none), its source
/// is free of symlinks (the engine resolves a source path itself, following them, and a round
/// could have planted one), it is not and does not contain an engine socket (a command that
/// reaches one controls the host), and it does not contain the runner's own state.
pub(super) fn check_mount(
    probe: &dyn FsProbe,
    m: &BindMount,
    sockets: &[PathBuf],
    forbidden: &[PathBuf],
) -> Result<(), SandboxError> {
    let flag = m.origin;
    if m.path.to_str().is_none() {
        return Err(SandboxError::invalid(
            flag,
            format!(
                "{:?} is not UTF-8: the container engine takes a mount's paths as strings and cannot name it; rename it, or run with the native backend",
                m.path
            ),
        ));
    }
    if let Some(s) = sockets.iter().find(|s| s.starts_with(&m.path)) {
        return Err(SandboxError::invalid(
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
    match probe.first_symlink(&m.path) {
        Ok(None) => Ok(()),
        Ok(Some(link)) => Err(SandboxError::invalid(
            flag,
            format!(
                "`{}` resolves through the symlink `{}`; the engine would mount what it points to, so every mounted path must be real",
                m.path.display(),
                link.display()
            ),
        )),
        Err(e) => Err(SandboxError::invalid(
            flag,
            format!("cannot check `{}`: {e}", m.path.display()),
        )),
    }
}
