//! `result.patch`: what a job changed in its provisioned workspace, against the base commit.
//! Computed in the runner's own repository ([`super::private_git_dir`]) with the workspace as
//! its work tree and a throwaway index (`GIT_INDEX_FILE`; a layered workspace's starts from its
//! base tree's stat data, [`super::stat_seed`]): the workspace is staged against the
//! base tree ([`super::stage`]: every change but the paths that cannot be taken, which are
//! reported), and the index is diffed against the base, binary-safe. Every git here runs under
//! the memory bound ([`super::git_bound`]). A patch that cannot be built says why
//! ([`NotWritten`]): nothing stale is left at `result.patch`. The workspace's `.git` — its
//! config, hooks, attributes drivers, index — is neither read nor touched.

use std::path::Path;

use super::git::{self, GitError};
use super::git_bound::{Bound, PeakRss};
use super::patch_status::{PatchFailure, Skipped};
use super::stage::{self, StageLimits};
use super::{ProvisionError, layer_changes, private_git_dir, stat_seed};

/// A written patch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// Bytes of the patch.
    pub bytes: u64,
    /// Files it changes.
    pub files: u64,
    /// The tree of the result (for a commit of it).
    pub tree: String,
    /// The paths left out of it (none: the patch is complete).
    pub skipped: Skipped,
    /// The highest peak resident memory of the runner's git while building it, in bytes.
    pub git_max_rss: u64,
}

/// A patch that could not be built.
#[derive(Debug)]
pub struct NotWritten {
    /// Why, by name.
    pub failure: PatchFailure,
    /// What failed.
    pub error: ProvisionError,
    /// The highest peak resident memory of the runner's git until it failed, in bytes.
    pub git_max_rss: u64,
}

/// The named reason of a failure to build the patch.
fn failure_of(e: &ProvisionError) -> PatchFailure {
    match e {
        ProvisionError::Git(GitError::OutOfMemory { .. }) => PatchFailure::OutOfMemory,
        ProvisionError::Git(_) => PatchFailure::GitFailed,
        ProvisionError::State { .. } => PatchFailure::RepositoryMissing,
        ProvisionError::Io { .. } | ProvisionError::Credential { .. } => PatchFailure::Io,
        ProvisionError::NoSuchRef { .. } => PatchFailure::GitFailed,
    }
}

/// Writes the diff from `base` to the workspace's files into `to` (the runner's limits and
/// memory bound).
pub fn write_patch(workspace: &Path, base: &str, to: &Path) -> Result<Written, NotWritten> {
    let bound = Bound::new(&PeakRss::default());
    write_patch_with(workspace, base, to, &StageLimits::default(), &bound)
}

/// [`write_patch`] with `limits`, its git under `bound`.
pub fn write_patch_with(
    workspace: &Path,
    base: &str,
    to: &Path,
    limits: &StageLimits,
    bound: &Bound,
) -> Result<Written, NotWritten> {
    let tmp = to.with_extension("patch.tmp");
    match build(workspace, base, to, &tmp, limits, bound) {
        Ok((tree, files, bytes, skipped)) => Ok(Written {
            bytes,
            files,
            tree,
            skipped,
            git_max_rss: bound.meter.bytes(),
        }),
        Err(error) => {
            // No stale patch (of an earlier run of a resumed job) stands for this one.
            let _ = std::fs::remove_file(&tmp);
            let _ = std::fs::remove_file(to);
            Err(NotWritten {
                failure: failure_of(&error),
                error,
                git_max_rss: bound.meter.bytes(),
            })
        }
    }
}

/// Stages the workspace and writes the patch through `tmp`: (tree, files, bytes, skipped).
fn build(
    workspace: &Path,
    base: &str,
    to: &Path,
    tmp: &Path,
    limits: &StageLimits,
    bound: &Bound,
) -> Result<(String, u64, u64, Skipped), ProvisionError> {
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
    let roots = layer_changes::roots(workspace);
    // Trusted only outside the roots, it needs them.
    let staged_index = stat_seed::staged_for_workspace(workspace, base)
        .filter(|(_, trust)| *trust == stage::StatTrust::Everywhere || roots.is_some());
    let seed = stat_seed::for_workspace(workspace);
    let base_of = stage::Base {
        commit: base,
        staged: staged_index.as_ref().map(|(p, t)| (p.as_path(), *t)),
        stat_seed: seed.as_deref(),
        roots: roots.as_deref(),
    };
    let staged = stage::stage(workspace, Some(base_of), &index, limits, bound);
    let _ = std::fs::remove_file(&index);
    let staged = staged?;
    let tree = staged.tree;
    git::at(&private)
        .bounded(bound)
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
        .output_to(tmp)?;
    let files = files_in(tmp).map_err(|e| ProvisionError::io("read the result patch", tmp, e))?;
    std::fs::rename(tmp, to).map_err(|e| ProvisionError::io("write the result patch", to, e))?;
    let bytes = std::fs::metadata(to)
        .map_err(|e| ProvisionError::io("read the result patch", to, e))?
        .len();
    Ok((tree, files, bytes, staged.skipped))
}

