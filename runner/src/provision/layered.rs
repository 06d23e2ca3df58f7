//! Layered workspaces: a repository job's workspace as an overlay ([`super::overlay`]) of a base
//! tree shared by every job at that commit ([`super::base_tree`]) and the job's own upper layer,
//! so a job costs a mount and the disk of what it changes, not a checkout.
//!
//! ```text
//! <state-dir>/workspaces/<job-id>/              the mount point (empty while no job runs)
//! <state-dir>/workspaces/<job-id>.layer/upper/  what the job changed
//! <state-dir>/workspaces/<job-id>.layer/work/   overlayfs' scratch
//! <state-dir>/workspaces/<job-id>.layer/lower   the base tree's path (one line)
//! <state-dir>/workspaces/<job-id>.layer/staging-index   marks: made after the tree's
//! <state-dir>/workspaces/<job-id>.layer/walk-listings   staging index, walk listings
//! ```
//!
//! The overlay is mounted while the job runs (provisioning, a resume) and unmounted before its
//! `job_finished`; a runner killed meanwhile leaves a mount that start-up recovery or the
//! retention sweep removes. The `lower` file is also the base tree's reference count: a tree no
//! layer names is removed by [`super::base_tree::sweep`].

use std::path::{Path, PathBuf};

use super::ProvisionError;
use super::overlay::{self, Layers, OverlayError};

/// The directory of `workspace`'s layers.
pub fn layer_dir(workspace: &Path) -> PathBuf {
    super::beside(workspace, ".layer")
}

/// Whether `workspace` is a layered one.
pub fn is_layered(workspace: &Path) -> bool {
    layer_dir(workspace).join("lower").is_file()
}

/// The base tree a layered workspace stands on.
pub fn lower_of(workspace: &Path) -> Result<PathBuf, ProvisionError> {
    let file = layer_dir(workspace).join("lower");
    let text = std::fs::read_to_string(&file)
        .map_err(|e| ProvisionError::io("read the base tree of", &file, e))?;
    Ok(PathBuf::from(text.trim_end_matches('\n')))
}

/// Makes `workspace`'s (fresh, empty) layers on `lower`: the `lower` file is written last, so a
/// half-made layer directory is not a layered workspace.
pub fn create(workspace: &Path, lower: &Path) -> Result<(), ProvisionError> {
    let dir = layer_dir(workspace);
    remove(workspace)?;
    for sub in ["upper", "work"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d).map_err(|e| ProvisionError::io("create the layer", &d, e))?;
    }
    let file = dir.join("lower");
    let mut line = lower.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    std::fs::write(&file, line).map_err(|e| ProvisionError::io("write the base tree of", &file, e))
}

/// A file kept beside a base tree that a workspace's layers may have been made after (a mark
/// in the layer directory, the runner's: no round sees it). Only a workspace made after such a
/// file may use it: everything its job changes is newer than what the file records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseFile {
    /// The tree's staging index ([`super::base_tree::staging_index`]).
    StagingIndex,
    /// The listings of the tree's walk ([`super::base_tree::walk_listings`]).
    WalkListings,
}

impl BaseFile {
    fn mark(self) -> &'static str {
        match self {
            BaseFile::StagingIndex => "staging-index",
            BaseFile::WalkListings => "walk-listings",
        }
    }
}

/// Records that `workspace`'s layers were made after its base tree's `file` existed.
pub fn mark_made_after(workspace: &Path, file: BaseFile) -> Result<(), ProvisionError> {
    let path = layer_dir(workspace).join(file.mark());
    std::fs::write(&path, b"").map_err(|e| ProvisionError::io("mark the layers", &path, e))
}

/// Whether `workspace`'s layers were made after its base tree's `file` existed.
pub fn made_after(workspace: &Path, file: BaseFile) -> bool {
    std::fs::symlink_metadata(layer_dir(workspace).join(file.mark()))
        .is_ok_and(|m| m.file_type().is_file())
}

/// Mounts `workspace`'s overlay (a mount left by a killed runner is replaced).
pub fn mount(workspace: &Path) -> Result<(), OverlayError> {
    let dir = layer_dir(workspace);
    let lower = lower_of(workspace).map_err(|e| OverlayError::Unsupported {
        target: workspace.to_owned(),
        reason: e.to_string(),
    })?;
    overlay::unmount(workspace)?;
    overlay::mount(
        &Layers {
            lower: &lower,
            upper: &dir.join("upper"),
            work: &dir.join("work"),
        },
        workspace,
    )
}

/// Unmounts `workspace`'s overlay, if mounted.
pub fn unmount(workspace: &Path) -> Result<(), OverlayError> {
    overlay::unmount(workspace)
}

/// Removes `workspace`'s layers (unmounted first: removing through a mount would only write
/// whiteouts). Missing layers are not an error.
pub fn remove(workspace: &Path) -> Result<(), ProvisionError> {
    overlay::unmount(workspace).map_err(|e| ProvisionError::State {
        action: "unmount the workspace",
        message: e.to_string(),
    })?;
    let dir = layer_dir(workspace);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ProvisionError::io("remove the layers", &dir, e)),
    }
}

/// Unmounts every workspace overlay under `workspaces` whose job `keep` does not name (start-up
/// recovery: mounts a killed runner left). Returns how many were unmounted.
pub fn unmount_stale(workspaces: &Path, keep: impl Fn(&str) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(workspaces) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let path = e.path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if keep(id) || !is_layered(&path) || !overlay::is_mount_point(&path) {
            continue;
        }
        match overlay::unmount(&path) {
            Ok(()) => n += 1,
            Err(e) => tracing::warn!(error = %e, "workspaces: {e}"),
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_sit_beside_the_workspace_and_name_their_base() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("j1");
        std::fs::create_dir(&ws).unwrap();
        assert_eq!(layer_dir(&ws), d.path().join("j1.layer"));
        assert!(!is_layered(&ws));
        create(&ws, Path::new("/s/mirrors/p.trees/abc")).unwrap();
        assert!(is_layered(&ws));
        assert_eq!(lower_of(&ws).unwrap(), Path::new("/s/mirrors/p.trees/abc"));
        assert!(layer_dir(&ws).join("upper").is_dir() && layer_dir(&ws).join("work").is_dir());
        remove(&ws).unwrap();
        assert!(!layer_dir(&ws).exists() && ws.is_dir());
        remove(&ws).unwrap();
    }
}
