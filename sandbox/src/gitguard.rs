//! Git repositories in the writable trees of a run (the workspace, each `--write` root): none may
//! be left with a file through which the host's `git` would run a command or read configuration
//! that the run wrote (SPEC §5, "Git:"). A round can `git init` anywhere it may write and set
//! `core.fsmonitor`, `core.hooksPath`, a filter, an alias, an include, `core.sshCommand` or a
//! hook; the user's next plain `git status` would run it. The workspace's own `.git/config` and
//! `.git/hooks` are read-only mounts during a run ([`crate::protect`]); this module covers the
//! rest.
//!
//! - Before the run, [`inventory`] walks each tree ([`walk`]: never following a symlink, `d_type`
//!   instead of a stat per file, bounded) and records every git directory (any directory git
//!   would take for one: `HEAD` plus `objects/` and `refs/` or a `commondir` — a `.git`
//!   directory, a bare repository, `.git/modules/*`, `.git/worktrees/*`), every `.git` file and
//!   every `.git` symlink, with an identity: device and inode, and a keyed digest of each surface
//!   (`config`, `config.worktree`, `hooks/`, `commondir`, `gitdir`) ([`digest`]).
//! - After the run, once its processes are gone, [`check_after_run`] walks again and compares
//!   ([`diff`]): whatever is new, replaced (another inode or kind) or has changed surfaces is
//!   made safe ([`sanitize`]): `config` replaced by a minimal safe one ([`config`]),
//!   `config.worktree` removed, `hooks/` emptied, a `commondir` or `.git` file that points
//!   anywhere but a git directory of the same tree removed ([`pointer`]), a `.git` symlink
//!   removed. Objects, refs, the index, `HEAD` and logs are never touched, so a round that starts
//!   a repository keeps its history. The originals go to `<control_dir>/sanitized/<n>/`
//!   ([`originals`]). Paths that are read-only mounts during the run (the protected paths) are
//!   neither looked at nor touched.
//!
//! Sanitizing is not a violation (a legitimate `git init` leads to it); what could not be
//! sanitized, and a part of a tree that the run made uncheckable (a directory it cannot be
//! looked into, a walk bound it pushed the tree past), are.
//!
//! # Test strategy
//!
//! The config reader is tested on hostile input and against `git config --list`
//! (`gitguard/config_tests.rs`); inventory, comparison and sanitizing on real directories with
//! hostile content, symlinks included (`gitguard/tests.rs`). `tests/it/git_boundary.rs` runs
//! hostile rounds on both backends and then the host's own git.

mod config;
mod diff;
mod digest;
mod originals;
mod pointer;
mod quote;
mod sanitize;
mod walk;

use std::collections::hash_map::RandomState;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use quote::escape;
pub use walk::{Limits, QUIET};

use crate::outcome::git::GitCheck;
use crate::outcome::{Violation, ViolationKind};

/// What the git check of a run covers (part of a plan: pure data).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitGuard {
    /// The writable trees (the workspace, then each `--write` root), none inside another.
    pub trees: Vec<PathBuf>,
    /// Host paths that are read-only mounts during the run (the workspace's `.git/config` and
    /// `.git/hooks`, each `--protect`): nothing at or below them is looked at or touched.
    pub protected: Vec<PathBuf>,
}

impl GitGuard {
    /// The check of a run that may write `workspace` and `write` (canonical paths), with
    /// `protected` read-only mounts. A tree inside another is walked as part of it.
    pub fn new(workspace: &Path, write: &[PathBuf], protected: Vec<PathBuf>) -> Self {
        let mut trees: Vec<PathBuf> = Vec::new();
        for t in std::iter::once(workspace).chain(write.iter().map(PathBuf::as_path)) {
            if trees.iter().any(|k| t.starts_with(k)) {
                continue;
            }
            trees.retain(|k| !k.starts_with(t));
            trees.push(t.to_owned());
        }
        Self { trees, protected }
    }

