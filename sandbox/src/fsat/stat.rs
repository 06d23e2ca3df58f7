//! What a name is, never following it: [`Kind`], [`Stat`], [`lstat`] (`fstatat` with
//! `AT_SYMLINK_NOFOLLOW`) and [`fstat`] (of a descriptor, an `O_PATH` one too).

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::{FsError, c_component};
use super::sys;

/// What kind of file a name is (never following a symlink).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symlink.
    Symlink,
    /// A FIFO, socket or device node.
    Special,
}

impl Kind {
    /// The kind of the mode bits `mode` (`st_mode`).
    pub fn of_mode(mode: u32) -> Kind {
        match mode & libc::S_IFMT {
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFREG => Kind::File,
            libc::S_IFLNK => Kind::Symlink,
            _ => Kind::Special,
        }
    }
}

/// What a name is, as `fstatat(AT_SYMLINK_NOFOLLOW)` (or `fstat`) saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stat {
    /// The kind.
    pub kind: Kind,
    /// Device.
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Link count.
    pub nlink: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Mode bits (type included).
    pub mode: u32,
    /// The device a device node stands for.
    pub rdev: u64,
    /// Size in bytes.
    pub size: u64,
    /// Last change of the inode: seconds, nanoseconds.
    pub ctime: (i64, i64),
    /// Last change of the content: seconds, nanoseconds.
    pub mtime: (i64, i64),
}

impl Stat {
    fn of(st: &libc::stat) -> Self {
        Self {
            kind: Kind::of_mode(st.st_mode),
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
            uid: st.st_uid,
            gid: st.st_gid,
            mode: st.st_mode,
            rdev: st.st_rdev,
            size: u64::try_from(st.st_size).unwrap_or(0),
            ctime: (st.st_ctime, st.st_ctime_nsec),
            mtime: (st.st_mtime, st.st_mtime_nsec),
        }
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when nothing has that name.
pub fn lstat(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Option<Stat>, FsError> {
    let c = c_component(name)?;
    match sys::lstatat(dir, &c) {
        Ok(st) => Ok(Some(Stat::of(&st))),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(FsError::os("fstatat", name, e)),
    }
}

/// `fstat(fd)`: what the descriptor stands for (the error names no path: anchor it).
pub fn fstat(fd: BorrowedFd<'_>) -> Result<Stat, FsError> {
    sys::fstat(fd)
        .map(|st| Stat::of(&st))
        .map_err(|e| FsError::os("fstat", PathBuf::new(), e))
}
