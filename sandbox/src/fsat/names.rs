//! Changing the names of a directory, never through a symlink: making a directory, removing a
//! name (a symlink is removed itself), making a symlink or a hard link (a symlink at the source
//! is linked itself, never followed), renaming without replacing; reading a symlink's target;
//! handing a file to an owner.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use super::error::{FsError, c_component, c_name};
use super::sys;

/// `mkdirat(dir, name, mode)`; a name already taken, whatever it is, fails (`EEXIST`).
pub fn mkdir(dir: BorrowedFd<'_>, name: &OsStr, mode: u32) -> Result<(), FsError> {
    let c = c_component(name)?;
    sys::mkdirat(dir, &c, mode).map_err(|e| FsError::os("mkdirat", name, e))
}

/// `unlinkat(dir, name, 0)`: removes a non-directory (a symlink itself, never its target).
pub fn unlink(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), FsError> {
    let c = c_component(name)?;
    sys::unlinkat(dir, &c, 0).map_err(|e| FsError::os("unlinkat", name, e))
}

/// `unlinkat(dir, name, AT_REMOVEDIR)`: removes an empty directory.
pub fn rmdir(dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), FsError> {
    let c = c_component(name)?;
    sys::unlinkat(dir, &c, libc::AT_REMOVEDIR).map_err(|e| FsError::os("unlinkat", name, e))
}

/// `symlinkat(target, dir, name)`: the link `name` in `dir` pointing to `target` (checked by
/// the caller; nothing here resolves it). A name already taken fails (`EEXIST`).
pub fn symlink(target: &OsStr, dir: BorrowedFd<'_>, name: &OsStr) -> Result<(), FsError> {
    let t = c_name(target)?;
    let c = c_component(name)?;
    sys::symlinkat(&t, dir, &c).map_err(|e| FsError::os("symlinkat", name, e))
}

/// `linkat(from_dir, from, dir, name, 0)`: `name` in `dir` a hard link to `from` in `from_dir`
/// (a symlink at `from` is linked itself, never followed). A name already taken fails
/// (`EEXIST`).
pub fn hard_link(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    dir: BorrowedFd<'_>,
    name: &OsStr,
) -> Result<(), FsError> {
    let f = c_component(from)?;
    let c = c_component(name)?;
    sys::linkat(from_dir, &f, dir, &c).map_err(|e| FsError::os("linkat", name, e))
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`: a name already taken at `to`
/// fails (`EEXIST`). The error names `from`.
pub fn rename_noreplace(
    from_dir: BorrowedFd<'_>,
    from: &OsStr,
    to_dir: BorrowedFd<'_>,
    to: &OsStr,
) -> Result<(), FsError> {
    let f = c_component(from)?;
    let t = c_component(to)?;
    sys::renameat2_noreplace(from_dir, &f, to_dir, &t)
        .map_err(|e| FsError::os("renameat2", from, e))
}

/// The longest symlink target [`read_link`] reads (Linux keeps them below a page).
const MAX_LINK: usize = 1 << 20;

/// The target of the symlink `name` in `dir`, as bytes (all of them).
pub fn read_link(dir: BorrowedFd<'_>, name: &OsStr) -> Result<Vec<u8>, FsError> {
    let c = c_component(name)?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n =
            sys::readlinkat(dir, &c, &mut buf).map_err(|e| FsError::os("readlinkat", name, e))?;
        if n < buf.len() {
            buf.truncate(n);
            return Ok(buf);
        }
        if buf.len() >= MAX_LINK {
            return Err(FsError::os(
                "readlinkat",
                name,
                std::io::Error::from_raw_os_error(libc::ENAMETOOLONG),
            ));
        }
        // Possibly cut short: once more with room to spare.
        buf.resize(buf.len() * 2, 0);
    }
}

/// `fchown(fd, uid, gid)`: hands the file or directory behind `fd` (not an `O_PATH`
/// descriptor) to `uid:gid` (the error names no path: anchor it).
pub fn chown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> Result<(), FsError> {
    sys::fchown(fd, uid, gid).map_err(|e| FsError::os("fchown", PathBuf::new(), e))
}
