//! A job's workspace from a repository: the mirror fetched ([`super::mirror`]), then either an
//! overlay of the base tree every job at that commit shares ([`super::layered`]), or, where no
//! overlay can be mounted, a clone of its own that shares the mirror's objects (`git clone
//! --shared`: an alternates file, no copy of the history) checked out at the resolved commit,
//! detached. Beside it, the runner's own repository
//! ([`super::private_git_dir`]) shares the same objects; the result is computed there, so the
//! workspace's own `.git` (which a round may rewrite) is never trusted.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::config::{ProvisionConfig, WorkspaceLayout};
use super::git::{self, Git};
use super::overlay::OverlayError;
use super::{ProvisionError, base_tree, layered, mirror, private_git_dir};

/// A provisioned workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Provisioned {
    /// The base commit the workspace was checked out at.
    pub commit: String,
    /// The mirror whose objects the workspace shares (rounds must be able to read it).
    pub mirror: std::path::PathBuf,
    /// How it was made (`overlay` or `clone`).
    pub layout: WorkspaceLayout,
}

/// The `HEAD` of the runner's repository beside a workspace.
const PRIVATE_HEAD: &str = "ref: refs/heads/main\n";

/// The `config` of the runner's repository beside a workspace: a bare repository.
const PRIVATE_CONFIG: &str =
    "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n";

/// Makes the runner's own repository for `workspace`, sharing the objects of `objects`.
pub fn init_private(workspace: &Path, objects: &Path) -> Result<(), ProvisionError> {
    let dir = private_git_dir(workspace);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)
            .map_err(|e| ProvisionError::io("remove an old result repository", &dir, e))?;
    }
    // What `git init --bare --template=` makes (with `init.defaultBranch=main`), written here:
    // a git process per job fewer.
    for sub in ["objects/info", "objects/pack", "refs/heads", "refs/tags"] {
        let d = dir.join(sub);
        std::fs::create_dir_all(&d)
            .map_err(|e| ProvisionError::io("create the result repository", &d, e))?;
    }
    for (name, text) in [("HEAD", PRIVATE_HEAD), ("config", PRIVATE_CONFIG)] {
        let f = dir.join(name);
        std::fs::write(&f, text)
            .map_err(|e| ProvisionError::io("write the result repository", &f, e))?;
    }
    let alternates = dir.join("objects").join("info").join("alternates");
    let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
    line.push(b'\n');
    std::fs::write(&alternates, line)
        .map_err(|e| ProvisionError::io("write the alternates of", &alternates, e))
}

/// A clone of `mirror` sharing its objects (`clone --shared`: an alternates file) into `dest`
/// (an existing empty directory), checked out detached at `commit`, its `origin` naming `url`
/// (the agent sees where its code is from).
pub fn checkout_shared(
    mirror: &Path,
    url: &str,
    commit: &str,
    dest: &Path,
) -> Result<(), ProvisionError> {
    // A directory left half-made by an earlier try is emptied first.
    if dest.join(".git").exists() {
        std::fs::remove_dir_all(dest.join(".git"))
            .map_err(|e| ProvisionError::io("remove a half-made clone", &dest.join(".git"), e))?;
    }
    Git::new()
        .args(["clone", "--shared", "--no-checkout", "--quiet", "--"])
        .args([mirror, dest])
        .output()?;
    let dest_git = dest.join(".git");
    git::at(&dest_git)
        .env("GIT_WORK_TREE", dest)
        .current_dir(dest)
        .args(["checkout", "--quiet", "--detach", commit, "--"])
        .output()?;
    git::at(&dest_git)
        .args(["remote", "set-url", "origin", url])
        .output()?;
    Ok(())
}

/// Who owns an overlay's files: a root runner's agent user (an overlay cannot be idmapped for
/// the round, so the round runs as the workspace's owner instead); a non-root runner's own.
fn owner(config: &ProvisionConfig) -> Result<Option<base_tree::Owner>, ProvisionError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let ids = ralph_sandbox::identity::agent_user(config.agent_user.as_deref(), Path::new("/etc"))
        .map_err(|e| ProvisionError::State {
            action: "choose the owner of the workspace",
            message: e.to_string(),
        })?;
    if ids.uid == 0 || ids.gid == 0 {
        return Err(ProvisionError::State {
            action: "choose the owner of the workspace",
            message: format!("the agent user `{}` is root", ids.name),
        });
    }
    Ok(Some(base_tree::Owner {
        uid: ids.uid,
        gid: ids.gid,
    }))
}

