//! Recording protected paths and undoing what a run changed, on real directories.

use std::os::unix::fs::{PermissionsExt, symlink};

use super::*;

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    store: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(
        ws.join(".git/hooks/pre-commit"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    symlink("pre-commit", ws.join(".git/hooks/pre-push")).unwrap();
    World {
        store: root.join("control/protected"),
        ws,
        _dir: dir,
    }
}

fn tp(w: &World, rel: &str) -> TreePath {
    TreePath::new(&w.ws, Path::new(rel)).unwrap()
}

fn protected(w: &World) -> Vec<TreePath> {
    vec![tp(w, ".git/hooks"), tp(w, ".git/config")]
}

fn read(p: PathBuf) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn nothing_changed_nothing_reported_and_the_copies_go() {
    let w = world();
    let snap = Snapshot::take(&protected(&w), &w.store).unwrap();
    assert!(w.store.is_dir());
    assert!(snap.check_and_restore().is_empty());
    assert!(!w.store.exists(), "copies kept although nothing changed");
}

#[test]
fn a_changed_file_is_restored_and_reported() {
    let w = world();
    let snap = Snapshot::take(&protected(&w), &w.store).unwrap();
    // Through any route: here simply rewritten (as through an old hard link would).
    std::fs::write(w.ws.join(".git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    let v = snap.check_and_restore();
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].kind, ViolationKind::ProtectedChanged);
    assert_eq!(v[0].path, w.ws.join(".git/config"));
    assert!(v[0].undone && v[0].detail.contains("restored"), "{}", v[0]);
    assert_eq!(read(w.ws.join(".git/config")), "[core]\n");
    assert!(w.store.is_dir(), "the copies are kept as evidence");
}

#[test]
fn a_new_hook_is_removed_and_a_replaced_one_restored() {
    let w = world();
    let snap = Snapshot::take(&protected(&w), &w.store).unwrap();
    std::fs::write(w.ws.join(".git/hooks/post-checkout"), "evil").unwrap();
    std::fs::remove_file(w.ws.join(".git/hooks/pre-commit")).unwrap();
    symlink("/etc/passwd", w.ws.join(".git/hooks/pre-commit")).unwrap();
    std::fs::remove_file(w.ws.join(".git/hooks/pre-push")).unwrap();
    symlink("/tmp/evil", w.ws.join(".git/hooks/pre-push")).unwrap();
    let v = snap.check_and_restore();
    let paths: Vec<_> = v.iter().map(|v| v.path.clone()).collect();
    assert!(
        paths.contains(&w.ws.join(".git/hooks/post-checkout")),
        "{v:?}"
    );
    assert!(paths.contains(&w.ws.join(".git/hooks/pre-commit")), "{v:?}");
    assert!(v.iter().all(|v| v.undone), "{v:?}");
    assert!(!w.ws.join(".git/hooks/post-checkout").exists());
    let hook = w.ws.join(".git/hooks/pre-commit");
    assert!(hook.symlink_metadata().unwrap().is_file());
    assert_eq!(read(hook.clone()), "#!/bin/sh\nexit 0\n");
    assert_eq!(
        hook.metadata().unwrap().permissions().mode() & 0o7777,
        0o755
    );
    assert_eq!(
        std::fs::read_link(w.ws.join(".git/hooks/pre-push")).unwrap(),
        PathBuf::from("pre-commit")
    );
}

#[test]
fn a_directory_swapped_for_another_is_put_back() {
    let w = world();
    let snap = Snapshot::take(&protected(&w), &w.store).unwrap();
    std::fs::rename(w.ws.join(".git/hooks"), w.ws.join("hooks-away")).unwrap();
    std::fs::create_dir(w.ws.join(".git/hooks")).unwrap();
    std::fs::write(w.ws.join(".git/hooks/pre-commit"), "evil").unwrap();
    let v = snap.check_and_restore();
    assert!(!v.is_empty());
    assert_eq!(
        read(w.ws.join(".git/hooks/pre-commit")),
        "#!/bin/sh\nexit 0\n"
    );
    assert!(w.ws.join(".git/hooks/pre-push").symlink_metadata().is_ok());
}

#[test]
fn hard_linked_protected_files_are_refused() {
    let w = world();
    std::fs::hard_link(w.ws.join(".git/hooks/pre-commit"), w.ws.join("alias")).unwrap();
    let e = refuse_hard_links(&protected(&w)).unwrap_err();
    assert!(
        e.to_string().contains("pre-commit") && e.to_string().contains("2 hard links"),
        "{e}"
    );
    assert_eq!(e.class(), crate::ErrorClass::Usage);
    std::fs::remove_file(w.ws.join("alias")).unwrap();
    refuse_hard_links(&protected(&w)).unwrap();
}

#[test]
fn the_copy_budget_bounds_what_is_kept() {
    let w = world();
    let big = w.ws.join(".git/hooks/big");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(COPY_BUDGET + 1).unwrap();
    let snap = Snapshot::take(&protected(&w), &w.store).unwrap();
    std::fs::write(&big, "changed").unwrap();
    let v = snap.check_and_restore();
    let big_v = v.iter().find(|v| v.path == big).unwrap();
    assert!(!big_v.undone && big_v.detail.contains("budget"), "{big_v}");
}
