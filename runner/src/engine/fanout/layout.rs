//! Each attempt's own workspace (SPEC §13): an overlay whose lower layer is the job's workspace
//! and whose upper layer takes every write the attempt makes (`<state-dir>/attempts/<job>.<n>`
//! the mount point, `<job>.<n>.layer/` its layers: [`crate::provision::layered`]), so an attempt
//! costs a mount and the disk of what it changes. Where an overlay cannot be mounted or used (a
//! runner without `CAP_SYS_ADMIN`; a workspace overlayfs refuses as a lower layer; a root-owned
//! workspace, whose rounds run as the agent user through an idmapped mount of it, and overlayfs
//! cannot be idmapped here), a full copy of the tree ([`crate::cache::copy`]). The workspace is not written while its attempts run (the job
//! holds its lock and applies the winner's changes only after every attempt ended), as an
//! overlay's lower layer must not be.
//!
//! An attempt's job unmounts its overlay when it ends; [`open`] mounts the winner's again to
//! read it. [`remove`] unmounts and deletes a view (never writing through a mount: removing a
//! mounted overlay's entries would only write whiteouts). Views left by a killed runner are
//! removed by [`sweep`] once their job is no longer running.

use std::path::{Path, PathBuf};

use crate::provision::layered;

/// How an attempt's workspace is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// An overlay on the workspace.
    Overlay,
    /// A copy of the workspace.
    Copy,
}

impl Layout {
    /// Its name in the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Layout::Overlay => "overlay",
            Layout::Copy => "copy",
        }
    }
}

/// An attempt's workspace as made.
#[derive(Clone, Copy, Debug)]
pub struct Made {
    /// How.
    pub layout: Layout,
    /// Files copied (0 for an overlay).
    pub files: u64,
    /// Bytes copied (0 for an overlay).
    pub bytes: u64,
}

/// `<state-dir>/attempts`.
pub fn attempts_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("attempts")
}

/// Makes `at` a view of `workspace`: an overlay if one can be mounted, else a copy (owned by
/// `owner` when given).
/// `agent`: the user a root runner's rounds run as (`None` for another runner).
pub fn make(
    workspace: &Path,
    at: &Path,
    owner: Option<(u32, u32)>,
    agent: Option<(u32, u32)>,
) -> Result<Made, String> {
    remove(at);
    // A root runner's rounds run as the workspace's owner when that is not root (else as the
    // agent user, through an idmapped mount of it); overlayfs cannot be idmapped, so only a
    // workspace the rounds' user owns is overlaid.
    let owned_by_agent =
        owner.is_some_and(|(u, g)| u != 0 && g != 0) || (agent.is_some() && owner == agent);
    if nix::unistd::geteuid().is_root() && owned_by_agent {
        match overlay(workspace, at) {
            Ok(()) => {
                return Ok(Made {
                    layout: Layout::Overlay,
                    files: 0,
                    bytes: 0,
                });
            }
            Err(why) => {
                tracing::info!(path = %at.display(), reason = %why, "an attempt's workspace is a copy: no overlay ({why})");
                remove(at);
            }
        }
    }
    let c = crate::cache::copy::copy_tree(workspace, at, owner).map_err(|e| e.to_string())?;
    Ok(Made {
        layout: Layout::Copy,
        files: c.files,
        bytes: c.bytes,
    })
}

fn overlay(workspace: &Path, at: &Path) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::create_dir(at).map_err(|e| format!("create `{}`: {e}", at.display()))?;
    layered::create(at, workspace).map_err(|e| e.to_string())?;
    // The overlay's root shows its upper directory's owner and mode: the workspace's.
    let m = std::fs::metadata(workspace).map_err(|e| format!("`{}`: {e}", workspace.display()))?;
    let upper = layered::layer_dir(at).join("upper");
    std::os::unix::fs::chown(&upper, Some(m.uid()), Some(m.gid()))
        .and_then(|()| {
            std::fs::set_permissions(&upper, std::fs::Permissions::from_mode(m.mode() & 0o7777))
        })
        .map_err(|e| format!("`{}`: {e}", upper.display()))?;
    layered::mount(at).map_err(|e| e.to_string())
}

/// Mounts an overlay view again (its job unmounted it); nothing for a copy.
pub fn open(at: &Path, layout: Layout) -> Result<(), crate::provision::overlay::OverlayError> {
    match layout {
        Layout::Overlay => layered::mount(at),
        Layout::Copy => Ok(()),
    }
}

/// Removes the view at `at` (unmounted first), whatever its layout; a failure is logged.
pub fn remove(at: &Path) {
    if layered::is_layered(at) {
        if let Err(e) = layered::remove(at) {
            tracing::warn!(path = %at.display(), error = %e, "failed to remove an attempt's overlay `{}`: {e}", at.display());
            return;
        }
    }
    if let Err(e) = std::fs::remove_dir_all(at) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(path = %at.display(), error = %e, "failed to remove an attempt's workspace `{}`: {e}", at.display());
        }
    }
}

/// Removes the views whose fan-out job `running` does not say still runs (a killed runner's);
/// returns how many.
pub fn sweep(state_dir: &Path, running: impl Fn(&str) -> bool) -> usize {
    let dir = attempts_dir(state_dir);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.ends_with(".layer") {
            continue;
        }
        let Some((job, _)) = name.rsplit_once('.') else {
            continue;
        };
        if running(job) {
            continue;
        }
        remove(&e.path());
        n += 1;
    }
    n
}
