//! Stat data to start a layered workspace's result staging from ([`super::stage`]), so that
//! taking the result costs a `stat` of each unchanged file instead of reading and hashing it.
//!
//! A layered workspace's files that the job did not change are its base tree's files, seen
//! through the overlay with the same inode, times, size and owner; the base tree's own index
//! (made by the runner's checkout, never written again: rounds write only the upper layer)
//! holds exactly that stat data. Staging copies it as the throwaway index and merges the base
//! commit into it with `git read-tree -m`: git takes every entry's content from the base tree
//! and keeps an entry's stat data only where the copy names the same blob, so the copy can
//! save work but never change what is staged. A file a round changed has a new change time
//! (which no unprivileged process can set back), so git sees it as changed and hashes it.
//! Where there is no such index (a clone workspace, whose own index a round may have
//! rewritten, is never used) or the merge fails, staging reads the base tree into an empty
//! index as before.
//!
//! Most jobs skip even the merge: the runner keeps the merged index beside the base tree
//! ([`super::base_tree::staging_index`], made once, in a later second than the tree's stat
//! data), and a job copies it ([`staged_for_workspace`]): as it is when the job's layers were
//! made after it existed, else with the stat data of the entries under the roots of the job's
//! changes cleared (outside them the workspace is the base tree itself).

use std::path::{Path, PathBuf};

use super::layered;
use super::stage::StatTrust;

/// The index whose stat data the result staging of `workspace` may start from: its base
/// tree's, for a layered workspace that has one, and whose layers were made in a later second
/// than that index was written (its stat data taken): every change the job made then has a
/// later change time than any the index records. A job made in the same second gets none (git,
/// without nanosecond times, could trust a change made in that second whose size and
/// modification time were put back), and its files are read.
pub fn for_workspace(workspace: &Path) -> Option<PathBuf> {
    if !layered::is_layered(workspace) {
        return None;
    }
    let index = layered::lower_of(workspace)
        .ok()?
        .join(".git")
        .join("index");
    let meta = std::fs::symlink_metadata(&index).ok()?;
    let made = std::fs::symlink_metadata(layered::layer_dir(workspace).join("lower"))
        .and_then(|m| m.modified())
        .ok()?;
    let taken = meta.modified().ok()?;
    (meta.file_type().is_file() && super::base_tree::later_second(taken, made)).then_some(index)
}

/// The runner's staging index of `commit` for `workspace` ([`super::base_tree::staging_index`]),
/// for a layered workspace whose base tree is the one made at `commit` and has one; and how far
/// its stat data may be trusted: everywhere when the index was there before the workspace's
/// layers were made (every change the job made is newer than any stat data it holds), else
/// only outside the roots of the job's changes ([`super::layer_changes`]). A link is not
/// followed.
pub fn staged_for_workspace(workspace: &Path, commit: &str) -> Option<(PathBuf, StatTrust)> {
    if !layered::is_layered(workspace) {
        return None;
    }
    let trust = if layered::made_after(workspace, layered::BaseFile::StagingIndex) {
        StatTrust::Everywhere
    } else {
        StatTrust::OutsideRoots
    };
    let tree = layered::lower_of(workspace).ok()?;
    // The tree's name is the commit it was made at (a root runner's: `<commit>.<uid>`).
    let name = tree.file_name()?.to_str()?;
    let at = name.strip_prefix(commit)?;
    if !(at.is_empty() || at.starts_with('.')) || commit.is_empty() {
        return None;
    }
    let index = super::base_tree::staging_index(&tree);
    let meta = std::fs::symlink_metadata(&index).ok()?;
    meta.file_type().is_file().then_some((index, trust))
}

/// Copies `seed` to `index` with the seed's modification time: git judges an entry whose file
/// changed in the same instant as its index was written ("racily clean") by that time, so the
/// copy must not look newer than the index it copies.
pub fn copy(seed: &Path, index: &Path) -> std::io::Result<()> {
    let modified = std::fs::metadata(seed)?.modified()?;
    std::fs::copy(seed, index)?;
    std::fs::File::options()
        .write(true)
        .open(index)?
        .set_modified(modified)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_layered_workspace_with_a_base_index_has_a_seed() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().join("j1");
        let lower = d.path().join("tree");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(lower.join(".git")).unwrap();
        // A clone workspace: its own index is never a seed.
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        std::fs::write(ws.join(".git/index"), b"DIRC").unwrap();
        assert_eq!(for_workspace(&ws), None);
        // Layered, but its base tree has no index (yet).
        layered::create(&ws, &lower).unwrap();
        assert_eq!(for_workspace(&ws), None);
        // A link where the index should be is not followed.
        std::os::unix::fs::symlink(ws.join(".git/index"), lower.join(".git/index")).unwrap();
        assert_eq!(for_workspace(&ws), None);
        std::fs::remove_file(lower.join(".git/index")).unwrap();
        let index = lower.join(".git/index");
        std::fs::write(&index, b"DIRC").unwrap();
        let set = |secs_ago: u64| {
            let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
            std::fs::File::options()
                .write(true)
                .open(&index)
                .unwrap()
                .set_modified(t)
                .unwrap();
        };
        // Written in an earlier second than the layers were made: its stat data is older
        // than anything the job changed.
        set(5);
        assert_eq!(for_workspace(&ws), Some(index.clone()));
        // Written in the layers' second (or after): no seed, the files are read.
        set(0);
        assert_eq!(for_workspace(&ws), None);
    }

    #[test]
    fn the_copy_keeps_the_seeds_time() {
        let d = tempfile::tempdir().unwrap();
        let seed = d.path().join("seed");
        std::fs::write(&seed, b"DIRC").unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        std::fs::File::options()
            .write(true)
            .open(&seed)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let index = d.path().join("index");
        copy(&seed, &index).unwrap();
        assert_eq!(std::fs::read(&index).unwrap(), b"DIRC");
        assert_eq!(std::fs::metadata(&index).unwrap().modified().unwrap(), old);
    }
}

#[cfg(test)]
#[path = "stat_seed_tests.rs"]
mod staging_tests;
