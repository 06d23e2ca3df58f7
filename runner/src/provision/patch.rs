//! `result.patch`: what a job changed in its provisioned workspace, against the base commit.
//! Computed in the runner's own repository ([`super::private_git_dir`]) with the workspace as
//! its work tree and a throwaway index (`GIT_INDEX_FILE`): the base tree is read into the index,
//! every file of the workspace is added (untracked ones too, `.gitignore` respected, `.git`
//! never), and the index is diffed against the base, binary-safe. The workspace's `.git` — its
//! config, hooks, attributes drivers, index — is neither read nor touched.

use std::path::Path;

use super::git::{self, Git};
use super::{ProvisionError, private_git_dir};

/// What a written patch holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchSummary {
    /// Bytes of the patch.
    pub bytes: u64,
    /// Files it changes.
    pub files: u64,
    /// The tree of the result (for a commit of it).
    pub tree: String,
}

/// The runner's git over `workspace`, with its own repository and `index`.
fn over(workspace: &Path, index: &Path) -> Git {
    git::at(&private_git_dir(workspace))
        .env("GIT_WORK_TREE", workspace)
        .env("GIT_INDEX_FILE", index)
        .current_dir(workspace)
        .args(["-c", "core.bare=false"])
}

/// Writes the diff from `base` to the workspace's files into `to`.
pub fn write_patch(workspace: &Path, base: &str, to: &Path) -> Result<PatchSummary, ProvisionError> {
    let private = private_git_dir(workspace);
    if !private.is_dir() {
        return Err(ProvisionError::State {
            action: "write the result patch",
            message: format!(
                "the runner's repository `{}` of the workspace is missing",
                private.display()
            ),
        });
    }
    let index = private.join("ralph-result.index");
    let _ = std::fs::remove_file(&index);
    over(workspace, &index)
        .args(["read-tree", "--end-of-options", base])
        .output()?;
    over(workspace, &index)
        .args(["add", "--all", "--", "."])
        .output()?;
    let tree = over(workspace, &index).args(["write-tree"]).line()?;
    let tmp = to.with_extension("patch.tmp");
    git::at(&private)
        .args([
            "diff-tree",
            "-p",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "-r",
            base,
            &tree,
        ])
        .output_to(&tmp)?;
    let files = git::at(&private)
        .args(["diff-tree", "--name-only", "-r", "--no-renames", base, &tree])
        .output()?
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64;
    std::fs::rename(&tmp, to).map_err(|e| ProvisionError::io("write the result patch", to, e))?;
    let bytes = std::fs::metadata(to)
        .map_err(|e| ProvisionError::io("read the result patch", to, e))?
        .len();
    let _ = std::fs::remove_file(&index);
    Ok(PatchSummary { bytes, files, tree })
}
