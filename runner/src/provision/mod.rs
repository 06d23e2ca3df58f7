//! Workspaces the runner provisions (SPEC §11): a job with `repo` gets a fresh clone under the
//! state dir, made cheaply from a per-repository mirror ([`mirror`], [`clone`]); when it ends its
//! result is written as `result.patch` against the recorded base commit ([`patch`]; staged by
//! [`stage`] so that no path a round left can fail it: the paths git refuses ([`git_path`]) or
//! a patch cannot hold are skipped and reported, [`patch_status`]) and, where the
//! configuration allows, pushed ([`push`]). Every git command the runner runs here goes
//! through [`git`], which never executes anything a workspace configures; where it reads what
//! a round wrote it runs under a memory bound ([`git_bound`]). Uploaded trees are
//! unpacked by [`untar`] (no absolute paths, no `..`, no links out, no devices, size limits).
//!
//! ```text
//! <state-dir>/mirrors/<slug>-<hash>.git     bare mirror of a repository (runner only)
//! <state-dir>/mirrors/<slug>-<hash>.trees/<commit>/
//!                                           base tree: a checkout shared by every overlay
//! <state-dir>/workspaces/<job-id>/          the job's workspace: an overlay of a base tree
//!                                           (mounted while the job runs; [`layered`]) or a
//!                                           clone sharing the mirror's objects
//! <state-dir>/workspaces/<job-id>.layer/    its upper layer (what the job changed)
//! <state-dir>/workspaces/<job-id>.git       the runner's own repository for the result
//! <state-dir>/uploads/<id>/tree             an uploaded tree ([`upload`]); each job naming it
//!                                           gets its own copy as its workspace
//! <state-dir>/jobs/<job-id>/result.patch    the result (kept after the workspace goes)
//! ```

pub mod base_tree;
pub mod changes;
pub mod clone;
pub mod config;
pub mod git;
pub mod git_bound;
pub mod git_path;
pub mod layer_changes;
pub mod layered;
pub mod lifecycle;
pub mod mirror;
pub mod overlay;
pub mod patch;
pub mod patch_answer;
pub mod patch_status;
pub mod push;
pub mod stage;
pub mod stat_seed;
pub mod untar;
pub mod upload;
pub mod walk_seed;

use std::path::{Path, PathBuf};

pub use config::{ProvisionConfig, RepoCredential, WorkspaceLayout};

/// A provisioning step that failed.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// A git command failed.
    #[error(transparent)]
    Git(#[from] git::GitError),
    /// A filesystem operation failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The ref does not name a commit of the repository.
    #[error("failed to resolve ref `{git_ref}` of `{repo}`: no such branch, tag or commit")]
    NoSuchRef {
        /// The repository.
        repo: String,
        /// The ref.
        git_ref: String,
    },
    /// A credential file could not be read.
    #[error("failed to read the credential `{path}` for `{repo}`: {source}")]
    Credential {
        /// The repository.
        repo: String,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The workspace is not in the state a step needs.
    #[error("failed to {action}: {message}")]
    State {
        /// What was being done.
        action: &'static str,
        /// Why not.
        message: String,
    },
}

impl ProvisionError {
    pub(crate) fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        ProvisionError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    }
}

/// The directory holding the provisioned workspaces.
pub fn workspaces_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("workspaces")
}

/// The runner's own repository beside a provisioned workspace (objects of the base and of the
/// result; never visible to a round).
pub fn private_git_dir(workspace: &Path) -> PathBuf {
    beside(workspace, ".git")
}

/// `<workspace><suffix>`: a directory of the runner's beside a provisioned workspace (in the
/// workspaces' directory, never inside the workspace a round writes).
pub(crate) fn beside(workspace: &Path, suffix: &str) -> PathBuf {
    let mut name = workspace
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    workspace.with_file_name(name)
}

/// The file a finished provisioned job's result is written to.
pub fn patch_path(job_dir: &Path) -> PathBuf {
    job_dir.join("result.patch")
}
