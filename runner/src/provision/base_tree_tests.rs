//! The base trees with real git: a tree's staging index is its commit's, made in a later second
//! than the tree's stat data, kept and swept with the tree.

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .output()
        .unwrap()
}

/// A mirror of a repository of a few files: (mirror, its url, the commit).
pub(crate) fn mirrored(dir: &Path) -> (PathBuf, String, String) {
    let work = dir.join("work");
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(work.join("a.txt"), "a\n").unwrap();
    std::fs::write(work.join("src/b.rs"), "b\n").unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &["commit", "-qm", "c"],
    ] {
        assert!(git(&work, args).status.success(), "git {args:?}");
    }
    let commit = String::from_utf8(git(&work, &["rev-parse", "HEAD"]).stdout).unwrap();
    let mirror = dir.join("mirrors").join("m.git");
    let url = work.display().to_string();
    let out = git(
        dir,
        &[
            "clone",
            "-q",
            "--mirror",
            &url,
            &mirror.display().to_string(),
        ],
    );
    assert!(out.status.success());
    (mirror, url, commit.trim().to_owned())
}

/// Waits (at most 5 s) until the wall clock is in a later second than `path`'s time.
pub(crate) fn wait_for_the_second_after(path: &Path) {
    let taken = std::fs::metadata(path).unwrap().modified().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !later_second(taken, std::time::SystemTime::now()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock did not move"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn seconds_compare_whole() {
    let at =
        |s: u64, ms: u64| std::time::UNIX_EPOCH + std::time::Duration::from_millis(s * 1000 + ms);
    assert!(!later_second(at(23, 300), at(23, 800)));
    assert!(!later_second(at(23, 300), at(23, 300)));
    assert!(!later_second(at(24, 0), at(23, 999)));
    assert!(later_second(at(23, 999), at(24, 0)));
    assert!(later_second(at(23, 0), at(25, 0)));
}

#[test]
fn a_base_tree_has_a_staging_index_of_exactly_its_commit_kept_and_swept_with_it() {
    let d = tempfile::tempdir().unwrap();
    let (mirror, url, commit) = mirrored(d.path());
    let first = ensure(&mirror, &url, &commit, None).unwrap();
    let tree = first.dir.clone();
    let index = staging_index(&tree);
    // Made only in a later second than the tree's own index: by a later job if need be.
    let seed = tree.join(".git").join("index");
    if first.staging_index {
        let times = |p: &Path| std::fs::metadata(p).unwrap().modified().unwrap();
        assert!(later_second(times(&seed), times(&index)));
    } else {
        assert!(!index.exists());
        wait_for_the_second_after(&seed);
    }
    let again = ensure(&mirror, &url, &commit, None).unwrap();
    assert_eq!(again.dir, tree);
    assert!(again.staging_index);
    assert_eq!(index, trees_dir(&mirror).join(format!("{commit}.index")));
    let meta = std::fs::symlink_metadata(&index).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // Every entry is the commit's, and nothing more.
    let same = Command::new("git")
        .args(["diff-index", "--cached", "--quiet", &commit])
        .env("GIT_DIR", tree.join(".git"))
        .env("GIT_INDEX_FILE", &index)
        .status()
        .unwrap();
    assert!(same.success());
    let listed = Command::new("git")
        .args(["ls-files", "--stage"])
        .env("GIT_DIR", tree.join(".git"))
        .env("GIT_INDEX_FILE", &index)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&listed.stdout).lines().count(), 2);
    // No temporary file is left beside it.
    let mut names: Vec<String> = std::fs::read_dir(trees_dir(&mirror))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Every plain directory's listing at once (0600, the runner's).
    assert_eq!(
        names[..3],
        [
            commit.clone(),
            format!("{commit}.index"),
            format!("{commit}.lower")
        ]
    );
    let lower = lower_listings(&tree);
    let mode = std::fs::symlink_metadata(&lower)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // Its walk listings too, once the tree has been quiet for a walk to keep them.
    if names.len() == 3 {
        crate::provision::walk_seed::tests::wait_until_quiet(&seed);
        assert!(ensure(&mirror, &url, &commit, None).unwrap().walk_listings);
    }
    let walk = walk_listings(&tree);
    assert_eq!(walk, trees_dir(&mirror).join(format!("{commit}.walk")));
    assert!(walk.is_file());

    // Kept while a workspace stands on the tree, removed with it after.
    let state = d.path();
    let workspaces = state.join("workspaces");
    let ws = workspaces.join("j1");
    std::fs::create_dir_all(&ws).unwrap();
    layered::create(&ws, &tree).unwrap();
    assert_eq!(sweep(state, &workspaces), Vec::<PathBuf>::new());
    assert!(index.is_file() && walk.is_file() && lower.is_file() && tree.is_dir());
    layered::remove(&ws).unwrap();
    // A stale half-written index of another tree goes too.
    let stale = trees_dir(&mirror).join("feed.index.tmp");
    std::fs::write(&stale, b"DIRC").unwrap();
    assert_eq!(sweep(state, &workspaces), vec![tree.clone()]);
    assert!(!index.exists() && !walk.exists() && !lower.exists());
    assert!(!tree.exists() && !stale.exists());
}

#[test]
fn a_remade_tree_replaces_a_stale_staging_index() {
    let d = tempfile::tempdir().unwrap();
    let (mirror, url, commit) = mirrored(d.path());
    std::fs::create_dir_all(trees_dir(&mirror)).unwrap();
    let index = staging_index(&trees_dir(&mirror).join(&commit));
    std::fs::write(&index, b"not an index").unwrap();
    let tree = ensure(&mirror, &url, &commit, None).unwrap().dir;
    assert_eq!(staging_index(&tree), index);
    wait_for_the_second_after(&tree.join(".git").join("index"));
    assert!(ensure(&mirror, &url, &commit, None).unwrap().staging_index);
    assert_eq!(&std::fs::read(&index).unwrap()[..4], b"DIRC");
    remove(&tree).unwrap();
    assert!(!index.exists() && !lower_listings(&tree).exists() && !tree.exists());
}
