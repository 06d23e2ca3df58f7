//! `--max-stalled-rounds` (SPEC §3): the runner's own detector of a round that changed nothing
//! in the workspace. Before and after each round the workspace's tree is digested — every
//! entry's path, type and permission bits, a file's content, a symlink's target; no link
//! followed, no other filesystem entered — and a round whose two digests agree changed nothing.
//!
//! A file's content is hashed again only when its inode, size, modification or change time
//! moved (any write moves the change time, which no process can set), so after the first walk a
//! round costs a walk of the tree's metadata plus the files it wrote; the cache holds one entry
//! per file (its path, stamp and hash: about 100 bytes). The runner's own placeholders — the
//! empty directories it makes at protected paths that do not exist, so that no round can create
//! them — are left out: the runner never makes a round look busy.

use std::collections::HashMap;
use std::fs::Metadata;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use ring::digest::{Context, SHA256};

/// How far before a walk's start a file's times make it "racy" (not cached): well above the
/// kernel's timestamp granularity (a jiffy, at most 10 ms).
const RACY_MARGIN_NS: i128 = 100_000_000;

/// A digest of a whole tree.
pub(crate) type TreeDigest = [u8; 32];

/// What a file's content hash was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(m: &Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Self {
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// Digests one workspace, round after round.
#[derive(Debug)]
pub(crate) struct ChangeWatch {
    root: PathBuf,
    /// Protected paths (relative): an empty directory there is the runner's placeholder.
    placeholders: Vec<PathBuf>,
    cache: HashMap<PathBuf, (Stamp, [u8; 32])>,
}

impl ChangeWatch {
    /// A watch of the tree at `root`, whose protected paths (relative to it) are
    /// `placeholders`.
    pub(crate) fn new(root: PathBuf, placeholders: Vec<PathBuf>) -> Self {
        Self {
            root,
            placeholders,
            cache: HashMap::new(),
        }
    }

    /// The tree's digest now.
    pub(crate) fn digest(&mut self) -> std::io::Result<TreeDigest> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
        self.digest_racy_from(now - RACY_MARGIN_NS)
    }

    /// [`ChangeWatch::digest`], where a file whose change time is at or after `racy_from_ns`
    /// is not cached: file times have the kernel's coarse clock, so a write just after this walk
    /// read a file could leave its stamp as it was (git's "racily clean" entries); such a file is
    /// read again next time.
    fn digest_racy_from(&mut self, racy_from_ns: i128) -> std::io::Result<TreeDigest> {
        let top = std::fs::symlink_metadata(&self.root)?;
        let dev = top.dev();
        let mut tree = Context::new(&SHA256);
        let mut seen: HashMap<PathBuf, (Stamp, [u8; 32])> = HashMap::new();
        // Depth first, each directory's entries in name order: the same tree, the same bytes.
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let dir = self.root.join(&rel);
            let mut names: Vec<_> = std::fs::read_dir(&dir)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()?;
            names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            let mut below = Vec::new();
            for name in names {
                let rel_path = rel.join(&name);
                let path = self.root.join(&rel_path);
                let m = std::fs::symlink_metadata(&path)?;
                let ft = m.file_type();
                if ft.is_dir() && self.is_placeholder(&rel_path, &path)? {
                    continue;
                }
                tree.update(rel_path.as_os_str().as_bytes());
                tree.update(&[0]);
                tree.update(&(m.mode() & 0o7777).to_be_bytes());
                if ft.is_file() {
                    tree.update(b"f");
                    let stamp = Stamp::of(&m);
                    let hash = match self.cache.get(&rel_path) {
                        Some((s, h)) if *s == stamp => *h,
                        _ => content_hash(&path)?,
                    };
                    tree.update(&hash);
                    if stamp.ctime_ns < racy_from_ns && stamp.mtime_ns < racy_from_ns {
                        seen.insert(rel_path, (stamp, hash));
                    }
                } else if ft.is_symlink() {
                    tree.update(b"l");
                    tree.update(std::fs::read_link(&path)?.as_os_str().as_bytes());
                } else if ft.is_dir() {
                    tree.update(b"d");
                    // Another filesystem mounted here is not the workspace's.
                    if m.dev() == dev {
                        below.push(rel_path);
                    }
                } else {
                    tree.update(match () {
                        () if ft.is_fifo() => b"p",
                        () if ft.is_socket() => b"s",
                        () if ft.is_char_device() => b"c",
                        () if ft.is_block_device() => b"b",
                        () => b"?",
                    });
                }
                tree.update(&[0]);
            }
            // Popped in name order.
            stack.extend(below.into_iter().rev());
        }
        self.cache = seen;
        let mut out = [0u8; 32];
        out.copy_from_slice(tree.finish().as_ref());
        Ok(out)
    }

    /// An empty directory at a protected path: the runner's placeholder.
    fn is_placeholder(&self, rel: &Path, path: &Path) -> std::io::Result<bool> {
        if !self.placeholders.iter().any(|p| p == rel) {
            return Ok(false);
        }
        Ok(std::fs::read_dir(path)?.next().is_none())
    }
}

