//! The run's report directory, bounded on both backends ([`ReportDir`]).
//!
//! ```text
//! sandbox (native init / container)            trusted side (native supervisor / runner)
//! ─────────────────────────────────            ─────────────────────────────────────────
//! tmpfs at <out> (size, nr_inodes, noexec)
//! open(<out>, O_DIRECTORY) ── SCM_RIGHTS ──▶  holds the tmpfs (alive after the namespace dies)
//! fork the command; it writes <out>/…
//! …every process gone…                         fstatvfs: any byte, any entry left? (else full)
//!                                               openat(tmpfs, NAME, O_NOFOLLOW|O_NONBLOCK):
//!                                                 a regular file → first max_bytes copied to
//!                                                 openat(host <out>, NAME, O_CREAT|O_EXCL|
//!                                                 O_NOFOLLOW); anything else is not kept
//! ```
//!
//! The descriptor is sent before the command exists, by code the command cannot reach (the
//! native init's socketpair end is closed on exec and in the command; the container init's
//! status connection is close-on-exec and the init undumpable), and it is read only once the
//! run's processes are gone: nothing races the copy, and nothing else the command left in the
//! tmpfs reaches the host. Without a mount namespace (full-access on a host without user
//! namespaces) there is no tmpfs: the host directory is the command's, and it is checked after
//! the run instead ([`check_host`]; full-access trusts the command anyway).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::outcome::{KeptFile, RefusedFile, ReportDirEnd};
use crate::spec::{ReportDir, ReportFile};

/// The tag of the message that carries the report directory's descriptor.
pub const HANDOVER_TAG: &[u8] = b"report_dir\n";

/// The mount data of the report directory's tmpfs, owned by `uid:gid` (mode 0700).
pub fn tmpfs_data(dir: &ReportDir, uid: u32, gid: u32) -> String {
    format!(
        "mode=0700,size={},nr_inodes={},uid={uid},gid={gid}",
        dir.bytes, dir.entries
    )
}

/// A one-line account of the bound, for the enforcement report.
pub fn describe(dir: &ReportDir) -> String {
    let files: Vec<String> = dir
        .files
        .iter()
        .map(|f| format!("{} (at most {} bytes)", f.name, f.max_bytes))
        .collect();
    format!(
        "the report directory: a tmpfs of {} bytes and {} entries; only {} kept, as regular files, after the run",
        dir.bytes,
        dir.entries,
        files.join(", ")
    )
}

/// Sends `fd` with the payload `tag` in one message on the unix socket `chan`.
pub fn send_fd(chan: BorrowedFd<'_>, fd: BorrowedFd<'_>, tag: &[u8]) -> io::Result<()> {
    crate::fd_pass::send(chan, tag, &[fd])
}

/// One `recvmsg` on `chan` into `buf`: the bytes read (0 at end-of-file) and the descriptors
/// that came with them (close-on-exec; room for a few, any beyond the first closed by the
/// caller). `flags` are `recvmsg`'s (`MSG_DONTWAIT`).
pub fn recv_with_fds(
    chan: BorrowedFd<'_>,
    buf: &mut [u8],
    flags: i32,
) -> io::Result<(usize, Vec<OwnedFd>)> {
    let got = crate::fd_pass::recv(chan, buf, 4, flags)?;
    Ok((got.len, got.fds))
}

/// The native hand-over: a socketpair whose one end the sandbox's init sends the tmpfs on
/// ([`crate::fd_pass::channel`]).
pub use crate::fd_pass::channel;

/// The tmpfs the init sent on `chan` (read without waiting, once the run is over): `None` when
/// no such message came.
pub fn receive(chan: BorrowedFd<'_>) -> Option<OwnedFd> {
    let mut buf = [0u8; 64];
    let (n, mut fds) = recv_with_fds(chan, &mut buf, libc::MSG_DONTWAIT).ok()?;
    if &buf[..n] != HANDOVER_TAG || fds.is_empty() {
        return None;
    }
    Some(fds.swap_remove(0))
}

/// Opens the report directory at `path` (as the sandbox sees it) to hand it over: the tmpfs's
/// root, read-only, not through a symlink.
pub fn open_for_handover(path: &Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))?;
    // SAFETY: a NUL-terminated path alive for the call, plain flags.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The free bytes and entries of the filesystem of `fd`, and whether it is a tmpfs.
fn space_of(fd: BorrowedFd<'_>) -> io::Result<(u64, u64, bool)> {
    let vfs = nix::sys::statvfs::fstatvfs(fd).map_err(io::Error::from)?;
    let fs = nix::sys::statfs::fstatfs(fd).map_err(io::Error::from)?;
    Ok((
        vfs.blocks_free().saturating_mul(vfs.fragment_size()),
        vfs.files_free(),
        fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC,
    ))
}

