//! Unix sockets in the trees a round can see (SPEC §5 "The host boundary": "A unix socket in a
//! visible tree is not connectable unless granted with `--socket PATH`"). Landlock before the
//! ABI that governs connecting to a named socket does not cover `connect(2)`, and with the
//! network off only AF_UNIX sockets remain, so a live socket a host process keeps in the
//! workspace (git's `fsmonitor--daemon.ipc`), a `--read` directory or a policy tree
//! (systemd-resolved's varlink socket) would be a channel to that process. Before each run the
//! visible trees are walked (never following a symlink, bounded) and every socket found is
//! masked (natively an empty mode-000 file mounted over it; in a container a masked path); a
//! socket named with `--socket` is made visible and left connectable instead.
//!
//! Sockets that appear after the run started are not covered on hosts whose Landlock cannot
//! restrict them (`ralph doctor` says so).
//!
//! A runner scans the same trees every round (the `--read` trees, the runner's toolchains: a
//! pyenv or rustup install is tens of thousands of directories), so a scan keeps each
//! directory's listing ([`memo`]) and the next one lists only the directories whose identity or
//! change time moved: a socket made, removed or renamed in a directory changes the directory's
//! own change time, which no process can set back. Under a watch ([`watch`]), a tree in which
//! nothing was heard since its last scan is taken whole from that scan ([`memo::TreeFound`]).
//! Without one, each kept listing needs a stat: those are taken on several threads first
//! ([`precheck`]), and the walk lists only what they found changed. Every directory below a
//! tree's root is statted, opened and listed relative to its parent's descriptor ([`place`]).

mod memo;
mod place;
mod precheck;
pub mod watch;

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::fsat::{self, Access, Kind};

/// Bytes of directory entries read per `getdents64`.
const LISTING_BUFFER: usize = 32 * 1024;

/// Entries walked per run, over all trees.
pub const ENTRY_LIMIT: usize = 500_000;

/// What a scan found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// Socket files, sorted.
    pub sockets: Vec<PathBuf>,
    /// Trees whose walk stopped at [`ENTRY_LIMIT`] (not every socket is known).
    pub incomplete: Vec<PathBuf>,
}

/// Walks `trees` (absolute host paths; a missing one is skipped) for socket files, reusing
/// what earlier scans in this process listed of directories that did not change ([`memo`]).
pub fn scan(trees: &[PathBuf]) -> Found {
    scan_with(trees, &memo::PROCESS, memo::MARGIN, &watch::PROCESS)
}

/// The file of a runner's state directory that keeps its scans' listings between its processes.
pub const LISTINGS_FILE: &str = "socket-listings";

/// Loads the listings kept in `path` ([`LISTINGS_FILE`]) into this process's memo when it has
/// none yet: the process's first scan then stats each directory listed there instead of listing
/// it again (a toolchain is tens of thousands of directories). A missing or malformed file is
/// ignored. Returns the directories loaded.
pub fn load_listings(path: &Path) -> usize {
    let mut memo = memo::PROCESS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !memo.is_empty() {
        return 0;
    }
    match memo::Memo::load(path) {
        Some(loaded) => {
            *memo = loaded;
            memo.len()
        }
        None => 0,
    }
}

/// [`load_listings`] on a thread of its own, started now: a process that has other work to do
/// before its first scan (a `ralph run` opening its store and journalling its job) reads and
/// parses the file meanwhile (2.3 MB for a runner with rustup and pyenv: ~6 ms). Wait for it
/// with [`LoadAhead::wait`] before the first scan.
pub fn load_listings_ahead(path: PathBuf) -> LoadAhead {
    let spawned = std::thread::Builder::new()
        .name("ralph-listings".into())
        .spawn({
            let path = path.clone();
            move || load_listings(&path)
        });
    match spawned {
        Ok(thread) => LoadAhead::Loading(thread),
        Err(_) => LoadAhead::Inline(path),
    }
}

/// A load of kept listings under way ([`load_listings_ahead`]).
#[derive(Debug)]
pub enum LoadAhead {
    /// On its thread.
    Loading(std::thread::JoinHandle<usize>),
    /// No thread could be started: loaded by [`LoadAhead::wait`].
    Inline(PathBuf),
}

impl LoadAhead {
    /// Waits until the listings are loaded; returns the directories loaded.
    pub fn wait(self) -> usize {
        match self {
            LoadAhead::Loading(thread) => thread.join().unwrap_or(0),
            LoadAhead::Inline(path) => load_listings(&path),
        }
    }
}

