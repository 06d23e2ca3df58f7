//! Base trees: one checkout per repository and commit, the lower layer every layered workspace
//! at that commit shares ([`super::layered`]). A base tree is a clone sharing the mirror's
//! objects, detached at the commit, with its index — exactly what a full per-job checkout would
//! be — made once, then only ever read (through the overlays). It is made in a temporary
//! directory and renamed into place, so a tree that exists is complete.
//!
//! ```text
//! <state-dir>/mirrors/<name>.git                    the mirror
//! <state-dir>/mirrors/<name>.trees/<commit>/        its base trees
//! <state-dir>/mirrors/<name>.trees/<commit>.index   a tree's staging index (the runner's own)
//! <state-dir>/mirrors/<name>.trees/<commit>.walk    the listings of a walk of it (the runner's)
//! <state-dir>/mirrors/<name>.trees/<commit>.lower   every plain directory's listing (the runner's)
//! ```
//!
//! Beside each tree the runner keeps the index its jobs' results are staged from
//! ([`staging_index`]): the commit merged into the tree's own index once (by the first job to
//! take the tree a second or more after it was made: [`keep_staging_index`]), so that each job
//! after it copies the index instead of merging again ([`super::stat_seed`]); and the listings
//! of a walk of the tree ([`walk_listings`], made once it has been quiet for the walks'
//! [`QUIET`]), from which the first round of a job after it walks its overlay
//! ([`super::walk_seed`]) instead of listing every directory; and the listing of every plain
//! directory of the tree, made as soon as the tree is in place ([`lower_listings`]), from
//! which every round's walks take what its job never changed ([`super::walk_seed::layers`]).
//!
//! Made and removed under the mirror's lock: [`sweep`] removes a tree no workspace's layers name,
//! and a job names its tree before it lets the lock go.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ralph_sandbox::gitguard::QUIET;

use super::ProvisionError;
use super::clone::checkout_shared;
use super::git;
use super::{layered, mirror};

/// The directory of `mirror`'s base trees.
pub fn trees_dir(mirror: &Path) -> PathBuf {
    mirror.with_extension("trees")
}

/// Who owns a base tree's files (and a layered workspace's upper layer): the agent user a root
/// runner's rounds run as, so that they are the workspace's owner in their sandbox (an overlay
/// cannot be idmapped). `None`: the runner's own ids (a non-root runner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// uid.
    pub uid: u32,
    /// gid.
    pub gid: u32,
}

/// A base tree, as a job takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseTree {
    /// Its directory.
    pub dir: PathBuf,
    /// Whether its staging index ([`staging_index`]) was there when the job took it: a job
    /// whose layers are made after the index may trust all of its stat data
    /// ([`super::stat_seed`]).
    pub staging_index: bool,
    /// Whether its walk listings ([`walk_listings`]) were there when the job took it: only a
    /// job whose layers are made after them may start from them ([`super::walk_seed`]).
    pub walk_listings: bool,
}

/// The base tree of `mirror` at `commit` owned by `owner`, made if missing, with its staging
/// index and walk listings made if they are missing and can be. The caller holds the mirror's
/// lock.
pub fn ensure(
    mirror: &Path,
    url: &str,
    commit: &str,
    owner: Option<Owner>,
) -> Result<BaseTree, ProvisionError> {
    let name = match owner {
        Some(o) => format!("{commit}.{}", o.uid),
        None => commit.to_owned(),
    };
    let dir = trees_dir(mirror).join(&name);
    if !dir.join(".git").is_dir() {
        make(mirror, url, commit, owner, &dir)?;
    }
    let staging_index = keep_staging_index(&dir, commit);
    let walk_listings = keep_walk_listings(&dir);
    keep_lower_listings(&dir);
    Ok(BaseTree {
        dir,
        staging_index,
        walk_listings,
    })
}

/// Makes the base tree `dir` (in a temporary directory, renamed into place).
fn make(
    mirror: &Path,
    url: &str,
    commit: &str,
    owner: Option<Owner>,
    dir: &Path,
) -> Result<(), ProvisionError> {
    let tmp = super::beside(dir, ".tmp");
    for stale in [&tmp, dir] {
        if stale.exists() {
            std::fs::remove_dir_all(stale)
                .map_err(|e| ProvisionError::io("remove a half-made base tree", stale, e))?;
        }
    }
    let files = [staging_index(dir), walk_listings(dir), lower_listings(dir)];
    let temps = files.clone().map(|f| super::beside(&f, ".tmp"));
    for stale in temps.into_iter().chain(files) {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(ProvisionError::io(
                    "remove a stale file of the base tree",
                    &stale,
                    e,
                ));
            }
            _ => {}
        }
    }
    std::fs::create_dir_all(&tmp)
        .map_err(|e| ProvisionError::io("create the base tree", &tmp, e))?;
    checkout_shared(mirror, url, commit, &tmp)?;
    if let Some(o) = owner {
        chown_tree(&tmp, o)?;
        refresh_index(&tmp, o);
    }
    std::fs::rename(&tmp, dir).map_err(|e| ProvisionError::io("move the base tree", dir, e))
}

