//! Where a directory of a scan is: its path, and the descriptor of its parent while the walk
//! holds one. A directory is statted, opened and listed relative to its parent's descriptor (one
//! component, never following a link) instead of by its absolute path: a toolchain's directories
//! sit ten or more components deep, and the kernel's walk of every component was most of what a
//! scan that lists nothing cost (`perf`: `path_lookupat` under the memo's stats). A tree's root,
//! and a directory deeper than [`HELD_DEPTH`], are reached by path as before.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use super::memo::Listing;
use crate::fsat::{self, Access};

/// How deep below a tree's root the walk keeps directories' descriptors for their children: the
/// descriptors a walk holds at once are those of the directories above the one it is at, so this
/// bounds them (a hostile tree nested thousands deep must not run the runner out of
/// descriptors, which would leave directories unlisted). Deeper directories are reached by path.
pub const HELD_DEPTH: usize = 64;

/// A directory to look at.
pub struct Place {
    /// Its absolute path.
    pub dir: std::path::PathBuf,
    /// Its depth below its tree's root (the root: 0).
    pub depth: usize,
    /// Its parent's descriptor, when the walk holds it.
    pub parent: Option<Arc<OwnedFd>>,
}

impl Place {
    /// A tree's root.
    pub fn root(dir: std::path::PathBuf) -> Place {
        Place {
            dir,
            depth: 0,
            parent: None,
        }
    }

    /// The directory `name` in this one, whose descriptor (`held`, if any) is its parent's.
    pub fn child(&self, name: &OsStr, held: Option<&Arc<OwnedFd>>) -> Place {
        Place {
            dir: self.dir.join(name),
            depth: self.depth + 1,
            parent: held.cloned(),
        }
    }

    /// The same directory, reached by its path: no descriptor held for it (a place kept for
    /// later, among many, must not hold its parent's open).
    pub fn by_path(self) -> Place {
        Place {
            parent: None,
            ..self
        }
    }

    /// Its parent's descriptor and its name in it, when the walk holds the parent.
    fn at(&self) -> Option<(&OwnedFd, &OsStr)> {
        Some((self.parent.as_deref()?, self.dir.file_name()?))
    }

    /// Whether the walk keeps this directory's descriptor for its children.
    fn holds(&self) -> bool {
        self.depth < HELD_DEPTH
    }

    /// Its identity and change time now, and, when `open` and the walk keeps it, an `O_PATH`
    /// descriptor of the very directory statted (for its children). `None`: not a directory
    /// (a link included), gone, or not to be statted.
    pub fn stat(&self, open: bool) -> Option<(Listing, Option<OwnedFd>)> {
        if !(open && self.holds()) {
            let now = match self.at() {
                Some((parent, name)) => Listing::stat_at(parent.as_fd(), name),
                None => Listing::stat(&self.dir),
            };
            return now.map(|l| (l, None));
        }
        let fd = self.open(Access::Path)?;
        Some((Listing::of_fd(fd.as_fd())?, Some(fd)))
    }

    /// The directory opened (never through a link as its last component; relative to its
    /// parent's descriptor when held).
    pub fn open(&self, access: Access) -> Option<OwnedFd> {
        match self.at() {
            Some((parent, name)) => fsat::open_dir(parent.as_fd(), name, access).ok(),
            None => fsat::open_root_nofollow(Path::new(&self.dir), access).ok(),
        }
    }

    /// The descriptor to hand its children: `fd` when the walk keeps this directory's.
    pub fn hold(&self, fd: Option<OwnedFd>) -> Option<Arc<OwnedFd>> {
        fd.filter(|_| self.holds()).map(Arc::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_holds_descriptors_only_above_the_depth_bound_and_reaches_the_rest_by_path() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let top = Place::root(root.clone());
        let (_, fd) = top.stat(true).unwrap();
        let held = top.hold(fd);
        assert!(held.is_some());
        let a = top.child(OsStr::new("a"), held.as_ref());
        // Statted through its parent's descriptor: the same directory as by path.
        let (by_fd, _) = a.stat(false).unwrap();
        assert_eq!(
            by_fd.identity(),
            Listing::stat(&root.join("a")).unwrap().identity()
        );
        // At the bound a directory's descriptor is not kept for its children.
        let edge = Place {
            dir: root.join("a"),
            depth: HELD_DEPTH,
            parent: held.clone(),
        };
        let (_, opened) = edge.stat(true).unwrap();
        assert!(opened.is_none());
        let fd = edge.open(Access::Path);
        assert!(edge.hold(fd).is_none());
        let below = edge.child(OsStr::new("b"), None);
        assert!(below.parent.is_none());
        assert!(below.stat(true).is_some());
    }
}
