//! A walk of an overlay's merged tree that knows its layers ([`super::walk_layered`]): the
//! listings of its lower layer (a tree the runner made and never writes again, walked as it was
//! put in place) and the path of its upper layer (every write through the overlay lands there).
//!
//! Why a directory the upper layer does not hold needs no look: an overlay shows a directory
//! only its lower layer has with the lower directory's entries, inode and change time, and any
//! change below a directory (an entry made, removed, renamed; its own mode, owner or times)
//! first copies that directory and every one above it up into the upper layer. So a directory
//! absent from the upper layer is its lower layer's, unchanged, and so is every directory below
//! it: its subtree is taken whole from the lower layer's listings (their subdirectories' inode
//! numbers lead from one to the next), with no system call. The walk checks the boundary: a
//! directory whose parent the upper layer holds is reached by one `fstatat` and trusted only
//! with the listing's device, inode and change time.
//!
//! What it costs: one walk of the upper layer per walk (it holds only what the job changed; a
//! walk of it past the bounds, or one that fails, leaves the tree to the plain walk), and the
//! lower listings in memory. A subdirectory without a lower listing (the lower walk did not
//! keep it: not plain, or not quiet) is reached again from the tree's root and walked as ever.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::hash::BuildHasher;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::{Kept, Limits, Listings, Walker};
use crate::fsat::{self, Access, Kind};

/// What a walk of an overlay's merged tree knows of its layers.
#[derive(Clone, Copy, Debug)]
pub struct Layers<'a> {
    /// The lower layer's listings as the overlay shows them (its device:
    /// [`Listings::moved`]).
    pub lower: &'a Listings,
    /// The upper layer (a runner-owned path).
    pub upper: &'a Path,
}

/// The layers as one walk uses them.
pub(super) struct Lower<'a> {
    listings: &'a Listings,
    /// The directories the upper layer holds (relative; the root among them).
    changed: HashSet<PathBuf>,
    /// The merged tree's root, to reach a directory below a lower subtree again.
    root: OwnedFd,
}

impl<'a> Lower<'a> {
    /// `None`: the upper layer could not be walked whole within `limits` (then the tree gets
    /// the plain walk).
    pub(super) fn new(layers: &Layers<'a>, root: BorrowedFd<'_>, limits: Limits) -> Option<Self> {
        let changed = upper_dirs(layers.upper, limits)?;
        Some(Self {
            listings: layers.lower,
            changed,
            root: root.try_clone_to_owned().ok()?,
        })
    }
}

/// Every directory below `upper` (relative), the root included; `None` past `limits` or on
/// any error.
fn upper_dirs(upper: &Path, limits: Limits) -> Option<HashSet<PathBuf>> {
    let root = fsat::open_root(upper, Access::Read).ok()?;
    let mut found = HashSet::from([PathBuf::new()]);
    let mut entries = 0;
    collect(
        root.as_fd(),
        Path::new(""),
        0,
        limits,
        &mut entries,
        &mut found,
    )
    .then_some(found)
}

fn collect(
    dir: BorrowedFd<'_>,
    rel: &Path,
    depth: usize,
    limits: Limits,
    entries: &mut u64,
    found: &mut HashSet<PathBuf>,
) -> bool {
    let Ok(list) = fsat::entries(dir) else {
        return false;
    };
    *entries += list.len() as u64;
    if *entries > limits.entries {
        return false;
    }
    for e in list.into_iter().filter(|e| e.kind == Kind::Dir) {
        if depth + 1 > limits.depth {
            return false;
        }
        let Ok(sub) = fsat::open_dir(dir, &e.name, Access::Read) else {
            return false;
        };
        let child = rel.join(&e.name);
        found.insert(child.clone());
        if !collect(sub.as_fd(), &child, depth + 1, limits, entries, found) {
            return false;
        }
    }
    true
}

impl<'a, K: BuildHasher> Walker<'a, K> {
    /// The subdirectory `name` of `parent` (`rel`), when the upper layer does not hold it and
    /// the lower listing of what stands there (device, inode, change time) is still its own.
    pub(super) fn lower_dir(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        rel: &Path,
    ) -> Option<((u64, u64), &'a Kept)> {
        let lower = self.lower.as_ref()?;
        if lower.changed.contains(rel) {
            return None;
        }
        let listings: &'a Listings = lower.listings;
        let st = fsat::lstat(parent, name).ok()??;
        let key = (st.dev, st.ino);
        let kept = listings.0.get(&key)?;
        (st.kind == Kind::Dir && kept.ctime == st.ctime).then_some((key, kept))
    }

    /// The lower directory `rel` (at `depth`) and its subtree, from the lower listings alone.
    /// Returns false once the walk must stop.
    pub(super) fn lower_tree(
        &mut self,
        (key, kept): ((u64, u64), &'a Kept),
        rel: PathBuf,
        depth: usize,
    ) -> bool {
        self.inv.reused += 1;
        if !self.count(kept.entries, &rel) {
            return false;
        }
        self.inv.listings.0.insert(key, kept.clone());
        let Some(listings) = self.lower.as_ref().map(|l| l.listings) else {
            return true;
        };
        for (name, ino) in &kept.subdirs {
            let child = rel.join(name);
            if self.protected(&child) || self.beyond_depth(&child, depth) {
                continue;
            }
            let sub = (key.0, *ino);
            let changed = self
                .lower
                .as_ref()
                .is_some_and(|l| l.changed.contains(&child));
            let below = if changed { None } else { listings.0.get(&sub) };
            let more = match below {
                Some(k) => self.lower_tree((sub, k), child, depth + 1),
                None => self.reenter(&rel, name, child, depth),
            };
            if !more {
                return false;
            }
        }
        true
    }

    /// The subdirectory `name` (`child`) of the lower directory `parent` (at `depth`) without a
    /// lower listing: reached from the root and walked as ever.
    fn reenter(&mut self, parent: &Path, name: &OsStr, child: PathBuf, depth: usize) -> bool {
        let dirs: Vec<OsString> = parent.iter().map(OsStr::to_owned).collect();
        let Some(l) = &self.lower else {
            // Not reached: a lower subtree is only ever walked with its layers.
            self.inv
                .unchecked
                .insert(child, "could not be reached again".into());
            return true;
        };
        let opened = fsat::walk(l.root.as_fd(), &dirs, fsat::Create::No);
        match opened {
            Ok(fd) => self.enter(fd.as_fd(), name, child, depth + 1),
            Err(e) => {
                self.inv
                    .unchecked
                    .insert(child, format!("could not be opened: {}", e.cause()));
                true
            }
        }
    }
}
