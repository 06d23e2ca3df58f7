//! Protected paths of a writable workspace (`.git/hooks`, `.git/config`, `.ralph/`, each
//! `--protect`): resolved on the host before a run without following any symlink (a symlink
//! where a protected path or one of its parents should be is refused, never mounted, never
//! written through), and checked after the run, when the tree is gone, the same way (a symlink
//! the run planted there, or a path it must leave absent, is removed and reported as a
//! [`Violation`]). Shared by both backends: the native helper and the docker plan mount what
//! [`resolve`] returns, and both call [`check_after_run`].

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::beneath::{self, BeneathError, Found, TreePath};
use crate::error::SandboxError;
use crate::outcome::{Violation, ViolationKind};
use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// An empty directory created where a protected path does not exist yet, so the command cannot
/// create it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// Where (its parent is a real directory).
    pub at: TreePath,
    /// Removed after the run (explicit `--protect`); the policy's own defaults (such as
    /// `.ralph/`) stay, empty, so they are not recreated every round.
    pub remove_after: bool,
}

/// The protected paths of a workspace-write run, resolved on the host.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ProtectedSet {
    /// Real directories between the workspace and a protected path, each bound onto itself so it
    /// cannot be renamed away (sorted, parents first).
    pub anchors: Vec<TreePath>,
    /// Paths bound read-only: the policy's and the request's protected paths, and any path that
    /// must stay absent but already exists (kept read-only so it cannot be pointed elsewhere).
    pub protected: Vec<TreePath>,
    /// Paths that must stay absent (removed after the run if the command creates them).
    pub absent: Vec<TreePath>,
    /// Missing protected paths to create as empty read-only placeholders.
    pub placeholders: Vec<Placeholder>,
    /// Every protected and absent path, checked after the run: no symlink may stand where it or
    /// one of its parents should be.
    pub watch: Vec<TreePath>,
}

fn refuse(rel: &Path, explicit: bool, why: String) -> SandboxError {
    let (field, whose) = if explicit {
        ("protect", "the protected path")
    } else {
        ("workspace", "the policy's protected path")
    };
    SandboxError::invalid(field, format!("{whose} `{}`: {why}", rel.display()))
}

fn io_error(e: BeneathError) -> SandboxError {
    SandboxError::invalid("workspace", format!("cannot inspect the workspace: {e}"))
}

/// Resolves the protected paths of `policy` and `req` (policy defaults first), without
/// following symlinks. Pure on the host: it creates nothing. Every `--write` directory is a
/// writable tree like the workspace: its git metadata (the policy's `.git/…` paths and the
/// paths that must stay absent) is protected the same way.
pub fn resolve(policy: &Policy, req: &SandboxRequest) -> Result<ProtectedSet, SandboxError> {
    let mut set = ProtectedSet::default();
    let defaults = policy.protect.paths.iter().map(|p| (p.as_path(), false));
    let explicit = req.protect.iter().map(|p| (p.as_path(), true));
    resolve_tree(&mut set, &req.workspace, defaults.chain(explicit), policy)?;
    for root in &req.write {
        let git = policy
            .protect
            .paths
            .iter()
            .filter(|p| p.starts_with(".git"))
            .map(|p| (p.as_path(), false));
        resolve_tree(&mut set, root, git, policy)?;
    }
    set.anchors.sort();
    set.anchors.dedup();
    crate::snapshot::refuse_hard_links(&set.protected)?;
    Ok(set)
}

