//! Whole trees removed and measured with a bounded number of open descriptors and bounded
//! memory, whatever their depth, never following a symlink.
//!
//! A recursive walk holds one descriptor per level: a round that leaves a 1,500-level tree makes
//! it fail with "Too many open files" for ever, and one deeper than `PATH_MAX` defeats any walk by
//! path. Here every step is relative to a directory descriptor (`openat(O_NOFOLLOW |
//! O_DIRECTORY)`, `unlinkat`, `fstatat(AT_SYMLINK_NOFOLLOW)`, entries read with `getdents64`:
//! [`crate::fsat`]), and at most [`OPEN_LEVELS`] directories are open at once:
//!
//! - **Removal** descends up to [`OPEN_LEVELS`] levels; a non-empty directory below that is
//!   moved up (`renameat2(RENAME_NOREPLACE)`) to just below the directory being removed, where a
//!   later pass over it takes it apart. Nothing leaves the tree being removed, nothing is reached
//!   through `..`, and a symlink (anywhere, the entry itself included) is unlinked as a link: its
//!   target is never touched.
//! - **Measuring** (nothing may change) walks up to [`OPEN_LEVELS`] levels with open streams;
//!   below that one descriptor walks on, going back up through `..` (never a symlink) and
//!   resuming at the next subdirectory in inode order, so no position needs to be remembered.
//!   Mount points below the top are not entered.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::BeneathError;
use crate::fsat::{
    self, Access, FsError, Kind, Listing, RawEntry, Stat, lstat, open_dir, rename_noreplace, rmdir,
    unlink,
};

/// Directory levels open at once (one descriptor and one [`BUF_BYTES`] buffer each).
pub const OPEN_LEVELS: usize = 16;

/// The `getdents64` buffer of one open level.
const BUF_BYTES: usize = 8192;

/// What a tree held: its non-directories (files, symlinks, special files) and their bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Entries that are not directories.
    pub files: u64,
    /// Their sizes (`st_size`), summed.
    pub bytes: u64,
}

impl Totals {
    fn add(&mut self, other: Totals) {
        self.files += other.files;
        self.bytes += other.bytes;
    }
}

/// The failure of `call` on the tree `path` (the whole tree is named, whatever the level).
fn io_err(call: &'static str, path: &Path, source: FsError) -> BeneathError {
    FsError::Os {
        call,
        path: path.to_owned(),
        source: source.into_io(),
    }
    .into()
}

fn errno(e: &FsError) -> i32 {
    e.errno().unwrap_or(0)
}

/// A directory open for reading, in its listing (see [`OPEN_LEVELS`]).
#[derive(Debug)]
struct Stream(Listing<OwnedFd>);

