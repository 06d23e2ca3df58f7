//! Resolving the host paths a job makes visible to its rounds (`--workspace`, `--read`,
//! `--write`, `--socket`, and `--protect` below the workspace) without letting an earlier round
//! steer them (SPEC §5, "The host boundary").
//!
//! A round may leave a symlink anywhere it can write, and `std::fs::canonicalize` would follow
//! it: a later job's `--read WS/cache` would then grant wherever `WS/cache` points, and
//! `--workspace WS/packages/foo` would make that place the next job's workspace. [`resolve`] walks
//! a path component by component the way `canonicalize` does (`.` dropped, `..` taken against the
//! real path reached so far, symlinks followed up to [`MAX_LINK_HOPS`] times, the result must
//! exist), and judges every symlink it meets by two rules:
//!
//! - **A rule that needs no store** ([`planted_by_whom`]): a link is followed only when no round
//!   could have made it — root owns it, and root owns every directory from `/` down to it, none
//!   of them writable by anyone else unless sticky and none the root of a tree rounds have
//!   written (`/var/run -> /run`, `/lib -> usr/lib`, `/etc/alternatives/*`). A round never
//!   holds host uid 0 in the confined modes, so what it plants belongs to someone else — except
//!   on a root-owned tree of a root runner, whose rounds' files are root's on disk (the idmapped
//!   workspace; docker's uid 0): such a tree carries the runner's mark ([`super::tree_mark`]).
//!   Either way the link is refused wherever it lies and whichever store recorded the job (or
//!   none, `ralph sandbox exec`). A user's own `~/proj -> /data/proj` is refused as well, with the
//!   resolved path to pass instead: ralph cannot tell it from a planted one.
//! - **What the runner remembers** ([`WritableTrees`]): a link whose own location (its parent
//!   directory's real path) lies inside a tree a round could have written is refused even when
//!   root owns it — a round that is uid 0 (docker on a root-owned workspace, `full-access` under a
//!   root runner) makes root-owned links. Which trees count is the caller's to say (see
//!   `docs/sandbox.md`, "Symlinks in the workspace"): the job's own workspace and `--write`
//!   directories, the workspaces and `--write` directories of the jobs in the state store, and
//!   for the service its `workspace_roots`.
//!
//! `--read` gets the same rule as the writable paths, not a looser one: a read grant through a
//! planted link hands the round the user's keys or tokens (`WS/cache -> ~/.ssh`), and the model
//! API is a channel out. Not a stricter one either: a root-owned system link is no more a round's
//! on a read path than on a written one.
//!
//! The walk reads the file system by path; it is a check made when a job is made and again before
//! each of its rounds, not a lock: a link planted between the check and the mount is covered by
//! the mounts themselves (see `docs/sandbox.md`).

use std::collections::HashSet;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::tree_lookup::{TreeLookup, TreeSource};

/// How many symlinks one resolution may follow (Linux's own limit, `MAXSYMLINKS`).
pub const MAX_LINK_HOPS: u32 = 40;

/// Characters of a link's target quoted in a message (the target is agent-controlled text).
const TARGET_QUOTE: usize = 200;

/// Who may own a symlink, and every directory above it, for the link to be followed without any
/// record of which trees rounds wrote: root (a round never holds host uid 0 in the confined
/// modes).
const TRUSTED_OWNER: u32 = 0;

/// The trees a round could have written into (real, symlink-free absolute paths), and who is
/// trusted to own a link outside them ([`TRUSTED_OWNER`]).
///
/// Two kinds: trees held here (the job's own, a service's workspace roots, a batch's jobs), and
/// the state store's, asked for by path only when a walk meets a symlink ([`TreeLookup`]): a
/// store names every workspace it ever ran (100,000 jobs of their own workspaces are 100,000
/// trees), and reading them all for each submission and each round was most of a round's time
/// there. Which tree holds a directory is found from the directory's ancestors (by hash here, by
/// index in the store), never by scanning every tree.
#[derive(Clone, Debug)]
pub struct WritableTrees {
    roots: Vec<PathBuf>,
    seen: HashSet<PathBuf>,
    trusted: Vec<u32>,
    stored: Option<TreeLookup>,
}

impl Default for WritableTrees {
    fn default() -> Self {
        Self {
            roots: Vec::new(),
            seen: HashSet::new(),
            trusted: vec![TRUSTED_OWNER],
            stored: None,
        }
    }
}

impl WritableTrees {
    /// No tree known: only the rule without memory applies (a link is followed where root owns
    /// it and every directory above it).
    pub fn none() -> Self {
        Self::default()
    }

    /// Trusts these owners instead of root alone (tests: links made by the test's own user
    /// stand in for system links).
    #[cfg(test)]
    pub(crate) fn trusting(mut self, owners: &[u32]) -> Self {
        self.trusted = owners.to_vec();
        self
    }

