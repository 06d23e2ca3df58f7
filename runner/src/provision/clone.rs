//! A job's workspace from a repository: the mirror fetched ([`super::mirror`]), then a clone
//! that shares the mirror's objects (`git clone --shared`: an alternates file, no copy of the
//! history) checked out at the resolved commit, detached. Beside it, the runner's own repository
//! ([`super::private_git_dir`]) shares the same objects; the result is computed there, so the
//! workspace's own `.git` (which a round may rewrite) is never trusted.

use std::path::Path;

use super::config::ProvisionConfig;
use super::git::{self, Git};
use super::{ProvisionError, mirror, private_git_dir};

/// A provisioned workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provisioned {
    /// The base commit the workspace was checked out at.
    pub commit: String,
    /// The mirror whose objects the workspace shares (rounds must be able to read it).
    pub mirror: std::path::PathBuf,
}

/// Makes the runner's own repository for `workspace`, sharing the objects of `objects`.
pub fn init_private(workspace: &Path, objects: &Path) -> Result<(), ProvisionError> {
    let dir = private_git_dir(workspace);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| ProvisionError::io("remove an old result repository", &dir, e))?;
    }
    Git::new()
        .args(["init", "--bare", "--quiet", "--"])
        .args([&dir])
        .output()?;
    let alternates = dir.join("objects").join("info").join("alternates");
    let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    std::fs::write(&alternates, line)
        .map_err(|e| ProvisionError::io("write the alternates of", &alternates, e))
}

/// Clones `url` at `git_ref` into `workspace` (an existing empty directory).
pub fn provision_repo(
    state_dir: &Path,
    config: &ProvisionConfig,
    workspace: &Path,
    url: &str,
    git_ref: Option<&str>,
) -> Result<Provisioned, ProvisionError> {
    let fetched = mirror::fetch(state_dir, config, url, git_ref)?;
    // A workspace left half-made by an earlier try is emptied first.
    if workspace.join(".git").exists() {
        std::fs::remove_dir_all(workspace.join(".git")).map_err(|e| {
            ProvisionError::io("remove a half-made clone", &workspace.join(".git"), e)
        })?;
    }
    Git::new()
        .args(["clone", "--shared", "--no-checkout", "--quiet", "--"])
        .args([&fetched.dir, workspace])
        .output()?;
    let ws_git = workspace.join(".git");
    git::at(&ws_git)
        .env("GIT_WORK_TREE", workspace)
        .current_dir(workspace)
        .args(["checkout", "--quiet", "--detach", &fetched.commit, "--"])
        .output()?;
    // The workspace's origin names the real repository (the agent sees where its code is from).
    git::at(&ws_git)
        .args(["remote", "set-url", "origin", url])
        .output()?;
    init_private(workspace, &fetched.dir.join("objects"))?;
    drop(fetched.lock);
    Ok(Provisioned {
        commit: fetched.commit,
        mirror: fetched.dir,
    })
}
