//! The lifetime of provisioned workspaces: removed (with the runner's repository beside them)
//! once their job has been finished for `workspace_retention`, or earlier, oldest first, when
//! they use more than `workspace_budget`; the job's `result.patch` stays.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{ProvisionError, private_git_dir};

/// Removes a provisioned workspace and the runner's repository beside it.
pub fn remove_workspace(workspace: &Path) -> Result<(), ProvisionError> {
    // The runner's repository first: a workspace that is gone has nothing left beside it.
    for dir in [private_git_dir(workspace), workspace.to_owned()] {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ProvisionError::io("remove the workspace", &dir, e)),
        }
    }
    Ok(())
}

/// Disk used by a tree (allocated blocks; symlinks not followed, hard links counted once per
/// tree walk at most as often as they are met).
pub fn disk_usage(root: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        total = total.saturating_add(meta.blocks().saturating_mul(512));
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
        }
    }
    total
}