/// Saves this process's memo to `path` ([`LISTINGS_FILE`]) when a scan changed it since it was
/// loaded or last saved.
pub fn save_listings(path: &Path) -> std::io::Result<()> {
    let mut memo = memo::PROCESS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !memo.changed {
        return Ok(());
    }
    memo.save(path)?;
    memo.changed = false;
    Ok(())
}

/// [`scan`] with its memo, the age a directory's change time must have before its listing is
/// kept, and its watch (tests).
pub(crate) fn scan_with(
    trees: &[PathBuf],
    memo: &std::sync::Mutex<memo::Memo>,
    margin: std::time::Duration,
    watch: &std::sync::Mutex<watch::State>,
) -> Found {
    let mut memo = memo
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut state = watch
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut watch = state.get();
    if let Some(w) = watch.as_deref_mut() {
        let forget = w.prepare(trees);
        for d in &forget.dirs {
            memo.forget(d);
        }
        memo.forget_under(&forget.under);
    }
    let watch = watch.as_deref();
    // Without a watch every kept listing needs its stat: taken on several threads first.
    let threads = if watch.is_none() {
        precheck::threads(&memo)
    } else {
        0
    };
    let mut checked = Vec::new();
    if threads > 1 {
        let check = memo.begin_check();
        checked = precheck::run(&memo, check, trees, threads);
        memo.checked += checked.iter().map(|c| c.dirs as u64).sum::<u64>();
    }
    let hears = |dev: u64| watch.is_some_and(|w| w.hears(dev));
    let mut found = Found::default();
    let mut seen = 0usize;
    let mut dirs = 0usize;
    for (i, tree) in trees.iter().enumerate() {
        // A tree the watch does not cover keeps listings of generation 0: never trusted until
        // a stat under a watch finds them current.
        let covered = watch.filter(|w| w.covers(tree));
        let trust = covered.map(|w| memo::Trust {
            generation: w.generation,
            hears: &hears,
        });
        let generation = covered.map_or(0, |w| w.generation);
        // (directory, whether its parent's listing was reused): a tree's root is always looked at,
        // or what a check on other threads left of the tree.
        let mut stack = vec![(place::Place::root(tree.clone()), false)];
        let mut complete = true;
        match std::fs::symlink_metadata(tree) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(m) => {
                use std::os::unix::fs::FileTypeExt;
                if m.file_type().is_socket() {
                    found.sockets.push(tree.clone());
                }
                continue;
            }
            Err(_) => continue,
        }
        if let Some(c) = checked.get_mut(i) {
            stack = std::mem::take(&mut c.rest)
                .into_iter()
                .map(|p| (p, false))
                .collect();
            seen += c.entries;
            dirs += c.dirs;
            found.sockets.append(&mut c.sockets);
            if seen > ENTRY_LIMIT {
                found.incomplete.push(tree.clone());
                continue;
            }
        }
        // The whole tree as the last scan found it, when nothing was heard of it since.
        let root_now = covered.and_then(|_| memo::Listing::stat(tree));
        if let (Some(w), Some(now)) = (covered, &root_now)
            && let Some(t) = memo.tree(tree, w.generation, now)
            && seen + t.entries <= ENTRY_LIMIT
        {
            seen += t.entries;
            dirs += t.dirs;
            found.sockets.extend(t.sockets.iter().cloned());
            continue;
        }
        let (seen_before, dirs_before, sockets_before) = (seen, dirs, found.sockets.len());
        // Whether what this walk finds can be taken whole next time ([`memo::TreeFound`]).
        let mut whole = root_now.is_some();
        while let Some((at, parent_reused)) = stack.pop() {
            dirs += 1;
            let dir = &at.dir;
            // The directory's descriptor, when it was statted or listed through one.
            let mut fd = None;
            let stat = |kept: &memo::Listing| {
                let (now, opened) = at.stat(!kept.subdirs.is_empty())?;
                fd = opened;
                Some(now)
            };
            let (listing, reused) = match memo.reuse(dir, trust, parent_reused, stat) {
                Some(l) => (l, true),
                None => {
                    let Some((l, opened)) = list(&at) else {
                        whole = false;
                        continue;
                    };
                    fd = Some(opened);
                    let l = std::sync::Arc::new(l);
                    whole &= memo.keep(dir, &l, margin, generation);
                    (l, false)
                }
            };
            let held = at.hold(fd);
            whole &= hears(listing.dev());
            seen += listing.entries;
            if seen > ENTRY_LIMIT {
                complete = false;
                break;
            }
            stack.extend(
                listing
                    .subdirs
                    .iter()
                    .map(|n| (at.child(n, held.as_ref()), reused)),
            );
            found
                .sockets
                .extend(listing.sockets.iter().map(|n| dir.join(n)));
        }
        if !complete {
            found.incomplete.push(tree.clone());
        } else if let (true, Some(w), Some(now)) = (whole, covered, &root_now) {
            memo.keep_tree(
                tree,
                memo::TreeFound {
                    generation: w.generation,
                    root: now.identity(),
                    sockets: found.sockets[sockets_before..].to_vec(),
                    entries: seen - seen_before,
                    dirs: dirs - dirs_before,
                },
            );
        }
    }
    memo.end_check();
    if watch.is_none() {
        state.scanned(dirs);
    }
    found.sockets.sort();
    found.sockets.dedup();
    found
}

