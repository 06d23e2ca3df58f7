//! The identity of a git directory's surfaces (`config`, `config.worktree`, `hooks/`,
//! `commondir`, `gitdir`): a keyed digest of each one's kind, mode and content (a symlink's
//! target, a directory's listing, recursively), so that any change a run makes shows, whatever
//! it does to sizes and times. The key is random per inventory and never leaves the process, so
//! a run cannot aim for a collision.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;

use crate::fsat::{self, Access, Kind};
use crate::outcome::git::Surface;

/// The surfaces of a git directory, in the order they are looked at.
pub const SURFACES: [Surface; 5] = [
    Surface::Config,
    Surface::ConfigWorktree,
    Surface::Hooks,
    Surface::Commondir,
    Surface::Gitdir,
];

/// Bytes of one file hashed; beyond, its size, inode and times stand for the rest.
const MAX_HASHED: u64 = 16 * 1024 * 1024;

/// Levels of a surface directory (`hooks/`) looked into.
const MAX_DEPTH: usize = 4;

/// Entries of a surface directory looked at, per directory.
const MAX_ENTRIES: usize = 4096;

/// Digests of the surfaces a git directory has (an absent surface has none).
pub type Surfaces = BTreeMap<Surface, u64>;

/// The digests of the surfaces of the git directory `dir` whose names are in `present`,
/// except those `skip` says are protected (read-only mounts during the run).
pub fn surfaces(
    dir: BorrowedFd<'_>,
    present: &[fsat::Entry],
    keys: &impl BuildHasher,
    skip: impl Fn(Surface) -> bool,
) -> Surfaces {
    let mut out = Surfaces::new();
    for s in SURFACES {
        if skip(s) {
            continue;
        }
        let name = OsStr::new(s.name());
        if present.iter().any(|e| e.name == name) {
            out.insert(s, entry(dir, name, keys, 0));
        }
    }
    out
}

/// The digest of `name` in `dir` (not following it).
pub fn entry(dir: BorrowedFd<'_>, name: &OsStr, keys: &impl BuildHasher, depth: usize) -> u64 {
    let mut h = keys.build_hasher();
    let st = match fsat::lstat(dir, name) {
        Ok(Some(st)) => st,
        Ok(None) => {
            h.write(b"absent");
            return h.finish();
        }
        Err(e) => {
            h.write(b"error");
            h.write_i32(e.errno().unwrap_or(0));
            return h.finish();
        }
    };
    h.write_u32(st.mode);
    match st.kind {
        Kind::File => file(dir, name, &mut h),
        Kind::Symlink => match fsat::read_link(dir, name) {
            Ok(t) => h.write(&t),
            Err(e) => h.write_i32(e.errno().unwrap_or(-1)),
        },
        Kind::Dir => directory(dir, name, keys, depth, &mut h),
        Kind::Special => h.write_u64(st.rdev),
    }
    h.finish()
}

fn file(dir: BorrowedFd<'_>, name: &OsStr, h: &mut impl Hasher) {
    let (f, st) = match fsat::open_regular(dir, name) {
        Ok(x) => x,
        Err(e) => {
            h.write_i32(e.errno().unwrap_or(-1));
            return;
        }
    };
    let size = st.size;
    h.write_u64(size);
    let mut buf = vec![0u8; 64 * 1024];
    let mut r = f.take(MAX_HASHED);
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.write(&buf[..n]),
            Err(e) => {
                h.write_i32(e.raw_os_error().unwrap_or(-1));
                break;
            }
        }
    }
    if size > MAX_HASHED {
        // Beyond what is hashed: the inode and times (a write changes the ctime).
        h.write_u64(st.ino);
        h.write_i64(st.ctime.0);
        h.write_i64(st.ctime.1);
        h.write_i64(st.mtime.0);
        h.write_i64(st.mtime.1);
    }
}

fn directory(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    keys: &impl BuildHasher,
    depth: usize,
    h: &mut impl Hasher,
) {
    if depth >= MAX_DEPTH {
        h.write(b"deep");
        return;
    }
    let d = match fsat::open_dir(dir, name, Access::Read) {
        Ok(d) => d,
        Err(e) => {
            h.write_i32(e.errno().unwrap_or(-1));
            return;
        }
    };
    let mut entries = match fsat::entries(d.as_fd()) {
        Ok(e) => e,
        Err(e) => {
            h.write_i32(e.errno().unwrap_or(-1));
            return;
        }
    };
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    h.write_usize(entries.len());
    for e in entries.iter().take(MAX_ENTRIES) {
        h.write(e.name.as_bytes());
        h.write_u8(0);
        h.write_u64(entry(d.as_fd(), &e.name, keys, depth + 1));
    }
}
