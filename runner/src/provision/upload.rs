//! Uploaded workspaces (SPEC §11, `ralph submit --upload DIR`): where an upload's tree lives on
//! the server (`<state-dir>/uploads/<id>/tree`, unpacked by [`super::untar`]), a job's own copy
//! of it (symlinks copied as links, never followed; modes kept), and the job's base commit: the
//! copied tree committed in the runner's own repository ([`super::private_git_dir`], no
//! alternates) exactly the way [`super::stage`] takes a result, so `result.patch` holds only
//! what the rounds changed. The upload's own `.git`, if any, stays in the workspace for the
//! agent; the runner never runs git with it.

use std::fs::File;
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::clone::init_private;
use super::git;
use super::git_bound::{Bound, PeakRss};
use super::stage::{self, StageLimits};
use super::{ProvisionError, private_git_dir};

/// A failure to give a job its copy of an upload.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The upload is not (or no longer) on this host.
    #[error(
        "failed to find the upload `{id}` on this runner (removed after its retention, or received by another host)"
    )]
    Missing {
        /// The upload's id.
        id: String,
    },
    /// Copying an entry of the upload failed.
    #[error("failed to {action} `{path}`: {source}")]
    Copy {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Making the base commit failed.
    #[error(transparent)]
    Provision(#[from] ProvisionError),
}

fn copy_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> UploadError + 'a {
    move |source| UploadError::Copy {
        action,
        path: path.to_owned(),
        source,
    }
}

/// `<state-dir>/uploads`.
pub fn uploads_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("uploads")
}

/// `<state-dir>/uploads/<id>`: a complete upload (an upload being received is beside it as
/// `<id>.partial` and renamed when complete).
pub fn upload_dir(state_dir: &Path, id: &str) -> PathBuf {
    uploads_dir(state_dir).join(id)
}

/// The unpacked tree of an upload.
pub fn tree_dir(upload_dir: &Path) -> PathBuf {
    upload_dir.join("tree")
}

/// Whether `id` names a complete upload on this host.
pub fn exists(state_dir: &Path, id: &str) -> bool {
    std::fs::symlink_metadata(tree_dir(&upload_dir(state_dir, id))).is_ok_and(|m| m.is_dir())
}

/// Gives `workspace` (an existing directory, emptied first) its own copy of upload `id` and
/// commits it as the base in the runner's repository beside it; returns the base commit.
pub fn provision_upload(
    state_dir: &Path,
    workspace: &Path,
    id: &str,
) -> Result<String, UploadError> {
    if !exists(state_dir, id) {
        return Err(UploadError::Missing { id: id.to_owned() });
    }
    // A workspace left half-made by an earlier try is emptied first.
    empty(workspace)?;
    copy_tree(&tree_dir(&upload_dir(state_dir, id)), workspace)?;
    Ok(base_commit(workspace, &format!("ralph: upload {id}"))?)
}

/// Removes everything in `dir` (symlinks removed, never followed).
fn empty(dir: &Path) -> Result<(), UploadError> {
    for child in std::fs::read_dir(dir).map_err(copy_err("list", dir))? {
        let path = child.map_err(copy_err("list", dir))?.path();
        let meta = std::fs::symlink_metadata(&path).map_err(copy_err("inspect", &path))?;
        if meta.is_dir() {
            std::fs::remove_dir_all(&path).map_err(copy_err("remove", &path))?;
        } else {
            std::fs::remove_file(&path).map_err(copy_err("remove", &path))?;
        }
    }
    Ok(())
}

/// Copies the contents of `from` into `to` (an existing directory): directories and regular
/// files with their modes, symlinks as symlinks (never followed); anything else is skipped
/// (an unpacked upload has nothing else).
pub fn copy_tree(from: &Path, to: &Path) -> Result<(), UploadError> {
    let mut names: Vec<_> = Vec::new();
    for child in std::fs::read_dir(from).map_err(copy_err("list", from))? {
        names.push(child.map_err(copy_err("list", from))?.file_name());
    }
    names.sort();
    for name in names {
        let (src, dst) = (from.join(&name), to.join(&name));
        let meta = std::fs::symlink_metadata(&src).map_err(copy_err("inspect", &src))?;
        let kind = meta.file_type();
        let mode = meta.permissions().mode() & 0o7777;
        if kind.is_dir() {
            std::fs::create_dir(&dst).map_err(copy_err("create the directory", &dst))?;
            // Writable by the owner while it is filled; its own mode once it is.
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o700))
                .map_err(copy_err("set the mode of", &dst))?;
            copy_tree(&src, &dst)?;
            std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(mode | 0o700))
                .map_err(copy_err("set the mode of", &dst))?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(copy_err("read the link", &src))?;
            std::os::unix::fs::symlink(&target, &dst).map_err(copy_err("create the link", &dst))?;
        } else if kind.is_file() {
            copy_file(&src, &dst, mode)?;
        }
    }
    Ok(())
}

/// Copies one regular file (opened without following a link; the copy made new).
fn copy_file(src: &Path, dst: &Path, mode: u32) -> Result<(), UploadError> {
    let mut input = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(src)
        .map_err(copy_err("open", src))?;
    let mut output = File::options()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(dst)
        .map_err(copy_err("create", dst))?;
    io::copy(&mut input, &mut output).map_err(copy_err("copy", src))?;
    output
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(copy_err("set the mode of", dst))
}