/// The SHA-256 of a file's content, read without following a link.
fn content_hash(path: &Path) -> std::io::Result<[u8; 32]> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let mut ctx = Context::new(&SHA256);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn watch(dir: &Path) -> ChangeWatch {
        ChangeWatch::new(dir.to_path_buf(), vec![PathBuf::from(".ralph")])
    }

    #[test]
    fn every_kind_of_change_moves_the_digest_and_nothing_else_does() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::create_dir_all(w.join("src/deep")).unwrap();
        std::fs::write(w.join("src/a.txt"), "one\n").unwrap();
        std::fs::write(w.join("src/deep/b.txt"), "two\n").unwrap();
        std::os::unix::fs::symlink("a.txt", w.join("src/link")).unwrap();
        let mut cw = watch(w);
        let first = cw.digest().unwrap();
        // Nothing changed; reading and listing are no change.
        let _ = std::fs::read(w.join("src/a.txt")).unwrap();
        assert_eq!(cw.digest().unwrap(), first);
        // Content, even of the same size.
        std::fs::write(w.join("src/a.txt"), "uno\n").unwrap();
        let content = cw.digest().unwrap();
        assert_ne!(content, first);
        // The same content written back: the same tree.
        std::fs::write(w.join("src/a.txt"), "one\n").unwrap();
        assert_eq!(cw.digest().unwrap(), first, "rewritten with the same bytes");
        // Modes.
        std::fs::set_permissions(w.join("src/a.txt"), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        assert_ne!(cw.digest().unwrap(), first);
        std::fs::set_permissions(w.join("src/a.txt"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        assert_eq!(cw.digest().unwrap(), first);
        // Entries: a new empty directory, a new empty file, a rename, a link's target.
        std::fs::create_dir(w.join("new")).unwrap();
        assert_ne!(cw.digest().unwrap(), first);
        std::fs::remove_dir(w.join("new")).unwrap();
        std::fs::write(w.join("empty"), "").unwrap();
        assert_ne!(cw.digest().unwrap(), first);
        std::fs::remove_file(w.join("empty")).unwrap();
        std::fs::rename(w.join("src/deep/b.txt"), w.join("src/deep/c.txt")).unwrap();
        assert_ne!(cw.digest().unwrap(), first);
        std::fs::rename(w.join("src/deep/c.txt"), w.join("src/deep/b.txt")).unwrap();
        std::fs::remove_file(w.join("src/link")).unwrap();
        std::os::unix::fs::symlink("deep", w.join("src/link")).unwrap();
        assert_ne!(cw.digest().unwrap(), first);
        std::fs::remove_file(w.join("src/link")).unwrap();
        std::os::unix::fs::symlink("a.txt", w.join("src/link")).unwrap();
        assert_eq!(cw.digest().unwrap(), first);
    }

    #[test]
    fn the_runners_placeholder_is_no_change_but_what_is_in_it_is() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::write(w.join("a"), "x").unwrap();
        let mut cw = watch(w);
        let before = cw.digest().unwrap();
        std::fs::create_dir(w.join(".ralph")).unwrap();
        assert_eq!(cw.digest().unwrap(), before, "an empty placeholder");
        std::fs::write(w.join(".ralph/notes"), "x").unwrap();
        assert_ne!(cw.digest().unwrap(), before);
        // An empty directory elsewhere is an entry.
        std::fs::remove_file(w.join(".ralph/notes")).unwrap();
        std::fs::create_dir(w.join("ralph")).unwrap();
        assert_ne!(cw.digest().unwrap(), before);
    }

    #[test]
    fn a_changed_file_is_read_again_and_an_unchanged_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::write(w.join("a"), "x").unwrap();
        let mut cw = watch(w);
        // Nothing is racy: every file is cached.
        let first = cw.digest_racy_from(i128::MAX).unwrap();
        // A cached hash stands for an unchanged stamp: make the cache lie, the digest follows
        // it (so the file was not read again).
        cw.cache.get_mut(Path::new("a")).unwrap().1 = [7; 32];
        assert_ne!(cw.digest_racy_from(i128::MAX).unwrap(), first);
        // A write moves the stamp: read again, the truth is back.
        std::fs::write(w.join("a"), "x").unwrap();
        assert_eq!(cw.digest_racy_from(i128::MAX).unwrap(), first);
    }

    #[test]
    fn a_file_changed_as_the_walk_ran_is_read_again_next_time() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path();
        std::fs::write(w.join("a"), "x").unwrap();
        let mut cw = watch(w);
        // Everything is racy (its times are after the walk's start): nothing cached, so a later
        // write that left the stamp as it was would still be seen.
        let first = cw.digest_racy_from(i128::MIN).unwrap();
        assert!(cw.cache.is_empty());
        assert_eq!(cw.digest().unwrap(), first);
    }
}