/// Whether `tree` has its staging index, made now if it can be: once the clock has left the
/// second in which the tree's own index was written (its stat data taken). git (built without
/// nanosecond times, as Debian's is) trusts an entry's stat data only when its file's times
/// fall in an earlier second than the index's own time; a staging index written in the same
/// second as the files' times would have every unchanged file read and hashed at each job's
/// index write (measured: 120 ms per job on 10,000 files), and one whose time is later than a
/// change made in that same second could hide the change (same size, modification time set
/// back, change time in the second already recorded). So it is written only in a later
/// second; a job whose layers are made after it exists trusts it everywhere (every change it
/// makes has a later change time than any the index records), one made before only outside
/// the roots of its changes, the entries under them cleared ([`super::stage::StatTrust`]). A
/// failure only costs jobs a merge each.
fn keep_staging_index(tree: &Path, commit: &str) -> bool {
    let index = staging_index(tree);
    if std::fs::symlink_metadata(&index).is_ok_and(|m| m.file_type().is_file()) {
        return true;
    }
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(taken) = modified(&tree.join(".git").join("index")) else {
        return false;
    };
    if !later_second(taken, std::time::SystemTime::now()) {
        return false;
    }
    let tmp = super::beside(&index, ".tmp");
    let kept = make_staging_index(tree, commit, &tmp)
        && modified(&tmp).is_some_and(|written| later_second(taken, written))
        && std::fs::rename(&tmp, &index).is_ok();
    if !kept {
        let _ = std::fs::remove_file(&tmp);
    }
    kept
}

/// Whether `tree` has its walk listings, made now if it can be: once every directory of the
/// tree has been unchanged for the walks' [`QUIET`] (the tree's own index is written after
/// its last directory was made or given to its owner), so that the walk keeps them all. A
/// failure only costs the jobs a listing of each directory in their first round.
fn keep_walk_listings(tree: &Path) -> bool {
    let walk = walk_listings(tree);
    if listings_there(&walk) {
        return true;
    }
    let Ok(taken) = std::fs::metadata(tree.join(".git").join("index")).and_then(|m| m.modified())
    else {
        return false;
    };
    // A change time is read from a coarse clock: a tick more than QUIET.
    let quiet = QUIET + std::time::Duration::from_millis(50);
    if std::time::SystemTime::now()
        .duration_since(taken)
        .is_ok_and(|d| d > quiet)
    {
        return write_listings(&walk, |tmp| {
            ralph_sandbox::gitguard::keep_listings(tree, tmp)
        });
    }
    false
}

/// Whether `tree` (in place: complete, never written again) has the listing of every plain
/// directory, made now if it has not (or has one of an older format). Unlike its walk listings
/// these need no quiet: the walks through a workspace's layers trust them because the tree
/// never changes, not by their change times. A failure only costs the jobs their walks through
/// the layers.
fn keep_lower_listings(tree: &Path) -> bool {
    let lower = lower_listings(tree);
    listings_there(&lower)
        || write_listings(&lower, |tmp| {
            ralph_sandbox::gitguard::keep_lower_listings(tree, tmp)
        })
}

/// Whether `path` is a file of listings in this release's format (one an older release wrote
/// is made again).
fn listings_there(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
        && ralph_sandbox::gitguard::listings_current(path)
}

/// Writes the listings file `path` with `make` through a temporary file renamed over it (a
/// reader sees the old file or the new one); whether it was written.
fn write_listings(path: &Path, make: impl FnOnce(&Path) -> std::io::Result<usize>) -> bool {
    let tmp = super::beside(path, ".tmp");
    let kept = make(&tmp).is_ok() && std::fs::rename(&tmp, path).is_ok();
    if !kept {
        let _ = std::fs::remove_file(&tmp);
    }
    kept
}

/// The listing of every plain directory of the base tree `tree`, kept beside it
/// (`<tree>.lower`, the runner's file: [`ralph_sandbox::gitguard::keep_lower_listings`]).
pub fn lower_listings(tree: &Path) -> PathBuf {
    super::beside(tree, ".lower")
}

/// The listings of a walk of the base tree `tree`, kept beside it (`<tree>.walk`, the runner's
/// file: [`ralph_sandbox::gitguard::keep_listings`]).
pub fn walk_listings(tree: &Path) -> PathBuf {
    super::beside(tree, ".walk")
}

/// Whether `later` falls in a later whole second (since the epoch) than `earlier`.
pub(super) fn later_second(earlier: std::time::SystemTime, later: std::time::SystemTime) -> bool {
    let secs = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    secs(later) > secs(earlier)
}

/// The staging index kept beside the base tree `tree` (`<tree>.index`): the tree's own index
/// with `commit` merged into it (`git read-tree -m`) by the runner ([`keep_staging_index`]). Every
/// entry is the commit's (the merge takes each from the commit's tree, and keeps the checkout's
/// stat data only where it names the same blob), its cache of trees is the commit's, and only
/// the runner writes it (mode 0600, outside every workspace and every overlay layer).
pub fn staging_index(tree: &Path) -> PathBuf {
    super::beside(tree, ".index")
}

