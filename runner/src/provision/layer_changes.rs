//! Where a layered workspace can differ from its base tree, read from its layers rather than by
//! looking at every file: the result's staging ([`super::stage`]) then looks only there.
//!
//! Every change a round makes through the overlay lands in the job's upper layer ([`super::
//! layered`]): a written, made, chmod-ed or renamed file is a copy there, a removed one a
//! whiteout, a directory emptied and made again an opaque directory. So a path the upper layer
//! does not hold, under a directory that is the base tree's (a directory of the upper layer that
//! the base tree and the workspace both have as a directory), is the base tree's file, unchanged.
//! The roots returned are:
//!
//! - every entry of the upper layer that is not such a directory (a file, link, whiteout or
//!   special file, or a directory the base tree does not have as one: taken whole);
//! - every name the base tree has in such a directory that the workspace no longer shows (a
//!   removal, under an opaque directory too: the overlay's markers are not read, the workspace's
//!   listing is compared with the base tree's);
//! - a directory holding a `.git` of its own (a nested repository to git) taken whole, in place
//!   of anything below it, so that git judges it as a whole as it does when it looks everywhere.
//!
//! Roots too many to name ([`MAX_ROOTS`], [`MAX_BYTES`]) or a walk too big ([`MAX_DIRS`]), or any
//! error reading the layers, give `None`: look everywhere. A root taken too wide only costs
//! time; none is ever left out. The walk never follows a link (descriptor-relative, `O_NOFOLLOW`,
//! [`ralph_sandbox::fsat`]): the upper layer is the round's writing. The workspace's own top
//! `.git` is left out: git never reads a work tree's `.git` as files of it.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use ralph_sandbox::fsat::list::entries;
use ralph_sandbox::fsat::open::{Access, open_dir, open_root};
use ralph_sandbox::fsat::stat::{Kind, lstat};

use super::layered;

/// The most roots named: past it, git looks everywhere (a pathspec each, on git's command line).
pub const MAX_ROOTS: usize = 512;

/// The most bytes of roots named (git's command line).
pub const MAX_BYTES: usize = 64 << 10;

/// The most directories of the upper layer walked.
pub const MAX_DIRS: usize = 4096;

/// The paths of layered `workspace` (relative, sorted, none inside another) outside of which it
/// is its base tree; `None`: not a layered workspace, or look everywhere (module doc). Called
/// when no round runs in it.
pub fn roots(workspace: &Path) -> Option<Vec<Vec<u8>>> {
    if !layered::is_layered(workspace) {
        return None;
    }
    let lower = layered::lower_of(workspace).ok()?;
    let upper = layered::layer_dir(workspace).join("upper");
    let mut walk = Walk::default();
    walk.dir(
        Vec::new(),
        open_root(&upper, Access::Read).ok()?,
        open_root(&lower, Access::Read).ok()?,
        open_root(workspace, Access::Read).ok()?,
    )?;
    let mut roots = walk.roots;
    roots.sort();
    roots.dedup();
    let bytes: usize = roots.iter().map(|r| r.len() + 1).sum();
    (roots.len() <= MAX_ROOTS && bytes <= MAX_BYTES).then_some(roots)
}

#[derive(Default)]
struct Walk {
    roots: Vec<Vec<u8>>,
    dirs: usize,
}

impl Walk {
    /// Visits the directory `rel`, open in the upper layer, the base tree and the workspace.
    fn dir(&mut self, rel: Vec<u8>, upper: OwnedFd, lower: OwnedFd, merged: OwnedFd) -> Option<()> {
        self.dirs += 1;
        if self.dirs > MAX_DIRS || self.roots.len() > MAX_ROOTS {
            return None;
        }
        let shown = entries(merged.as_fd()).ok()?;
        if !rel.is_empty() && shown.iter().any(|e| e.name == ".git") {
            // A nested repository (or what may be one): git judges it whole.
            self.roots.push(rel);
            return Some(());
        }
        let join = |name: &OsStr| {
            let mut p = rel.clone();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(name.as_bytes());
            p
        };
        // Removals: the base tree's names the workspace no longer shows.
        let shown: std::collections::HashSet<OsString> =
            shown.into_iter().map(|e| e.name).collect();
        for e in entries(lower.as_fd()).ok()? {
            let own_git = rel.is_empty() && e.name == ".git";
            if !own_git && !shown.contains(&e.name) {
                self.roots.push(join(&e.name));
            }
        }
        for e in entries(upper.as_fd()).ok()? {
            if rel.is_empty() && e.name == ".git" {
                continue;
            }
            let both_dirs = e.kind == Kind::Dir
                && matches!(lstat(lower.as_fd(), &e.name), Ok(Some(st)) if st.kind == Kind::Dir)
                && matches!(lstat(merged.as_fd(), &e.name), Ok(Some(st)) if st.kind == Kind::Dir);
            if !both_dirs {
                self.roots.push(join(&e.name));
                continue;
            }
            self.dir(
                join(&e.name),
                open_dir(upper.as_fd(), &e.name, Access::Read).ok()?,
                open_dir(lower.as_fd(), &e.name, Access::Read).ok()?,
                open_dir(merged.as_fd(), &e.name, Access::Read).ok()?,
            )?;
        }
        Some(())
    }
}

#[cfg(test)]
#[path = "layer_changes_tests.rs"]
mod tests;