    /// The trees `roots` (real absolute paths; relative ones are ignored, duplicates dropped).
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut t = Self::none();
        t.extend(roots);
        t
    }

    /// The trees a store knows, asked for when a walk meets a symlink ([`TreeLookup`]).
    pub fn stored(source: Arc<dyn TreeSource>) -> Self {
        Self {
            stored: Some(TreeLookup::new(source)),
            ..Self::none()
        }
    }

    /// Adds trees (real absolute paths; relative ones are ignored, duplicates dropped).
    pub fn extend(&mut self, roots: impl IntoIterator<Item = PathBuf>) {
        for r in roots {
            if r.is_absolute() && self.seen.insert(r.clone()) {
                self.roots.push(r);
            }
        }
    }

    /// These trees and `more` (the store's answers so far shared).
    pub fn with(&self, more: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut t = self.clone();
        t.extend(more);
        t
    }

    /// The roots held here, in the order they were added (not the store's).
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The innermost tree that holds the directory `dir` (a real path), if any: the most precise
    /// one to name (a job's workspace rather than the service root it lies under). `Err` when
    /// the store could not say (the reason; also kept, [`WritableTrees::lookup_failure`]).
    pub fn containing(&self, dir: &Path) -> Result<Option<PathBuf>, String> {
        let held = dir.ancestors().find(|a| self.seen.contains(*a));
        let Some(lookup) = &self.stored else {
            return Ok(held.map(Path::to_path_buf));
        };
        let depth = held.map_or(0, |h| h.components().count());
        Ok(lookup
            .innermost(dir, depth)?
            .or_else(|| held.map(Path::to_path_buf)))
    }

    /// Why the store could not say which trees hold a directory, if it once could not: a
    /// refusal then is the store's fault ([`ResolveError::TreesUnknown`]), not the path's.
    pub fn lookup_failure(&self) -> Option<String> {
        self.stored.as_ref().and_then(TreeLookup::failure)
    }
}

/// Why a path cannot be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The walk met a symlink inside a writable tree.
    #[error(
        "`{}` is a symlink (to `{target}`) inside the writable tree `{}` (a round could have planted it); give the real path",
        link.display(),
        tree.display()
    )]
    LinkInWritableTree {
        /// The symlink.
        link: PathBuf,
        /// Where it points, escaped and bounded (it may be agent-controlled text).
        target: String,
        /// The writable tree it lies in.
        tree: PathBuf,
    },
    /// The walk met a symlink that a round could have planted (outside the trees the runner knows
    /// of): not root's, or in a directory someone but root can change.
    #[error(
        "`{}` is a symlink (to `{target}`) that a round could have planted ({}); a path through a symlink is followed only where root owns the link and every directory above it: give the resolved path{}",
        link.display(),
        planted.why,
        planted.resolved.as_deref().map(|r| format!(" `{r}` if that is what you mean")).unwrap_or_else(|| " (it does not resolve)".to_owned())
    )]
    UntrustedLink {
        /// The symlink.
        link: PathBuf,
        /// Where it points, escaped and bounded (it may be agent-controlled text).
        target: String,
        /// Who could have made it, and what to pass instead.
        planted: Box<Planted>,
    },
    /// The walk met a symlink and the state store could not say whether it lies in a tree
    /// rounds have written: refused (fail closed), the store's fault.
    #[error(
        "`{}` is a symlink, and the state store could not say whether it lies in a tree rounds have written: {reason}",
        link.display()
    )]
    TreesUnknown {
        /// The symlink.
        link: PathBuf,
        /// The store's error.
        reason: String,
    },
    /// A component does not exist.
    #[error("`{}` does not exist", at.display())]
    Missing {
        /// The first missing component (real path of its parent, plus its name).
        at: PathBuf,
    },
    /// A component that the path goes on below is not a directory.
    #[error("`{}` is not a directory", at.display())]
    NotDirectory {
        /// The component.
        at: PathBuf,
    },
    /// More than [`MAX_LINK_HOPS`] symlinks (a loop, most likely).
    #[error("failed to resolve `{}`: more than {MAX_LINK_HOPS} symlinks on the way (a loop?)", at.display())]
    TooManyLinks {
        /// The symlink that would have been one too many.
        at: PathBuf,
    },
    /// A relative path and no absolute base to take it against.
    #[error("failed to resolve `{}`: it is relative and the base `{}` is not absolute", given.display(), base.display())]
    RelativeBase {
        /// The path.
        given: PathBuf,
        /// The base.
        base: PathBuf,
    },
    /// A file system call failed.
    #[error("failed to {action} `{}`: {source}", at.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        at: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// Why a symlink could have been planted, and the path to pass instead.
#[derive(Debug)]
pub struct Planted {
    /// Who could have made it: its owner, a marked tree it lies in, or a directory above it that
    /// someone else can change.
    pub why: String,
    /// The whole path resolved the way `canonicalize` would (following every link), escaped and
    /// bounded: the suggestion, if it resolves.
    pub resolved: Option<String>,
}

/// One step of the walk still to take.
enum Step {
    /// `..`
    Up,
    /// A name in the directory reached so far.
    Name(OsString),
}

