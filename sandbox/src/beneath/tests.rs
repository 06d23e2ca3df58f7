use std::os::unix::fs::symlink;

use super::*;

fn tree() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().canonicalize().unwrap();
    (d, root)
}

fn tp(root: &Path, rel: &str) -> TreePath {
    TreePath::new(root, Path::new(rel)).unwrap()
}

#[test]
fn relative_paths_are_checked() {
    let root = Path::new("/ws");
    assert_eq!(tp(root, "./a/./b").rel, PathBuf::from("a/b"));
    for (bad, why) in [
        ("/etc", "relative"),
        ("a/../b", ".."),
        ("..", ".."),
        ("", "itself"),
        (".", "itself"),
    ] {
        let e = TreePath::new(root, Path::new(bad)).unwrap_err();
        assert!(e.to_string().contains(why), "{bad}: {e}");
    }
}

#[test]
fn inspect_reports_where_a_walk_ends() {
    let (_d, root) = tree();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    std::fs::write(root.join("a/f"), "x").unwrap();
    symlink("/etc", root.join("a/link")).unwrap();
    assert!(matches!(inspect(&tp(&root, "a/b")).unwrap(), Found::Exists(s) if s.kind == Kind::Dir));
    assert!(
        matches!(inspect(&tp(&root, "a/f")).unwrap(), Found::Exists(s) if s.kind == Kind::File)
    );
    assert_eq!(
        inspect(&tp(&root, "a/missing/x")).unwrap(),
        Found::Missing {
            at: tp(&root, "a/missing")
        }
    );
    assert_eq!(
        inspect(&tp(&root, "a/link/passwd")).unwrap(),
        Found::Symlink {
            at: tp(&root, "a/link")
        }
    );
    assert_eq!(
        inspect(&tp(&root, "a/link")).unwrap(),
        Found::Symlink {
            at: tp(&root, "a/link")
        }
    );
    assert_eq!(
        inspect(&tp(&root, "a/f/x")).unwrap(),
        Found::NotDirectory {
            at: tp(&root, "a/f")
        }
    );
}

#[test]
fn mkdir_never_creates_through_a_symlink() {
    let (_d, root) = tree();
    let (_o, outside) = tree();
    symlink(&outside, root.join(".git")).unwrap();
    let e = mkdir(&tp(&root, ".git/hooks"), 0o555).unwrap_err();
    assert!(
        matches!(&e, BeneathError::Symlink { at, .. } if at.rel == Path::new(".git")),
        "{e}"
    );
    assert!(
        e.to_string().contains(&outside.display().to_string()),
        "{e}"
    );
    assert!(!outside.join("hooks").exists(), "created through the link");
    std::fs::create_dir(root.join("real")).unwrap();
    assert!(mkdir(&tp(&root, "real/hooks"), 0o555).unwrap());
    assert!(!mkdir(&tp(&root, "real/hooks"), 0o555).unwrap());
}

#[test]
fn remove_all_removes_a_planted_link_not_its_target() {
    let (_d, root) = tree();
    let (_o, outside) = tree();
    std::fs::write(outside.join("keep"), "x").unwrap();
    std::fs::create_dir(outside.join("commondir")).unwrap();
    // The link as the entry itself.
    symlink(&outside, root.join("link")).unwrap();
    assert!(remove_all(&tp(&root, "link")).unwrap());
    assert!(root.join("link").symlink_metadata().is_err());
    assert!(outside.join("keep").exists());
    // The link as a parent: refused, the target untouched.
    symlink(&outside, root.join(".git")).unwrap();
    let e = remove_all(&tp(&root, ".git/commondir")).unwrap_err();
    assert!(matches!(e, BeneathError::Symlink { .. }), "{e}");
    assert!(outside.join("commondir").is_dir());
    // A real directory holding a link out: the tree goes, the link's target stays.
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    symlink(&outside, root.join("d/e/out")).unwrap();
    assert!(remove_all(&tp(&root, "d")).unwrap());
    assert!(!root.join("d").exists());
    assert!(outside.join("keep").exists() && outside.join("commondir").is_dir());
    assert!(!remove_all(&tp(&root, "d")).unwrap());
}

#[test]
fn rmdir_if_empty_keeps_what_has_content() {
    let (_d, root) = tree();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    assert!(!rmdir_if_empty(&tp(&root, "a")).unwrap());
    assert!(rmdir_if_empty(&tp(&root, "a/b")).unwrap());
    assert!(!rmdir_if_empty(&tp(&root, "a/b")).unwrap());
}

#[test]
fn first_symlink_finds_the_first_link_from_the_top() {
    let (_d, root) = tree();
    std::fs::create_dir_all(root.join("a/b")).unwrap();
    symlink(root.join("a"), root.join("l")).unwrap();
    assert_eq!(first_symlink(&root.join("a/b")).unwrap(), None);
    assert_eq!(
        first_symlink(&root.join("l/b")).unwrap(),
        Some(root.join("l"))
    );
    assert_eq!(first_symlink(&root.join("nope/x")).unwrap(), None);
}
