//! File operations beneath the workspace's open directory that never follow a symlink: every
//! directory is opened component by component with `O_NOFOLLOW | O_DIRECTORY` from the
//! workspace's fd, and every final name is created with `*at` calls that do not follow it
//! (`O_CREAT | O_EXCL | O_NOFOLLOW`, `mkdirat`, `symlinkat`, `linkat` without
//! `AT_SYMLINK_FOLLOW`). A symlink made earlier in the same upload thus cannot redirect a write.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, open, openat};
use nix::sys::stat::{Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, symlinkat, unlinkat};

/// Mode of directories created on the way to an entry (the archive did not list them).
const PARENT_MODE: u32 = 0o755;

fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful `open`/`openat`; nothing else owns it, so
    // the `OwnedFd` is its only owner and closes it once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Opens the workspace directory itself (trusted: the runner chose it).
pub(super) fn open_root(dest: &Path) -> nix::Result<OwnedFd> {
    open(dest, dir_flags(), Mode::empty()).map(own)
}

/// Opens the directory `name` in `at`; `ELOOP`/`ENOTDIR` when it is a symlink or not a
/// directory.
pub(super) fn open_dir(at: &OwnedFd, name: &OsStr) -> nix::Result<OwnedFd> {
    openat(Some(at.as_raw_fd()), name, dir_flags(), Mode::empty()).map(own)
}

/// Opens `dirs` beneath `root`, one component at a time, creating missing ones when `create`.
pub(super) fn walk(root: &OwnedFd, dirs: &[OsString], create: bool) -> nix::Result<OwnedFd> {
    let mut current = open_dir(root, OsStr::new("."))?;
    for name in dirs {
        current = match open_dir(&current, name) {
            Err(Errno::ENOENT) if create => {
                match mkdir(&current, name, PARENT_MODE) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                open_dir(&current, name)?
            }
            other => other?,
        };
    }
    Ok(current)
}

/// Makes the directory `name` in `at` (`EEXIST` if the name exists, whatever it is).
pub(super) fn mkdir(at: &OwnedFd, name: &OsStr, mode: u32) -> nix::Result<()> {
    mkdirat(
        Some(at.as_raw_fd()),
        name,
        Mode::from_bits_truncate(mode & 0o777),
    )
}

/// Creates the new regular file `name` in `at` (`EEXIST` if the name exists, even as a link).
pub(super) fn create_file(at: &OwnedFd, name: &OsStr) -> nix::Result<File> {
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(
        Some(at.as_raw_fd()),
        name,
        flags,
        Mode::from_bits_truncate(0o600),
    )
    .map(|fd| File::from(own(fd)))
}

/// Whether `name` in `at` is a directory (not following a symlink).
pub(super) fn is_dir(at: &OwnedFd, name: &OsStr) -> nix::Result<bool> {
    let stat = fstatat(Some(at.as_raw_fd()), name, AtFlags::AT_SYMLINK_NOFOLLOW)?;
    Ok(SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
}

/// Removes the non-directory `name` in `at` (a link is removed, not followed).
pub(super) fn remove(at: &OwnedFd, name: &OsStr) -> nix::Result<()> {
    unlinkat(Some(at.as_raw_fd()), name, UnlinkatFlags::NoRemoveDir)
}

/// Makes the symlink `name` in `at` pointing to `target` (checked by the caller).
pub(super) fn symlink(target: &OsStr, at: &OwnedFd, name: &OsStr) -> nix::Result<()> {
    symlinkat(target, Some(at.as_raw_fd()), name)
}

/// Makes `name` in `at` a hard link to `from_name` in `from_at` (a symlink is not followed).
pub(super) fn hard_link(
    from_at: &OwnedFd,
    from_name: &OsStr,
    at: &OwnedFd,
    name: &OsStr,
) -> nix::Result<()> {
    linkat(
        Some(from_at.as_raw_fd()),
        from_name,
        Some(at.as_raw_fd()),
        name,
        AtFlags::empty(),
    )
}
