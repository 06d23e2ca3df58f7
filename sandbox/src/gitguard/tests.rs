//! The git check on real directories: what the walk finds and skips, what a comparison makes of
//! new, replaced and changed repositories, and what sanitizing leaves — hostile content first
//! (symlinked `hooks` and `config`, FIFOs, pointers out of the tree, non-UTF-8 names), then what
//! must stay untouched (objects, refs, protected paths, unchanged repositories).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use super::*;
use crate::outcome::git::{Change, RepoKind, Sanitized, Surface};

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    /// Outside every tree: where an agent would aim links.
    host: PathBuf,
    control: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, host, control) = (root.join("ws"), root.join("host"), root.join("control"));
    for d in [&ws, &host, &control] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(host.join("keep"), "host\n").unwrap();
    World {
        _dir: dir,
        ws,
        host,
        control,
    }
}

const FRESH: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";

const HOSTILE: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = /ws/payload\n\thooksPath = /ws/h\n[include]\n\tpath = /ws/evil.cfg\n";

/// A git directory at `dir` (the shape git checks, some data, a config and a hook).
fn git_dir(dir: &Path, config: &str) {
    for d in ["objects/ab", "refs/heads", "hooks", "logs"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("objects/ab/cdef"), "object").unwrap();
    std::fs::write(dir.join("refs/heads/main"), "0123\n").unwrap();
    std::fs::write(dir.join("index"), "index").unwrap();
    std::fs::write(dir.join("config"), config).unwrap();
    std::fs::write(dir.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
}

fn hook(dir: &Path, name: &str) {
    let p = dir.join("hooks").join(name);
    std::fs::write(&p, "#!/bin/sh\necho pwned > /tmp/x\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn guard(w: &World) -> GitGuard {
    GitGuard::new(&w.ws, &[], Vec::new())
}

fn check(w: &World, g: &GitGuard, before: &Inventory) -> (GitCheck, Vec<Violation>) {
    check_after_run(g, before, &w.control)
}

fn only(c: &GitCheck) -> &Sanitized {
    assert_eq!(c.sanitized.len(), 1, "{:#?}", c.sanitized);
    &c.sanitized[0]
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Everything git keeps as data, as (path, content) — must survive sanitizing unchanged.
fn data(dir: &Path) -> Vec<(String, String)> {
    ["HEAD", "objects/ab/cdef", "refs/heads/main", "index"]
        .iter()
        .map(|p| ((*p).to_owned(), read(&dir.join(p))))
        .collect()
}

#[test]
fn the_walk_finds_every_kind_of_repository_and_follows_no_symlink() {
    let w = world();
    git_dir(&w.ws.join(".git"), FRESH);
    git_dir(&w.ws.join(".git/modules/lib/a"), FRESH);
    std::fs::create_dir_all(w.ws.join(".git/worktrees/wt")).unwrap();
    std::fs::write(w.ws.join(".git/worktrees/wt/HEAD"), "x").unwrap();
    std::fs::write(w.ws.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
    git_dir(&w.ws.join("sub/.git"), FRESH);
    git_dir(&w.ws.join("srv/bare.git"), FRESH);
    std::fs::create_dir_all(w.ws.join("lib/a")).unwrap();
    std::fs::write(
        w.ws.join("lib/a/.git"),
        "gitdir: ../../.git/modules/lib/a\n",
    )
    .unwrap();
    std::fs::create_dir_all(w.ws.join("ln")).unwrap();
    symlink(&w.host, w.ws.join("ln/.git")).unwrap();
    // Not a git directory: no HEAD.
    std::fs::create_dir_all(w.ws.join("fake/.git/objects")).unwrap();
    // Behind a symlink: never walked.
    git_dir(&w.host.join("r/.git"), HOSTILE);
    symlink(w.host.join("r"), w.ws.join("via-link")).unwrap();
    let inv = inventory(&guard(&w));
    let t = &inv.trees[0];
    let found: Vec<(String, &'static str)> = t
        .repos
        .iter()
        .map(|(p, f)| {
            let k = match f {
                walk::Found::Dir { .. } => "dir",
                walk::Found::File { .. } => "file",
                walk::Found::Link { .. } => "link",
            };
            (p.display().to_string(), k)
        })
        .collect();
    let want: Vec<(String, &str)> = [
        (".git", "dir"),
        (".git/modules/lib/a", "dir"),
        (".git/worktrees/wt", "dir"),
        ("lib/a/.git", "file"),
        ("ln/.git", "link"),
        ("srv/bare.git", "dir"),
        ("sub/.git", "dir"),
    ]
    .iter()
    .map(|(p, k)| ((*p).to_owned(), *k))
    .collect();
    assert_eq!(found, want);
    assert!(t.unchecked.is_empty() && t.stopped.is_none(), "{t:?}");
}

#[test]
fn an_untouched_tree_needs_nothing() {
    let w = world();
    git_dir(&w.ws.join(".git"), HOSTILE);
    git_dir(&w.ws.join("sub/.git"), HOSTILE);
    hook(&w.ws.join("sub/.git"), "pre-commit");
    let g = guard(&w);
    let before = inventory(&g);
    // Ordinary work in the tree changes nothing the check cares about.
    std::fs::write(w.ws.join("sub/file.txt"), "work").unwrap();
    std::fs::write(w.ws.join("sub/.git/index"), "new index").unwrap();
    std::fs::write(w.ws.join("sub/.git/objects/ab/new"), "obj").unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(c.is_empty(), "{c:#?}");
    assert!(v.is_empty(), "{v:#?}");
    // The user's own repositories keep their configuration, whatever it says.
    assert_eq!(read(&w.ws.join("sub/.git/config")), HOSTILE);
    assert!(!w.control.join("sanitized").exists());
}

#[test]
fn a_new_hostile_repository_is_made_safe_and_keeps_its_data() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    let repo = w.ws.join("sub/.git");
    git_dir(&repo, HOSTILE);
    hook(&repo, "pre-commit");
    hook(&repo, "fsmonitor-watchman");
    std::fs::write(repo.join("config.worktree"), "[core]\n\tfsmonitor = /x\n").unwrap();
    std::fs::write(repo.join("commondir"), "/etc\n").unwrap();
    let data_before = data(&repo);
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(s.rel, "sub/.git");
    assert_eq!(s.tree, w.ws);
    assert_eq!((s.kind, s.change), (RepoKind::GitDir, Change::New));
    assert_eq!(
        s.replaced,
        vec![
            Surface::Config,
            Surface::ConfigWorktree,
            Surface::Hooks,
            Surface::Commondir
        ]
    );
    assert!(s.dropped.contains(&"core.fsmonitor".to_owned()), "{s:?}");
    assert!(s.dropped.contains(&"include.path".to_owned()), "{s:?}");
    assert_eq!(c.counts.new, 1);
    // The replacement keeps only what git needs to read the data.
    let cfg = read(&repo.join("config"));
    assert!(cfg.contains("repositoryformatversion = 0") && cfg.contains("bare = false"));
    for bad in ["fsmonitor", "hooksPath", "include", "/ws/"] {
        assert!(!cfg.contains(bad), "{bad} in {cfg}");
    }
    assert!(!repo.join("config.worktree").exists());
    assert!(!repo.join("commondir").exists());
    assert_eq!(std::fs::read_dir(repo.join("hooks")).unwrap().count(), 0);
    assert_eq!(
        data(&repo),
        data_before,
        "objects, refs, HEAD, index untouched"
    );
    // The originals are kept, never executable.
    let orig = s.originals.clone().unwrap();
    assert_eq!(orig, w.control.join("sanitized/1"));
    assert_eq!(read(&orig.join("config")), HOSTILE);
    assert!(read(&orig.join("config.worktree")).contains("fsmonitor"));
    assert_eq!(read(&orig.join("commondir")), "/etc\n");
    let kept_hook = orig.join("hooks/pre-commit");
    assert!(read(&kept_hook).contains("pwned"));
    assert_eq!(
        std::fs::metadata(&kept_hook).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let manifest = read(&orig.join("manifest.json"));
    assert!(manifest.contains("sub/.git"), "{manifest}");
    // A second check finds nothing more: what it left is what the next run starts from.
    let again = inventory(&g);
    let (c2, v2) = check(&w, &g, &again);
    assert!(c2.is_empty() && v2.is_empty(), "{c2:#?} {v2:#?}");
}

#[test]
fn a_changed_repository_gets_only_what_changed_replaced() {
    let w = world();
    let repo = w.ws.join("sub/.git");
    let user = "[core]\n\tbare = false\n[remote \"origin\"]\n\turl = https://example.invalid/r\n";
    git_dir(&repo, user);
    let g = guard(&w);
    let before = inventory(&g);
    hook(&repo, "post-checkout");
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(s.change, Change::Changed);
    assert_eq!(s.replaced, vec![Surface::Hooks]);
    assert_eq!(
        read(&repo.join("config")),
        user,
        "the unchanged config is the user's"
    );
    assert_eq!(std::fs::read_dir(repo.join("hooks")).unwrap().count(), 0);

    // A changed config: replaced, the user's original kept.
    let before = inventory(&g);
    std::fs::write(
        repo.join("config"),
        format!("{user}[core]\n\tfsmonitor = x\n"),
    )
    .unwrap();
    let (c, _) = check(&w, &g, &before);
    let s = only(&c);
    assert_eq!(s.replaced, vec![Surface::Config]);
    assert!(!read(&repo.join("config")).contains("fsmonitor"));
    assert!(read(&s.originals.clone().unwrap().join("config")).contains("fsmonitor"));
}

#[test]
fn a_replaced_repository_is_made_safe() {
    let w = world();
    let repo = w.ws.join("sub/.git");
    git_dir(&repo, FRESH);
    let g = guard(&w);
    let before = inventory(&g);
    // Moved away (kept alive, so its inode cannot be reused) and made again.
    std::fs::rename(&repo, w.host.join("old")).unwrap();
    git_dir(&repo, HOSTILE);
    let (c, _) = check(&w, &g, &before);
    let s = only(&c);
    assert_eq!(s.change, Change::Replaced);
    assert!(!read(&repo.join("config")).contains("fsmonitor"));
    assert_eq!(c.counts.replaced, 1);

    // Removed and made again: the new directory may get the old inode number back. Then it
    // counts as changed, and every surface that differs from before the run is replaced all the
    // same (what does not differ is byte for byte what the tree had before).
    let before = inventory(&g);
    std::fs::remove_dir_all(&repo).unwrap();
    git_dir(&repo, FRESH);
    hook(&repo, "pre-push");
    let (c, _) = check(&w, &g, &before);
    let s = only(&c);
    assert!(
        matches!(s.change, Change::Replaced | Change::Changed),
        "{s:?}"
    );
    assert!(s.replaced.contains(&Surface::Config) && s.replaced.contains(&Surface::Hooks));
    assert!(!repo.join("hooks/pre-push").exists());
}

#[test]
fn symlinked_hooks_and_config_are_removed_never_followed() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    let repo = w.ws.join("sub/.git");
    git_dir(&repo, FRESH);
    std::fs::remove_dir_all(repo.join("hooks")).unwrap();
    std::fs::remove_file(repo.join("config")).unwrap();
    std::fs::create_dir(w.host.join("hooks")).unwrap();
    std::fs::write(w.host.join("hooks/pre-commit"), "host hook").unwrap();
    std::fs::write(w.host.join("config"), "[core]\n\tbare = true\n").unwrap();
    symlink(w.host.join("hooks"), repo.join("hooks")).unwrap();
    symlink(w.host.join("config"), repo.join("config")).unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(s.replaced, vec![Surface::Config, Surface::Hooks]);
    assert!(s.notes.iter().any(|n| n.contains("symlink")), "{s:?}");
    // The host's files are as they were.
    assert_eq!(read(&w.host.join("hooks/pre-commit")), "host hook");
    assert_eq!(read(&w.host.join("config")), "[core]\n\tbare = true\n");
    assert_eq!(read(&w.host.join("keep")), "host\n");
    // In the repository: a real empty hooks directory, a real config that kept nothing.
    let m = std::fs::symlink_metadata(repo.join("hooks")).unwrap();
    assert!(m.is_dir());
    let m = std::fs::symlink_metadata(repo.join("config")).unwrap();
    assert!(m.is_file());
    assert!(!read(&repo.join("config")).contains("bare"));
}

#[test]
fn a_fifo_config_is_removed_without_being_opened() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    let repo = w.ws.join("r/.git");
    git_dir(&repo, FRESH);
    std::fs::remove_file(repo.join("config")).unwrap();
    nix::unistd::mkfifo(&repo.join("config"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    nix::unistd::mkfifo(
        &repo.join("hooks/pre-commit"),
        nix::sys::stat::Mode::S_IRWXU,
    )
    .unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    assert_eq!(only(&c).replaced, vec![Surface::Config, Surface::Hooks]);
    assert!(
        std::fs::symlink_metadata(repo.join("config"))
            .unwrap()
            .is_file()
    );
}

#[test]
fn git_files_stay_only_when_they_point_at_a_checked_git_directory() {
    let w = world();
    git_dir(&w.ws.join(".git"), FRESH);
    std::fs::create_dir_all(w.ws.join("kept")).unwrap();
    std::fs::write(w.ws.join("kept/.git"), "gitdir: /elsewhere/x\n").unwrap();
    let g = GitGuard::new(
        &w.ws,
        &[],
        vec![w.ws.join(".git/config"), w.ws.join(".git/hooks")],
    );
    let before = inventory(&g);
    // A submodule the run added: `.git` file into `.git/modules/m`, itself new.
    git_dir(&w.ws.join(".git/modules/m"), HOSTILE);
    std::fs::create_dir_all(w.ws.join("m")).unwrap();
    std::fs::write(w.ws.join("m/.git"), "gitdir: ../.git/modules/m\n").unwrap();
    // An absolute pointer into the tree.
    std::fs::create_dir_all(w.ws.join("abs")).unwrap();
    std::fs::write(
        w.ws.join("abs/.git"),
        format!("gitdir: {}\r\n", w.ws.join(".git/modules/m").display()),
    )
    .unwrap();
    // Out of the tree, to the host, through a symlink, to a non-git directory.
    git_dir(&w.host.join("evil"), HOSTILE);
    for (dir, target) in [
        (
            "out",
            format!("gitdir: {}\n", w.host.join("evil").display()),
        ),
        ("up", "gitdir: ../../host/evil\n".to_owned()),
        ("via", "gitdir: lnk/../.git/modules/m\n".to_owned()),
        ("plain", "gitdir: ../src\n".to_owned()),
        ("junk", "not a gitfile\n".to_owned()),
    ] {
        std::fs::create_dir_all(w.ws.join(dir)).unwrap();
        std::fs::write(w.ws.join(dir).join(".git"), target).unwrap();
    }
    std::fs::create_dir_all(w.ws.join("src")).unwrap();
    std::fs::create_dir_all(w.host.join("deep")).unwrap();
    symlink(w.host.join("deep"), w.ws.join("via/lnk")).unwrap();
    // The user's own pointer, changed by the run: its content before is put back.
    std::fs::write(w.ws.join("kept/.git"), "gitdir: /host/evil\n").unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let mut by_rel: Vec<(&str, Change, RepoKind)> = c
        .sanitized
        .iter()
        .map(|s| (s.rel.as_str(), s.change, s.kind))
        .collect();
    by_rel.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        by_rel,
        vec![
            (".git/modules/m", Change::New, RepoKind::GitDir),
            ("junk/.git", Change::New, RepoKind::GitFile),
            ("kept/.git", Change::Changed, RepoKind::GitFile),
            ("out/.git", Change::New, RepoKind::GitFile),
            ("plain/.git", Change::New, RepoKind::GitFile),
            ("up/.git", Change::New, RepoKind::GitFile),
            ("via/.git", Change::New, RepoKind::GitFile),
        ]
    );
    assert!(
        w.ws.join("m/.git").is_file(),
        "a pointer into a checked git directory stays"
    );
    assert!(w.ws.join("abs/.git").is_file());
    for d in ["out", "up", "via", "plain", "junk"] {
        assert!(
            !w.ws.join(d).join(".git").exists(),
            "{d}/.git is still there"
        );
    }
    assert_eq!(read(&w.ws.join("kept/.git")), "gitdir: /elsewhere/x\n");
    assert_eq!(
        read(&w.host.join("evil/config")),
        HOSTILE,
        "the target is untouched"
    );
}

#[test]
fn a_git_symlink_is_removed_and_its_target_untouched() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    git_dir(&w.host.join("evil"), HOSTILE);
    std::fs::create_dir(w.ws.join("sub")).unwrap();
    symlink(w.host.join("evil"), w.ws.join("sub/.git")).unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!((s.kind, s.change), (RepoKind::GitLink, Change::New));
    assert!(w.ws.join("sub/.git").symlink_metadata().is_err());
    assert_eq!(read(&w.host.join("evil/config")), HOSTILE);
}

#[test]
fn commondir_stays_only_when_it_points_at_a_checked_git_directory() {
    let w = world();
    git_dir(&w.ws.join(".git"), FRESH);
    let g = guard(&w);
    let before = inventory(&g);
    for (name, target) in [
        ("ok", "../..\n"),
        ("bad", "/etc\n"),
        ("up", "../../../../host\n"),
    ] {
        let d = w.ws.join(".git/worktrees").join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("HEAD"), "x").unwrap();
        std::fs::write(d.join("commondir"), target).unwrap();
        std::fs::write(d.join("gitdir"), "/ws/wt/.git\n").unwrap();
    }
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let mut rels: Vec<&str> = c.sanitized.iter().map(|s| s.rel.as_str()).collect();
    rels.sort_unstable();
    assert_eq!(rels, vec![".git/worktrees/bad", ".git/worktrees/up"]);
    assert!(w.ws.join(".git/worktrees/ok/commondir").exists());
    assert!(!w.ws.join(".git/worktrees/bad/commondir").exists());
}

#[test]
fn protected_paths_are_neither_looked_at_nor_touched_but_the_rest_of_the_repo_is() {
    let w = world();
    git_dir(&w.ws.join(".git"), HOSTILE);
    let g = GitGuard::new(
        &w.ws,
        &[],
        vec![w.ws.join(".git/config"), w.ws.join(".git/hooks")],
    );
    let before = inventory(&g);
    // Behind a read-only mount nothing changes in a real run; here the test changes it to show
    // the check leaves it alone.
    std::fs::write(
        w.ws.join(".git/config"),
        "[core]\n\tfsmonitor = user's own\n",
    )
    .unwrap();
    hook(&w.ws.join(".git"), "pre-commit");
    std::fs::write(
        w.ws.join(".git/config.worktree"),
        "[core]\n\tfsmonitor = x\n",
    )
    .unwrap();
    git_dir(&w.ws.join(".git/modules/x"), HOSTILE);
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let mut got: Vec<(&str, Vec<Surface>)> = c
        .sanitized
        .iter()
        .map(|s| (s.rel.as_str(), s.replaced.clone()))
        .collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (".git", vec![Surface::ConfigWorktree]),
            (".git/modules/x", vec![Surface::Config, Surface::Hooks]),
        ]
    );
    assert_eq!(
        read(&w.ws.join(".git/config")),
        "[core]\n\tfsmonitor = user's own\n"
    );
    assert!(w.ws.join(".git/hooks/pre-commit").exists());
}