/// Set once an overlay could not be mounted here: later `auto` jobs go straight to a checkout.
static OVERLAY_UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// Makes `workspace` an overlay of the shared base tree at `commit` (the mirror's lock held).
/// `Ok(false)`: overlays are not possible here and `layout` allows a checkout instead.
fn provision_layered(
    config: &ProvisionConfig,
    mirror_dir: &Path,
    url: &str,
    commit: &str,
    workspace: &Path,
) -> Result<bool, ProvisionError> {
    let layout = config.workspace_layout;
    if layout == WorkspaceLayout::Clone
        || (layout == WorkspaceLayout::Auto && OVERLAY_UNSUPPORTED.load(Ordering::Relaxed))
    {
        return Ok(false);
    }
    let owner = owner(config)?;
    let base = base_tree::ensure(mirror_dir, url, commit, owner)?;
    let tree = base.dir;
    layered::create(workspace, &tree)?;
    for (kept, file) in [
        (base.staging_index, layered::BaseFile::StagingIndex),
        (base.walk_listings, layered::BaseFile::WalkListings),
    ] {
        if kept {
            layered::mark_made_after(workspace, file)?;
        }
    }
    if let Some(o) = owner {
        base_tree::chown_tree(&layered::layer_dir(workspace).join("upper"), o)?;
    }
    match layered::mount(workspace) {
        Ok(()) => Ok(true),
        Err(e @ OverlayError::Unsupported { .. }) if layout == WorkspaceLayout::Auto => {
            OVERLAY_UNSUPPORTED.store(true, Ordering::Relaxed);
            tracing::warn!(
                error = %e,
                "workspaces: {e}; repository jobs get a full checkout each (workspace_layout = \"auto\")"
            );
            layered::remove(workspace)?;
            // No overlay here stands on it (none can be mounted): the tree is not kept.
            if let Err(e) = base_tree::remove(&tree) {
                tracing::warn!(error = %e, "workspaces: failed to remove `{}`: {e}", tree.display());
            }
            Ok(false)
        }
        Err(e) => {
            let _ = layered::remove(workspace);
            Err(ProvisionError::State {
                action: "mount the workspace (workspace_layout = \"overlay\")",
                message: e.to_string(),
            })
        }
    }
}

/// Makes `workspace` (an existing empty directory) hold `url` at `git_ref`: an overlay of the
/// shared base tree where the layout allows and the host can, else a checkout of its own.
pub fn provision_repo(
    state_dir: &Path,
    config: &ProvisionConfig,
    workspace: &Path,
    url: &str,
    git_ref: Option<&str>,
) -> Result<Provisioned, ProvisionError> {
    let fetched = mirror::fetch(state_dir, config, url, git_ref)?;
    let layout = if provision_layered(config, &fetched.dir, url, &fetched.commit, workspace)? {
        WorkspaceLayout::Overlay
    } else {
        checkout_shared(&fetched.dir, url, &fetched.commit, workspace)?;
        WorkspaceLayout::Clone
    };
    init_private(workspace, &fetched.dir.join("objects"))?;
    drop(fetched.lock);
    Ok(Provisioned {
        commit: fetched.commit,
        mirror: fetched.dir,
        layout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A repository with one commit, as a plain path URL.
    fn origin(dir: &Path) -> String {
        let work = dir.join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("a.txt"), "a\n").unwrap();
        for args in [
            &["init", "-q", "-b", "main"][..],
            &["add", "-A"],
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-qm",
                "c",
            ],
        ] {
            let ok = Command::new("git")
                .args(args)
                .current_dir(&work)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        }
        work.display().to_string()
    }

    /// Every file and directory of the runner's repository, with the files' content.
    fn listing(dir: &Path) -> Vec<(String, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(p) = stack.pop() {
            let rel = p.strip_prefix(dir).unwrap().display().to_string();
            if p.is_dir() {
                stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
                out.push((rel, None));
            } else {
                out.push((rel, Some(std::fs::read(&p).unwrap())));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn the_runners_repository_is_what_git_init_makes_and_reads_the_objects() {
        let d = tempfile::tempdir().unwrap();
        let url = origin(d.path());
        let ws = d.path().join("ws");
        init_private(&ws, &Path::new(&url).join(".git").join("objects")).unwrap();
        let made = crate::provision::private_git_dir(&ws);
        let by_git = d.path().join("by-git.git");
        let ok = Command::new("git")
            .args(["-c", "init.defaultBranch=main", "init", "--bare", "--quiet"])
            .arg("--template=")
            .arg(&by_git)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let mut ours = listing(&made);
        ours.retain(|(p, _)| p != "objects/info/alternates");
        assert_eq!(ours, listing(&by_git));
        // It is a bare repository that reads the workspace's base through its alternates.
        let out = Command::new("git")
            .args(["rev-parse", "--is-bare-repository"])
            .env("GIT_DIR", &made)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "true\n", "{out:?}");
        let commit = Command::new("git")
            .args(["-C", &url, "rev-parse", "HEAD"])
            .output()
            .unwrap();
        let commit = String::from_utf8(commit.stdout).unwrap();
        let read = Command::new("git")
            .args(["cat-file", "-t", commit.trim()])
            .env("GIT_DIR", &made)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&read.stdout), "commit\n");
    }

    #[test]
    fn where_no_overlay_can_be_mounted_auto_falls_back_to_a_clone_and_overlay_refuses() {
        // A state directory whose path the mount options cannot carry: no overlay, for root
        // and non-root runners alike.
        let d = tempfile::tempdir().unwrap();
        let url = origin(d.path());
        let state = d.path().join("state,odd");
        let ws = state.join("workspaces").join("j1");
        std::fs::create_dir_all(&ws).unwrap();

        let overlay = ProvisionConfig {
            workspace_layout: WorkspaceLayout::Overlay,
            ..Default::default()
        };
        let e = provision_repo(&state, &overlay, &ws, &url, Some("main")).unwrap_err();
        assert!(e.to_string().contains("workspace_layout"), "{e}");
        assert!(!layered::layer_dir(&ws).exists());

        let made =
            provision_repo(&state, &ProvisionConfig::default(), &ws, &url, Some("main")).unwrap();
        assert_eq!(made.layout, WorkspaceLayout::Clone);
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
        assert!(!layered::is_layered(&ws));
        // The base tree it could not mount is not kept.
        let trees = base_tree::trees_dir(&made.mirror);
        let left = std::fs::read_dir(&trees).map_or(0, |d| d.count());
        assert_eq!(left, 0, "{trees:?}");
    }
}
