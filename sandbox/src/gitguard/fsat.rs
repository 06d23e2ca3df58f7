//! The descriptor-relative operations the git check needs beyond [`crate::beneath`]: listing a
//! directory (kinds from `d_type`, no stat per entry), opening a child directory or a regular
//! file, creating a file exclusively, reading a symlink's target, handing a file to an owner.
//! None follows a symlink: every open carries `O_NOFOLLOW`, every stat `AT_SYMLINK_NOFOLLOW`.

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use nix::fcntl::AtFlags;
use nix::sys::stat::{FileStat, SFlag, fstatat};

use crate::beneath::Kind;

/// One entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Entry {
    /// Its name.
    pub name: OsString,
    /// What it is (never following a symlink).
    pub kind: Kind,
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a name"))
}

/// The kind of `st` (a `lstat` result).
pub(super) fn kind_of(st: &FileStat) -> Kind {
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFDIR => Kind::Dir,
        SFlag::S_IFREG => Kind::File,
        SFlag::S_IFLNK => Kind::Symlink,
        _ => Kind::Special,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`; `None` when absent.
pub(super) fn lstat(dir: RawFd, name: &OsStr) -> io::Result<Option<FileStat>> {
    match fstatat(Some(dir), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(nix::Error::ENOENT) => Ok(None),
        Err(e) => Err(errno(e)),
    }
}

/// `fstat` of a descriptor (an `O_PATH` one too).
pub(super) fn fstat(fd: RawFd) -> io::Result<FileStat> {
    nix::sys::stat::fstat(fd).map_err(errno)
}

/// Opens the directory `name` in `dir` for listing; a symlink or anything but a directory
/// fails (`ELOOP`, `ENOTDIR`).
pub(super) fn open_dir(dir: RawFd, name: &OsStr) -> io::Result<OwnedFd> {
    open_flags(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
    )
}

/// Opens the trusted directory `path` (a tree's root) for listing.
pub(super) fn open_root(path: &Path) -> io::Result<OwnedFd> {
    open_flags(
        libc::AT_FDCWD,
        path.as_os_str(),
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
    )
}

fn open_flags(dir: RawFd, name: &OsStr, flags: i32) -> io::Result<OwnedFd> {
    let c = cstring(name)?;
    // SAFETY: a valid descriptor (or AT_FDCWD), a NUL-terminated name alive for the call,
    // plain flags.
    let fd = unsafe { libc::openat(dir, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bytes read per `getdents64` call.
const LISTING_BUFFER: usize = 32 * 1024;

/// Every entry of the directory open at `fd` (read from its start; the descriptor is used up)
/// but `.` and `..`; kinds from `d_type`, with a `fstatat` only where the file system does not
/// fill it in. Plain `getdents64`: a directory costs its `openat`, its listing and its `close`.
pub(super) fn entries(fd: RawFd) -> io::Result<Vec<Entry>> {
    let mut buf = vec![0u8; LISTING_BUFFER];
    let mut out = Vec::new();
    loop {
        // SAFETY: `fd` is an open directory descriptor and `buf` is writable for `buf.len()`
        // bytes for the duration of the call; the kernel writes at most that many.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            return Ok(out);
        }
        parse_dirents(fd, &buf[..n.min(buf.len())], &mut out)?;
    }
}

/// `struct linux_dirent64`: `d_ino` (8 bytes), `d_off` (8), `d_reclen` (2), `d_type` (1), then
/// the NUL-terminated name, padded to `d_reclen`.
fn parse_dirents(fd: RawFd, mut bytes: &[u8], out: &mut Vec<Entry>) -> io::Result<()> {
    const NAME_AT: usize = 19;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "a malformed directory entry");
    while !bytes.is_empty() {
        let reclen = bytes
            .get(16..18)
            .map(|b| usize::from(u16::from_ne_bytes([b[0], b[1]])))
            .ok_or_else(bad)?;
        if reclen <= NAME_AT || reclen > bytes.len() {
            return Err(bad());
        }
        let (rec, rest) = bytes.split_at(reclen);
        bytes = rest;
        let raw = &rec[NAME_AT..];
        let name = &raw[..raw.iter().position(|&b| b == 0).unwrap_or(raw.len())];
        if name == b"." || name == b".." || name.is_empty() {
            continue;
        }
        let name = OsString::from_vec(name.to_vec());
        let kind = match rec[18] {
            libc::DT_DIR => Kind::Dir,
            libc::DT_REG => Kind::File,
            libc::DT_LNK => Kind::Symlink,
            libc::DT_UNKNOWN => match lstat(fd, &name)? {
                Some(st) => kind_of(&st),
                // Gone since the listing: nothing to look at.
                None => continue,
            },
            _ => Kind::Special,
        };
        out.push(Entry { name, kind });
    }
    Ok(())
}

/// A regular file opened for reading (never a symlink, a FIFO or a device: a FIFO would block,
/// so the open is non-blocking and the kind is checked on the descriptor).
pub(super) fn open_regular(dir: RawFd, name: &OsStr) -> io::Result<(File, FileStat)> {
    let c = cstring(name)?;
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags.
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    let file = File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let st = fstat(file.as_raw_fd())?;
    if kind_of(&st) != Kind::File {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((file, st))
}

/// Up to `limit` bytes of the regular file `name` in `dir`, and whether that was all of it.
pub(super) fn read_regular(dir: RawFd, name: &OsStr, limit: u64) -> io::Result<(Vec<u8>, bool)> {
    let (file, _) = open_regular(dir, name)?;
    let mut buf = Vec::new();
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    let complete = buf.len() as u64 <= limit;
    buf.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok((buf, complete))
}

/// Creates the file `name` in `dir` (it must not exist; a symlink there fails too).
pub(super) fn create_new(dir: RawFd, name: &OsStr, mode: u32) -> io::Result<File> {
    let c = cstring(name)?;
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags and a
    // mode.
    let fd = unsafe {
        libc::openat(
            dir,
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The target of the symlink `name` in `dir`, as bytes (at most 4096).
pub(super) fn read_link(dir: RawFd, name: &OsStr) -> io::Result<Vec<u8>> {
    nix::fcntl::readlinkat(Some(dir), name)
        .map(OsStringExt::into_vec)
        .map_err(errno)
}

/// Hands the file or directory behind `fd` (not an `O_PATH` descriptor) to `uid:gid`.
pub(super) fn chown(fd: RawFd, uid: u32, gid: u32) -> io::Result<()> {
    nix::unistd::fchown(
        fd,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .map_err(errno)
}
