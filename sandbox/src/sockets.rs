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

/// Walks `trees` (absolute host paths; a missing one is skipped) for socket files.
pub fn scan(trees: &[PathBuf]) -> Found {
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
            // One `openat` and the `getdents64` calls per directory (no libc stream, no stat):
            // types from `d_type`, so a symlink is never followed.
            let Ok(fd) = fsat::open_root_nofollow(&dir, Access::Read) else {
                continue;
            };
            let mut listing = fsat::Listing::new(fd.as_fd(), LISTING_BUFFER);
            while let Ok(Some(e)) = listing.next_entry() {
                seen += 1;
                if seen > ENTRY_LIMIT {
                    complete = false;
                    stack.clear();
                    break;
                }
                match e.d_type {
                    libc::DT_DIR => stack.push(dir.join(&e.name)),
                    libc::DT_SOCK => found.sockets.push(dir.join(&e.name)),
                    libc::DT_UNKNOWN => match fsat::lstat(fd.as_fd(), &e.name) {
                        Ok(Some(st)) if st.kind == Kind::Dir => stack.push(dir.join(&e.name)),
                        Ok(Some(st)) if st.mode & libc::S_IFMT == libc::S_IFSOCK => {
                            found.sockets.push(dir.join(&e.name));
                        }
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
        if !complete {
            found.incomplete.push(tree.clone());
        }
    }
    found.sockets.sort();
    found.sockets.dedup();
    found
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
