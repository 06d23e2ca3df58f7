//! Walks of an overlay from its lower layer's listings ([`super::keep_listings`],
//! [`super::listings_seen_through`], and through its layers: `walk/lower.rs`), on a real overlay (root only: it skips, saying why,
//! elsewhere): a walk that trusts them finds everything a fresh walk finds, whatever was made
//! through the overlay after the listings were written, and lists again only what changed.

use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

use super::*;

/// An overlay of a lower tree of plain directories, quiet for the walks (mounted; unmounted
/// when dropped).
struct Overlay {
    _dir: tempfile::TempDir,
    lower: PathBuf,
    upper: PathBuf,
    merged: PathBuf,
    host: PathBuf,
}

impl Drop for Overlay {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.merged, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn overlay() -> Option<Overlay> {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let (lower, upper, work, merged, host) = (
        root.join("lower"),
        root.join("upper"),
        root.join("work"),
        root.join("merged"),
        root.join("host"),
    );
    for d in [
        "src/a/b/c",
        "src/a/d",
        "src/e",
        "docs/f",
        "docs/g",
        "leaf1",
        "leaf2",
        "leaf3",
    ] {
        std::fs::create_dir_all(lower.join(d)).unwrap();
        std::fs::write(lower.join(d).join("file.txt"), d).unwrap();
    }
    for d in [&upper, &work, &merged, &host] {
        std::fs::create_dir(d).unwrap();
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    if let Err(e) = nix::mount::mount(
        Some("overlay"),
        &merged,
        Some("overlay"),
        nix::mount::MsFlags::empty(),
        Some(options.as_str()),
    ) {
        assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
        eprintln!("skipped: an overlay needs root here ({e})");
        return None;
    }
    Some(Overlay {
        _dir: dir,
        lower,
        upper,
        merged,
        host,
    })
}

fn dev(p: &Path) -> u64 {
    std::fs::metadata(p).unwrap().dev()
}

fn repo_paths(i: &Inventory) -> Vec<PathBuf> {
    i.trees[0].repos.keys().cloned().collect()
}

/// What a job could make through the overlay in directories only the lower layer had: a
/// repository at `repo` (its configuration naming a command), a `.git` file in `git_file`, a
/// socket `docs/f/s` (returned: it lives as long as its listener), `leaf2` swapped for a link
/// out of the tree, `src/e` removed and made again with a `.git` file in it.
fn make_hostile(o: &Overlay, repo: &str, git_file: &str) -> std::os::unix::net::UnixListener {
    let m = &o.merged;
    let r = m.join(repo).join(".git");
    std::fs::create_dir_all(r.join("hooks")).unwrap();
    std::fs::write(r.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::create_dir_all(r.join("objects")).unwrap();
    std::fs::create_dir_all(r.join("refs")).unwrap();
    std::fs::write(r.join("config"), "[core]\n\tfsmonitor = /x\n").unwrap();
    std::fs::write(m.join(git_file).join(".git"), "gitdir: /elsewhere\n").unwrap();
    let socket = std::os::unix::net::UnixListener::bind(m.join("docs/f/s")).unwrap();
    std::fs::remove_dir_all(m.join("leaf2")).unwrap();
    symlink(&o.host, m.join("leaf2")).unwrap();
    std::fs::remove_dir_all(m.join("src/e")).unwrap();
    std::fs::create_dir(m.join("src/e")).unwrap();
    std::fs::write(m.join("src/e/.git"), "gitdir: /elsewhere/too\n").unwrap();
    socket
}

#[test]
fn an_overlay_walked_from_its_lower_listings_finds_what_a_fresh_walk_finds() {
    // Quiet first, so that the lower walk keeps its listings.
    let Some(o) = overlay() else { return };
    std::thread::sleep(walk::QUIET + std::time::Duration::from_millis(50));
    let base = o.lower.parent().unwrap().join("base.walk");
    let kept = keep_listings(&o.lower, &base).unwrap();
    assert!(kept >= 10, "{kept}");
    let seeded = o.lower.parent().unwrap().join("seeded.walk");
    let n = listings_seen_through(&base, dev(&o.lower), dev(&o.merged), &seeded)
        .unwrap()
        .unwrap();
    assert_eq!(n, kept);
    let g = GitGuard::new(&o.merged, &[], Vec::new());

    // Unchanged: every kept directory is trusted, and the walk finds what a fresh one does.
    let trusted = inventory_kept(&g, Some(&seeded), None);
    assert!(trusted.reused() >= 10, "{}", trusted.reused());
    assert_eq!(repo_paths(&trusted), repo_paths(&inventory(&g)));

    // What a job could make through the overlay in directories only the lower layer had: a
    // repository in a leaf and deep in the tree, a `.git` file, a socket, a directory swapped
    // for a link out of the tree, a directory removed and made again.
    let m = &o.merged;
    let _socket = make_hostile(&o, "leaf1/r", "src/a/b/c");

    let trusted = inventory_kept(&g, Some(&seeded), None);
    let fresh = inventory(&g);
    assert_eq!(repo_paths(&trusted), repo_paths(&fresh));
    for found in ["leaf1/r/.git", "src/a/b/c/.git", "src/e/.git"] {
        assert!(
            repo_paths(&trusted).contains(&PathBuf::from(found)),
            "{found}"
        );
    }
    assert_eq!(trusted.sockets(), fresh.sockets());
    assert_eq!(
        trusted.sockets().sockets,
        [m.join("docs/f/s")],
        "the socket made through the overlay"
    );
    assert_eq!(trusted.trees[0].unchecked, fresh.trees[0].unchecked);
    // The untouched directories are still trusted (src/a/d, docs/g, leaf3).
    assert!(trusted.reused() >= 3, "{}", trusted.reused());
}

#[test]
fn listings_of_another_device_are_not_carried_over() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("t/a/b")).unwrap();
    std::thread::sleep(walk::QUIET + std::time::Duration::from_millis(50));
    let base = d.path().join("base.walk");
    let kept = keep_listings(&d.path().join("t"), &base).unwrap();
    assert_eq!(kept, 3, "t, t/a and t/a/b");
    let dev = dev(d.path());
    let to = d.path().join("to.walk");
    // From another device than the listings': nothing.
    assert_eq!(
        listings_seen_through(&base, dev + 1, 7, &to)
            .unwrap()
            .unwrap(),
        0
    );
    assert_eq!(
        listings_seen_through(&base, dev, 7, &to).unwrap().unwrap(),
        kept
    );
    let moved = walk::Listings::load(&to).unwrap();
    assert_eq!(
        moved.moved(7, 7).len(),
        kept,
        "every listing is on device 7"
    );
    // No file, or not one of listings: none.
    assert!(listings_seen_through(&d.path().join("none"), dev, 7, &to).is_none());
    std::fs::write(&base, b"junk").unwrap();
    assert!(listings_seen_through(&base, dev, 7, &to).is_none());
}

/// The overlay's layers as a runner names them, every plain directory of its lower layer kept
/// at once (the tree was just made: not quiet).
fn layers(o: &Overlay) -> crate::spec::WorkspaceLayers {
    let base = o.lower.parent().unwrap().join("base.lower");
    let quiet = o.lower.parent().unwrap().join("base.walk");
    assert_eq!(
        keep_listings(&o.lower, &quiet).unwrap(),
        0,
        "nothing is quiet yet"
    );
    assert!(keep_lower_listings(&o.lower, &base).unwrap() >= 10);
    crate::spec::WorkspaceLayers {
        merged: o.merged.clone(),
        upper: o.upper.clone(),
        lower_listings: base,
        lower_dev: dev(&o.lower),
    }
}

/// What a walk found that a fresh walk must find alike.
fn same_findings(walked: &Inventory, fresh: &Inventory) {
    assert_eq!(repo_paths(walked), repo_paths(fresh));
    assert_eq!(walked.sockets(), fresh.sockets());
    assert_eq!(walked.trees[0].unchecked, fresh.trees[0].unchecked);
    assert_eq!(walked.trees[0].stopped, fresh.trees[0].stopped);
    assert_eq!(walked.trees[0].entries, fresh.trees[0].entries);
}

#[test]
fn an_overlay_walked_through_its_layers_looks_only_where_the_upper_layer_changed() {
    let Some(o) = overlay() else { return };
    let layers = layers(&o);
    let g = GitGuard::new(&o.merged, &[], Vec::new());

    // Unchanged: every lower directory is taken from the listings, the root's children by one
    // look each, below them none.
    let layered = inventory_kept(&g, None, Some(&layers));
    same_findings(&layered, &inventory(&g));
    assert!(layered.reused() >= 10, "{}", layered.reused());

    // What a job could make through the overlay deep in directories only the lower layer had:
    // a repository, a `.git` file, a socket, a directory swapped for a link out of the tree,
    // one removed and made again with a `.git` in it, one renamed.
    let m = &o.merged;
    let _socket = make_hostile(&o, "src/a/b/c/r", "src/a/d");
    // A lower directory cannot be renamed here (no `redirect_dir`): moved as `mv` then does.
    assert!(std::fs::rename(m.join("docs/g"), m.join("leaf3/g")).is_err());
    std::fs::create_dir(m.join("leaf3/g")).unwrap();
    std::fs::write(m.join("leaf3/g/.git"), "gitdir: /moved\n").unwrap();
    std::fs::remove_dir_all(m.join("docs/g")).unwrap();

    let layered = inventory_kept(&g, None, Some(&layers));
    let fresh = inventory(&g);
    same_findings(&layered, &fresh);
    for found in [
        "src/a/b/c/r/.git",
        "src/a/d/.git",
        "src/e/.git",
        "leaf3/g/.git",
    ] {
        assert!(
            repo_paths(&layered).contains(&PathBuf::from(found)),
            "{found}"
        );
    }
    assert_eq!(layered.sockets().sockets, [m.join("docs/f/s")]);
    // The directories the job did not touch are still taken from the listings (leaf1 and its
    // like), and the walk after a run does the same from the walk before it.
    assert!(layered.reused() >= 1, "{}", layered.reused());
    let (check, violations) = check_after_run(&g, &layered, &o.lower.parent().unwrap().join("ctl"));
    let (fresh_check, fresh_violations) =
        check_after_run(&g, &fresh, &o.lower.parent().unwrap().join("ctl2"));
    assert_eq!(check, fresh_check);
    assert_eq!(violations.len(), fresh_violations.len());
}

#[test]
fn an_upper_layer_past_the_walks_bounds_leaves_the_tree_to_the_plain_walk() {
    let Some(o) = overlay() else { return };
    let layers = layers(&o);
    let g = GitGuard::new(&o.merged, &[], Vec::new());
    for i in 0..40 {
        std::fs::create_dir(o.merged.join(format!("leaf1/many{i}"))).unwrap();
    }
    std::fs::write(o.merged.join("src/a/b/c/.git"), "gitdir: /x\n").unwrap();
    let limits = Limits {
        depth: 128,
        entries: 30,
    };
    let layered = inventory_with(&g, limits, None, Some(&layers));
    let plain = inventory_with(&g, limits, None, None);
    assert_eq!(
        layered.trees[0].stopped.is_some(),
        plain.trees[0].stopped.is_some()
    );
    assert!(layered.trees[0].stopped.is_some());
    assert_eq!(
        layered.reused(),
        0,
        "nothing taken from listings: the upper layer was too big"
    );
}
