//! The roots of a real overlay (root only: it skips, saying why, elsewhere): for every kind of
//! change a round can make, staging only under the roots gives exactly the tree and the skipped
//! paths that looking everywhere gives, and the roots are only where the changes are.

use std::path::{Path, PathBuf};

use super::{MAX_ROOTS, roots};
use crate::provision::clone::init_private;
use crate::provision::git_bound::{Bound, PeakRss};
use crate::provision::patch::tests::{head_of, sh};
use crate::provision::stage::{self, Base, StageLimits, StatTrust};
use crate::provision::stat_seed;
use crate::provision::{base_tree, layered};

/// A layered workspace on a base tree of a few nested directories, mounted.
struct Layered {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    base: String,
}

impl Drop for Layered {
    fn drop(&mut self) {
        let _ = layered::unmount(&self.ws);
    }
}

fn layered() -> Option<Layered> {
    layered_with("true")
}

/// [`layered`], with `more` run in the base tree (and committed there) after its files.
fn layered_with(more: &str) -> Option<Layered> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let lower = root.join("base");
    std::fs::create_dir(&lower).unwrap();
    sh(
        &lower,
        "git init -q -b main && mkdir -p src/a/b docs empty-later && \
         echo top > top.txt && echo one > src/a/one.txt && echo two > src/a/two.txt && \
         echo deep > src/a/b/deep.txt && echo doc > docs/d.md && echo k > empty-later/k && \
         printf '*.log\\n' > .gitignore && git add -A && git commit -qm base",
    );
    sh(&lower, more);
    let base = head_of(&lower);
    // Named as the runner names a base tree, with its staging index beside it.
    let tree = root.join(&base);
    std::fs::rename(&lower, &tree).unwrap();
    let lower = tree;
    assert!(base_tree::make_staging_index(
        &lower,
        &base,
        &base_tree::staging_index(&lower)
    ));
    let ws = root.join("ws");
    std::fs::create_dir(&ws).unwrap();
    layered::create(&ws, &lower).unwrap();
    layered::mark_made_after(&ws, layered::BaseFile::StagingIndex).unwrap();
    if let Err(e) = layered::mount(&ws) {
        assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
        eprintln!("skipped: an overlay needs root here ({e})");
        return None;
    }
    init_private(&ws, &lower.join(".git").join("objects")).unwrap();
    Some(Layered {
        _dir: dir,
        ws,
        base,
    })
}

/// The staging of `ws` from `base` a job's result makes when the base tree has no staging
/// index: merged into the base tree's own index.
fn staged(ws: &Path, base: &str, roots: Option<&[Vec<u8>]>) -> stage::Staged {
    staged_as(ws, base, roots, None)
}

/// The staging of `ws` from `base` a job's result makes: from the runner's staging index
/// beside the base tree (it must be there), its stat data trusted as `trust` says; with no
/// `trust`, as [`staged`].
fn staged_as(
    ws: &Path,
    base: &str,
    roots: Option<&[Vec<u8>]>,
    trust: Option<StatTrust>,
) -> stage::Staged {
    staged_into(
        ws,
        base,
        roots,
        trust,
        &ws.parent().unwrap().join("staging.index"),
        true,
    )
}

/// [`staged_as`] into `index`, removed after when `remove`.
fn staged_into(
    ws: &Path,
    base: &str,
    roots: Option<&[Vec<u8>]>,
    trust: Option<StatTrust>,
    index: &Path,
    remove: bool,
) -> stage::Staged {
    let meter = PeakRss::default();
    let seed = stat_seed::for_workspace(ws);
    let made = trust.map(|t| (stat_seed::staged_for_workspace(ws, base).unwrap().0, t));
    let out = stage::stage(
        ws,
        Some(Base {
            commit: base,
            staged: made.as_ref().map(|(p, t)| (p.as_path(), *t)),
            stat_seed: seed.as_deref(),
            roots,
        }),
        index,
        &StageLimits::default(),
        &Bound::new(&meter),
    )
    .unwrap();
    if remove {
        let _ = std::fs::remove_file(index);
    }
    out
}

fn shown(roots: &[Vec<u8>]) -> Vec<String> {
    roots
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect()
}

/// Runs `change` in a fresh layered workspace: the roots (which must be named), and the
/// staging under them, which must be the staging that looks everywhere.
fn check(change: &str) -> Option<Vec<String>> {
    let l = layered()?;
    sh(&l.ws, change);
    let found = roots(&l.ws).unwrap_or_else(|| panic!("no roots after `{change}`"));
    let everywhere = staged(&l.ws, &l.base, None);
    let scoped = staged(&l.ws, &l.base, Some(&found));
    assert_eq!(
        scoped,
        everywhere,
        "`{change}`: roots {:?} staged another tree",
        shown(&found)
    );
    // What a job does: the roots, from the runner's staging index (trusted everywhere when
    // the job's layers were made after it, else outside the roots).
    for trust in [StatTrust::Everywhere, StatTrust::OutsideRoots] {
        let from_index = staged_as(&l.ws, &l.base, Some(&found), Some(trust));
        assert_eq!(
            from_index, everywhere,
            "`{change}`: the staging index ({trust:?}) staged another tree"
        );
    }
    Some(shown(&found))
}