#[cfg(test)]
thread_local! {
    /// Streams open now on this thread, and the most at once since the test reset it.
    static OPEN: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    static PEAK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
impl Drop for Stream {
    fn drop(&mut self) {
        OPEN.with(|o| o.set(o.get().saturating_sub(1)));
    }
}

impl Stream {
    fn new(fd: OwnedFd) -> Self {
        #[cfg(test)]
        OPEN.with(|o| {
            o.set(o.get() + 1);
            PEAK.with(|p| p.set(p.get().max(o.get())));
        });
        Self(Listing::new(fd, BUF_BYTES))
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }

    /// The next entry; `None` at the end.
    fn next(&mut self) -> Result<Option<RawEntry>, FsError> {
        self.0.next_entry()
    }

    /// Starts over from the first entry.
    fn rewind(&mut self) -> Result<(), FsError> {
        self.0.rewind()
    }
}

/// Whether `e` (in `dir`) is a directory, and its stat when one was needed (non-directories
/// are always stat'ed, for their size); `None` when it is gone.
fn classify(dir: BorrowedFd<'_>, e: &RawEntry) -> Result<Option<(bool, Option<Stat>)>, FsError> {
    if e.d_type == libc::DT_DIR {
        return Ok(Some((true, None)));
    }
    Ok(lstat(dir, &e.name)?.map(|st| (st.kind == Kind::Dir, Some(st))))
}

fn size_of(st: &Stat) -> u64 {
    st.size
}

/// One open level of a removal: its stream and its name in the level above.
#[derive(Debug)]
struct Level {
    stream: Stream,
    name: OsString,
}

/// Removes `name` in `parent` (a symlink or file itself, a directory with everything below it),
/// with at most [`OPEN_LEVELS`] directories open; `shown` is its path for messages. Returns
/// what was removed; `Ok(None)` when there was nothing.
pub fn remove_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
) -> Result<Option<Totals>, BeneathError> {
    let st = match lstat(parent, name) {
        Ok(Some(st)) => st,
        Ok(None) => return Ok(None),
        Err(e) => return Err(io_err("fstatat", shown, e)),
    };
    if st.kind != Kind::Dir {
        unlink(parent, name).map_err(|e| io_err("unlinkat", shown, e))?;
        return Ok(Some(Totals {
            files: 1,
            bytes: size_of(&st),
        }));
    }
    let top = match open_dir(parent, name, Access::Read) {
        Ok(fd) => fd,
        // Swapped for a link or file since the stat: removed as what it is now.
        Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
            unlink(parent, name).map_err(|e| io_err("unlinkat", shown, e))?;
            return Ok(Some(Totals { files: 1, bytes: 0 }));
        }
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("openat", shown, e)),
    };
    let totals = empty_tree(top, shown)?;
    match rmdir(parent, name) {
        Ok(()) => {}
        Err(e) if errno(&e) == libc::ENOENT => {}
        Err(e) => return Err(io_err("unlinkat", shown, e)),
    }
    Ok(Some(totals))
}

/// Removes everything below the directory `top` (kept itself).
fn empty_tree(top: OwnedFd, shown: &Path) -> Result<Totals, BeneathError> {
    let mut totals = Totals::default();
    let mut stack = vec![Level {
        stream: Stream::new(top),
        name: OsString::new(),
    }];
    // Subtrees moved up below the top since its stream was last started over.
    let mut moved_up = false;
    let mut moved = 0u64;
    let fail = |call, e| io_err(call, shown, e);
    loop {
        let depth = stack.len();
        let Some(level) = stack.last_mut() else {
            break;
        };
        let Some(entry) = level.stream.next().map_err(|e| fail("getdents64", e))? else {
            if depth == 1 {
                if moved_up {
                    // The moved subtrees may have been listed already or not: once more.
                    moved_up = false;
                    level.stream.rewind().map_err(|e| fail("lseek", e))?;
                    continue;
                }
                break;
            }
            let done = stack.pop();
            if let (Some(done), Some(up)) = (done, stack.last_mut()) {
                let name = done.name;
                drop(done.stream);
                match rmdir(up.stream.fd(), &name) {
                    Ok(()) => {}
                    Err(e) if errno(&e) == libc::ENOENT => {}
                    // Listed before something was moved in: this level is walked again.
                    Err(e) if matches!(errno(&e), libc::ENOTEMPTY | libc::EEXIST) => {
                        up.stream.rewind().map_err(|e| fail("lseek", e))?;
                    }
                    Err(e) => return Err(fail("unlinkat", e)),
                }
            }
            continue;
        };
        let dir = stack[depth - 1].stream.fd();
        let (is_dir, st) = match classify(dir, &entry) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) => return Err(fail("fstatat", e)),
        };
        if !is_dir {
            match unlink(dir, &entry.name) {
                Ok(()) => {
                    totals.add(Totals {
                        files: 1,
                        bytes: st.as_ref().map_or(0, size_of),
                    });
                }
                Err(e) if errno(&e) == libc::ENOENT => {}
                Err(e) => return Err(fail("unlinkat", e)),
            }
            continue;
        }
        match rmdir(dir, &entry.name) {
            Ok(()) => continue,
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) if matches!(errno(&e), libc::ENOTEMPTY | libc::EEXIST) => {}
            Err(e) => return Err(fail("unlinkat", e)),
        }
        if depth < OPEN_LEVELS {
            match open_dir(dir, &entry.name, Access::Read) {
                Ok(fd) => stack.push(Level {
                    stream: Stream::new(fd),
                    name: entry.name,
                }),
                Err(e) if errno(&e) == libc::ENOENT => {}
                // Swapped for a link or file since the listing: removed as what it is now.
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    match unlink(dir, &entry.name) {
                        Ok(()) => totals.add(Totals { files: 1, bytes: 0 }),
                        Err(e) if errno(&e) == libc::ENOENT => {}
                        Err(e) => return Err(fail("unlinkat", e)),
                    }
                }
                Err(e) => return Err(fail("openat", e)),
            }
            continue;
        }
        // Too deep to hold open: the subtree moves up below the top, a level of its own there.
        let top_fd = stack[0].stream.fd();
        loop {
            let to = OsString::from(format!(".ralph-removing-{moved}"));
            moved += 1;
            match rename_noreplace(dir, &entry.name, top_fd, &to) {
                Ok(()) => break,
                Err(e) if errno(&e) == libc::EEXIST => continue,
                Err(e) if errno(&e) == libc::ENOENT => break,
                Err(e) => return Err(fail("renameat2", e)),
            }
        }
        moved_up = true;
    }
    Ok(totals)
}