#[test]
fn write_roots_are_checked_and_nested_trees_walked_once() {
    let w = world();
    let cache = w.host.join("cache");
    std::fs::create_dir(&cache).unwrap();
    let inner = w.ws.join("inner");
    std::fs::create_dir(&inner).unwrap();
    let g = GitGuard::new(&w.ws, &[cache.clone(), inner], Vec::new());
    assert_eq!(g.trees, vec![w.ws.clone(), cache.clone()]);
    let before = inventory(&g);
    git_dir(&cache.join("r/.git"), HOSTILE);
    git_dir(&w.ws.join("inner/.git"), HOSTILE);
    let (c, _) = check(&w, &g, &before);
    let mut got: Vec<String> = c.sanitized.iter().map(Sanitized::path).collect();
    got.sort();
    let mut want = vec![
        format!("{}/r/.git", cache.display()),
        format!("{}/inner/.git", w.ws.display()),
    ];
    want.sort();
    assert_eq!(got, want);
    // The workspace inside a write root: the write root is the tree.
    let g = GitGuard::new(&inner_of(&w), std::slice::from_ref(&w.ws), Vec::new());
    assert_eq!(g.trees, vec![w.ws.clone()]);
}

fn inner_of(w: &World) -> PathBuf {
    w.ws.join("inner")
}

