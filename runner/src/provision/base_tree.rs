//! Base trees: one checkout per repository and commit, the lower layer every layered workspace
//! at that commit shares ([`super::layered`]). A base tree is a clone sharing the mirror's
//! objects, detached at the commit, with its index — exactly what a full per-job checkout would
//! be — made once, then only ever read (through the overlays). It is made in a temporary
//! directory and renamed into place, so a tree that exists is complete.
//!
//! ```text
//! <state-dir>/mirrors/<name>.git              the mirror
//! <state-dir>/mirrors/<name>.trees/<commit>/  its base trees
//! ```
//!
//! Made and removed under the mirror's lock: [`sweep`] removes a tree no workspace's layers name,
//! and a job names its tree before it lets the lock go.

use std::path::{Path, PathBuf};

use super::ProvisionError;
use super::clone::checkout_shared;
use super::git;
use super::{layered, mirror};

/// The directory of `mirror`'s base trees.
pub fn trees_dir(mirror: &Path) -> PathBuf {
    mirror.with_extension("trees")
}

/// Who owns a base tree's files (and a layered workspace's upper layer): the agent user a root
/// runner's rounds run as, so that they are the workspace's owner in their sandbox (an overlay
/// cannot be idmapped). `None`: the runner's own ids (a non-root runner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// uid.
    pub uid: u32,
    /// gid.
    pub gid: u32,
}

/// The base tree of `mirror` at `commit` owned by `owner`, made if missing. The caller holds
/// the mirror's lock.
pub fn ensure(
    mirror: &Path,
    url: &str,
    commit: &str,
    owner: Option<Owner>,
) -> Result<PathBuf, ProvisionError> {
    let name = match owner {
        Some(o) => format!("{commit}.{}", o.uid),
        None => commit.to_owned(),
    };
    let dir = trees_dir(mirror).join(&name);
    if dir.join(".git").is_dir() {
        return Ok(dir);
    }
    let tmp = trees_dir(mirror).join(format!("{name}.tmp"));
    for stale in [&tmp, &dir] {
        if stale.exists() {
            std::fs::remove_dir_all(stale)
                .map_err(|e| ProvisionError::io("remove a half-made base tree", stale, e))?;
        }
    }
    std::fs::create_dir_all(&tmp)
        .map_err(|e| ProvisionError::io("create the base tree", &tmp, e))?;
    checkout_shared(mirror, url, commit, &tmp)?;
    if let Some(o) = owner {
        chown_tree(&tmp, o)?;
        refresh_index(&tmp, o);
    }
    std::fs::rename(&tmp, &dir).map_err(|e| ProvisionError::io("move the base tree", &dir, e))?;
    Ok(dir)
}

/// Brings the index of the base tree `tree` up to date with its files' stat data after the
/// chown moved every file's change time, and gives it back to `owner`: the results of the jobs
/// on this tree are staged from it ([`super::stat_seed`]), so each job stats the files it did
/// not change instead of hashing them (one hash of each file here, once per tree). A failure
/// only costs the jobs that time.
fn refresh_index(tree: &Path, owner: Owner) {
    let ran = git::at(&tree.join(".git"))
        .env("GIT_WORK_TREE", tree)
        .current_dir(tree)
        .args(["update-index", "-q", "--refresh"])
        .run();
    if let Err(e) = ran {
        tracing::debug!(error = %e, "workspaces: the base tree's index was not refreshed: {e}");
    }
    let index = tree.join(".git").join("index");
    if let Err(e) = std::os::unix::fs::lchown(&index, Some(owner.uid), Some(owner.gid)) {
        tracing::debug!(error = %e, "workspaces: the base tree's index was not given back: {e}");
    }
}

/// Gives every file of `root` to `owner` (symlinks themselves, never followed).
pub fn chown_tree(root: &Path, owner: Owner) -> Result<(), ProvisionError> {
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(owner.uid), Some(owner.gid))
            .map_err(|e| ProvisionError::io("chown", &p, e))?;
        let meta = std::fs::symlink_metadata(&p).map_err(|e| ProvisionError::io("stat", &p, e))?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(&p).map_err(|e| ProvisionError::io("list", &p, e))?;
            for e in entries {
                stack.push(e.map_err(|e| ProvisionError::io("list", &p, e))?.path());
            }
        }
    }
    Ok(())
}

/// Removes every base tree no layered workspace under `workspaces` stands on (each mirror's
/// trees under its lock). Returns the trees removed.
pub fn sweep(state_dir: &Path, workspaces: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(mirrors) = std::fs::read_dir(mirror::mirrors_dir(state_dir)) else {
        return removed;
    };
    for m in mirrors.flatten() {
        let trees = m.path();
        if trees.extension().is_none_or(|e| e != "trees") {
            continue;
        }
        let Ok(lock) = mirror::lock(&trees.with_extension("git")) else {
            continue;
        };
        // Read under the lock: a job names its tree before it lets the lock go.
        let used = in_use(workspaces);
        if let Ok(entries) = std::fs::read_dir(&trees) {
            for t in entries.flatten() {
                let path = t.path();
                if used.contains(&path) {
                    continue;
                }
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => removed.push(path),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "workspaces: failed to remove the unused base tree `{}`: {e}",
                        path.display()
                    ),
                }
            }
        }
        drop(lock);
    }
    removed
}

/// The base trees the layered workspaces under `workspaces` stand on.
fn in_use(workspaces: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(workspaces) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let id = name.to_str()?.strip_suffix(".layer")?;
            layered::lower_of(&workspaces.join(id)).ok()
        })
        .collect()
}
