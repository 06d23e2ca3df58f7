//! The sandbox's own root (every mode but full-access): a tmpfs holding only the policy's
//! readable trees that exist on this host, the job's own paths and the run's private
//! directories, with the Landlock ruleset that matches it.

use std::path::PathBuf;

use super::fs::FsPlan;
use super::{Bind, LandlockPlan, MIN_LANDLOCK_ABI_FS, RootPlan, identity, masks, unavailable};
use crate::error::SandboxError;
use crate::host::Host;
use crate::identity::Ids;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::paths;
use crate::plan::probe::{FsProbe, Kind};
use crate::policy::admit::{self, Admitted};
use crate::policy::{FilesystemPolicy, Policy, WorkspaceAccess};
use crate::spec::SandboxRequest;

/// The policy's readable trees as this host has them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct PolicyTrees {
    /// Trees bound read-only.
    pub binds: Vec<Bind>,
    /// Top-level symlinks recreated as on the host.
    pub symlinks: Vec<(PathBuf, PathBuf)>,
    /// Trees this host does not have (or whose link cannot be read).
    pub skipped: Vec<String>,
}

/// The own root of `req` under `policy`, refusing a host whose Landlock cannot hold it.
pub(super) fn own_root(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    admitted: &Admitted,
    e: &mut Enforcement,
) -> Result<FsPlan, SandboxError> {
    let fs = &policy.filesystem;
    let abi = landlock_abi(host)?;
    let PolicyTrees {
        mut binds,
        symlinks,
        skipped,
    } = policy_trees(probe, fs);
    request_binds(probe, fs, req, &mut binds)?;
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
    let (identity, hand_over) = identity::command(probe, req, host, &mut binds, e)?;
    let devices: Vec<PathBuf> = fs
        .devices
        .iter()
        .filter(|p| probe.exists(p))
        .cloned()
        .collect();
    let (read, write) = landlock_paths(req, &binds);
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
    let mut mounts = Vec::new();
    let guarded = masks::protected(probe, policy, req, &mut mounts, e)?;
    masks::hidden(probe, &fs.hidden, &binds, &mut mounts, e);
    let (socket_masks, socket_walk) =
        masks::unix_sockets(probe, fs, req, &binds, guarded.git.as_ref(), abi, e);
    mounts.extend(socket_masks);
    let scratch_size = admitted.scratch_size;
    let scratch_owner = identity
        .as_ref()
        .map_or((host.euid, host.egid), |i: &Ids| (i.uid, i.gid));
    e.record(
        Restriction::ScratchSpace,
        Level::Full,
        format!("HOME and TMPDIR: a tmpfs of {scratch_size} bytes each"),
    );
    let root = RootPlan {
        binds,
        symlinks,
        devices: devices.clone(),
        tmp: req.private.tmp.clone(),
        home: req.private.home.clone(),
        scratch_size,
        scratch_owner,
    };
    let landlock = LandlockPlan {
        abi,
        read,
        write,
        devices,
        list: vec![PathBuf::from("/"), PathBuf::from("/dev")],
        deny_tcp: admitted.network == crate::mode::Network::None && abi >= 4,
        scope: abi >= 6,
    };
    Ok(FsPlan {
        mounts,
        guarded,
        socket_walk,
        identity,
        hand_over,
        root: Some(root),
        landlock: Some(landlock),
    })
}

/// The Landlock ABI, refusing a host without Landlock or with one too old for every write path.
fn landlock_abi(host: &Host) -> Result<i32, SandboxError> {
    let abi = host
        .landlock
        .abi()
        .ok_or_else(|| unavailable("filesystem isolation (landlock)", host.landlock.reason()))?;
    if abi < MIN_LANDLOCK_ABI_FS {
        return Err(unavailable(
            "filesystem isolation (landlock)",
            format!(
                "landlock abi {abi} cannot restrict truncate(2); abi {MIN_LANDLOCK_ABI_FS} (Linux 6.2) or newer is needed"
            ),
        ));
    }
    Ok(abi)
}

/// The policy's readable trees: bound read-only when they exist, recreated when they are
/// symlinks (`/bin -> usr/bin`), skipped when this host does not have them.
pub(super) fn policy_trees(probe: &dyn FsProbe, fs: &FilesystemPolicy) -> PolicyTrees {
    let mut out = PolicyTrees::default();
    for p in &fs.read {
        match probe.kind(p) {
            Some(Kind::Symlink) => match probe.read_link(p) {
                Some(target) => out.symlinks.push((p.clone(), target)),
                None => out.skipped.push(p.display().to_string()),
            },
            Some(_) => out.binds.push(Bind {
                path: p.clone(),
                write: false,
                idmap: None,
            }),
            None => out.skipped.push(p.display().to_string()),
        }
    }
    out
}

fn bind(path: &std::path::Path, write: bool) -> Bind {
    Bind {
        path: path.to_path_buf(),
        write,
        idmap: None,
    }
}

/// The job's own binds after the policy's: each `--read` path (which must exist), each granted
/// socket no bound tree shows already, the private readable directories, the workspace, each
/// `--write` directory and the private writable directories.
pub(super) fn request_binds(
    probe: &dyn FsProbe,
    fs: &FilesystemPolicy,
    req: &SandboxRequest,
    binds: &mut Vec<Bind>,
) -> Result<(), SandboxError> {
    for p in &req.read {
        paths::check_read(probe, p)?;
        binds.push(bind(p, false));
    }
    // Granted sockets: made visible where no bound tree shows them already (a socket needs
    // no write permission on its mount; one in the workspace stays in its idmapped view).
    for s in &req.sockets {
        paths::check_socket(probe, s)?;
        let shown = std::iter::once(&req.workspace)
            .chain(&req.read)
            .chain(&req.write)
            .chain(&fs.read)
            .any(|t| s.starts_with(t));
        if !shown {
            binds.push(bind(s, false));
        }
    }
    binds.extend(req.private.readable.iter().map(|p| bind(p, false)));
    binds.push(bind(&req.workspace, fs.workspace == WorkspaceAccess::Write));
    for p in &req.write {
        paths::check_write(probe, p)?;
        binds.push(bind(p, true));
    }
    binds.extend(req.private.writable.iter().map(|p| bind(p, true)));
    Ok(())
}

/// Landlock's read and write lists: the bound trees, `/proc`, the scratch tmpfs and the report
/// directory.
fn landlock_paths(req: &SandboxRequest, binds: &[Bind]) -> (Vec<PathBuf>, Vec<PathBuf>) {
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
    (read, write)
}

/// Records how signals and abstract unix sockets are scoped (with Landlock only).
pub(super) fn record_scoping(landlock: Option<&LandlockPlan>, e: &mut Enforcement) {
    let Some(ll) = landlock else {
        return;
    };
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
