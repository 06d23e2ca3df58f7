//! The raw system calls of the layer: the only `unsafe` code of [`crate::fsat`]. Each takes
//! descriptors it borrows and NUL-terminated names it borrows, and returns the OS error as it
//! is. The symlink discipline is part of the call, not a caller's choice: `openat` always adds
//! `O_NOFOLLOW | O_CLOEXEC`, `fstatat` always uses `AT_SYMLINK_NOFOLLOW`, `linkat` never
//! follows.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `-1` as an error, anything else as the value.
fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Takes ownership of a descriptor the kernel just returned (`-1`: the error).
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it, so the `OwnedFd`
    // is its only owner and closes it once.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(path, flags | O_CLOEXEC)`: a trusted path (symlinks in it are followed unless `flags`
/// has `O_NOFOLLOW`).
pub(super) fn open(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: a NUL-terminated path alive for the call, plain flags.
    owned(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
pub(super) fn openat(
    dir: BorrowedFd<'_>,
    name: &CStr,
    flags: libc::c_int,
    mode: u32,
) -> io::Result<OwnedFd> {
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags and a
    // mode (read only with `O_CREAT`).
    owned(unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    })
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub(super) fn lstatat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor, a NUL-terminated name and a stat buffer of the right size, all
    // alive for the call.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    check(rc.into())?;
    // SAFETY: fstatat returned 0, so it filled the buffer.
    Ok(unsafe { st.assume_init() })
}

/// `fstat(fd)` (an `O_PATH` descriptor too).
pub(super) fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a valid descriptor and a stat buffer of the right size, alive for the call.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    check(rc.into())?;
    // SAFETY: fstat returned 0, so it filled the buffer.
    Ok(unsafe { st.assume_init() })
}

/// `mkdirat(dir, name, mode)`.
pub(super) fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: u32) -> io::Result<()> {
    // SAFETY: a valid descriptor and a NUL-terminated name alive for the call.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }.into()).map(drop)
}

/// `unlinkat(dir, name, flags)` (`0` or `AT_REMOVEDIR`; a symlink is removed itself).
pub(super) fn unlinkat(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid descriptor and a NUL-terminated name alive for the call.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) }.into()).map(drop)
}

/// `readlinkat(dir, name, buf)`: the bytes written to `buf` (not NUL-terminated).
pub(super) fn readlinkat(dir: BorrowedFd<'_>, name: &CStr, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: a valid descriptor, a NUL-terminated name and a buffer writable for its length.
    let n = unsafe {
        libc::readlinkat(
            dir.as_raw_fd(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    let n = check(n as libc::c_long)?;
    Ok(usize::try_from(n).unwrap_or(0).min(buf.len()))
}

/// `symlinkat(target, dir, name)`.
pub(super) fn symlinkat(target: &CStr, dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: two NUL-terminated strings alive for the call and a valid descriptor.
    let rc = unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) };
    check(rc.into()).map(drop)
}

/// `linkat(from_dir, from, to_dir, to, 0)`: without `AT_SYMLINK_FOLLOW`, a symlink at `from`
/// is linked itself.
pub(super) fn linkat(
    from_dir: BorrowedFd<'_>,
    from: &CStr,
    to_dir: BorrowedFd<'_>,
    to: &CStr,
) -> io::Result<()> {
    // SAFETY: two valid descriptors and two NUL-terminated names alive for the call.
    let rc = unsafe {
        libc::linkat(
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            0,
        )
    };
    check(rc.into()).map(drop)
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`.
pub(super) fn renameat2_noreplace(
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
    check(rc).map(drop)
}

/// `getdents64(fd, buf)`: the bytes of `struct linux_dirent64` records written (0 at the end).
pub(super) fn getdents64(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: an open directory descriptor and a buffer writable for its length, alive for the
    // call; the kernel writes at most that many bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            fd.as_raw_fd(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    let n = check(n)?;
    Ok(usize::try_from(n).unwrap_or(0).min(buf.len()))
}

/// `lseek(fd, 0, SEEK_SET)`.
pub(super) fn rewind(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: lseek on a valid descriptor; no memory is involved.
    let rc = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_SET) };
    check(rc).map(drop)
}

/// `fchown(fd, uid, gid)`.
pub(super) fn fchown(fd: BorrowedFd<'_>, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: fchown on a valid descriptor; no memory is involved.
    check(unsafe { libc::fchown(fd.as_raw_fd(), uid, gid) }.into()).map(drop)
}