/// Removes the base tree `tree`, its staging index and its listings.
pub fn remove(tree: &Path) -> std::io::Result<()> {
    for file in [
        staging_index(tree),
        walk_listings(tree),
        lower_listings(tree),
    ] {
        match std::fs::remove_file(file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::remove_dir_all(tree)
}

/// Writes `to`: `tree`'s index (its stat data and time: [`super::stat_seed::copy`]) with
/// `commit` merged into it. Whether it was made; a failure only costs each job a merge.
pub(super) fn make_staging_index(tree: &Path, commit: &str, to: &Path) -> bool {
    let made = super::stat_seed::copy(&tree.join(".git").join("index"), to)
        .map_err(|e| e.to_string())
        .and_then(|()| {
            let ran = git::at(&tree.join(".git"))
                .env("GIT_INDEX_FILE", to)
                .current_dir(tree)
                .args(["read-tree", "-m", "--end-of-options", commit])
                .run()
                .map_err(|e| e.to_string())?;
            if ran.status.success() {
                Ok(())
            } else {
                Err(String::from_utf8_lossy(&ran.stderr).trim().to_owned())
            }
        })
        // After git: it writes the index anew, with the umask's mode.
        .and_then(|()| {
            std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())
        });
    match made {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!("workspaces: no staging index for the base tree: {e}");
            let _ = std::fs::remove_file(to);
            false
        }
    }
}

/// Brings the index of the base tree `tree` up to date with its files' stat data after the
/// chown moved every file's change time, and gives it back to `owner`: the results of the jobs
/// on this tree are staged from it ([`super::stat_seed`]), so each job stats the files it did
/// not change instead of hashing them (one hash of each file here, once per tree). A failure
/// only costs the jobs that time.
fn refresh_index(tree: &Path, owner: Owner) {
    let ran = git::at(&tree.join(".git"))
        .env("GIT_WORK_TREE", tree)
        .current_dir(tree)
        .args(["update-index", "-q", "--refresh"])
        .run();
    if let Err(e) = ran {
        tracing::debug!(error = %e, "workspaces: the base tree's index was not refreshed: {e}");
    }
    let index = tree.join(".git").join("index");
    if let Err(e) = std::os::unix::fs::lchown(&index, Some(owner.uid), Some(owner.gid)) {
        tracing::debug!(error = %e, "workspaces: the base tree's index was not given back: {e}");
    }
}

/// Gives every file of `root` to `owner` (symlinks themselves, never followed).
pub fn chown_tree(root: &Path, owner: Owner) -> Result<(), ProvisionError> {
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        std::os::unix::fs::lchown(&p, Some(owner.uid), Some(owner.gid))
            .map_err(|e| ProvisionError::io("chown", &p, e))?;
        let meta = std::fs::symlink_metadata(&p).map_err(|e| ProvisionError::io("stat", &p, e))?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(&p).map_err(|e| ProvisionError::io("list", &p, e))?;
            for e in entries {
                stack.push(e.map_err(|e| ProvisionError::io("list", &p, e))?.path());
            }
        }
    }
    Ok(())
}

/// Removes every base tree no layered workspace under `workspaces` stands on (each mirror's
/// trees under its lock). Returns the trees removed.
pub fn sweep(state_dir: &Path, workspaces: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(mirrors) = std::fs::read_dir(mirror::mirrors_dir(state_dir)) else {
        return removed;
    };
    for m in mirrors.flatten() {
        let trees = m.path();
        if trees.extension().is_none_or(|e| e != "trees") {
            continue;
        }
        let Ok(lock) = mirror::lock(&trees.with_extension("git")) else {
            continue;
        };
        // Read under the lock: a job names its tree before it lets the lock go.
        let used = in_use(workspaces);
        if let Ok(entries) = std::fs::read_dir(&trees) {
            for t in entries.flatten() {
                let path = t.path();
                if used.iter().any(|u| {
                    *u == path
                        || staging_index(u) == path
                        || walk_listings(u) == path
                        || lower_listings(u) == path
                }) {
                    continue;
                }
                // A tree's staging index and listings go with it (and a file left half-made by a
                // killed runner with them); only trees are reported.
                if !t.file_type().is_ok_and(|f| f.is_dir()) {
                    if let Err(e) = std::fs::remove_file(&path) {
                        tracing::warn!(
                            error = %e,
                            "workspaces: failed to remove the unused `{}`: {e}",
                            path.display()
                        );
                    }
                    continue;
                }
                match std::fs::remove_dir_all(&path) {
                    Ok(()) => removed.push(path),
                    Err(e) => tracing::warn!(
                        error = %e,
                        "workspaces: failed to remove the unused base tree `{}`: {e}",
                        path.display()
                    ),
                }
            }
        }
        drop(lock);
    }
    removed
}

/// The base trees the layered workspaces under `workspaces` stand on.
fn in_use(workspaces: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(workspaces) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let id = name.to_str()?.strip_suffix(".layer")?;
            layered::lower_of(&workspaces.join(id)).ok()
        })
        .collect()
}

#[cfg(test)]
#[path = "base_tree_tests.rs"]
pub(crate) mod tests;