/// Lists the directory at `at` with one `openat` (relative to its parent's descriptor when the
/// walk holds it, [`place`]), an `fstat` and its `getdents64` calls (no libc stream, no stat per
/// entry): types from `d_type`, so a symlink is never followed. `None` when it cannot be listed.
/// The directory's identity and change time are taken from its descriptor before the listing,
/// so a change during the listing shows as a newer change time the next time. Returns the
/// descriptor too (for its children).
fn list(at: &place::Place) -> Option<(memo::Listing, std::os::fd::OwnedFd)> {
    let fd = at.open(Access::Read)?;
    let mut out = memo::Listing::of_fd(fd.as_fd())?;
    let mut listing = fsat::Listing::new(fd.as_fd(), LISTING_BUFFER);
    while let Ok(Some(e)) = listing.next_entry() {
        out.entries += 1;
        match e.d_type {
            libc::DT_DIR => out.subdirs.push(e.name),
            libc::DT_SOCK => out.sockets.push(e.name),
            libc::DT_UNKNOWN => match fsat::lstat(fd.as_fd(), &e.name) {
                Ok(Some(st)) if st.kind == Kind::Dir => out.subdirs.push(e.name),
                Ok(Some(st)) if st.mode & libc::S_IFMT == libc::S_IFSOCK => {
                    out.sockets.push(e.name);
                }
                _ => {}
            },
            _ => {}
        }
    }
    drop(listing);
    Some((out, fd))
}

/// The trees to scan: `candidates` that do not lie inside another candidate.
pub fn roots(mut candidates: Vec<PathBuf>) -> Vec<PathBuf> {
    candidates.sort();
    candidates.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for c in candidates {
        if !out.iter().any(|o| c.starts_with(o)) {
            out.push(c);
        }
    }
    out
}