/// Measures `name` in `parent` without changing anything: what [`remove_at`] would remove.
/// `Ok(None)` when there is nothing.
pub fn measure_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
) -> Result<Option<Totals>, BeneathError> {
    let st = match lstat(parent, name) {
        Ok(Some(st)) => st,
        Ok(None) => return Ok(None),
        Err(e) => return Err(io_err("fstatat", shown, e)),
    };
    if st.kind != Kind::Dir {
        return Ok(Some(Totals {
            files: 1,
            bytes: size_of(&st),
        }));
    }
    let top = match open_dir(parent, name, Access::Read) {
        Ok(fd) => fd,
        Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
            return Ok(Some(Totals { files: 1, bytes: 0 }));
        }
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("openat", shown, e)),
    };
    measure_tree(top, st.dev, shown).map(Some)
}

/// Measures below the directory `top` (on device `dev`).
fn measure_tree(top: OwnedFd, dev: u64, shown: &Path) -> Result<Totals, BeneathError> {
    let fail = |call, e| io_err(call, shown, e);
    let mut totals = Totals::default();
    let mut stack = vec![Stream::new(top)];
    while let Some(level) = stack.last_mut() {
        let Some(entry) = level.next().map_err(|e| fail("getdents64", e))? else {
            stack.pop();
            continue;
        };
        let dir = level.fd();
        let (is_dir, st) = match classify(dir, &entry) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) => return Err(fail("fstatat", e)),
        };
        if !is_dir {
            totals.add(Totals {
                files: 1,
                bytes: st.as_ref().map_or(0, size_of),
            });
            continue;
        }
        let Some(child) = enter(dir, &entry.name, dev).map_err(|e| fail("openat", e))? else {
            continue;
        };
        if stack.len() < OPEN_LEVELS {
            stack.push(Stream::new(child));
        } else {
            totals.add(measure_deep(child, dev).map_err(|e| fail("getdents64", e))?);
        }
    }
    Ok(totals)
}

