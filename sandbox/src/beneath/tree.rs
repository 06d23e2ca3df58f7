//! Whole trees removed and measured with a bounded number of open descriptors and bounded
//! memory, whatever their depth, never following a symlink.
//!
//! A recursive walk holds one descriptor per level: a round that leaves a 1,500-level tree makes
//! it fail with "Too many open files" for ever, and one deeper than `PATH_MAX` defeats any walk by
//! path. Here every step is relative to a directory descriptor (`openat(O_NOFOLLOW |
//! O_DIRECTORY)`, `unlinkat`, `fstatat(AT_SYMLINK_NOFOLLOW)`, entries read with `getdents64`),
//! and at most [`OPEN_LEVELS`] directories are open at once:
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

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::BeneathError;

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

fn io_err(call: &'static str, path: &Path, source: io::Error) -> BeneathError {
    BeneathError::Io {
        call,
        path: path.to_owned(),
        source,
    }
}

fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))
}

/// `openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)`.
fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
fn lstat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated name and a stat buffer of the right size.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat returned 0, so it filled the buffer.
    Ok(unsafe { st.assume_init() })
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a stat buffer of the right size.
    if unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0, so it filled the buffer.
    Ok(unsafe { st.assume_init() })
}

/// `unlinkat(dir, name, AT_REMOVEDIR or 0)`.
fn unlink(dir: BorrowedFd<'_>, name: &CStr, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: a valid descriptor and a NUL-terminated name alive for the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`.
fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: two valid descriptors and two NUL-terminated names alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn is_dir_mode(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

fn size_of(st: &libc::stat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

/// One entry of a directory, as `getdents64` gave it (`.` and `..` left out).
#[derive(Debug)]
struct Entry {
    ino: u64,
    /// `DT_*`; `DT_UNKNOWN` when the filesystem does not say.
    kind: u8,
    name: CString,
}

/// An open directory read with `getdents64` into its own buffer.
#[derive(Debug)]
struct Stream {
    fd: OwnedFd,
    buf: Vec<u8>,
    len: usize,
    pos: usize,
}

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
        Self {
            fd,
            buf: vec![0; BUF_BYTES],
            len: 0,
            pos: 0,
        }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The next entry; `None` at the end.
    fn next(&mut self) -> io::Result<Option<Entry>> {
        loop {
            if self.pos >= self.len {
                // SAFETY: a valid directory descriptor and a buffer of the given length that we
                // own; the kernel writes at most that many bytes.
                let n = unsafe {
                    libc::syscall(
                        libc::SYS_getdents64,
                        self.fd.as_raw_fd(),
                        self.buf.as_mut_ptr(),
                        self.buf.len(),
                    )
                };
                if n < 0 {
                    return Err(io::Error::last_os_error());
                }
                if n == 0 {
                    return Ok(None);
                }
                self.len = usize::try_from(n).unwrap_or(0).min(self.buf.len());
                self.pos = 0;
            }
            let rec = &self.buf[self.pos..self.len];
            // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
            if rec.len() < 19 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a truncated directory entry",
                ));
            }
            let ino = u64::from_ne_bytes(rec[0..8].try_into().unwrap_or([0; 8]));
            let reclen = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
            if reclen < 19 || reclen > rec.len() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a malformed directory entry",
                ));
            }
            let kind = rec[18];
            let raw = &rec[19..reclen];
            let name = &raw[..raw.iter().position(|b| *b == 0).unwrap_or(raw.len())];
            self.pos += reclen;
            if name == b"." || name == b".." || name.is_empty() {
                continue;
            }
            return Ok(Some(Entry {
                ino,
                kind,
                name: c_name(name)?,
            }));
        }
    }

    /// Starts over from the first entry.
    fn rewind(&mut self) -> io::Result<()> {
        // SAFETY: lseek on a descriptor we own.
        if unsafe { libc::lseek(self.fd.as_raw_fd(), 0, libc::SEEK_SET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.len = 0;
        self.pos = 0;
        Ok(())
    }
}

/// Whether `e` (in `dir`) is a directory, and its stat when one was needed (non-directories
/// are always stat'ed, for their size).
fn classify(dir: BorrowedFd<'_>, e: &Entry) -> io::Result<(bool, Option<libc::stat>)> {
    if e.kind == libc::DT_DIR {
        return Ok((true, None));
    }
    let st = lstat(dir, &e.name)?;
    Ok((is_dir_mode(st.st_mode), Some(st)))
}

/// One open level of a removal: its stream and its name in the level above.
#[derive(Debug)]
struct Level {
    stream: Stream,
    name: CString,
}

/// Removes `name` in `parent` (a symlink or file itself, a directory with everything below it),
/// with at most [`OPEN_LEVELS`] directories open; `shown` is its path for messages. Returns
/// what was removed; `Ok(None)` when there was nothing.
pub fn remove_at(
    parent: BorrowedFd<'_>,
    name: &OsStr,
    shown: &Path,
) -> Result<Option<Totals>, BeneathError> {
    let cname = c_name(name.as_bytes()).map_err(|e| io_err("encode", shown, e))?;
    let st = match lstat(parent, &cname) {
        Ok(st) => st,
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("fstatat", shown, e)),
    };
    if !is_dir_mode(st.st_mode) {
        unlink(parent, &cname, false).map_err(|e| io_err("unlinkat", shown, e))?;
        return Ok(Some(Totals {
            files: 1,
            bytes: size_of(&st),
        }));
    }
    let top = match open_dir(parent, &cname) {
        Ok(fd) => fd,
        // Swapped for a link or file since the stat: removed as what it is now.
        Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
            unlink(parent, &cname, false).map_err(|e| io_err("unlinkat", shown, e))?;
            return Ok(Some(Totals { files: 1, bytes: 0 }));
        }
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("openat", shown, e)),
    };
    let totals = empty_tree(top, shown)?;
    match unlink(parent, &cname, true) {
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
        name: CString::default(),
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
                match unlink(up.stream.fd(), &name, true) {
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
            Ok(c) => c,
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) => return Err(fail("fstatat", e)),
        };
        if !is_dir {
            match unlink(dir, &entry.name, false) {
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
        match unlink(dir, &entry.name, true) {
            Ok(()) => continue,
            Err(e) if errno(&e) == libc::ENOENT => continue,
            Err(e) if matches!(errno(&e), libc::ENOTEMPTY | libc::EEXIST) => {}
            Err(e) => return Err(fail("unlinkat", e)),
        }
        if depth < OPEN_LEVELS {
            match open_dir(dir, &entry.name) {
                Ok(fd) => stack.push(Level {
                    stream: Stream::new(fd),
                    name: entry.name,
                }),
                Err(e) if errno(&e) == libc::ENOENT => {}
                // Swapped for a link or file since the listing: removed as what it is now.
                Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
                    match unlink(dir, &entry.name, false) {
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
            let to = c_name(format!(".ralph-removing-{moved}").as_bytes())
                .map_err(|e| fail("encode", e))?;
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
    let cname = c_name(name.as_bytes()).map_err(|e| io_err("encode", shown, e))?;
    let st = match lstat(parent, &cname) {
        Ok(st) => st,
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("fstatat", shown, e)),
    };
    if !is_dir_mode(st.st_mode) {
        return Ok(Some(Totals {
            files: 1,
            bytes: size_of(&st),
        }));
    }
    let top = match open_dir(parent, &cname) {
        Ok(fd) => fd,
        Err(e) if matches!(errno(&e), libc::ELOOP | libc::ENOTDIR) => {
            return Ok(Some(Totals { files: 1, bytes: 0 }));
        }
        Err(e) if errno(&e) == libc::ENOENT => return Ok(None),
        Err(e) => return Err(io_err("openat", shown, e)),
    };
    measure_tree(top, st.st_dev, shown).map(Some)
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
            Ok(c) => c,
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
fn enter(dir: BorrowedFd<'_>, name: &CStr, dev: u64) -> io::Result<Option<OwnedFd>> {
    let fd = match open_dir(dir, name) {
        Ok(fd) => fd,
        Err(e) if matches!(errno(&e), libc::ENOENT | libc::ELOOP | libc::ENOTDIR) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if fstat(fd.as_fd())?.st_dev != dev {
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
) -> io::Result<Option<Entry>> {
    // The scan reads through its own descriptor: `dir` stays where it is.
    let here = c_name(b".")?;
    let mut s = Stream::new(open_dir(dir, &here)?);
    let mut count = count;
    let mut next: Option<Entry> = None;
    while let Some(e) = s.next()? {
        let (is_dir, st) = match classify(s.fd(), &e) {
            Ok(c) => c,
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
fn measure_deep(start: OwnedFd, dev: u64) -> io::Result<Totals> {
    let dotdot = c_name(b"..")?;
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
        let left = fstat(cur.as_fd())?.st_ino;
        cur = open_dir(cur.as_fd(), &dotdot)?;
        depth -= 1;
        next = scan(cur.as_fd(), None, Some(left))?;
    }
}

/// Opens the parent of a trusted path (the caller's own tree: its components may be followed).
fn open_parent(path: &Path) -> Result<(OwnedFd, &OsStr), BeneathError> {
    let bad = || {
        io_err(
            "open",
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path has no last component",
            ),
        )
    };
    let name = path.file_name().ok_or_else(bad)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let c = c_name(parent.as_os_str().as_bytes()).map_err(|e| io_err("encode", path, e))?;
    // SAFETY: a NUL-terminated path alive for the call.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io_err("open", parent, io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok((unsafe { OwnedFd::from_raw_fd(fd) }, name))
}

/// Removes `path` (its last component never followed: a symlink there is removed itself) and
/// everything below it, see [`remove_at`]. The path's parent is the caller's own (the runner's
/// state directory). `Ok(None)` when nothing was there.
pub fn remove_tree(path: &Path) -> Result<Option<Totals>, BeneathError> {
    let (parent, name) = match open_parent(path) {
        Ok(p) => p,
        Err(BeneathError::Io { source, .. }) if errno(&source) == libc::ENOENT => {
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
        Err(BeneathError::Io { source, .. }) if errno(&source) == libc::ENOENT => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    measure_at(parent.as_fd(), name, path)
}

#[cfg(test)]
mod tests;
