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
//! own change time, which no process can set back.

mod memo;

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
    scan_with(trees, &memo::PROCESS, memo::MARGIN)
}

/// [`scan`] with its memo and the age a directory's change time must have before its listing is
/// kept (tests).
pub(crate) fn scan_with(
    trees: &[PathBuf],
    memo: &std::sync::Mutex<memo::Memo>,
    margin: std::time::Duration,
) -> Found {
    let mut memo = memo
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut found = Found::default();
    let mut seen = 0usize;
    for tree in trees {
        let mut stack = vec![tree.clone()];
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
        while let Some(dir) = stack.pop() {
            let listing = match memo.reuse(&dir) {
                Some(l) => l,
                None => {
                    let Some(l) = list(&dir) else { continue };
                    memo.keep(&dir, &l, margin);
                    l
                }
            };
            seen += listing.entries;
            if seen > ENTRY_LIMIT {
                complete = false;
                break;
            }
            stack.extend(listing.subdirs.iter().map(|n| dir.join(n)));
            found
                .sockets
                .extend(listing.sockets.iter().map(|n| dir.join(n)));
        }
        if !complete {
            found.incomplete.push(tree.clone());
        }
    }
    found.sockets.sort();
    found.sockets.dedup();
    found
}

/// Lists `dir` with one `openat` and its `getdents64` calls (no libc stream, no stat): types
/// from `d_type`, so a symlink is never followed. `None` when it cannot be listed. The
/// directory's identity and change time are taken first, so a change during the listing
/// shows as a newer change time the next time.
fn list(dir: &Path) -> Option<memo::Listing> {
    let mut out = memo::Listing::stat(dir)?;
    let fd = fsat::open_root_nofollow(dir, Access::Read).ok()?;
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
    Some(out)
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
        let first = scan_with(std::slice::from_ref(&root), &memo, margin);
        assert_eq!(first.sockets, [root.join("a/b/old.sock")]);
        // Nothing changed: every directory's listing is reused (root, a, a/b, a/c, d).
        let again = scan_with(std::slice::from_ref(&root), &memo, margin);
        assert_eq!(again, first);
        assert_eq!(memo.lock().unwrap().reused, 5);
        // A socket made later, deep down, and one in the root: both found.
        wait_past(std::time::SystemTime::now(), tick);
        let _deep = std::os::unix::net::UnixListener::bind(root.join("a/c/new.sock")).unwrap();
        let _top = std::os::unix::net::UnixListener::bind(root.join("top.sock")).unwrap();
        let after = scan_with(std::slice::from_ref(&root), &memo, margin);
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
        let swapped = scan_with(std::slice::from_ref(&root), &memo, margin);
        assert!(
            swapped.sockets.contains(&root.join("d/s.sock")),
            "{swapped:?}"
        );
        // A directory changed within the margin of its listing is listed again next time.
        let fresh = root.join("fresh");
        std::fs::create_dir(&fresh).unwrap();
        let _ = scan_with(std::slice::from_ref(&root), &memo, margin);
        let _f = std::os::unix::net::UnixListener::bind(fresh.join("f.sock")).unwrap();
        let last = scan_with(std::slice::from_ref(&root), &memo, margin);
        assert!(last.sockets.contains(&fresh.join("f.sock")), "{last:?}");
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
}