/// The protected paths `paths` (relative, `explicit` when the job asked for them) and the
/// policy's absent paths of the writable tree `root`.
fn resolve_tree<'a>(
    set: &mut ProtectedSet,
    root: &Path,
    paths: impl Iterator<Item = (&'a Path, bool)>,
    policy: &Policy,
) -> Result<(), SandboxError> {
    for (rel, explicit) in paths {
        let path = TreePath::new(root, rel).map_err(|e| {
            SandboxError::invalid(if explicit { "protect" } else { "policy" }, e.to_string())
        })?;
        set.watch.push(path.clone());
        let bound = match beneath::inspect(&path).map_err(io_error)? {
            Found::Exists(_) => path,
            Found::Symlink { at } => return Err(symlink_refusal(rel, explicit, &at)),
            Found::NotDirectory { at } if explicit => {
                return Err(refuse(
                    rel,
                    explicit,
                    format!("`{}` is not a directory", at.full().display()),
                ));
            }
            // A policy default below a file (e.g. `.git` is a `gitdir:` file): nothing to bind.
            Found::NotDirectory { .. } => continue,
            Found::Missing { at } if at == path || explicit => {
                set.placeholders.push(Placeholder {
                    at: at.clone(),
                    remove_after: explicit,
                });
                at
            }
            // A policy default whose parent is missing: protecting `.git/hooks` must not stop
            // `git init`. The path is watched all the same.
            Found::Missing { .. } => continue,
        };
        let mut parent = bound.parent();
        while let Some(p) = parent {
            if !set.anchors.contains(&p) {
                set.anchors.push(p.clone());
            }
            parent = p.parent();
        }
        set.protected.push(bound);
    }
    for rel in &policy.protect.absent {
        let path =
            TreePath::new(root, rel).map_err(|e| SandboxError::invalid("policy", e.to_string()))?;
        set.watch.push(path.clone());
        match beneath::inspect(&path).map_err(io_error)? {
            Found::Exists(_) => set.protected.push(path),
            Found::Symlink { at } => return Err(symlink_refusal(rel, false, &at)),
            Found::Missing { .. } | Found::NotDirectory { .. } => set.absent.push(path),
        }
    }
    Ok(())
}

fn symlink_refusal(rel: &Path, explicit: bool, at: &TreePath) -> SandboxError {
    let target = beneath::Dir::parent_of(at)
        .ok()
        .map(|d| d.link_target(at.rel.file_name().unwrap_or_default()))
        .unwrap_or_else(|| "?".into());
    refuse(
        rel,
        explicit,
        format!(
            "`{}` is a symlink (to {target}); a protected path and the directories above it must be real, so that protecting them cannot reach anything else. Remove the link (a previous run may have planted it) and run again",
            at.full().display()
        ),
    )
}

/// After a run, once its processes are gone: every symlink standing where a watched path or one
/// of its parents should be is removed (the link itself, never its target), and every path that
/// must stay absent but now exists is removed. Each is one [`Violation`].
pub fn check_after_run(watch: &[TreePath], absent: &[TreePath]) -> Vec<Violation> {
    let mut out = Vec::new();
    for w in watch {
        let at = match beneath::inspect(w) {
            // A path that must stay absent, created as a link: the loop below removes it.
            Ok(Found::Symlink { at }) if at == *w && absent.contains(w) => continue,
            Ok(Found::Symlink { at }) => at,
            Ok(_) => continue,
            Err(e) => {
                out.push(Violation {
                    kind: ViolationKind::Uncheckable,
                    path: w.full(),
                    detail: format!("could not be checked after the run: {e}"),
                    undone: false,
                });
                continue;
            }
        };
        let target = beneath::Dir::parent_of(&at)
            .map(|d| d.link_target(at.rel.file_name().unwrap_or_default()))
            .unwrap_or_else(|_| "?".into());
        let removed = beneath::remove_all(&at);
        out.push(Violation {
            kind: ViolationKind::Symlink,
            path: at.full(),
            detail: format!(
                "a symlink (to {target}) was planted where the protected `{}` must be a real path{}",
                w.rel.display(),
                removal_note(&removed)
            ),
            undone: matches!(removed, Ok(true)),
        });
    }
    for p in absent {
        match beneath::inspect(p) {
            Ok(Found::Exists(_)) => {}
            Ok(Found::Symlink { at }) if at == *p => {}
            Ok(_) => continue,
            Err(e) => {
                out.push(Violation {
                    kind: ViolationKind::Uncheckable,
                    path: p.full(),
                    detail: format!("could not be checked after the run: {e}"),
                    undone: false,
                });
                continue;
            }
        }
        let removed = beneath::remove_all(p);
        out.push(Violation {
            kind: ViolationKind::CreatedAbsent,
            path: p.full(),
            detail: format!(
                "was created during the run, and must not exist{}",
                removal_note(&removed)
            ),
            undone: matches!(removed, Ok(true)),
        });
    }
    out
}

fn removal_note(r: &Result<bool, BeneathError>) -> String {
    match r {
        Ok(_) => "; it has been removed".to_owned(),
        Err(e) => format!("; it could not be removed: {e}"),
    }
}

#[cfg(test)]
mod tests;
