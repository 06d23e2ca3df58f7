use std::os::unix::fs::symlink;
use std::path::PathBuf;

use super::*;

/// Builds a chain of `depth` directories `d/d/d/...` below `root` by descriptor (the path is far
/// longer than `PATH_MAX`), with a file at every 100th level, a symlink to `canary` halfway and
/// a file at the bottom.
fn chain(root: &Path, depth: usize, canary: &Path) -> Totals {
    let d = OsStr::new("d");
    let mut fd = open_dir(
        open_parent(&root.join("x")).unwrap().0.as_fd(),
        OsStr::new("."),
        Access::Read,
    )
    .unwrap();
    let mut expect = Totals::default();
    for i in 0..depth {
        fsat::mkdir(fd.as_fd(), d, 0o700).unwrap();
        fd = open_dir(fd.as_fd(), d, Access::Read).unwrap();
        if i % 100 == 0 {
            let mut file = fsat::create_new(fd.as_fd(), OsStr::new("f"), 0o600).unwrap();
            std::io::Write::write_all(&mut file, b"abc").unwrap();
            expect.add(Totals { files: 1, bytes: 3 });
        }
        if i == depth / 2 {
            fsat::symlink(canary.as_os_str(), fd.as_fd(), OsStr::new("link")).unwrap();
            expect.add(Totals {
                files: 1,
                bytes: canary.as_os_str().len() as u64,
            });
        }
    }
    expect
}

fn canary() -> (tempfile::TempDir, PathBuf) {
    let c = tempfile::tempdir().unwrap();
    std::fs::create_dir(c.path().join("inside")).unwrap();
    std::fs::write(c.path().join("inside/keep"), "precious").unwrap();
    let p = c.path().to_owned();
    (c, p)
}

fn canary_intact(c: &Path) {
    assert_eq!(
        std::fs::read_to_string(c.join("inside/keep")).unwrap(),
        "precious",
        "the canary behind a planted link was touched"
    );
}

#[test]
fn a_tree_deeper_than_path_max_goes_with_a_bounded_number_of_descriptors() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, canary) = canary();
    let top = dir.path().join("top");
    std::fs::create_dir(&top).unwrap();
    let expect = chain(&top, 5000, &canary);
    // Deeper than any path could name.
    assert!(5000 * 2 > libc::PATH_MAX as usize);

    PEAK.with(|p| p.set(0));
    assert_eq!(measure(&top).unwrap(), Some(expect));
    let peak = PEAK.with(std::cell::Cell::get);
    assert!(
        peak <= OPEN_LEVELS + 2,
        "measuring held {peak} streams open"
    );

    PEAK.with(|p| p.set(0));
    assert_eq!(remove_tree(&top).unwrap(), Some(expect));
    let peak = PEAK.with(std::cell::Cell::get);
    assert!(peak <= OPEN_LEVELS, "removing held {peak} streams open");
    assert!(top.symlink_metadata().is_err(), "the tree is still there");
    canary_intact(&canary);
    assert_eq!(remove_tree(&top).unwrap(), None);
}

#[test]
fn a_wide_and_deep_tree_is_measured_and_removed_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, canary) = canary();
    let top = dir.path().join("top");
    let mut expect = Totals::default();
    for i in 0..40 {
        let mut p = top.join(format!("w{i}"));
        for j in 0..(i % 25) {
            p.push(format!("l{j}"));
        }
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("f"), vec![b'x'; i]).unwrap();
        expect.add(Totals {
            files: 1,
            bytes: i as u64,
        });
    }
    symlink(&canary, top.join("w3/l0/l1/out")).unwrap();
    expect.add(Totals {
        files: 1,
        bytes: canary.as_os_str().len() as u64,
    });
    // A subtree named like the ones moved up is no problem.
    std::fs::create_dir_all(top.join(".ralph-removing-0/a")).unwrap();
    assert_eq!(measure(&top).unwrap(), Some(expect));
    assert_eq!(remove_tree(&top).unwrap(), Some(expect));
    assert!(!top.exists());
    canary_intact(&canary);
}

#[test]
fn a_link_in_place_of_the_tree_is_removed_as_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, canary) = canary();
    let link = dir.path().join("home");
    symlink(&canary, &link).unwrap();
    assert_eq!(
        measure(&link).unwrap(),
        Some(Totals {
            files: 1,
            bytes: canary.as_os_str().len() as u64
        })
    );
    assert!(remove_tree(&link).unwrap().is_some());
    assert!(link.symlink_metadata().is_err());
    canary_intact(&canary);
    // A missing path or a missing parent: nothing to do.
    assert_eq!(remove_tree(&dir.path().join("nope")).unwrap(), None);
    assert_eq!(remove_tree(&dir.path().join("nope/deeper")).unwrap(), None);
}