#[test]
fn a_non_utf8_path_is_reported_escaped_and_serialises() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    let name = OsStr::from_bytes(b"bad\xff\n## Runner notes");
    git_dir(&w.ws.join(name).join(".git"), HOSTILE);
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(s.rel, "bad\\xff\\x0a## Runner notes/.git");
    let json = serde_json::to_string(&c).unwrap();
    assert!(!json.contains("\\n##"), "{json}");
    assert!(!read(&w.ws.join(name).join(".git/config")).contains("fsmonitor"));
}

#[test]
fn what_the_run_makes_uncheckable_is_a_violation() {
    let w = world();
    std::fs::create_dir_all(w.ws.join("a/b")).unwrap();
    let g = guard(&w);
    let limits = Limits {
        depth: 3,
        entries: 1000,
    };
    let before = inventory_with(&g, limits, None, None);
    assert!(before.trees[0].unchecked.is_empty());
    // Deeper than the bound: what lies there cannot be looked at.
    git_dir(&w.ws.join("a/b/c/d/.git"), HOSTILE);
    let (c, v) = check(&w, &g, &before);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert_eq!(v[0].kind, ViolationKind::Uncheckable);
    assert!(v[0].detail.contains("deeper than 3"), "{}", v[0].detail);
    assert!(c.unchecked.unwrap().contains("a/b/c/d"));
    // A tree already past the bound before the run: said, not a violation.
    let before = inventory_with(&g, limits, None, None);
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    assert!(c.unchecked.is_some());

    // The entry bound, pushed past by the run.
    let w = world();
    let g = guard(&w);
    let limits = Limits {
        depth: 10,
        entries: 20,
    };
    let before = inventory_with(&g, limits, None, None);
    for i in 0..30 {
        std::fs::write(w.ws.join(format!("f{i}")), "").unwrap();
    }
    let (c, v) = check(&w, &g, &before);
    assert_eq!(v.len(), 1, "{v:#?}");
    assert!(
        v[0].detail.contains("stopped at 20 entries"),
        "{}",
        v[0].detail
    );
    assert!(c.unchecked.is_some());
}