/// Opens the subdirectory `name` of `dir` to walk it: `None` when it is gone, no longer a
/// directory, or another filesystem's mount point.
fn enter(dir: BorrowedFd<'_>, name: &OsStr, dev: u64) -> Result<Option<OwnedFd>, FsError> {
    let fd = match open_dir(dir, name, Access::Read) {
        Ok(fd) => fd,
        Err(e) if matches!(errno(&e), libc::ENOENT | libc::ELOOP | libc::ENOTDIR) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if fsat::fstat(fd.as_fd())?.dev != dev {
        return Ok(None);
    }
    Ok(Some(fd))
}

/// Counts the non-directories of `dir` and finds its subdirectory with the smallest inode
/// number above `after` (`None`: from the first).
fn scan(
    dir: BorrowedFd<'_>,
    count: Option<&mut Totals>,
    after: Option<u64>,
) -> Result<Option<RawEntry>, FsError> {
    // The scan reads through its own descriptor: `dir` stays where it is.
    let mut s = Stream::new(open_dir(dir, OsStr::new("."), Access::Read)?);
    let mut count = count;
    let mut next: Option<RawEntry> = None;
    while let Some(e) = s.next()? {
        let (is_dir, st) = match classify(s.fd(), &e) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(err) if errno(&err) == libc::ENOENT => continue,
            Err(err) => return Err(err),
        };
        if !is_dir {
            if let Some(t) = count.as_deref_mut() {
                t.add(Totals {
                    files: 1,
                    bytes: st.as_ref().map_or(0, size_of),
                });
            }
            continue;
        }
        if after.is_some_and(|a| e.ino <= a) {
            continue;
        }
        if next.as_ref().is_none_or(|n| e.ino < n.ino) {
            next = Some(e);
        }
    }
    Ok(next)
}

/// Measures below `start` with one descriptor at a time beyond the open levels: subdirectories
/// in inode order, back up through `..`.
fn measure_deep(start: OwnedFd, dev: u64) -> Result<Totals, FsError> {
    let dotdot = OsStr::new("..");
    let mut totals = Totals::default();
    let mut cur = start;
    let mut depth = 0u64;
    // Entering `cur`: count it, then go down to its first subdirectory.
    let mut next = scan(cur.as_fd(), Some(&mut totals), None)?;
    loop {
        if let Some(e) = next.take() {
            if let Some(child) = enter(cur.as_fd(), &e.name, dev)? {
                cur = child;
                depth += 1;
                next = scan(cur.as_fd(), Some(&mut totals), None)?;
                continue;
            }
            // Gone or not ours to walk: the next one after it.
            next = scan(cur.as_fd(), None, Some(e.ino))?;
            continue;
        }
        if depth == 0 {
            return Ok(totals);
        }
        let left = fsat::fstat(cur.as_fd())?.ino;
        cur = open_dir(cur.as_fd(), dotdot, Access::Read)?;
        depth -= 1;
        next = scan(cur.as_fd(), None, Some(left))?;
    }
}

/// Opens the parent of a trusted path (the caller's own tree: its components may be followed).
fn open_parent(path: &Path) -> Result<(OwnedFd, &OsStr), BeneathError> {
    let bad = || -> BeneathError {
        FsError::Os {
            call: "open",
            path: path.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path has no last component",
            ),
        }
        .into()
    };
    let name = path.file_name().ok_or_else(bad)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((fsat::open_root(parent, Access::Path)?, name))
}

/// Removes `path` (its last component never followed: a symlink there is removed itself) and
/// everything below it, see [`remove_at`]. The path's parent is the caller's own (the runner's
/// state directory). `Ok(None)` when nothing was there.
pub fn remove_tree(path: &Path) -> Result<Option<Totals>, BeneathError> {
    let (parent, name) = match open_parent(path) {
        Ok(p) => p,
        Err(BeneathError::Fs(e)) if e.is(libc::ENOENT) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    remove_at(parent.as_fd(), name, path)
}

/// Measures `path` like [`remove_tree`] would remove it, changing nothing.
pub fn measure(path: &Path) -> Result<Option<Totals>, BeneathError> {
    let (parent, name) = match open_parent(path) {
        Ok(p) => p,
        Err(BeneathError::Fs(e)) if e.is(libc::ENOENT) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    measure_at(parent.as_fd(), name, path)
}

#[cfg(test)]
mod tests;
