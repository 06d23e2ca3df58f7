//! `push = "BRANCH"`: the result committed on top of the base (in the runner's own repository)
//! and pushed to that branch of the job's repository with the runner's credentials. Refused
//! unless the configuration allows it (`limits.allow_push`).

use std::path::Path;

use super::config::ProvisionConfig;
use super::git;
use super::mirror::credential_config;
use super::{ProvisionError, private_git_dir};

/// Commits `tree` (from [`super::patch::write_patch`]) on `base` and pushes it to `branch` of
/// `url`. Returns the new commit.
pub fn push_result(
    config: &ProvisionConfig,
    workspace: &Path,
    url: &str,
    base: &str,
    tree: &str,
    branch: &str,
    message: &str,
) -> Result<String, ProvisionError> {
    if !config.allow_push {
        return Err(ProvisionError::State {
            action: "push the result",
            message: "this runner does not allow `push` (set `limits.allow_push = true`)".into(),
        });
    }
    let private = private_git_dir(workspace);
    let commit = git::at(&private)
        .args(["commit-tree", tree, "-p", base, "-m", message])
        .line()?;
    let secrets = credential_config(config, url)?;
    git::at(&private)
        .secret_config(&secrets)
        .args([
            "push",
            "--quiet",
            "--",
            url,
            &format!("{commit}:refs/heads/{branch}"),
        ])
        .output()?;
    Ok(commit)
}