#[test]
fn originals_past_the_budget_are_noted_not_kept() {
    let w = world();
    let g = guard(&w);
    let before = inventory(&g);
    let repo = w.ws.join("r/.git");
    git_dir(&repo, HOSTILE);
    let big = vec![b'x'; usize::try_from(originals::BUDGET).unwrap() + 1];
    std::fs::write(repo.join("hooks/big"), &big).unwrap();
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let orig = only(&c).originals.clone().unwrap();
    assert!(!orig.join("hooks/big").exists());
    assert!(orig.join("config").exists());
    let manifest = read(&orig.join("manifest.json"));
    assert!(manifest.contains("budget"), "{manifest}");
    assert_eq!(std::fs::read_dir(repo.join("hooks")).unwrap().count(), 0);
}

#[test]
fn the_tree_itself_can_be_a_bare_repository() {
    let w = world();
    git_dir(&w.ws, FRESH);
    let g = guard(&w);
    let before = inventory(&g);
    hook(&w.ws, "post-update");
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(s.rel, "");
    assert_eq!(s.path(), w.ws.display().to_string());
    assert_eq!(s.replaced, vec![Surface::Hooks]);
}

/// Waits until every directory made so far is quiet enough for a walk to keep its listing: the
/// condition is the clock's own, [`walk::QUIET`] past the last change.
fn until_quiet() {
    std::thread::sleep(walk::QUIET + std::time::Duration::from_millis(50));
}

