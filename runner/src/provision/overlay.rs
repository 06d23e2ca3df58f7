//! The overlay mount a layered workspace is (the syscalls, behind a narrow interface): a shared,
//! never-written base tree as the lower layer, the job's own upper and work directories, mounted
//! on the job's workspace directory. Every write a round makes lands in the upper layer (copy on
//! write); the base tree and the other jobs' workspaces never change.
//!
//! Mounting needs `CAP_SYS_ADMIN` (a root runner); a runner that lacks it, or a state dir on a
//! filesystem overlayfs cannot use as its upper layer, gets [`OverlayError::Unsupported`] and
//! falls back to a full checkout ([`super::clone`]).

use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

/// A failure to mount or unmount an overlay.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// Overlay mounts are not possible here (no privilege, no overlayfs, an unusable upper
    /// filesystem, or a path the mount options cannot carry).
    #[error("failed to mount an overlay on `{target}`: {reason}")]
    Unsupported {
        /// The mount point.
        target: PathBuf,
        /// Why not.
        reason: String,
    },
    /// `mount(2)` or `umount2(2)` failed otherwise.
    #[error("failed to {syscall} `{target}`: {errno}")]
    Syscall {
        /// The syscall.
        syscall: &'static str,
        /// The mount point.
        target: PathBuf,
        /// The error.
        errno: Errno,
    },
}

/// The three directories of one overlay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layers<'a> {
    /// The shared base tree (read only).
    pub lower: &'a Path,
    /// The job's changes.
    pub upper: &'a Path,
    /// overlayfs' scratch directory (same filesystem as `upper`).
    pub work: &'a Path,
}

/// A path as an overlay option value: the option string separates options with `,` and lower
/// layers with `:`, so a path holding either (or `\`, or non-UTF-8) is not carried at all.
fn option_path(p: &Path) -> Option<&str> {
    let s = p.to_str()?;
    (!s.contains([',', ':', '\\', '\n'])).then_some(s)
}

/// The mount data for `layers` (`None` when a path cannot be written into it).
fn options(layers: &Layers<'_>) -> Option<String> {
    Some(format!(
        "lowerdir={},upperdir={},workdir={}",
        option_path(layers.lower)?,
        option_path(layers.upper)?,
        option_path(layers.work)?
    ))
}

/// Mounts the overlay of `layers` on `target` (an existing empty directory), with no device
/// files, no setuid and no suid-executables honoured through it.
pub fn mount(layers: &Layers<'_>, target: &Path) -> Result<(), OverlayError> {
    let data = options(layers).ok_or_else(|| OverlayError::Unsupported {
        target: target.to_owned(),
        reason: "a layer's path holds `,`, `:`, `\\` or is not UTF-8".into(),
    })?;
    let flags = MsFlags::MS_NODEV | MsFlags::MS_NOSUID;
    match nix::mount::mount(
        Some("ralph-workspace"),
        target,
        Some("overlay"),
        flags,
        Some(data.as_str()),
    ) {
        Ok(()) => Ok(()),
        // No privilege, no overlayfs, an upper layer on a filesystem overlayfs refuses (tmpfs
        // without xattrs, another overlay), too deep a stack.
        Err(errno @ (Errno::EPERM | Errno::ENODEV | Errno::EINVAL | Errno::EOPNOTSUPP)) => {
            Err(OverlayError::Unsupported {
                target: target.to_owned(),
                reason: format!("mount(2): {errno}"),
            })
        }
        Err(errno) => Err(OverlayError::Syscall {
            syscall: "mount(2) an overlay on",
            target: target.to_owned(),
            errno,
        }),
    }
}

/// Unmounts `target` if something is mounted there (lazily: a process still inside it keeps
/// its view, the path is free at once). Not mounted is not an error.
pub fn unmount(target: &Path) -> Result<(), OverlayError> {
    if !is_mount_point(target) {
        return Ok(());
    }
    match nix::mount::umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
        Ok(()) | Err(Errno::EINVAL | Errno::ENOENT) => Ok(()),
        Err(errno) => Err(OverlayError::Syscall {
            syscall: "umount2(2)",
            target: target.to_owned(),
            errno,
        }),
    }
}

/// Whether a filesystem is mounted on `path` (its device differs from its parent's; symlinks
/// not followed).
pub fn is_mount_point(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(parent) = path.parent() else {
        return false;
    };
    match (
        std::fs::symlink_metadata(path),
        std::fs::symlink_metadata(parent),
    ) {
        (Ok(p), Ok(q)) => p.is_dir() && p.dev() != q.dev(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_carry_plain_paths_only() {
        let l = |lower: &'static str| Layers {
            lower: Path::new(lower),
            upper: Path::new("/s/w/1.layer/upper"),
            work: Path::new("/s/w/1.layer/work"),
        };
        assert_eq!(
            options(&l("/s/trees/abc")).as_deref(),
            Some("lowerdir=/s/trees/abc,upperdir=/s/w/1.layer/upper,workdir=/s/w/1.layer/work")
        );
        for bad in ["/s/a,upperdir=/etc", "/s/a:/etc", "/s/a\\,b", "/s/a\nb"] {
            assert_eq!(options(&l(bad)), None, "{bad}");
        }
    }

    #[test]
    fn a_plain_directory_is_not_a_mount_point() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("x")).unwrap();
        assert!(!is_mount_point(&d.path().join("x")));
        assert!(!is_mount_point(&d.path().join("missing")));
        assert!(unmount(&d.path().join("x")).is_ok());
    }
}
