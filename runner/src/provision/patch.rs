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
pub fn write_patch(
    workspace: &Path,
    base: &str,
    to: &Path,
) -> Result<PatchSummary, ProvisionError> {
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
    let tree = stage(workspace, Some(base), &index)?;
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
        .args([
            "diff-tree",
            "--name-only",
            "-r",
            "--no-renames",
            base,
            &tree,
        ])
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

/// Writes the workspace's files as a tree of the runner's repository, the way a result is
/// taken: a fresh `index` (from `base`'s tree when given, else empty), every file added
/// (untracked ones too, `.gitignore` respected, `.git` never), written as a tree. The
/// workspace's own `.git` is neither read nor touched. Returns the tree's id.
pub fn stage(workspace: &Path, base: Option<&str>, index: &Path) -> Result<String, ProvisionError> {
    let _ = std::fs::remove_file(index);
    if let Some(base) = base {
        over(workspace, index)
            .args(["read-tree", "--end-of-options", base])
            .output()?;
    }
    over(workspace, index)
        .args(["add", "--all", "--", "."])
        .output()?;
    Ok(over(workspace, index).args(["write-tree"]).line()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provision::clone::init_private;

    fn sh(dir: &Path, script: &str) {
        let ok = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .status()
            .unwrap()
            .success();
        assert!(ok, "{script}");
    }

    /// A workspace whose `.git` a round rewrote to run commands in any git that reads it: the
    /// runner's patch runs none of them, and still holds every change (untracked and binary).
    #[test]
    fn a_hostile_workspace_git_runs_nothing_and_the_patch_is_complete() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir(&ws).unwrap();
        sh(
            &ws,
            "git init -q -b main && echo a > a.txt && git add -A && git commit -qm base",
        );
        let base = String::from_utf8(
            std::process::Command::new("git")
                .args(["-C", ws.to_str().unwrap(), "rev-parse", "HEAD"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
        .trim()
        .to_owned();
        init_private(&ws, &ws.join(".git").join("objects")).unwrap();
        let m = root.join("pwned");
        let m = m.display();
        sh(
            &ws,
            &format!(
                "cat >> .git/config <<'X'\n[core]\n\tfsmonitor = touch {m}-fsmonitor\n\thooksPath = {root}/evil\n\tpager = touch {m}-pager\n[filter \"evil\"]\n\tclean = touch {m}-clean\n\tprocess = touch {m}-process\n\trequired = true\n[diff \"evil\"]\n\ttextconv = touch {m}-textconv\n\tcommand = touch {m}-diffcmd\n[diff]\n\texternal = touch {m}-external\n[include]\n\tpath = {root}/inc\nX\nprintf '[core]\\n\\tfsmonitor = touch {m}-include\\n' > {root}/inc\nprintf '* filter=evil diff=evil\\n' > .gitattributes\nmkdir -p {root}/evil && printf '#!/bin/sh\\ntouch {m}-hook\\n' > {root}/evil/post-index-change && chmod +x {root}/evil/post-index-change\necho b > a.txt && printf '\\000\\377x' > bin.dat && echo new > untracked.txt",
                root = root.display()
            ),
        );
        let to = root.join("result.patch");
        let summary = write_patch(&ws, &base, &to).unwrap();
        let text = String::from_utf8_lossy(&std::fs::read(&to).unwrap()).into_owned();
        let ran: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("pwned"))
            .collect();
        assert!(ran.is_empty(), "ran: {ran:?}");
        for f in ["a.txt", "bin.dat", "untracked.txt", ".gitattributes"] {
            assert!(text.contains(&format!("b/{f}")), "{f}:\n{text}");
        }
        assert!(text.contains("GIT binary patch"), "{text}");
        assert_eq!(summary.files, 4);
        // The workspace's own index was not touched: `untracked.txt` is still untracked there.
        let status = std::process::Command::new("git")
            .args([
                "-C",
                ws.to_str().unwrap(),
                "-c",
                "core.fsmonitor=false",
                "ls-files",
            ])
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        let listed = String::from_utf8_lossy(&status.stdout);
        assert!(!listed.contains("untracked.txt"), "{listed}");
    }
}