fn sorted<T: Ord + Clone>(v: &[T]) -> Vec<T> {
    let mut v = v.to_vec();
    v.sort();
    v
}

#[test]
fn a_walk_again_lists_only_what_changed_and_finds_what_a_fresh_walk_finds() {
    let w = world();
    for d in [
        "a/b/c/d",
        "a/e",
        "x/y",
        "x/z",
        "prot/inner",
        "wide/1",
        "wide/2",
        "wide/3",
    ] {
        std::fs::create_dir_all(w.ws.join(d)).unwrap();
    }
    std::fs::write(w.ws.join("a/b/c/d/file.rs"), "code").unwrap();
    git_dir(&w.ws.join("x/repo"), FRESH);
    let keys = RandomState::new();
    let protected = [PathBuf::from("prot")];
    // Directories changed within the last second are not kept: a change in the same tick of
    // the coarse clock would not move their change time.
    let early = walk::walk(&w.ws, &protected, &keys, Limits::DEFAULT);
    assert!(early.listings.is_empty(), "{}", early.listings.len());
    until_quiet();
    let before = walk::walk(&w.ws, &protected, &keys, Limits::DEFAULT);
    // Plain, quiet directories are kept; the git directory and its parts' parent are not.
    assert!(before.listings.len() >= 10, "{}", before.listings.len());
    assert_eq!(before.reused, 0);

    // What a round could do deep in old directories: a repository, a `.git` file, a socket, a
    // directory swapped for a link out of the tree, a hook in the old repository, a repository
    // in a protected path.
    git_dir(&w.ws.join("a/b/c/d/new"), HOSTILE);
    std::fs::write(w.ws.join("x/y/.git"), "gitdir: /elsewhere\n").unwrap();
    let _socket = std::os::unix::net::UnixListener::bind(w.ws.join("a/e/s")).unwrap();
    std::fs::remove_dir(w.ws.join("x/z")).unwrap();
    symlink(&w.host, w.ws.join("x/z")).unwrap();
    hook(&w.ws.join("x/repo"), "pre-commit");
    git_dir(&w.ws.join("prot/inner/r"), HOSTILE);

    let again = walk::walk_again(&w.ws, &protected, &keys, Limits::DEFAULT, &before.listings);
    let fresh = walk::walk(&w.ws, &protected, &keys, Limits::DEFAULT);
    assert_eq!(again.repos, fresh.repos);
    assert_eq!(sorted(&again.sockets), sorted(&fresh.sockets));
    assert_eq!(again.unchecked, fresh.unchecked);
    assert_eq!(
        (again.entries, &again.stopped),
        (fresh.entries, &fresh.stopped)
    );
    for found in ["a/b/c/d/new", "x/y/.git", "x/repo"] {
        assert!(again.repos.contains_key(Path::new(found)), "{found}");
    }
    assert!(!again.repos.contains_key(Path::new("prot/inner/r")));
    assert_eq!(again.sockets, [PathBuf::from("a/e/s")]);
    // Only the changed directories were listed again (the root, `a`, `a/b/c/d`, `a/e`, `x`,
    // `x/y`): `a/b`, `a/b/c`, `wide` and `wide/*` were not.
    assert!(again.reused >= 6, "{}", again.reused);
    assert_eq!(fresh.reused, 0);
}