    /// The protected paths below `root`, relative to it.
    fn protected_in(&self, root: &Path) -> Vec<PathBuf> {
        self.protected
            .iter()
            .filter_map(|p| p.strip_prefix(root).ok())
            .filter(|r| !r.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect()
    }
}

/// What the walks before a run found (kept in the process that runs the check after it).
#[derive(Debug)]
pub struct Inventory {
    keys: RandomState,
    limits: Limits,
    trees: Vec<walk::TreeInventory>,
    /// Where the walk after the run keeps its listings for the next run.
    kept: Option<PathBuf>,
    /// The workspace's layers, when it is an overlay whose lower listings could be read.
    layers: Option<Layered>,
}

/// A writable tree that is an overlay ([`crate::spec::WorkspaceLayers`]), its lower layer's
/// listings loaded as the overlay shows them.
#[derive(Debug)]
struct Layered {
    merged: PathBuf,
    upper: PathBuf,
    lower: walk::Listings,
}

impl Layered {
    /// `None` when the workspace is not seen as an overlay of that tree (the mount point on the
    /// lower layer's own device) or the listings cannot be read.
    fn load(layers: &crate::spec::WorkspaceLayers) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let shown = std::fs::metadata(&layers.merged).ok()?.dev();
        if shown == layers.lower_dev {
            return None;
        }
        let lower = walk::Listings::load(&layers.lower_listings)?.moved(layers.lower_dev, shown);
        Some(Self {
            merged: layers.merged.clone(),
            upper: layers.upper.clone(),
            lower,
        })
    }
}

impl Inventory {
    /// One walk of `root` (after `earlier`'s listings, if any), through its layers when it is
    /// the layered workspace.
    fn walk(
        &self,
        guard: &GitGuard,
        root: &Path,
        earlier: Option<&walk::Listings>,
    ) -> walk::TreeInventory {
        let protected = guard.protected_in(root);
        match (&self.layers, earlier) {
            (Some(l), _) if l.merged == root => {
                let layers = walk::Layers {
                    lower: &l.lower,
                    upper: &l.upper,
                };
                walk::walk_layered(root, &protected, &self.keys, self.limits, earlier, &layers)
            }
            (_, Some(e)) => walk::walk_again(root, &protected, &self.keys, self.limits, e),
            (_, None) => walk::walk(root, &protected, &self.keys, self.limits),
        }
    }
}

impl Inventory {
    /// Directories the walks did not list again, their kept listing still theirs.
    pub fn reused(&self) -> u64 {
        self.trees.iter().map(|t| t.reused).sum()
    }

    /// The unix sockets the walks found (absolute paths, sorted), and the trees they did not
    /// walk whole (a bound, a directory they could not look into): there, not every socket is
    /// known.
    pub fn sockets(&self) -> crate::sockets::Found {
        let mut found = crate::sockets::Found::default();
        for t in &self.trees {
            found
                .sockets
                .extend(t.sockets.iter().map(|rel| t.root.join(rel)));
            if t.stopped.is_some() || !t.unchecked.is_empty() {
                found.incomplete.push(t.root.clone());
            }
        }
        found.sockets.sort();
        found.sockets.dedup();
        found
    }
}

/// Walks every tree of `guard` before a run.
pub fn inventory(guard: &GitGuard) -> Inventory {
    inventory_with(guard, Limits::DEFAULT, None, None)
}

/// [`inventory`], listing again only the directories that changed since the listings kept in
/// `kept` (a runner-owned file, written by [`check_after_run`] of an earlier run of the same
/// job; missing or unreadable: everything is listed). What it finds is what [`inventory`]
/// would.
pub fn inventory_kept(
    guard: &GitGuard,
    kept: Option<&Path>,
    layers: Option<&crate::spec::WorkspaceLayers>,
) -> Inventory {
    inventory_with(guard, Limits::DEFAULT, kept, layers)
}

/// [`inventory_kept`] with other bounds (tests).
pub fn inventory_with(
    guard: &GitGuard,
    limits: Limits,
    kept: Option<&Path>,
    layers: Option<&crate::spec::WorkspaceLayers>,
) -> Inventory {
    let earlier = kept.and_then(walk::Listings::load);
    let mut inventory = Inventory {
        keys: RandomState::new(),
        limits,
        trees: Vec::new(),
        kept: kept.map(Path::to_path_buf),
        layers: layers.and_then(Layered::load),
    };
    inventory.trees = guard
        .trees
        .iter()
        .map(|t| inventory.walk(guard, t, earlier.as_ref()))
        .collect();
    inventory
}

/// Walks `root`, a tree the runner made whole and never writes again (a base tree, once it is
/// in place), and writes the listing of every plain directory to `to`, however recently the
/// directory changed: the walks of an overlay on it through its layers
/// ([`crate::spec::WorkspaceLayers`]) trust a directory the upper layer does not hold because
/// the tree never changes, not because of its change time, so they need not wait for it to be
/// quiet. How many directories were kept.
pub fn keep_lower_listings(root: &Path, to: &Path) -> std::io::Result<usize> {
    let walked = walk::walk_finished(root, &RandomState::new(), Limits::DEFAULT);
    walked.listings.save(to)?;
    Ok(walked.listings.len())
}

