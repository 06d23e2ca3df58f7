//! The private filesystem view, built inside the mount namespace: mount propagation cut off,
//! protected paths bound read-only over themselves, the private `/tmp`, a fresh `/proc`, and
//! empty mode-000 mounts over secrets.

use std::path::Path;

use nix::mount::{MsFlags, mount};
use nix::sys::statvfs::{FsFlags, statvfs};

use super::step::{StepFailure, restriction};
use crate::plan::MountStep;

const NONE: Option<&str> = None;

fn fail(step: &str, path: &Path, err: nix::Error) -> StepFailure {
    StepFailure::nix(
        restriction::MOUNTS,
        step,
        &format!("mount over `{}`", path.display()),
        err,
    )
}

/// Flags a read-only remount must keep: inside a user namespace the flags of mounts inherited
/// from the parent are locked, and dropping one makes the remount fail with EPERM.
fn locked_flags(path: &Path) -> MsFlags {
    let Ok(st) = statvfs(path) else {
        return MsFlags::empty();
    };
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    out
}

fn bind_read_only(from: &Path, to: &Path) -> Result<(), StepFailure> {
    mount(
        Some(from),
        to,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        NONE,
    )
    .map_err(|e| fail("mount(MS_BIND)", to, e))?;
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked_flags(to);
    mount(NONE, to, NONE, flags, NONE).map_err(|e| fail("mount(MS_REMOUNT|MS_RDONLY)", to, e))
}

/// Binds `from` over `to`, then each of `keep` back at its own path. The kept paths are opened
/// (`O_PATH`) before `to` is covered and bound from `/proc/self/fd/N` afterwards.
fn bind_private(from: &Path, to: &Path, keep: &[std::path::PathBuf]) -> Result<(), StepFailure> {
    use std::os::fd::AsRawFd;
    let handles = keep
        .iter()
        .map(|p| {
            nix::fcntl::open(
                p.as_path(),
                nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            // SAFETY: open returned a new descriptor that nothing else owns.
            .map(|fd| unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
            .map_err(|e| fail("open(O_PATH)", p, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    mount(
        Some(from),
        to,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        NONE,
    )
    .map_err(|e| fail("mount(MS_BIND)", to, e))?;
    for (p, fd) in keep.iter().zip(&handles) {
        // Recreate the mount point inside the private directory (it is removed with it).
        let is_dir = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map(|m| m.is_dir())
            .unwrap_or(true);
        let made = if is_dir {
            std::fs::create_dir_all(p)
        } else {
            p.parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| {
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(p)
                        .map(drop)
                })
        };
        made.map_err(|e| {
            StepFailure::io(
                restriction::MOUNTS,
                "mkdir",
                &format!("create the mount point `{}`", p.display()),
                &e,
            )
        })?;
        let src = format!("/proc/self/fd/{}", fd.as_raw_fd());
        mount(
            Some(src.as_str()),
            p.as_path(),
            NONE,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            NONE,
        )
        .map_err(|e| fail("mount(MS_BIND)", p, e))?;
    }
    Ok(())
}

/// Applies `steps` in order. `hidden_file` is an empty mode-000 file used to mask secret files
/// (present whenever a `HideFile` step is).
pub fn apply(steps: &[MountStep], hidden_file: Option<&Path>) -> Result<(), StepFailure> {
    // Nothing done here may leak back to the host's mount table.
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(|e| fail("mount(MS_REC|MS_PRIVATE)", Path::new("/"), e))?;
    for step in steps {
        match step {
            MountStep::ProtectReadOnly { path } => bind_read_only(path, path)?,
            MountStep::BindPrivate { from, to, keep } => bind_private(from, to, keep)?,
            MountStep::Proc => {
                let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
                mount(Some("proc"), "/proc", Some("proc"), flags, NONE)
                    .map_err(|e| fail("mount(proc)", Path::new("/proc"), e))?;
            }
            MountStep::HideFile { path } => match hidden_file {
                Some(mask) => bind_read_only(mask, path)?,
                None => return Err(StepFailure::new(restriction::MOUNTS, "mount(MS_BIND)", format!("no mask file to hide `{}`", path.display()))),
            },
            MountStep::HideDir { path } => {
                let flags = MsFlags::MS_RDONLY
                    | MsFlags::MS_NOSUID
                    | MsFlags::MS_NODEV
                    | MsFlags::MS_NOEXEC;
                mount(
                    Some("tmpfs"),
                    path.as_path(),
                    Some("tmpfs"),
                    flags,
                    Some("mode=000,size=4k,nr_inodes=1"),
                )
                .map_err(|e| fail("mount(tmpfs)", path, e))?;
            }
        }
    }
    Ok(())
}