/// `openat(dir, name, flags | O_NOFOLLOW | O_CLOEXEC, mode)`.
fn open_in(dir: BorrowedFd<'_>, name: &str, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))?;
    // SAFETY: a valid descriptor, a NUL-terminated name alive for the call, plain flags.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            c.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn is_no_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// Copies one kept file from `from` (the tmpfs) to `host`: `Ok(None)` when it is not there.
fn copy_one(
    from: BorrowedFd<'_>,
    host: BorrowedFd<'_>,
    f: &ReportFile,
    end: &mut ReportDirEnd,
) -> Option<KeptFile> {
    let src = match open_in(
        from,
        &f.name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    ) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return None,
        Err(e) => {
            let why = if e.raw_os_error() == Some(libc::ELOOP) {
                "a symlink; symlinks are refused".to_owned()
            } else {
                format!("not openable ({e})")
            };
            end.refused.push(RefusedFile {
                name: f.name.clone(),
                why,
            });
            return None;
        }
    };
    let mut src = std::fs::File::from(src);
    match src.metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            end.refused.push(RefusedFile {
                name: f.name.clone(),
                why: "not a regular file".into(),
            });
            return None;
        }
        Err(e) => {
            end.refused.push(RefusedFile {
                name: f.name.clone(),
                why: format!("not inspectable ({e})"),
            });
            return None;
        }
    }
    let dst = match open_in(
        host,
        &f.name,
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
        0o600,
    ) {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => {
            end.no_space |= is_no_space(&e);
            end.problems
                .push(format!("failed to create `{}` on the host: {e}", f.name));
            return None;
        }
    };
    let mut dst = dst;
    let mut kept = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let failed = loop {
        let want = usize::try_from((f.max_bytes - kept).min(buf.len() as u64)).unwrap_or(0);
        if want == 0 {
            break None;
        }
        match src.read(&mut buf[..want]) {
            Ok(0) => break None,
            Ok(n) => {
                if let Err(e) = dst.write_all(&buf[..n]) {
                    break Some(e);
                }
                kept += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Some(e),
        }
    };
    if let Some(e) = failed {
        end.no_space |= is_no_space(&e);
        end.problems
            .push(format!("failed to copy `{}` to the host: {e}", f.name));
        drop(dst);
        // Never half a file: a cut report would be judged as the agent's.
        let c = std::ffi::CString::new(f.name.as_str()).ok();
        if let Some(c) = c {
            // SAFETY: a valid descriptor and a NUL-terminated name.
            unsafe { libc::unlinkat(host.as_raw_fd(), c.as_ptr(), 0) };
        }
        return None;
    }
    let size = src.metadata().map(|m| m.len()).unwrap_or(kept);
    Some(KeptFile {
        name: f.name.clone(),
        bytes: kept,
        truncated: size > kept,
    })
}

/// Opens the host directory (the runner's own path; its last component never followed).
fn open_host(path: &Path) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte"))?;
    // SAFETY: a NUL-terminated path alive for the call, plain flags.
    let fd = unsafe {
        libc::open(
            c.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Once the run's processes are gone: what the tmpfs `from` (handed over by the sandbox; `None`
/// when it never was) has left, and its kept files copied to the host directory.
pub fn deliver(dir: &ReportDir, from: Option<OwnedFd>) -> ReportDirEnd {
    let mut end = ReportDirEnd {
        path: dir.path.clone(),
        bytes: dir.bytes,
        entries: dir.entries,
        ..ReportDirEnd::default()
    };
    let Some(from) = from else {
        end.problems
            .push("the sandbox did not hand the report directory over; nothing was kept".into());
        return end;
    };
    match space_of(from.as_fd()) {
        Ok((_, _, false)) => {
            end.problems.push(
                "what was handed over as the report directory is not a tmpfs; nothing was kept"
                    .into(),
            );
            return end;
        }
        Ok((free_bytes, free_entries, true)) => {
            end.free_bytes = Some(free_bytes);
            end.free_entries = Some(free_entries);
        }
        Err(e) => end
            .problems
            .push(format!("the report directory's space is unknown: {e}")),
    }
    let host = match open_host(&dir.path) {
        Ok(fd) => fd,
        Err(e) => {
            end.problems.push(format!(
                "failed to open `{}` on the host: {e}; nothing was kept",
                dir.path.display()
            ));
            return end;
        }
    };
    for f in &dir.files {
        if let Some(k) = copy_one(from.as_fd(), host.as_fd(), f, &mut end) {
            end.kept.push(k);
        }
    }
    end
}

/// Without a tmpfs (no mount namespace): the command wrote the host directory itself. Whatever
/// it holds beyond the bounds is the run's fault: measured (never through a symlink, bounded
/// descriptors), and when over its bounds the directory's content is removed (the run fails).
pub fn check_host(dir: &ReportDir) -> ReportDirEnd {
    let mut end = ReportDirEnd {
        path: dir.path.clone(),
        bytes: dir.bytes,
        entries: dir.entries,
        ..ReportDirEnd::default()
    };
    let totals = match crate::beneath::tree::measure(&dir.path) {
        Ok(t) => t.unwrap_or_default(),
        Err(e) => {
            end.problems
                .push(format!("the report directory cannot be measured: {e}"));
            return end;
        }
    };
    end.free_bytes = Some(dir.bytes.saturating_sub(totals.bytes));
    end.free_entries = Some(dir.entries.saturating_sub(totals.files + 1));
    if end.full() {
        // Nothing of an overfull directory stays on the host.
        if let Err(e) = crate::beneath::tree::remove_tree(&dir.path) {
            end.problems.push(format!(
                "the overfull report directory could not be removed: {e}"
            ));
        }
        let _ = std::fs::create_dir(&dir.path);
        return end;
    }
    for f in &dir.files {
        if let Ok(m) = dir.path.join(&f.name).symlink_metadata() {
            end.kept.push(KeptFile {
                name: f.name.clone(),
                bytes: m.len().min(f.max_bytes),
                truncated: m.len() > f.max_bytes,
            });
        }
    }
    end
}

#[cfg(test)]
mod tests;
