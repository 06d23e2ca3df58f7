//! Opening, never through a symlink: a tree's root (the one open by path, a path the caller
//! trusts), a directory in a directory, any name as an `O_PATH` descriptor, a regular file for
//! reading; creating a new file exclusively; walking down a list of directories.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use super::error::{FsError, c_component, c_name};
use super::stat::{Kind, Stat, fstat};
use super::{names, sys};

/// How a directory is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `O_PATH`: enough to stat and to be the base of `*at` calls, not to list.
    Path,
    /// `O_RDONLY`: to list too.
    Read,
}

impl Access {
    fn flags(self) -> libc::c_int {
        match self {
            Access::Path => libc::O_PATH,
            Access::Read => libc::O_RDONLY,
        }
    }
}

/// What [`walk`] does with a missing directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Create {
    /// Fails (`ENOENT`).
    No,
    /// Creates it with this mode.
    Missing(u32),
}

fn open_by_path(path: &Path, flags: libc::c_int) -> Result<OwnedFd, FsError> {
    let c = c_name(path.as_os_str())?;
    sys::open(&c, flags).map_err(|e| FsError::os("open", path, e))
}

/// Opens the directory `path`, the root of a tree, by path: the caller trusts it (symlinks in
/// it are followed). Everything below is reached from its descriptor.
pub fn open_root(path: &Path, access: Access) -> Result<OwnedFd, FsError> {
    open_by_path(path, access.flags() | libc::O_DIRECTORY)
}

/// [`open_root`], except that a symlink as the last component fails (`ELOOP`).
pub fn open_root_nofollow(path: &Path, access: Access) -> Result<OwnedFd, FsError> {
    open_by_path(path, access.flags() | libc::O_DIRECTORY | libc::O_NOFOLLOW)
}

/// Opens the directory `name` in `dir`; a symlink (`ELOOP`) or anything but a directory
/// (`ENOTDIR`) fails.
pub fn open_dir(dir: BorrowedFd<'_>, name: &OsStr, access: Access) -> Result<OwnedFd, FsError> {
    let c = c_component(name)?;
    sys::openat(dir, &c, access.flags() | libc::O_DIRECTORY, 0)
        .map_err(|e| FsError::os("openat", name, e))
}

/// An `O_PATH` descriptor of `name` in `dir`, whatever it is. A symlink is not followed: the
/// descriptor then stands for the link itself (its [`fstat`] says [`Kind::Symlink`]).
pub fn open_path(dir: BorrowedFd<'_>, name: &OsStr) -> Result<OwnedFd, FsError> {
    let c = c_component(name)?;
    sys::openat(dir, &c, libc::O_PATH, 0).map_err(|e| FsError::os("openat", name, e))
}

/// The regular file `name` in `dir` opened for reading, with its stat. A symlink fails
/// (`ELOOP`); a FIFO or device is never waited on (the open is non-blocking) and fails as
/// [`FsError::NotRegular`], the kind being read from the descriptor.
pub fn open_regular(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(File, Stat), FsError> {
    let c = c_component(name)?;
    let fd = sys::openat(
        dir,
        &c,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| FsError::os("openat", name, e))?;
    let st = fstat(fd.as_fd()).map_err(|e| e.at(name))?;
    if st.kind != Kind::File {
        return Err(FsError::NotRegular { path: name.into() });
    }
    Ok((File::from(fd), st))
}

/// Up to `limit` bytes of the regular file `name` in `dir` ([`open_regular`]), and whether that
/// was all of it.
pub fn read_regular(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    limit: u64,
) -> Result<(Vec<u8>, bool), FsError> {
    let (file, _) = open_regular(dir, name)?;
    let mut buf = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| FsError::os("read", name, e))?;
    let complete = buf.len() as u64 <= limit;
    buf.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((buf, complete))
}

/// Creates the regular file `name` in `dir` for writing, with `mode` (less the umask):
/// `O_CREAT | O_EXCL`, so a name already taken fails (`EEXIST`), a symlink there too (it is
/// never followed to create its target).
pub fn create_new(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Result<File, FsError> {
    let c = c_component(name)?;
    sys::openat(dir, &c, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, mode)
        .map(File::from)
        .map_err(|e| FsError::os("openat", name, e))
}

/// Opens the directories `dirs` below `root`, one component at a time ([`open_dir`] for
/// listing, so a symlink or a non-directory on the way fails with `ELOOP` or `ENOTDIR`), and
/// returns the last one (`root` itself, newly opened, when `dirs` is empty). A missing one is
/// created first with [`Create::Missing`]. The error names the path below `root`.
pub fn walk(root: BorrowedFd<'_>, dirs: &[OsString], create: Create) -> Result<OwnedFd, FsError> {
    let mut current = open_dir(root, OsStr::new("."), Access::Read)?;
    let mut here = std::path::PathBuf::new();
    for name in dirs {
        here.push(name);
        current = match open_dir(current.as_fd(), name, Access::Read) {
            Err(e) if e.is(libc::ENOENT) => match create {
                Create::No => return Err(e.at(&here)),
                Create::Missing(mode) => {
                    match names::mkdir(current.as_fd(), name, mode) {
                        Ok(()) => {}
                        Err(e) if e.is(libc::EEXIST) => {}
                        Err(e) => return Err(e.at(&here)),
                    }
                    open_dir(current.as_fd(), name, Access::Read).map_err(|e| e.at(&here))?
                }
            },
            other => other.map_err(|e| e.at(&here))?,
        };
    }
    Ok(current)
}