/// Walks `root` (a tree the runner made and only reads, such as a base tree) and writes the
/// listings the walk kept to `to`, for the walks of a tree that shows it
/// ([`listings_seen_through`]). How many directories were kept.
pub fn keep_listings(root: &Path, to: &Path) -> std::io::Result<usize> {
    let walked = walk::walk(root, &[], &RandomState::new(), Limits::DEFAULT);
    walked.listings.save(to)?;
    Ok(walked.listings.len())
}

/// Whether `path` is a file of listings in this release's format (its first bytes only: a
/// file an older release wrote is not read, and may be made again).
pub fn listings_current(path: &Path) -> bool {
    walk::Listings::current(path)
}

/// Writes to `to` the listings of `from` ([`keep_listings`]) of the directories on device
/// `lower`, as an overlay of device `overlay` whose lower layer they are shows them (module
/// `walk`: [`walk::Listings::moved`]). A walk of the overlay trusts one only for a directory
/// with that device, inode and change time: one only the lower layer has. How many were
/// written; `None`: `from` is missing or not a file of listings.
pub fn listings_seen_through(
    from: &Path,
    lower: u64,
    overlay: u64,
    to: &Path,
) -> Option<std::io::Result<usize>> {
    let seen = walk::Listings::load(from)?.moved(lower, overlay);
    Some(seen.save(to).map(|()| seen.len()))
}

/// Unchecked directories named in the report, at most.
const UNCHECKED_NAMED: usize = 4;

/// After a run, once none of its processes is left: walks every tree again, makes safe whatever
/// git repository the run created, replaced or changed (originals under `control_dir`), and
/// says what it did. The violations are what could not be made safe or checked.
pub fn check_after_run(
    guard: &GitGuard,
    before: &Inventory,
    control_dir: &Path,
) -> (GitCheck, Vec<Violation>) {
    let mut check = GitCheck::default();
    let mut violations = Vec::new();
    let mut originals = originals::Originals::new(control_dir);
    let mut unchecked = Vec::new();
    let empty = walk::TreeInventory::default();
    let mut kept = walk::Listings::default();
    for (i, root) in guard.trees.iter().enumerate() {
        let was = before.trees.get(i).unwrap_or(&empty);
        // Only the directories the run changed are listed again (walk.rs).
        let now = before.walk(guard, root, Some(&was.listings));
        kept.extend(&now.listings);
        // What the run made impossible to look into is its doing: the round fails.
        let known = was.unchecked_paths();
        for (rel, why) in &now.unchecked {
            let path = sanitize::display(root, rel);
            if !known.contains(rel.as_path()) {
                violations.push(Violation {
                    kind: ViolationKind::Uncheckable,
                    path: PathBuf::from(&path),
                    detail: format!(
                        "{why}: the git repositories in it could not be checked after the run"
                    ),
                    undone: false,
                });
            }
            unchecked.push(format!("`{path}` ({why})"));
        }
        if let Some(why) = &now.stopped {
            if was.stopped.is_none() {
                violations.push(Violation {
                    kind: ViolationKind::Uncheckable,
                    path: root.clone(),
                    detail: format!(
                        "{why}: the run grew the tree past what the git check walks, so the rest could not be checked"
                    ),
                    undone: false,
                });
            }
            unchecked.push(format!("`{}`: {why}", root.display()));
        }
        let mut ctx = sanitize::Ctx {
            root,
            after: &now,
            originals: &mut originals,
        };
        for action in diff::compare(was, &now) {
            match sanitize::apply(&mut ctx, &action) {
                Ok(Some(s)) => {
                    check.counts.add(s.change);
                    if check.sanitized.len() < GitCheck::MAX_ITEMS {
                        check.sanitized.push(s);
                    }
                }
                Ok(None) => {}
                Err(v) => violations.push(v),
            }
        }
    }
    if !unchecked.is_empty() {
        let more = unchecked.len().saturating_sub(UNCHECKED_NAMED);
        let mut text = format!(
            "not checked for git repositories: {}",
            unchecked
                .iter()
                .take(UNCHECKED_NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        );
        if more > 0 {
            text.push_str(&format!("; and {more} more"));
        }
        check.unchecked = Some(text);
    }
    // For the next run's walk before it: making things safe above touched only git
    // directories and the directories holding a `.git`, whose listings are never kept. A
    // listing that cannot be written only costs the next walk time.
    if let Some(path) = &before.kept {
        let _ = kept.save(path);
    }
    (check, violations)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod overlay_tests;
