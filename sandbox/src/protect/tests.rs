//! Protected-path resolution and the after-run check on real directories, with hostile
//! symlinks where protected paths or their parents should be.

use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::*;
use crate::mode::Mode;
use crate::policy::PolicySet;

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    /// A host directory outside the workspace that an agent would aim at.
    host: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (ws, host) = (root.join("ws"), root.join("host"));
    std::fs::create_dir(&ws).unwrap();
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("keep"), "host\n").unwrap();
    World {
        _dir: dir,
        ws,
        host,
    }
}

fn req(w: &World, protect: &[&str]) -> SandboxRequest {
    SandboxRequest {
        protect: protect.iter().map(PathBuf::from).collect(),
        ..SandboxRequest::minimal(
            Mode::WorkspaceWrite,
            w.ws.clone(),
            PathBuf::from("/nonexistent/home"),
            PathBuf::from("/nonexistent/tmp"),
        )
    }
}

fn resolve_ww(r: &SandboxRequest) -> Result<ProtectedSet, SandboxError> {
    let set = PolicySet::embedded().unwrap();
    resolve(set.get(Mode::WorkspaceWrite).unwrap(), r)
}

fn tp(w: &World, rel: &str) -> TreePath {
    TreePath::new(&w.ws, Path::new(rel)).unwrap()
}

fn host_untouched(w: &World) {
    let entries: Vec<_> = std::fs::read_dir(&w.host)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        entries,
        vec![std::ffi::OsString::from("keep")],
        "host dir changed"
    );
}

#[test]
fn a_git_symlink_is_refused_not_followed() {
    let w = world();
    symlink(&w.host, w.ws.join(".git")).unwrap();
    let e = resolve_ww(&req(&w, &[])).unwrap_err();
    let text = e.to_string();
    assert_eq!(e.class(), crate::ErrorClass::Usage);
    assert!(
        text.contains(".git/hooks") && text.contains("is a symlink"),
        "{text}"
    );
    assert!(text.contains(&w.host.display().to_string()), "{text}");
    host_untouched(&w);
}

#[test]
fn a_symlinked_hooks_dir_or_config_is_refused() {
    for rel in [".git/hooks", ".git/config"] {
        let w = world();
        std::fs::create_dir(w.ws.join(".git")).unwrap();
        symlink(&w.host, w.ws.join(rel)).unwrap();
        let text = resolve_ww(&req(&w, &[])).unwrap_err().to_string();
        assert!(
            text.contains(rel) && text.contains("symlink"),
            "{rel}: {text}"
        );
    }
}

#[test]
fn an_explicit_protect_through_a_symlink_is_refused() {
    let w = world();
    symlink(&w.host, w.ws.join("tests")).unwrap();
    for p in ["tests", "tests/unit"] {
        let e = resolve_ww(&req(&w, &[p])).unwrap_err();
        assert!(
            matches!(&e, SandboxError::InvalidRequest { field, .. } if field == "protect"),
            "{e}"
        );
    }
    host_untouched(&w);
}

#[test]
fn protect_paths_must_stay_inside_the_workspace() {
    let w = world();
    for p in ["/etc", "../host", "a/../../host"] {
        let e = resolve_ww(&req(&w, &[p])).unwrap_err();
        assert!(
            matches!(&e, SandboxError::InvalidRequest { field, .. } if field == "protect"),
            "{p}: {e}"
        );
    }
}

#[test]
fn real_paths_bind_and_anchor_their_parents() {
    let w = world();
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    std::fs::write(w.ws.join(".git/config"), "").unwrap();
    std::fs::create_dir_all(w.ws.join("tests/unit")).unwrap();
    let set = resolve_ww(&req(&w, &["tests/unit"])).unwrap();
    assert_eq!(set.anchors, vec![tp(&w, ".git"), tp(&w, "tests")]);
    assert!(set.protected.contains(&tp(&w, ".git/hooks")));
    assert!(set.protected.contains(&tp(&w, "tests/unit")));
    assert_eq!(set.absent, vec![tp(&w, ".git/commondir")]);
    assert!(set.watch.contains(&tp(&w, ".git/config")));
}

#[test]
fn without_a_repository_git_paths_are_watched_not_bound() {
    let w = world();
    let set = resolve_ww(&req(&w, &[])).unwrap();
    assert!(set.anchors.is_empty());
    assert!(!set.protected.iter().any(|p| p.rel.starts_with(".git")));
    assert!(set.watch.contains(&tp(&w, ".git/hooks")));
    assert!(set.watch.contains(&tp(&w, ".git/config")));
}

#[test]
fn after_the_run_a_planted_git_symlink_is_removed_and_reported() {
    let w = world();
    let set = resolve_ww(&req(&w, &[])).unwrap();
    // What a round does: `.git` pointing at a host directory.
    symlink(&w.host, w.ws.join(".git")).unwrap();
    let v = check_after_run(&set.watch, &set.absent);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, ViolationKind::Symlink);
    assert_eq!(v[0].path, w.ws.join(".git"));
    assert!(v[0].undone);
    assert!(v[0].to_string().contains(".git/hooks"), "{}", v[0]);
    assert!(w.ws.join(".git").symlink_metadata().is_err(), "link left");
    host_untouched(&w);
}

#[test]
fn after_the_run_commondir_is_removed_without_following_links() {
    let w = world();
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    let set = resolve_ww(&req(&w, &[])).unwrap();
    symlink(&w.host, w.ws.join(".git/commondir")).unwrap();
    let v = check_after_run(&set.watch, &set.absent);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, ViolationKind::CreatedAbsent);
    assert!(w.ws.join(".git/commondir").symlink_metadata().is_err());
    host_untouched(&w);
    // Nothing planted: nothing reported.
    assert!(check_after_run(&set.watch, &set.absent).is_empty());
}

#[test]
fn a_symlink_above_an_absent_path_is_reported_and_its_target_kept() {
    let w = world();
    let set = resolve_ww(&req(&w, &[])).unwrap();
    std::fs::create_dir(w.host.join("commondir")).unwrap();
    symlink(&w.host, w.ws.join(".git")).unwrap();
    let v = check_after_run(&set.watch, &set.absent);
    assert!(v.iter().all(|v| v.path == w.ws.join(".git")), "{v:?}");
    assert!(
        w.host.join("commondir").is_dir(),
        "the clean-up followed the link"
    );
}

#[test]
fn write_roots_get_the_workspaces_git_protection() {
    let w = world();
    let cache = w.host.join("cache");
    std::fs::create_dir_all(cache.join(".git/hooks")).unwrap();
    std::fs::write(cache.join(".git/config"), "").unwrap();
    let mut r = req(&w, &[]);
    r.write = vec![cache.clone()];
    let set = resolve_ww(&r).unwrap();
    let in_cache = |rel: &str| TreePath::new(&cache, Path::new(rel)).unwrap();
    assert!(set.protected.contains(&in_cache(".git/hooks")));
    assert!(set.protected.contains(&in_cache(".git/config")));
    assert!(set.anchors.contains(&in_cache(".git")));
    assert!(set.absent.contains(&in_cache(".git/commondir")));
    // Not the workspace-only defaults (no `.ralph` placeholder in a cache directory).
    assert!(!set.placeholders.iter().any(|p| p.at.root == cache));
    // A planted link there is refused like in the workspace.
    let other = w.host.join("other");
    std::fs::create_dir(&other).unwrap();
    std::os::unix::fs::symlink(&w.host, other.join(".git")).unwrap();
    r.write = vec![other];
    assert!(
        resolve_ww(&r)
            .unwrap_err()
            .to_string()
            .contains("is a symlink")
    );
}
