//! Idmapped workspaces for a root runner's containers (SPEC §5: the round never holds host uid
//! 0, what it creates belongs to the workspace's owner on the host). Docker Engine 20.10 cannot
//! idmap a bind mount itself, but a bind of a mount that *is* idmapped keeps the idmapping: the
//! runner clones each root-owned writable tree (`open_tree(OPEN_TREE_CLONE)`), idmaps the clone
//! through a user namespace that sends the owner's ids on disk to the agent user's
//! (`mount_setattr(MOUNT_ATTR_IDMAP)`, as the native backend does, [`crate::native::idmap`]),
//! attaches it under [`IDMAP_DIR`], and the container's binds of that tree (and of the protected
//! paths inside it) take their source there. Once the container has started it holds its own
//! copies of the mounts, and the runner's are detached at once; a runner killed in between
//! leaves a directory named for it, which the next start-up detaches ([`reap_leftovers`]).
//!
//! The engine must see the runner's mounts: it resolves a bind's source in its own mount
//! namespace, so [`engine_shares_mounts`] compares the two (the engine's pid comes from the
//! socket's peer credentials); where they differ (a runner in a unit with private mounts) the
//! run is refused (exit 69) rather than run as uid 0.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::SandboxError;
use crate::plan::OwnerMap;

/// Where the runner attaches the idmapped trees of its containers (root only; tmpfs on the
/// usual systems, so nothing survives a reboot).
pub const IDMAP_DIR: &str = "/run/ralph-idmap";

/// The restriction a failure names.
const RESTRICTION: &str = "the round's identity (idmapped workspace)";

fn unavailable(reason: String) -> SandboxError {
    SandboxError::unavailable(RESTRICTION, reason)
}

/// The idmapped trees of one container, attached under [`IDMAP_DIR`] until detached (on drop
/// at the latest).
#[derive(Debug)]
pub struct IdmappedTrees {
    dir: PathBuf,
    /// (the tree on the host, where its idmapped clone is attached).
    trees: Vec<(PathBuf, PathBuf)>,
    attached: bool,
}

impl IdmappedTrees {
    /// Clones and idmaps each of `trees` (path, mapping, read-only) and attaches the clones
    /// under a directory of [`IDMAP_DIR`] named for this process.
    pub fn make(trees: &[(PathBuf, OwnerMap, bool)]) -> Result<Self, SandboxError> {
        let dir = own_dir()?;
        let mut out = IdmappedTrees {
            dir,
            trees: Vec::new(),
            attached: true,
        };
        for (n, (path, map, read_only)) in trees.iter().enumerate() {
            let at = out.dir.join(n.to_string());
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&at)
                .map_err(|e| unavailable(format!("failed to create `{}`: {e}", at.display())))?;
            attach_idmapped(path, &at, map, *read_only)?;
            out.trees.push((path.clone(), at));
        }
        Ok(out)
    }

    /// Where a container's bind of `path` takes its source: inside the idmapped clone of the
    /// innermost tree holding it, else `path` itself.
    pub fn source_of(&self, path: &Path) -> PathBuf {
        self.trees
            .iter()
            .filter_map(|(root, at)| path.strip_prefix(root).ok().map(|rest| (root, at, rest)))
            .max_by_key(|(root, _, _)| root.components().count())
            .map_or_else(
                || path.to_path_buf(),
                |(_, at, rest)| {
                    if rest.as_os_str().is_empty() {
                        at.clone()
                    } else {
                        at.join(rest)
                    }
                },
            )
    }

    /// Detaches the clones (lazily: a container that started holds its own copies) and removes
    /// the directory. Idempotent.
    pub fn detach(&mut self) {
        if !self.attached {
            return;
        }
        self.attached = false;
        for (_, at) in self.trees.iter().rev() {
            let _ = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(at);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl Drop for IdmappedTrees {
    fn drop(&mut self) {
        self.detach();
    }
}

/// `<IDMAP_DIR>/<pid>.<start ticks>.<n>`, fresh, mode 0700.
fn own_dir() -> Result<PathBuf, SandboxError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = Path::new(IDMAP_DIR);
    match std::fs::DirBuilder::new().mode(0o700).create(base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(unavailable(format!(
                "failed to create `{}`: {e}",
                base.display()
            )));
        }
    }
    // Only root's, never a link: whatever is attached below it is reached by the engine.
    let meta = std::fs::symlink_metadata(base)
        .map_err(|e| unavailable(format!("`{}`: {e}", base.display())))?;
    {
        use std::os::unix::fs::MetadataExt;
        if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
            return Err(unavailable(format!(
                "`{}` must be a directory only root can write",
                base.display()
            )));
        }
    }
    let me = super::labels::Owner::current();
    let dir = base.join(format!(
        "{}.{}.{}",
        me.pid,
        me.start_ticks,
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| unavailable(format!("failed to create `{}`: {e}", dir.display())))?;
    Ok(dir)
}