#[test]
fn an_unchanged_workspace_has_no_roots_and_stages_the_base_tree() {
    let Some(l) = layered() else { return };
    assert_eq!(roots(&l.ws), Some(vec![]));
    let tree = staged(&l.ws, &l.base, Some(&[])).tree;
    sh(
        &l.ws,
        &format!(
            "test \"$(git --git-dir=.git rev-parse {}^{{tree}})\" = {tree}",
            l.base
        ),
    );
    // A file rewritten with the same bytes is copied up, and is still no change.
    assert_eq!(
        check("cat top.txt > t && cat t > top.txt && rm t"),
        Some(vec!["top.txt".to_owned()])
    );
}

#[test]
fn the_roots_are_only_where_the_changes_are() {
    let Some(r) = check("echo more >> src/a/b/deep.txt && echo n > src/new.txt && rm docs/d.md")
    else {
        return;
    };
    assert_eq!(r, ["docs/d.md", "src/a/b/deep.txt", "src/new.txt"]);
}

#[test]
fn removals_renames_and_kind_changes_stage_as_looking_everywhere_does() {
    for change in [
        "rm src/a/one.txt",
        "rm -rf src/a",
        // An opaque directory: emptied and made again.
        "rm -rf src && mkdir -p src/a && echo n > src/a/new.txt",
        "mv src/a src/z",
        "mv top.txt src/a/b/top.txt",
        "chmod +x top.txt",
        "rm top.txt && mkdir top.txt && echo y > top.txt/in",
        "rm -rf docs && echo f > docs",
        "rm -rf src/a/b && ln -s /etc src/a/b && ln -s ../../etc src/link",
        "rm -rf empty-later/k",
    ] {
        let Some(_) = check(change) else { return };
    }
}

#[test]
fn nested_repositories_ignored_and_special_files_stage_as_looking_everywhere_does() {
    for change in [
        // A repository made in a tracked directory, and one in a new one.
        "cd src/a && git init -q && echo q > q.txt",
        "mkdir -p new/inner && git init -q new/inner && echo z > new/inner/z && echo f > new/file",
        "echo l > src/a/x.log && echo l > src/a/y.txt && mkdir logs && echo l > logs/z.log",
        "printf '!keep.log\\n' >> .gitignore && echo k > src/keep.log",
        "mkfifo src/a/pipe && mkdir fifos && mkfifo fifos/p",
        // The workspace's own .git: never a change, whatever is written there.
        "git -c user.name=a -c user.email=a@a commit -q --allow-empty -m x && echo h > .git/x",
    ] {
        let Some(_) = check(change) else { return };
    }
}

#[test]
fn names_git_would_read_as_patterns_are_taken_literally() {
    let Some(r) = check(
        "echo a > 'src/a/*' && echo b > 'sp ace' && echo c > \"$(printf 'nl\\nx')\" && \
         echo d > ':(top)x' && echo e > 'src/[ab]'",
    ) else {
        return;
    };
    assert_eq!(r.len(), 5, "{r:?}");
}

#[test]
fn too_many_roots_look_everywhere_and_still_stage_every_change() {
    let Some(l) = layered() else { return };
    sh(
        &l.ws,
        &format!(
            "i=0; while [ $i -le {MAX_ROOTS} ]; do echo $i > f$i; i=$((i+1)); done && echo x >> top.txt"
        ),
    );
    assert_eq!(roots(&l.ws), None);
    let everywhere = staged(&l.ws, &l.base, None);
    assert!(everywhere.skipped.is_empty());
    sh(
        &l.ws,
        &format!(
            "test \"$(git --git-dir={} diff-tree -r --name-only {} {} | wc -l)\" = {}",
            crate::provision::private_git_dir(&l.ws).display(),
            l.base,
            everywhere.tree,
            MAX_ROOTS + 2
        ),
    );
}

#[test]
fn a_workspace_that_is_not_layered_has_no_roots() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(roots(d.path()), None);
}