/// Puts the steps of `path` in front of `todo` (`.` and the root dropped: the caller resets the
/// walk to `/` for an absolute path).
fn push_front(todo: &mut VecDeque<Step>, path: &Path) {
    let steps: Vec<Step> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(Step::Name(n.to_owned())),
            Component::ParentDir => Some(Step::Up),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => None,
        })
        .collect();
    for s in steps.into_iter().rev() {
        todo.push_front(s);
    }
}

/// A link target for a message: control characters escaped, bounded.
fn shown(target: &Path) -> String {
    let text = target.to_string_lossy();
    let escaped: String = text.chars().flat_map(char::escape_default).collect();
    if escaped.chars().count() > TARGET_QUOTE {
        let cut: String = escaped.chars().take(TARGET_QUOTE).collect();
        format!("{cut}…")
    } else {
        escaped
    }
}

/// Who could have planted the symlink described by `link` in the real directory `dir`, if anyone
/// but `trusted` could: the link's owner when it is not trusted, or the first directory from
/// `dir` up to `/` that is the root of a tree rounds have written (its mark,
/// [`super::tree_mark`]: what a root runner's round leaves there is root's too), that an
/// untrusted user owns, or that one can write (group or other write without the sticky bit: in a
/// sticky directory only an entry's owner, the directory's owner and root can replace an entry).
/// `None`: only a trusted owner could have made the link where it is.
pub fn planted_by_whom(link: &std::fs::Metadata, dir: &Path, trusted: &[u32]) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    if !trusted.contains(&link.uid()) {
        return Some(format!("it belongs to uid {}", link.uid()));
    }
    for d in dir.ancestors() {
        if super::tree_mark::is_marked(d) {
            return Some(format!(
                "it lies in `{}`, a tree rounds have written (marked `{}`)",
                d.display(),
                super::tree_mark::MARK
            ));
        }
        let m = match std::fs::symlink_metadata(d) {
            Ok(m) => m,
            Err(e) => return Some(format!("`{}` cannot be inspected: {e}", d.display())),
        };
        if !trusted.contains(&m.uid()) {
            return Some(format!("`{}` belongs to uid {}", d.display(), m.uid()));
        }
        let mode = m.mode();
        if mode & 0o022 != 0 && mode & libc::S_ISVTX == 0 {
            return Some(format!(
                "`{}` can be changed by other users (mode {:o})",
                d.display(),
                mode & 0o7777
            ));
        }
    }
    None
}

/// Resolves `given` (absolute, or relative to the absolute `base`) to the real path it names,
/// which must exist; a symlink on the way is refused, never followed, when its parent directory
/// lies inside one of `trees` or when a round could have planted it ([`planted_by_whom`]).
pub fn resolve(given: &Path, base: &Path, trees: &WritableTrees) -> Result<PathBuf, ResolveError> {
    let abs = if given.is_absolute() {
        given.to_owned()
    } else if base.is_absolute() {
        base.join(given)
    } else {
        return Err(ResolveError::RelativeBase {
            given: given.to_owned(),
            base: base.to_owned(),
        });
    };
    let mut todo = VecDeque::new();
    push_front(&mut todo, &abs);
    let mut real = PathBuf::from("/");
    let mut hops = 0;
    while let Some(step) = todo.pop_front() {
        let name = match step {
            Step::Up => {
                // `/..` is `/`, as for the kernel.
                real.pop();
                continue;
            }
            Step::Name(name) => name,
        };
        let here = real.join(&name);
        let meta = std::fs::symlink_metadata(&here).map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => ResolveError::Missing { at: here.clone() },
            _ => ResolveError::Io {
                action: "inspect",
                at: here.clone(),
                source,
            },
        })?;
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&here).map_err(|source| ResolveError::Io {
                action: "read the symlink",
                at: here.clone(),
                source,
            })?;
            match trees.containing(&real) {
                Ok(Some(tree)) => {
                    return Err(ResolveError::LinkInWritableTree {
                        link: here,
                        target: shown(&target),
                        tree,
                    });
                }
                Ok(None) => {}
                Err(reason) => return Err(ResolveError::TreesUnknown { link: here, reason }),
            }
            if let Some(why) = planted_by_whom(&meta, &real, &trees.trusted) {
                return Err(ResolveError::UntrustedLink {
                    link: here,
                    target: shown(&target),
                    planted: Box::new(Planted {
                        why,
                        resolved: std::fs::canonicalize(&abs).ok().map(|r| shown(&r)),
                    }),
                });
            }
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(ResolveError::TooManyLinks { at: here });
            }
            if target.is_absolute() {
                real = PathBuf::from("/");
            }
            push_front(&mut todo, &target);
            continue;
        }
        if !meta.is_dir() && !todo.is_empty() {
            return Err(ResolveError::NotDirectory { at: here });
        }
        real = here;
    }
    Ok(real)
}

#[cfg(test)]
mod tests;