/// Clones the tree at `src`, idmaps the clone with `map` (read-only with `read_only`) and
/// attaches it at `at`. A filesystem that cannot be idmapped fails (never a plain bind).
fn attach_idmapped(
    src: &Path,
    at: &Path,
    map: &OwnerMap,
    read_only: bool,
) -> Result<(), SandboxError> {
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(p)
            .map_err(|e| unavailable(format!("failed to open `{}`: {e}", p.display())))
    };
    let userns = crate::native::idmap::userns(map)
        .map_err(|f| unavailable(format!("{}: {}", f.step, f.reason)))?;
    let source = open(src)?;
    let tree = crate::sys::clone_tree(&source).map_err(|e| {
        unavailable(format!(
            "open_tree(OPEN_TREE_CLONE) of `{}`: {e}",
            src.display()
        ))
    })?;
    crate::sys::idmap_tree(&tree, &userns, read_only).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EINVAL) {
            " (the filesystem cannot be idmapped; chown the workspace to an unprivileged user)"
        } else {
            ""
        };
        unavailable(format!(
            "mount_setattr(MOUNT_ATTR_IDMAP) of `{}`: {e}{hint}",
            src.display()
        ))
    })?;
    let target = open(at)?;
    crate::sys::attach_tree(&tree, &target)
        .map_err(|e| unavailable(format!("move_mount to `{}`: {e}", at.display())))
}

/// Whether the engine answering on `socket` resolves paths in this process's mount namespace
/// (so that the mounts made here are what its binds see). `Err` says why it cannot be told.
pub fn engine_shares_mounts(socket: &Path) -> Result<bool, String> {
    let stream = std::os::unix::net::UnixStream::connect(socket)
        .map_err(|e| format!("connect `{}`: {e}", socket.display()))?;
    let cred = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("the engine's credentials (SO_PEERCRED): {e}"))?;
    let ns = |pid: &str| {
        std::fs::read_link(format!("/proc/{pid}/ns/mnt"))
            .map_err(|e| format!("/proc/{pid}/ns/mnt: {e}"))
    };
    Ok(ns("self")? == ns(&cred.pid().to_string())?)
}

/// Detaches and removes what runners of this host that are gone left under [`IDMAP_DIR`]
/// (killed between a container's creation and its start); returns how many trees. A directory
/// whose name does not say its maker, or whose maker lives, is left alone.
pub fn reap_leftovers() -> usize {
    let Ok(rd) = std::fs::read_dir(IDMAP_DIR) else {
        return 0;
    };
    let mut count = 0;
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let mut parts = name.splitn(3, '.');
        let (Some(pid), Some(ticks)) = (
            parts.next().and_then(|p| p.parse::<u32>().ok()),
            parts.next().and_then(|t| t.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let alive = super::labels::Owner {
            pid,
            start_ticks: ticks,
            boot_id: super::labels::Owner::current().boot_id,
        }
        .is_alive();
        if alive {
            continue;
        }
        let dir = e.path();
        let Ok(trees) = std::fs::read_dir(&dir) else {
            continue;
        };
        for t in trees.flatten() {
            let p = t.path();
            if nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH).is_ok() {
                count += 1;
            }
            let _ = std::fs::remove_dir(&p);
        }
        let _ = std::fs::remove_dir(&dir);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bind_takes_its_source_in_the_innermost_idmapped_tree() {
        let t = IdmappedTrees {
            dir: PathBuf::from("/nonexistent"),
            trees: vec![
                (PathBuf::from("/w"), PathBuf::from("/run/x/0")),
                (PathBuf::from("/w/cache"), PathBuf::from("/run/x/1")),
            ],
            attached: false,
        };
        assert_eq!(t.source_of(Path::new("/w")), Path::new("/run/x/0"));
        assert_eq!(
            t.source_of(Path::new("/w/.git/hooks")),
            Path::new("/run/x/0/.git/hooks")
        );
        assert_eq!(
            t.source_of(Path::new("/w/cache/a")),
            Path::new("/run/x/1/a")
        );
        assert_eq!(t.source_of(Path::new("/wx")), Path::new("/wx"));
        assert_eq!(t.source_of(Path::new("/usr")), Path::new("/usr"));
    }

    #[test]
    fn the_engine_shares_this_process_mount_namespace_when_it_is_this_process() {
        // A listener of this process stands in for the engine.
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("engine.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(engine_shares_mounts(&sock), Ok(true));
        assert!(engine_shares_mounts(&dir.path().join("none")).is_err());
    }
}