#[test]
fn a_submodules_commit_is_a_change_and_git_never_runs_in_the_repository_a_round_made() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let hook = dir.path().join("hook.sh");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    sh(dir.path(), "chmod +x hook.sh");
    let change = format!(
        "cd sub && git init -q && git -c user.name=a -c user.email=a@a commit -q --allow-empty \
         -m x && git config core.fsmonitor {} && echo d > dirty",
        hook.display()
    );
    let Some(l) = layered_with(
        "git init -q sub && git -C sub -c user.name=a -c user.email=a@a \
         commit -q --allow-empty -m s && git add sub 2>/dev/null && git commit -qm sub && rm -rf sub/.git",
    ) else {
        return;
    };
    sh(&l.ws, &change);
    assert!(!marker.exists());
    let found = roots(&l.ws).unwrap();
    let everywhere = staged(&l.ws, &l.base, None);
    let scoped = staged(&l.ws, &l.base, Some(&found));
    assert_eq!(scoped, everywhere, "roots {:?}", shown(&found));
    assert!(
        !marker.exists(),
        "git ran the hook of the repository the round made"
    );
    // The new commit of the submodule is in the tree.
    sh(
        &l.ws,
        &format!(
            "test \"$(git --git-dir={} diff-tree -r --name-only {} {})\" = sub",
            crate::provision::private_git_dir(&l.ws).display(),
            l.base,
            scoped.tree
        ),
    );
}

#[test]
fn a_round_cannot_steer_the_staging_index_and_staging_never_writes_it() {
    let Some(l) = layered() else { return };
    let lower = layered::lower_of(&l.ws).unwrap();
    let index = base_tree::staging_index(&lower);
    let before = std::fs::read(&index).unwrap();
    // The round rewrites two files with the same size, gives one its old times back, and
    // stages its changes in the workspace's own index (what a base tree's index is, seen
    // through the overlay), as if the files were the base's.
    sh(
        &l.ws,
        "touch -r src/a/one.txt /tmp/ralph-ref-$$ && printf 'ONE\\n' > src/a/one.txt && \
         touch -r /tmp/ralph-ref-$$ src/a/one.txt && rm /tmp/ralph-ref-$$ && \
         printf 'TWO\\n' > src/a/two.txt && echo n > new.txt && \
         git -c user.name=a -c user.email=a@a add -A",
    );
    let found = roots(&l.ws).unwrap();
    let everywhere = staged(&l.ws, &l.base, None);
    let from_index = staged_as(&l.ws, &l.base, Some(&found), Some(StatTrust::Everywhere));
    assert_eq!(from_index, everywhere);
    let outside = staged_as(&l.ws, &l.base, Some(&found), Some(StatTrust::OutsideRoots));
    assert_eq!(outside, everywhere);
    sh(
        &l.ws,
        &format!(
            "test \"$(git --git-dir={} diff-tree -r --name-only {} {} | tr '\\n' ' ')\" = 'new.txt src/a/one.txt src/a/two.txt '",
            crate::provision::private_git_dir(&l.ws).display(),
            l.base,
            from_index.tree
        ),
    );
    assert_eq!(std::fs::read(&index).unwrap(), before);
    // A staging index named for another commit is not taken.
    assert_eq!(stat_seed::staged_for_workspace(&l.ws, "0123abcd"), None);
    assert_eq!(stat_seed::staged_for_workspace(&l.ws, ""), None);
    // Layers made before it was there trust it only outside the roots.
    std::fs::remove_file(layered::layer_dir(&l.ws).join("staging-index")).unwrap();
    assert_eq!(
        stat_seed::staged_for_workspace(&l.ws, &l.base).map(|(_, t)| t),
        Some(StatTrust::OutsideRoots)
    );
}

#[test]
fn trusted_outside_the_roots_the_entries_under_them_lose_their_stat_data() {
    let Some(l) = layered() else { return };
    // A file rewritten with the same bytes (a root, unchanged) and one changed.
    sh(
        &l.ws,
        "cat top.txt > t && cat t > top.txt && rm t && echo more >> src/a/b/deep.txt",
    );
    let found = roots(&l.ws).unwrap();
    assert_eq!(shown(&found), ["src/a/b/deep.txt", "top.txt"]);
    let index = l.ws.parent().unwrap().join("kept.index");
    let outside = staged_into(
        &l.ws,
        &l.base,
        Some(&found),
        Some(StatTrust::OutsideRoots),
        &index,
        false,
    );
    assert_eq!(outside, staged(&l.ws, &l.base, None));
    let debug = |path: &str| {
        let out = std::process::Command::new("git")
            .args(["ls-files", "--debug", "--", path])
            .env("GIT_DIR", crate::provision::private_git_dir(&l.ws))
            .env("GIT_INDEX_FILE", &index)
            .env("GIT_WORK_TREE", &l.ws)
            .current_dir(&l.ws)
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    // Under a root and unchanged: no stat data (git read it; nothing wrote it back).
    assert!(
        debug("top.txt").contains("ctime: 0:0"),
        "{}",
        debug("top.txt")
    );
    // Outside the roots: the base tree's own.
    assert!(
        !debug("docs/d.md").contains("ctime: 0:0"),
        "{}",
        debug("docs/d.md")
    );
    assert!(
        debug("docs/d.md").contains("size: 4"),
        "{}",
        debug("docs/d.md")
    );
}
