//! What a native run's own root hides or pins inside what it shows: the protected paths of the
//! writable trees (their parents anchored, the paths bound read-only), the policy's secrets and
//! the unix sockets found in the visible trees (masked unless granted).

use std::path::{Path, PathBuf};

use super::{Bind, MountStep};
use crate::beneath::TreePath;
use crate::error::SandboxError;
use crate::gitguard::GitGuard;
use crate::native::socket_walk::SocketWalk;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::Guarded;
use crate::plan::probe::{FsProbe, Kind};
use crate::plan::sockets_detail;
use crate::policy::{FilesystemPolicy, Policy, WorkspaceAccess};
use crate::sockets;
use crate::spec::SandboxRequest;

/// Protected paths: their ancestors anchored (no rename), then bound read-only; with a
/// read-only workspace there is nothing to protect.
pub(super) fn protected(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    mounts: &mut Vec<MountStep>,
    e: &mut Enforcement,
) -> Result<Guarded, SandboxError> {
    if policy.filesystem.workspace != WorkspaceAccess::Write {
        e.record(
            Restriction::ProtectedPaths,
            Level::Full,
            "the whole workspace is read-only",
        );
        return Ok(Guarded::default());
    }
    let set = probe.protected(policy, req)?;
    let protected = set.protected.len();
    let git = GitGuard::new(
        &req.workspace,
        &req.write,
        set.protected.iter().map(TreePath::full).collect(),
    );
    let trees = git.trees.len();
    let guarded = Guarded {
        placeholders: set.placeholders,
        absent: set.absent,
        watch: set.watch,
        protected: set.protected.clone(),
        git: Some(git),
    };
    mounts.extend(set.anchors.into_iter().map(|at| MountStep::Anchor { at }));
    mounts.extend(
        set.protected
            .into_iter()
            .map(|at| MountStep::ProtectReadOnly { at }),
    );
    e.record(
        Restriction::ProtectedPaths,
        Level::Full,
        format!("{protected} path(s) read-only, their parents pinned against rename; {} path(s) kept absent; git repositories the run creates or changes in {trees} writable tree(s) made safe after it", guarded.absent.len()),
    );
    Ok(guarded)
}

/// The policy's secrets under a bound tree or in the sandbox's own `/proc` (whose entries are
/// the host's), masked with empty mode-000 mounts; those this host does not have are skipped.
pub(super) fn hidden(
    probe: &dyn FsProbe,
    hidden: &[PathBuf],
    binds: &[Bind],
    mounts: &mut Vec<MountStep>,
    e: &mut Enforcement,
) {
    let mut count = 0;
    for p in hidden {
        if !binds.iter().any(|b| p.starts_with(&b.path)) && !p.starts_with("/proc") {
            continue;
        }
        match probe.kind(p) {
            Some(Kind::Dir) => mounts.push(MountStep::HideDir { path: p.clone() }),
            Some(_) => mounts.push(MountStep::HideFile { path: p.clone() }),
            None => continue,
        }
        count += 1;
    }
    e.record(
        Restriction::HiddenSecrets,
        Level::Full,
        format!("{count} secret path(s) masked with empty mode-000 mounts"),
    );
}

/// Unix sockets in visible trees (the policy's scanned trees that are bound, the job's own):
/// masked unless granted: the masks, in mount order. The writable trees that the git check walks (`git`) are left to that
/// walk, in the helper (one walk of each tree for both, [`SocketWalk`]); their protected paths,
/// which it never looks into, are scanned here.
pub(super) fn unix_sockets(
    probe: &dyn FsProbe,
    fs: &FilesystemPolicy,
    req: &SandboxRequest,
    binds: &[Bind],
    git: Option<&GitGuard>,
    abi: i32,
    e: &mut Enforcement,
) -> (Vec<MountStep>, Option<SocketWalk>) {
    let mut candidates: Vec<PathBuf> = fs
        .scan_sockets
        .iter()
        .filter(|p| binds.iter().any(|b| p.starts_with(&b.path)))
        .cloned()
        .collect();
    candidates.push(req.workspace.clone());
    candidates.extend(req.read.iter().cloned());
    candidates.extend(req.write.iter().cloned());
    if let Some(g) = git {
        candidates.retain(|c| !g.trees.iter().any(|t| c.starts_with(t)));
        candidates.extend(g.protected.iter().cloned());
    }
    let found = probe.scan_sockets(&sockets::roots(candidates));
    let masked: Vec<&Path> = found
        .sockets
        .iter()
        .filter(|s| !req.sockets.contains(s))
        .map(PathBuf::as_path)
        .collect();
    let masks = masked
        .iter()
        .map(|path| MountStep::HideFile {
            path: path.to_path_buf(),
        })
        .collect();
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
    let walk = git.map(|_| SocketWalk {
        granted: req.sockets.clone(),
        masked: masked.len(),
        incomplete: found.incomplete.clone(),
        abi,
    });
    (masks, walk)
}
