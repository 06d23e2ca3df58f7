//! The lifetime of provisioned workspaces: removed (with their layers and the runner's
//! repository beside them)
//! once their job has been finished for `workspace_retention`, or earlier, oldest first, when
//! they use more than `workspace_budget`; the job's `result.patch` stays.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{ProvisionError, layered, private_git_dir};

/// Removes a provisioned workspace, its layers and the runner's repository beside it (an
/// overlay still mounted, by a runner that was killed, is unmounted first).
pub fn remove_workspace(workspace: &Path) -> Result<(), ProvisionError> {
    // The layers and the runner's repository first: a workspace that is gone has nothing left
    // beside it.
    layered::remove(workspace)?;
    for dir in [private_git_dir(workspace), workspace.to_owned()] {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ProvisionError::io("remove the workspace", &dir, e)),
        }
    }
    Ok(())
}

/// Disk a provisioned workspace uses of its own: the workspace (a clone's checkout; nothing
/// for an overlay, mounted or not), its upper layer, and the runner's repository. A base tree is
/// shared and counted apart.
pub fn workspace_usage(workspace: &Path) -> u64 {
    disk_usage(workspace)
        + disk_usage(&layered::layer_dir(workspace))
        + disk_usage(&private_git_dir(workspace))
}

/// Disk used by every base tree (shared by the overlays; [`super::base_tree`]).
pub fn trees_usage(state_dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(super::mirror::mirrors_dir(state_dir)) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "trees"))
        .map(|p| disk_usage(&p))
        .sum()
}

/// Disk used by a tree (allocated blocks; symlinks not followed, hard links counted once per
/// tree walk at most as often as they are met; a filesystem mounted inside it, such as a running
/// job's overlay, is not entered).
pub fn disk_usage(root: &Path) -> u64 {
    let Ok(top) = std::fs::symlink_metadata(root) else {
        return 0;
    };
    let mut total = 0u64;
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.dev() != top.dev() {
            continue;
        }
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}