/// Whether `p` is a socket file (not following a symlink).
pub fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sockets_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let s1 = root.join("a/b/live.sock");
        let _l = std::os::unix::net::UnixListener::bind(&s1).unwrap();
        let other = tempfile::tempdir().unwrap();
        let _l2 = std::os::unix::net::UnixListener::bind(other.path().join("x.sock")).unwrap();
        std::os::unix::fs::symlink(other.path(), root.join("a/link")).unwrap();
        let f = scan(&[root.clone(), root.join("missing")]);
        assert_eq!(f.sockets, vec![s1.clone()]);
        assert!(f.incomplete.is_empty());
        assert!(is_socket(&s1) && !is_socket(&root));
        // A socket named directly.
        assert_eq!(scan(std::slice::from_ref(&s1)).sockets, vec![s1]);
    }

    /// Waits (with a deadline) until the wall clock is `by` past `t`: the coarse clock that
    /// stamps change times has moved on.
    fn wait_past(t: std::time::SystemTime, by: std::time::Duration) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::SystemTime::now() < t + by {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock did not move"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_rescan_lists_only_what_changed_and_still_finds_every_new_socket() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        for sub in ["a/b", "a/c", "d"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let _old = std::os::unix::net::UnixListener::bind(root.join("a/b/old.sock")).unwrap();
        let memo = std::sync::Mutex::new(memo::Memo::new());
        let margin = std::time::Duration::from_millis(50);
        let tick = std::time::Duration::from_millis(60);
        let made = std::time::SystemTime::now();
        wait_past(made, tick);
        let off = std::sync::Mutex::new(watch::State::Off);
        let first = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        assert_eq!(first.sockets, [root.join("a/b/old.sock")]);
        // Nothing changed: every directory's listing is reused (root, a, a/b, a/c, d).
        let again = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        assert_eq!(again, first);
        assert_eq!(memo.lock().unwrap().reused, 5);
        // A socket made later, deep down, and one in the root: both found.
        wait_past(std::time::SystemTime::now(), tick);
        let _deep = std::os::unix::net::UnixListener::bind(root.join("a/c/new.sock")).unwrap();
        let _top = std::os::unix::net::UnixListener::bind(root.join("top.sock")).unwrap();
        let after = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        assert_eq!(
            after.sockets,
            [
                root.join("a/b/old.sock"),
                root.join("a/c/new.sock"),
                root.join("top.sock")
            ]
        );
        // A directory swapped for another one (same name, a socket inside): found.
        let other = root.join("other");
        std::fs::create_dir(&other).unwrap();
        let _swapped = std::os::unix::net::UnixListener::bind(other.join("s.sock")).unwrap();
        std::fs::remove_dir(root.join("d")).unwrap();
        std::fs::rename(&other, root.join("d")).unwrap();
        let swapped = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        assert!(
            swapped.sockets.contains(&root.join("d/s.sock")),
            "{swapped:?}"
        );
        // A directory changed within the margin of its listing is listed again next time.
        let fresh = root.join("fresh");
        std::fs::create_dir(&fresh).unwrap();
        let _ = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        let _f = std::os::unix::net::UnixListener::bind(fresh.join("f.sock")).unwrap();
        let last = scan_with(std::slice::from_ref(&root), &memo, margin, &off);
        assert!(last.sockets.contains(&fresh.join("f.sock")), "{last:?}");
    }

    /// A fresh memo with a test's margin (50 ms), once every directory made so far is older
    /// than it.
    fn quiet_memo() -> (std::sync::Mutex<memo::Memo>, std::time::Duration) {
        let margin = std::time::Duration::from_millis(50);
        wait_past(std::time::SystemTime::now(), margin + margin / 5);
        (std::sync::Mutex::new(memo::Memo::new()), margin)
    }

    /// A watch for a test, or `None` (printing why) where fanotify cannot be used.
    fn watched() -> Option<std::sync::Mutex<watch::State>> {
        let mut state = watch::State::Untried;
        // The first scan of a process has none: a process that scans once never pays for it.
        assert!(state.get().is_none());
        // Nor does one whose scans look at few directories.
        state.scanned(watch::WORTH - 1);
        assert!(state.get().is_none());
        state.scanned(watch::WORTH);
        if state.get().is_none() {
            assert!(
                !nix::unistd::geteuid().is_root(),
                "root cannot make a fanotify group"
            );
            eprintln!("skipped: a fanotify group needs root");
            return None;
        }
        Some(std::sync::Mutex::new(state))
    }

    #[test]
    fn a_watched_rescan_stats_nothing_that_was_not_heard_of_and_finds_every_new_socket() {
        let Some(w) = watched() else { return };
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap().join("tree");
        let outside = d.path().canonicalize().unwrap().join("outside");
        for sub in ["a/b", "a/c/deep", "d", "e"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let (memo, margin) = quiet_memo();
        let trees = std::slice::from_ref(&root);
        let first = scan_with(trees, &memo, margin, &w);
        assert!(first.sockets.is_empty());
        // Nothing heard of: only the tree's root is looked at, and what the tree held is taken
        // whole (root, a, a/b, a/c, a/c/deep, d, e: none walked).
        let again = scan_with(trees, &memo, margin, &w);
        assert_eq!(again, first);
        {
            let m = memo.lock().unwrap();
            assert_eq!((m.trees_reused, m.reused, m.heard), (1, 0, 0));
        }
        // A socket made deep down; a directory with a socket made outside the tree and moved
        // in over an empty one (no event names the socket's directory inside the tree).
        let _deep = std::os::unix::net::UnixListener::bind(root.join("a/c/deep/new.sock")).unwrap();
        std::fs::create_dir(&outside).unwrap();
        let _moved = std::os::unix::net::UnixListener::bind(outside.join("m.sock")).unwrap();
        std::fs::rename(&outside, root.join("d")).unwrap();
        let after = scan_with(trees, &memo, margin, &w);
        assert_eq!(
            after.sockets,
            [root.join("a/c/deep/new.sock"), root.join("d/m.sock")]
        );
        {
            // The tree was walked (changes were heard in it); below `a`, whose listing was
            // reused after a stat, `a/b` and `a/c` were taken on trust, `a/c/deep` listed again.
            let m = memo.lock().unwrap();
            assert_eq!((m.trees_reused, m.heard), (1, 2));
        }
        // A mount inside the tree changes what a path shows without an event: heard of as a
        // change of the mounts, and everything is looked at again.
        std::fs::create_dir(root.join("e/mnt")).unwrap();
        wait_past(std::time::SystemTime::now(), margin + margin / 5);
        let _ = scan_with(trees, &memo, margin, &w);
        let _ = scan_with(trees, &memo, margin, &w);
        let staging = tempfile::tempdir().unwrap();
        let _hidden =
            std::os::unix::net::UnixListener::bind(staging.path().join("h.sock")).unwrap();
        let target = root.join("e/mnt");
        nix::mount::mount(
            Some(staging.path()),
            &target,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let mounted = scan_with(trees, &memo, margin, &w);
        let _ = nix::mount::umount2(&target, nix::mount::MntFlags::MNT_DETACH);
        assert!(
            mounted.sockets.contains(&target.join("h.sock")),
            "{mounted:?}"
        );
    }

    #[test]
    fn a_tree_with_an_unheard_filesystem_inside_is_never_taken_whole() {
        let Some(w) = watched() else { return };
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap().join("tree");
        std::fs::create_dir_all(root.join("a/m")).unwrap();
        // Mounted before the first scan: no change of the mounts is heard later.
        nix::mount::mount(
            Some("tmpfs"),
            &root.join("a/m"),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=1m"),
        )
        .unwrap();
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _unmount = Unmount(root.join("a/m"));
        std::fs::create_dir(root.join("a/m/deep")).unwrap();
        let (memo, margin) = quiet_memo();
        let trees = std::slice::from_ref(&root);
        let _ = scan_with(trees, &memo, margin, &w);
        let _ = scan_with(trees, &memo, margin, &w);
        // A socket on the tmpfs, whose events the watch does not hear (its filesystem is not a
        // tree's): found, because the tree is walked and the tmpfs directories stat-ed.
        let _s = std::os::unix::net::UnixListener::bind(root.join("a/m/deep/s.sock")).unwrap();
        let after = scan_with(trees, &memo, margin, &w);
        assert_eq!(after.sockets, [root.join("a/m/deep/s.sock")]);
        assert_eq!(memo.lock().unwrap().trees_reused, 0);
    }

    #[test]
    fn a_change_heard_while_another_tree_is_scanned_is_not_forgotten() {
        let Some(w) = watched() else { return };
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let (a, b) = (base.join("a"), base.join("b"));
        std::fs::create_dir_all(a.join("x/y")).unwrap();
        std::fs::create_dir_all(b.join("x/y")).unwrap();
        let (memo, margin) = quiet_memo();
        let both = [a.clone(), b.clone()];
        let _ = scan_with(&both, &memo, margin, &w);
        let _ = scan_with(&both, &memo, margin, &w);
        // A socket deep in `b`, heard while only `a` is scanned.
        let _s = std::os::unix::net::UnixListener::bind(b.join("x/y/s.sock")).unwrap();
        let _ = scan_with(std::slice::from_ref(&a), &memo, margin, &w);
        let later = scan_with(std::slice::from_ref(&b), &memo, margin, &w);
        assert_eq!(later.sockets, [b.join("x/y/s.sock")]);
    }

    #[test]
    fn a_watch_that_lost_events_looks_at_everything_again() {
        let Some(w) = watched() else { return };
        // A filesystem of its own: the noise below would overflow the queue of every other
        // test's watch on the filesystem of the temporary directories too.
        let d = tempfile::tempdir().unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            d.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=64m"),
        )
        .unwrap();
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = nix::mount::umount2(self.0, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _unmount = Unmount(d.path());
        let root = d.path().canonicalize().unwrap().join("tree");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let (memo, margin) = quiet_memo();
        let trees = std::slice::from_ref(&root);
        let _ = scan_with(trees, &memo, margin, &w);
        let _ = scan_with(trees, &memo, margin, &w);
        let trusted = |m: &memo::Memo| m.heard + m.trees_reused;
        let before = trusted(&memo.lock().unwrap());
        assert!(before >= 1, "{before}");
        // More events than the kernel queues (`max_queued_events`, 16,384 by default), all
        // outside the tree.
        let queued: usize = std::fs::read_to_string("/proc/sys/fs/fanotify/max_queued_events")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(16_384);
        let noise = d.path().join("noise");
        std::fs::create_dir(&noise).unwrap();
        for i in 0..queued + 1_000 {
            std::fs::write(noise.join(i.to_string()), b"").unwrap();
        }
        let _s = std::os::unix::net::UnixListener::bind(root.join("a/b/s.sock")).unwrap();
        let after = scan_with(trees, &memo, margin, &w);
        assert_eq!(after.sockets, [root.join("a/b/s.sock")]);
        assert_eq!(
            trusted(&memo.lock().unwrap()),
            before,
            "nothing taken on trust"
        );
    }

    #[test]
    fn nested_roots_are_walked_once() {
        let r = roots(vec![
            PathBuf::from("/a/b"),
            PathBuf::from("/a"),
            PathBuf::from("/c"),
            PathBuf::from("/a"),
        ]);
        assert_eq!(r, vec![PathBuf::from("/a"), PathBuf::from("/c")]);
    }

    #[test]
    fn a_watch_is_made_only_after_a_scan_that_looked_at_enough_directories() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (small, big) = (root.join("small"), root.join("big"));
        std::fs::create_dir_all(small.join("a/b")).unwrap();
        for i in 0..watch::WORTH {
            std::fs::create_dir_all(big.join(format!("d{i}"))).unwrap();
        }
        let memo = std::sync::Mutex::new(memo::Memo::new());
        let margin = std::time::Duration::from_millis(50);
        let state = std::sync::Mutex::new(watch::State::Untried);
        let made = || matches!(*state.lock().unwrap(), watch::State::On(_));
        for _ in 0..3 {
            scan_with(std::slice::from_ref(&small), &memo, margin, &state);
            assert!(matches!(
                *state.lock().unwrap(),
                watch::State::Deferred { dirs: 3 }
            ));
        }
        // The scan that looks at many directories makes none itself: the next one does.
        scan_with(std::slice::from_ref(&big), &memo, margin, &state);
        assert!(matches!(
            *state.lock().unwrap(),
            watch::State::Deferred { dirs } if dirs == watch::WORTH + 1
        ));
        scan_with(std::slice::from_ref(&small), &memo, margin, &state);
        if nix::unistd::geteuid().is_root() {
            assert!(made(), "{:?}", state.lock().unwrap());
        } else {
            eprintln!("skipped the watch itself: a fanotify group needs root");
            assert!(matches!(*state.lock().unwrap(), watch::State::Off));
        }
    }

    #[test]
    fn listings_kept_across_processes_are_reused_only_after_a_stat_and_changes_since_are_seen() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let root = base.join("tree");
        for sub in ["a/b", "c"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let _s1 = std::os::unix::net::UnixListener::bind(root.join("a/b/one.sock")).unwrap();
        let (memo, margin) = quiet_memo();
        let off = std::sync::Mutex::new(watch::State::Off);
        let trees = std::slice::from_ref(&root);
        let first = scan_with(trees, &memo, margin, &off);
        assert_eq!(first.sockets, [root.join("a/b/one.sock")]);
        let file = base.join(LISTINGS_FILE);
        memo.lock().unwrap().save(&file).unwrap();
        // The next process: every directory is stat-ed and none listed again.
        let load = || std::sync::Mutex::new(memo::Memo::load(&file).unwrap());
        let next = load();
        assert_eq!(next.lock().unwrap().len(), 4);
        assert_eq!(scan_with(trees, &next, margin, &off), first);
        assert_eq!(next.lock().unwrap().reused, 4);
        // A socket made since, in an old directory, and a directory swapped for another of the
        // same name: both are seen by the process after.
        let _s2 = std::os::unix::net::UnixListener::bind(root.join("c/two.sock")).unwrap();
        std::fs::rename(root.join("a/b"), base.join("old-b")).unwrap();
        std::fs::create_dir(root.join("a/b")).unwrap();
        let _s3 = std::os::unix::net::UnixListener::bind(root.join("a/b/three.sock")).unwrap();
        let after = load();
        assert_eq!(
            scan_with(trees, &after, margin, &off).sockets,
            [root.join("a/b/three.sock"), root.join("c/two.sock")]
        );
        // A file that is not one is none: the scan lists everything.
        let bytes = std::fs::read(&file).unwrap();
        for bad in [&bytes[..bytes.len() - 1], &bytes[..8], b"rlsock2\n"] {
            std::fs::write(&file, bad).unwrap();
            assert!(memo::Memo::load(&file).is_none());
        }
    }

    #[test]
    fn a_tree_nested_deeper_than_the_descriptors_a_walk_holds_is_walked_whole() {
        // Below `place::HELD_DEPTH` directories are reached by path: every socket is still
        // found, listed or reused, and one made later at the bottom too.
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let mut deep = root.clone();
        let mut at_edge = None;
        for level in 0..place::HELD_DEPTH + 20 {
            deep.push("d");
            if level + 1 == place::HELD_DEPTH {
                at_edge = Some(deep.clone());
            }
        }
        std::fs::create_dir_all(&deep).unwrap();
        // A socket's path at bind is short (`sun_path`): bound near the top, then moved down.
        let staging = tempfile::tempdir().unwrap();
        let bind_at = |to: &std::path::Path| {
            let here = staging.path().join("s.sock");
            let l = std::os::unix::net::UnixListener::bind(&here).unwrap();
            std::fs::rename(&here, to).unwrap();
            l
        };
        let at_edge = at_edge.unwrap().join("edge.sock");
        let _edge = bind_at(&at_edge);
        let _bottom = bind_at(&deep.join("bottom.sock"));
        let (memo, margin) = quiet_memo();
        let off = std::sync::Mutex::new(watch::State::Off);
        let trees = std::slice::from_ref(&root);
        let first = scan_with(trees, &memo, margin, &off);
        let mut want = vec![at_edge.clone(), deep.join("bottom.sock")];
        want.sort();
        assert_eq!(first.sockets, want);
        let again = scan_with(trees, &memo, margin, &off);
        assert_eq!(again, first);
        assert_eq!(memo.lock().unwrap().reused, place::HELD_DEPTH as u64 + 21);
        wait_past(std::time::SystemTime::now(), margin + margin / 5);
        let _later = bind_at(&deep.join("later.sock"));
        let after = scan_with(trees, &memo, margin, &off);
        assert!(
            after.sockets.contains(&deep.join("later.sock")),
            "{after:?}"
        );
        assert_eq!(after.sockets.len(), 3);
    }

    #[test]
    fn a_kept_directory_swapped_for_a_link_is_not_followed_by_the_next_process() {
        // The next process stats each kept directory relative to its parent's descriptor; a
        // directory (or its parent) replaced by a link to a tree with a socket in it is a link:
        // nothing behind it is walked.
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let root = base.join("tree");
        for sub in ["a/b/c", "x/y"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir_all(elsewhere.join("b/c")).unwrap();
        std::fs::create_dir_all(elsewhere.join("y")).unwrap();
        let _e1 = std::os::unix::net::UnixListener::bind(elsewhere.join("b/c/e.sock")).unwrap();
        let _e2 = std::os::unix::net::UnixListener::bind(elsewhere.join("y/f.sock")).unwrap();
        let (memo, margin) = quiet_memo();
        let off = std::sync::Mutex::new(watch::State::Off);
        let trees = std::slice::from_ref(&root);
        assert!(scan_with(trees, &memo, margin, &off).sockets.is_empty());
        let file = base.join(LISTINGS_FILE);
        memo.lock().unwrap().save(&file).unwrap();
        std::fs::rename(root.join("a"), base.join("old-a")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("a")).unwrap();
        std::fs::rename(root.join("x/y"), base.join("old-y")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("y"), root.join("x/y")).unwrap();
        let next = std::sync::Mutex::new(memo::Memo::load(&file).unwrap());
        let found = scan_with(trees, &next, margin, &off);
        assert!(found.sockets.is_empty(), "{found:?}");
        assert!(found.incomplete.is_empty());
    }

    #[test]
    fn a_check_on_other_threads_finds_what_the_walk_finds_and_every_change_since() {
        // The next process's first scan checks the kept listings on other threads first
        // (`precheck`); what it finds, and what it leaves to the walk, must be what a walk alone
        // finds, before and after changes of every kind.
        if std::thread::available_parallelism().map_or(1, std::num::NonZero::get) < 2 {
            eprintln!("skipped: one CPU, a scan checks nothing on other threads");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let (one, two) = (base.join("one"), base.join("two"));
        for i in 0..12 {
            for sub in ["a/b", "c", "x/y/z"] {
                std::fs::create_dir_all(one.join(format!("p{i}")).join(sub)).unwrap();
            }
        }
        std::fs::create_dir_all(two.join("t/u")).unwrap();
        let bind = |p: std::path::PathBuf| std::os::unix::net::UnixListener::bind(p).unwrap();
        let _s = [
            bind(one.join("p3/a/b/s.sock")),
            bind(one.join("p7/c/s.sock")),
            bind(two.join("t/u/s.sock")),
        ];
        let lone = base.join("lone.sock");
        let _lone = bind(lone.clone());
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let _e = bind(elsewhere.join("e.sock"));
        let trees = [one.clone(), two.clone(), lone.clone(), base.join("missing")];
        let (memo, margin) = quiet_memo();
        let off = || std::sync::Mutex::new(watch::State::Off);
        let first = scan_with(&trees, &memo, margin, &off());
        assert_eq!(first.sockets.len(), 4, "{first:?}");
        let file = base.join(LISTINGS_FILE);
        memo.lock().unwrap().save(&file).unwrap();
        // Every directory: one, 12 x (p, a, b, c, x, y, z), two, t, u.
        let kept_dirs = 1 + 12 * 7 + 3;
        // Loaded as the next process loads them, scanned with and without the check.
        let load = |check: bool| {
            let mut m = memo::Memo::load(&file).unwrap();
            m.check_from = if check { 0 } else { usize::MAX };
            std::sync::Mutex::new(m)
        };
        let (checked, walked) = (load(true), load(false));
        assert_eq!(scan_with(&trees, &checked, margin, &off()), first);
        assert_eq!(scan_with(&trees, &walked, margin, &off()), first);
        {
            let (c, w) = (checked.lock().unwrap(), walked.lock().unwrap());
            assert_eq!((c.checked, c.reused), (kept_dirs, 0));
            assert_eq!((w.checked, w.reused), (0, kept_dirs));
        }
        // A socket made in a kept directory, a directory swapped for another with a socket, one
        // swapped for a link to a directory with a socket, a new directory with a socket, a kept
        // directory removed with the socket it held.
        let _n1 = bind(one.join("p5/x/y/z/new.sock"));
        std::fs::rename(one.join("p9/a"), base.join("old-a")).unwrap();
        std::fs::create_dir_all(one.join("p9/a/b")).unwrap();
        let _n2 = bind(one.join("p9/a/b/swapped.sock"));
        std::fs::rename(one.join("p2/x"), base.join("old-x")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, one.join("p2/x")).unwrap();
        std::fs::create_dir_all(two.join("t/fresh")).unwrap();
        let _n3 = bind(two.join("t/fresh/fresh.sock"));
        std::fs::remove_file(one.join("p7/c/s.sock")).unwrap();
        std::fs::remove_dir(one.join("p7/c")).unwrap();
        let (checked, walked) = (load(true), load(false));
        let after = scan_with(&trees, &checked, margin, &off());
        assert_eq!(after, scan_with(&trees, &walked, margin, &off()));
        let mut want = vec![
            lone.clone(),
            one.join("p3/a/b/s.sock"),
            one.join("p5/x/y/z/new.sock"),
            one.join("p9/a/b/swapped.sock"),
            two.join("t/fresh/fresh.sock"),
            two.join("t/u/s.sock"),
        ];
        want.sort();
        assert_eq!(after.sockets, want);
        assert!(after.incomplete.is_empty());
        // What changed was left to the walk, which listed it without statting it again, nor
        // anything the check found current below it. Of the 88 kept directories, p2/x, p2/x/y,
        // p2/x/y/z (behind a link now) and p7/c (removed) are gone; p9/a and p9/a/b (swapped) and
        // the changed ones (p2, p5/x/y/z, p7, p9, two/t) are listed again; the rest is reused:
        // after the check's stat, or, by the walk alone, after its own.
        let unchanged = kept_dirs - 4 - 2 - 5;
        let c = checked.lock().unwrap();
        assert_eq!((c.checked, c.reused), (unchanged, 0));
        let w = walked.lock().unwrap();
        assert_eq!((w.checked, w.reused), (0, unchanged));
    }
}