#[test]
fn a_repository_made_in_an_old_directory_is_made_safe_after_the_run() {
    let w = world();
    std::fs::create_dir_all(w.ws.join("src/deep/er")).unwrap();
    until_quiet();
    let g = guard(&w);
    let before = inventory(&g);
    git_dir(&w.ws.join("src/deep/er/.git"), HOSTILE);
    let (c, v) = check(&w, &g, &before);
    assert!(v.is_empty(), "{v:#?}");
    let s = only(&c);
    assert_eq!(
        (s.rel.as_str(), s.change),
        ("src/deep/er/.git", Change::New)
    );
    assert!(!read(&w.ws.join("src/deep/er/.git/config")).contains("fsmonitor"));
}

#[test]
fn listings_kept_by_one_run_spare_the_next_runs_walks_and_miss_nothing() {
    let w = world();
    for d in ["src/a/b", "src/c", "docs"] {
        std::fs::create_dir_all(w.ws.join(d)).unwrap();
    }
    until_quiet();
    let g = guard(&w);
    let kept = w.control.join("listings");
    // The first run: nothing kept yet; its check after keeps the listings.
    let first = inventory_kept(&g, Some(&kept), None);
    assert_eq!(first.trees[0].reused, 0);
    let (c, v) = check(&w, &g, &first);
    assert!(c.is_empty() && v.is_empty(), "{c:#?} {v:#?}");
    assert!(kept.is_file());
    // Between runs (or by the runner), a repository appears deep in an old directory.
    git_dir(&w.ws.join("src/a/b/.git"), HOSTILE);
    let second = inventory_kept(&g, Some(&kept), None);
    let fresh = inventory(&g);
    // (Each inventory keys its digests its own way: the paths are compared.)
    let paths = |i: &Inventory| i.trees[0].repos.keys().cloned().collect::<Vec<_>>();
    assert_eq!(paths(&second), paths(&fresh));
    assert!(
        second.trees[0]
            .repos
            .contains_key(Path::new("src/a/b/.git"))
    );
    assert!(second.trees[0].reused >= 2, "{}", second.trees[0].reused);
    // A file that is not one is ignored: everything is listed.
    for junk in [
        &b""[..],
        b"rlwalk2\n",
        b"rlwalk2\n\x01\0\0\0\0\0\0\0",
        b"not listings",
    ] {
        std::fs::write(&kept, junk).unwrap();
        let again = inventory_kept(&g, Some(&kept), None);
        assert_eq!(again.trees[0].reused, 0);
        assert_eq!(paths(&again), paths(&fresh));
    }
}

#[test]
fn kept_listings_round_trip_and_refuse_names_that_are_not_one_component() {
    let w = world();
    std::fs::create_dir_all(w.ws.join("a/b c/d")).unwrap();
    until_quiet();
    let keys = RandomState::new();
    let inv = walk::walk(&w.ws, &[], &keys, Limits::DEFAULT);
    let file = w.control.join("l");
    inv.listings.save(&file).unwrap();
    assert_eq!(walk::Listings::load(&file), Some(inv.listings.clone()));
    // The same listings in the first format (no inode numbers of subdirectories) are not read.
    let saved = std::fs::read(&file).unwrap();
    let old = w.control.join("old");
    std::fs::write(&old, [&b"rlwalk1\n"[..], &saved[8..]].concat()).unwrap();
    assert_eq!(walk::Listings::load(&old), None);
    // A name with a slash in it (a path, not a name) makes the file unreadable.
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes.windows(3).position(|w| w == b"b c").unwrap();
    bytes[at + 1] = b'/';
    std::fs::write(&file, &bytes).unwrap();
    assert_eq!(walk::Listings::load(&file), None);
}