/// The files a patch written by `git diff-tree -p --binary --no-renames` changes: its lines
/// that start with `diff --git ` (one per file; every other line of a file's part starts with
/// a header word, a context or change marker (` `, `+`, `-`, `\\`), `@@`, or a base85 line,
/// whose alphabet has no space).
fn files_in(patch: &Path) -> std::io::Result<u64> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(patch)?);
    let (mut files, mut line) = (0, Vec::new());
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(files);
        }
        if line.starts_with(b"diff --git ") {
            files += 1;
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::provision::clone::init_private;
    use crate::provision::git_bound;
    use crate::provision::patch_status::SkipReason;
    use std::os::unix::ffi::OsStrExt;

    /// The commit `dir`'s repository has checked out.
    pub(crate) fn head_of(dir: &Path) -> String {
        let out = std::process::Command::new("git")
            .args(["-C", dir.to_str().unwrap(), "rev-parse", "HEAD"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    pub(crate) fn sh(dir: &Path, script: &str) {
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
        let base = head_of(&ws);
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
        assert!(summary.skipped.is_empty(), "{:?}", summary.skipped);
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

    /// A workspace at a base commit (`a.txt`, `tracked.txt`) with the runner's repository
    /// beside it: (root, workspace, base).
    pub(crate) fn based() -> (tempfile::TempDir, std::path::PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        std::fs::create_dir(&ws).unwrap();
        sh(
            &ws,
            "git init -q -b main && echo broken > a.txt && echo t > tracked.txt && git add -A && git commit -qm base",
        );
        let base = head_of(&ws);
        init_private(&ws, &ws.join(".git").join("objects")).unwrap();
        (dir, ws, base)
    }

    fn skipped_of(w: &Written) -> std::collections::BTreeMap<String, SkipReason> {
        assert_eq!(w.skipped.total as usize, w.skipped.listed.len());
        w.skipped
            .listed
            .iter()
            .map(|p| (p.path.clone(), p.reason))
            .collect()
    }

    /// Issue 25: a round that also leaves paths git refuses (`.GIT/config` made the whole
    /// `git add` fail: an empty patch), a FIFO, a socket, a nested repository: each is skipped
    /// and named, and the rest of the work is in the patch, which applies to a fresh clone.
    #[test]
    fn paths_git_refuses_are_skipped_and_named_and_the_rest_of_the_work_applies() {
        use crate::provision::patch_status::SkipReason as R;
        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(
            &ws,
            "echo fixed > a.txt\nmkdir -p .GIT sub/.Git/hooks \"$(printf '.g\\342\\200\\214it')\"\necho '[core]' > .GIT/config\necho x > sub/.Git/hooks/x\necho y > \"$(printf '.g\\342\\200\\214it')/x\"\necho z > 'git~1'\nln -s elsewhere .gitmodules\nmkfifo fifo\nrm tracked.txt && mkfifo tracked.txt\nmkdir nested && cd nested && git init -q && echo n > n && git add n && git commit -qm n && cd ..\necho bs > 'back\\slash'\nprintf 'nl\\n' > \"$(printf 'new\\nline.txt')\"\necho ok > \"$(printf 'caf\\377.txt')\"\nmkdir -p src && echo lib > src/lib.rs",
        );
        let _sock = std::os::unix::net::UnixListener::bind(ws.join("sock")).unwrap();
        let to = root.join("result.patch");
        let w = write_patch(&ws, &base, &to).unwrap();
        let want: std::collections::BTreeMap<String, SkipReason> = [
            (".GIT/config", R::GitPath),
            (".g\\u{200c}it/x", R::GitPath),
            (".gitmodules", R::GitPath),
            ("fifo", R::SpecialFile),
            ("git~1", R::GitPath),
            ("nested/", R::NestedRepository),
            ("sock", R::SpecialFile),
            ("sub/.Git/hooks/x", R::GitPath),
            ("tracked.txt", R::SpecialFile),
        ]
        .into_iter()
        .map(|(p, r)| (p.to_owned(), r))
        .collect();
        assert_eq!(skipped_of(&w), want);
        // Everything else: the fix, the odd but valid names, the new directory.
        assert_eq!(
            w.files,
            5,
            "{}",
            String::from_utf8_lossy(&std::fs::read(&to).unwrap())
        );
        let fresh = root.join("fresh");
        sh(
            &root,
            &format!(
                "git clone -q ws fresh && cd fresh && git apply --index {}",
                to.display()
            ),
        );
        assert_eq!(
            std::fs::read_to_string(fresh.join("a.txt")).unwrap(),
            "fixed\n"
        );
        assert_eq!(
            std::fs::read_to_string(fresh.join("back\\slash")).unwrap(),
            "bs\n"
        );
        assert_eq!(
            std::fs::read_to_string(fresh.join("new\nline.txt")).unwrap(),
            "nl\n"
        );
        assert_eq!(
            std::fs::read_to_string(fresh.join("src/lib.rs")).unwrap(),
            "lib\n"
        );
        let odd = std::ffi::OsStr::from_bytes(b"caf\xff.txt");
        assert_eq!(std::fs::read_to_string(fresh.join(odd)).unwrap(), "ok\n");
        // What was skipped is not in it: the tracked file stays as the base has it.
        assert_eq!(
            std::fs::read_to_string(fresh.join("tracked.txt")).unwrap(),
            "t\n"
        );
        assert!(!fresh.join(".GIT").exists() && !fresh.join("git~1").exists());
        assert!(w.git_max_rss > 0 && w.git_max_rss < git_bound::GIT_MEMORY);
    }

    /// A batch git refuses is split until the refused paths are found (named by git or not):
    /// they are recorded with git's message and every other path is staged.
    #[test]
    fn paths_git_still_refuses_are_isolated_and_the_rest_is_staged() {
        let (_dir, ws, base) = based();
        sh(
            &ws,
            "echo 1 > good1 && mkfifo f1 && echo 2 > good2 && mkfifo \"$(printf 'f\\n2')\" && echo 3 > good3 && rm tracked.txt",
        );
        let index = crate::provision::private_git_dir(&ws).join("t.index");
        let bound = Bound::new(&PeakRss::default());
        let git = || {
            git::at(&private_git_dir(&ws))
                .env("GIT_WORK_TREE", &ws)
                .env("GIT_INDEX_FILE", &index)
                .current_dir(&ws)
                .config("core.bare=false")
                .bounded(&bound)
        };
        git().args(["read-tree", &base]).output().unwrap();
        let paths: Vec<Vec<u8>> = ["good1", "f1", "good2", "f\n2", "good3", "tracked.txt"]
            .iter()
            .map(|p| p.as_bytes().to_vec())
            .collect();
        let (refused, runs) = stage::isolate(&git, &paths).unwrap();
        let mut names: Vec<&[u8]> = refused.keys().map(Vec::as_slice).collect();
        names.sort();
        assert_eq!(names, [b"f\n2".as_slice(), b"f1".as_slice()]);
        assert!(
            refused[b"f1".as_slice()].contains("unsupported file type"),
            "{refused:?}"
        );
        assert!(runs <= 3, "{runs}");
        let listed = git().args(["ls-files"]).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&listed),
            "a.txt\ngood1\ngood2\ngood3\n"
        );
    }

    /// The count of files a patch changes is git's own count, whatever the files hold: lines
    /// that read like a file's header inside content, binary content, names with a newline, a
    /// space or a quote, a deletion, a mode change and a link.
    #[test]
    fn the_files_counted_in_a_patch_are_the_files_git_lists() {
        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(
            &ws,
            "printf 'diff --git a/x b/x\\n+diff --git a/y b/y\\ndiff --git \\n' > a.txt && \
             head -c 3000 /dev/urandom > bin.dat && printf 'x\\ndiff --git a b\\n' > 'new\nline' && \
             echo q > 'sp ace \"q' && rm tracked.txt && ln -s a.txt link && \
             printf 'diff --git a/b b/b\\n' > README && chmod +x README",
        );
        let to = root.join("result.patch");
        let w = write_patch(&ws, &base, &to).unwrap();
        let listed = std::process::Command::new("git")
            .args([
                "diff-tree",
                "-z",
                "--name-only",
                "-r",
                "--no-renames",
                &base,
                &w.tree,
            ])
            .env("GIT_DIR", crate::provision::private_git_dir(&ws))
            .output()
            .unwrap();
        assert!(listed.status.success());
        let names = listed
            .stdout
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .count();
        assert_eq!(names, 7, "{}", String::from_utf8_lossy(&listed.stdout));
        assert_eq!(w.files, names as u64);
    }

    /// Issue 25: 300 MiB and 1 GiB sparse files are skipped as too large, never read: the
    /// runner's git stays far below its memory bound, and the rest of the work is written.
    #[test]
    fn files_over_the_size_bound_are_skipped_unread_and_git_stays_small() {
        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(
            &ws,
            "echo fixed > a.txt && truncate -s 300M big300 && mkdir d && truncate -s 1G d/big1g",
        );
        let to = root.join("result.patch");
        let w = write_patch(&ws, &base, &to).unwrap();
        let skipped = skipped_of(&w);
        assert_eq!(skipped.get("big300"), Some(&SkipReason::TooLarge));
        assert_eq!(skipped.get("d/big1g"), Some(&SkipReason::TooLarge));
        assert_eq!(w.files, 1);
        let detail = w.skipped.listed[0].detail.clone().unwrap();
        assert!(detail.contains("bytes, over the"), "{detail}");
        // The peak resident memory of every git child, measured by wait4: no big file was
        // loaded.
        eprintln!("git's peak resident memory: {} bytes", w.git_max_rss);
        assert!(w.git_max_rss > 0, "{}", w.git_max_rss);
        assert!(w.git_max_rss < stage::MAX_PATCH_FILE, "{}", w.git_max_rss);
    }

    /// With no size bound, a 1 GiB sparse file is staged streamed (git never holds it) but a
    /// binary diff of it cannot fit the 1 GiB memory bound: the patch fails, named
    /// `out_of_memory`, nothing stale is left — never an empty patch — and git's peak stayed
    /// under the bound. A 300 MiB one fits it and is written.
    #[test]
    fn a_git_over_its_memory_bound_is_a_named_failure_and_the_bound_holds() {
        let unbounded = StageLimits { max_file: u64::MAX };
        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(&ws, "echo fixed > a.txt && truncate -s 1G big1g");
        let to = root.join("result.patch");
        std::fs::write(&to, "a stale patch of an earlier run").unwrap();
        let meter = PeakRss::default();
        let not = write_patch_with(&ws, &base, &to, &unbounded, &Bound::new(&meter)).unwrap_err();
        assert_eq!(not.failure, PatchFailure::OutOfMemory, "{}", not.error);
        let text = not.error.to_string();
        assert!(
            text.contains("ran out of memory") && text.contains("diff-tree"),
            "{text}"
        );
        assert!(!to.exists());
        eprintln!("1 GiB, no size bound: git's peak {} bytes", not.git_max_rss);
        assert!(
            not.git_max_rss > 0 && not.git_max_rss <= git_bound::GIT_MEMORY,
            "{}",
            not.git_max_rss
        );

        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(&ws, "truncate -s 300M big300");
        let to = root.join("result.patch");
        let meter = PeakRss::default();
        let w = write_patch_with(&ws, &base, &to, &unbounded, &Bound::new(&meter)).unwrap();
        assert!(w.skipped.is_empty());
        assert_eq!(w.files, 1);
        eprintln!("300 MiB, no size bound: git's peak {} bytes", w.git_max_rss);
        assert!(w.git_max_rss < git_bound::GIT_MEMORY, "{}", w.git_max_rss);
    }

    /// The runner's repository gone (removed beside the workspace): a named failure.
    #[test]
    fn a_missing_runner_repository_is_a_named_failure() {
        let (dir, ws, base) = based();
        std::fs::remove_dir_all(private_git_dir(&ws)).unwrap();
        let to = dir.path().join("result.patch");
        let not = write_patch(&ws, &base, &to).unwrap_err();
        assert_eq!(not.failure, PatchFailure::RepositoryMissing);
        assert!(
            not.error.to_string().contains("is missing"),
            "{}",
            not.error
        );
    }

    /// A directory that became a link or a file, a file that became a directory: staged as
    /// `git add` stages them (the entries in the way replaced), and the patch applies.
    #[test]
    fn type_changes_are_staged_and_the_patch_applies() {
        let (dir, ws, base) = based();
        let root = dir.path().canonicalize().unwrap();
        sh(
            &ws,
            "mkdir d e && echo x > d/x && echo y > e/y && git add -A && git commit -qm more",
        );
        let base2 = head_of(&ws);
        assert_ne!(base, base2);
        sh(
            &ws,
            "rm -r d && ln -s a.txt d && rm -r e && echo file > e && rm tracked.txt && mkdir tracked.txt && echo in > tracked.txt/inner",
        );
        let to = root.join("result.patch");
        let w = write_patch(&ws, &base2, &to).unwrap();
        assert!(w.skipped.is_empty(), "{:?}", w.skipped);
        let fresh = root.join("fresh");
        sh(
            &root,
            &format!(
                "git clone -q ws fresh && cd fresh && git apply --index {}",
                to.display()
            ),
        );
        assert_eq!(
            std::fs::read_link(fresh.join("d")).unwrap(),
            Path::new("a.txt")
        );
        assert_eq!(std::fs::read_to_string(fresh.join("e")).unwrap(), "file\n");
        assert_eq!(
            std::fs::read_to_string(fresh.join("tracked.txt/inner")).unwrap(),
            "in\n"
        );
    }
}