/// Commits the files of `workspace` in a fresh runner's repository beside it (no alternates:
/// the objects are its own), staged as [`stage::stage`] stages a result (a path that cannot be
/// staged is left out of the base, as it would be of a result); returns the commit.
pub fn base_commit(workspace: &Path, message: &str) -> Result<String, ProvisionError> {
    let private = private_git_dir(workspace);
    // The repository `clone` makes, without its alternates: nothing is shared, the base's
    // objects are its own.
    init_private(workspace, &private.join("objects"))?;
    let alternates = private.join("objects").join("info").join("alternates");
    std::fs::remove_file(&alternates)
        .map_err(|e| ProvisionError::io("remove the alternates of", &alternates, e))?;
    let index = private.join("ralph-base.index");
    let meter = PeakRss::default();
    let staged = stage::stage(
        workspace,
        None,
        &index,
        &StageLimits::default(),
        &Bound::new(&meter),
    );
    let _ = std::fs::remove_file(&index);
    let staged = staged?;
    if !staged.skipped.is_empty() {
        tracing::info!(
            skipped = staged.skipped.total,
            "upload: {} path(s) of `{}` left out of the base: {}",
            staged.skipped.total,
            workspace.display(),
            super::patch_status::skipped_list(&staged.skipped.listed, staged.skipped.total)
        );
    }
    let tree = staged.tree;
    Ok(git::at(&private)
        .args(["commit-tree", &tree, "-m", message])
        .line()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_copy_keeps_links_and_modes_and_the_base_holds_every_file_but_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let state = root.join("state");
        let tree = tree_dir(&upload_dir(&state, "u1"));
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::create_dir_all(tree.join(".git")).unwrap();
        std::fs::write(tree.join(".git").join("config"), "[core]\n").unwrap();
        std::fs::write(tree.join("run.sh"), "echo hi\n").unwrap();
        std::fs::set_permissions(tree.join("run.sh"), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(tree.join("sub").join("a.txt"), "a\n").unwrap();
        std::fs::write(tree.join(".gitignore"), "ignored.log\n").unwrap();
        std::fs::write(tree.join("ignored.log"), "x\n").unwrap();
        symlink("sub/a.txt", tree.join("link")).unwrap();
        let ws = root.join("workspaces").join("job");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("half-made"), "x").unwrap();
        let commit = provision_upload(&state, &ws, "u1").unwrap();
        assert!(!ws.join("half-made").exists());
        assert_eq!(
            std::fs::read_link(ws.join("link")).unwrap(),
            Path::new("sub/a.txt")
        );
        let mode = std::fs::metadata(ws.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(ws.join(".git").join("config").is_file());
        let files = git::at(&private_git_dir(&ws))
            .args(["ls-tree", "-r", "--name-only", &commit])
            .output()
            .unwrap();
        let files = String::from_utf8(files).unwrap();
        let files: Vec<&str> = files.lines().collect();
        assert_eq!(files, [".gitignore", "link", "run.sh", "sub/a.txt"]);
        // No alternates: the base's objects are the runner's repository's own.
        assert!(
            !private_git_dir(&ws)
                .join("objects/info/alternates")
                .exists()
        );
        // A result against it holds only the change.
        std::fs::write(ws.join("sub").join("a.txt"), "b\n").unwrap();
        let summary =
            crate::provision::patch::write_patch(&ws, &commit, &root.join("r.patch")).unwrap();
        assert_eq!(summary.files, 1);
        assert!(matches!(
            provision_upload(&state, &ws, "nope"),
            Err(UploadError::Missing { .. })
        ));
    }

    /// Issue 25: an uploaded tree with a path git refuses (`.GIT/config`) made the base commit
    /// fail (the job a `provision_failed` error): the base is made without it, and the result
    /// holds the rounds' work, naming the path it left out.
    #[test]
    fn an_upload_with_a_path_git_refuses_gets_a_base_and_a_partial_result() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let state = root.join("state");
        let tree = tree_dir(&upload_dir(&state, "u1"));
        std::fs::create_dir_all(tree.join(".GIT")).unwrap();
        std::fs::write(tree.join(".GIT").join("config"), "[core]\n").unwrap();
        std::fs::write(tree.join("a.txt"), "a\n").unwrap();
        let ws = root.join("workspaces").join("job");
        std::fs::create_dir_all(&ws).unwrap();
        let commit = provision_upload(&state, &ws, "u1").unwrap();
        let files = git::at(&private_git_dir(&ws))
            .args(["ls-tree", "-r", "--name-only", &commit])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(files).unwrap(), "a.txt\n");
        std::fs::write(ws.join("a.txt"), "b\n").unwrap();
        let w = crate::provision::patch::write_patch(&ws, &commit, &root.join("r.patch")).unwrap();
        assert_eq!(w.files, 1);
        assert_eq!(w.skipped.total, 1);
        assert_eq!(w.skipped.listed[0].path, ".GIT/config");
    }
}
