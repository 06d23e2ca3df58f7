//! The first round of a job on a layered workspace walks its overlay from its base tree's walk
//! listings ([`super::base_tree::walk_listings`]) instead of listing every directory: the
//! listings are written as the job's own (`<job>/walk-listings`, which every round's git check
//! and socket scan start from) with the overlay's device in place of the base tree's.
//!
//! Why that is sound: a walk trusts a kept listing only for a directory with the listing's
//! device, inode and change time (`ralph_sandbox::gitguard`). With both layers on one
//! filesystem, the overlay shows a directory only the base tree has with the overlay's device
//! and the base directory's own inode and change time, and its entries are the base
//! directory's (a base tree is never written once made). A directory the job made or changed
//! is its upper layer's, and has that layer's change time: later than the listings were made,
//! since only a workspace whose layers were made after them is seeded
//! ([`super::layered::BaseFile::WalkListings`]). A job's own listings are never replaced.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{base_tree, layered, overlay};

/// Writes `to` (the job's walk listings, when it has none yet) from the base tree listings of
/// the layered, mounted `workspace`: how many directories it holds, `None` when it was not
/// written (not layered or not mounted, made before the listings, layers on two filesystems,
/// no listings).
pub fn seed(workspace: &Path, to: &Path) -> Option<usize> {
    if !layered::is_layered(workspace)
        || !layered::made_after(workspace, layered::BaseFile::WalkListings)
        || std::fs::symlink_metadata(to).is_ok()
        || !overlay::is_mount_point(workspace)
    {
        return None;
    }
    let tree = layered::lower_of(workspace).ok()?;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let lower = dev(&tree)?;
    let upper = dev(&layered::layer_dir(workspace).join("upper"))?;
    let shown = dev(workspace)?;
    if lower != upper || shown == lower {
        return None;
    }
    match ralph_sandbox::gitguard::listings_seen_through(
        &base_tree::walk_listings(&tree),
        lower,
        shown,
        to,
    )? {
        Ok(n) => Some(n),
        Err(e) => {
            tracing::debug!(error = %e, "workspaces: the walk listings were not seeded: {e}");
            let _ = std::fs::remove_file(to);
            None
        }
    }
}

/// What every walk of a round's git check may know of the layered, mounted `workspace`: its
/// upper layer and its base tree's listings, so that a directory the job never changed is taken
/// from those listings without a look (`ralph_sandbox::gitguard`'s `walk/lower.rs`). `None`:
/// not layered or not mounted, a lower layer that is not a base tree (a fan-out attempt's is
/// its job's workspace), the layers on two file systems, or the tree has no listings.
///
/// Sound because a base tree is never written once it is in place (its listings are made then:
/// [`base_tree::lower_listings`]), and every change through the overlay lands in the upper
/// layer, which the walks look at whole.
pub fn layers(workspace: &Path) -> Option<ralph_sandbox::spec::WorkspaceLayers> {
    if !layered::is_layered(workspace) || !overlay::is_mount_point(workspace) {
        return None;
    }
    let merged = workspace.canonicalize().ok()?;
    let tree = layered::lower_of(workspace).ok()?;
    // Only a base tree never changes: a fan-out attempt's lower layer is its job's workspace.
    if tree.parent().and_then(Path::extension) != Some(std::ffi::OsStr::new("trees")) {
        return None;
    }
    let upper = layered::layer_dir(workspace).join("upper");
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    let lower = dev(&tree)?;
    if lower != dev(&upper)? || dev(&merged)? == lower {
        return None;
    }
    let lower_listings = base_tree::lower_listings(&tree);
    lower_listings
        .is_file()
        .then_some(ralph_sandbox::spec::WorkspaceLayers {
            merged,
            upper,
            lower_listings,
            lower_dev: lower,
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::provision::base_tree::tests::mirrored;

    /// Waits (at most 5 s) until `path`'s time is more than the walks' quiet time ago.
    pub(crate) fn wait_until_quiet(path: &Path) {
        let taken = std::fs::metadata(path).unwrap().modified().unwrap();
        let quiet = ralph_sandbox::gitguard::QUIET + std::time::Duration::from_millis(60);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::SystemTime::now()
            .duration_since(taken)
            .is_ok_and(|d| d <= quiet)
            || std::time::SystemTime::now() < taken
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock did not move"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn a_round_knows_the_layers_of_a_mounted_workspace_from_its_trees_first_job() {
        let d = tempfile::tempdir().unwrap();
        let (mirror, url, commit) = mirrored(d.path());
        // The tree's first job: the listing of every plain directory is there at once (the
        // quiet walk listings are not yet).
        let base = base_tree::ensure(&mirror, &url, &commit, None).unwrap();
        let tree = base.dir;
        assert!(!base.walk_listings);
        let lower = base_tree::lower_listings(&tree);
        assert!(ralph_sandbox::gitguard::listings_current(&lower));
        let ws = d.path().join("workspaces").join("j1");
        std::fs::create_dir_all(&ws).unwrap();
        layered::create(&ws, &tree).unwrap();
        // Not mounted: nothing (the path is an empty directory, not the overlay).
        assert_eq!(layers(&ws), None);
        if let Err(e) = layered::mount(&ws) {
            assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
            eprintln!("skipped: an overlay needs root here ({e})");
            return;
        }
        let l = layers(&ws).unwrap();
        assert_eq!(l.merged, ws.canonicalize().unwrap());
        assert_eq!(l.upper, layered::layer_dir(&ws).join("upper"));
        assert_eq!(l.lower_listings, lower);
        assert_eq!(l.lower_dev, std::fs::metadata(&tree).unwrap().dev());
        // Without the file: nothing; one an older release wrote (another format) is made
        // again by the next job to take the tree, as are missing ones.
        std::fs::remove_file(&lower).unwrap();
        assert_eq!(layers(&ws), None);
        // A layered workspace on a tree that is not a base tree (a fan-out attempt's view of
        // its job's workspace) never gets layers, even with listings beside that tree.
        let plain = d.path().join("workspaces").join("job");
        std::fs::create_dir_all(plain.join("src")).unwrap();
        ralph_sandbox::gitguard::keep_lower_listings(&plain, &plain.with_extension("lower"))
            .unwrap();
        let attempt = d.path().join("attempts").join("job.1");
        std::fs::create_dir_all(&attempt).unwrap();
        layered::create(&attempt, &plain).unwrap();
        layered::mount(&attempt).unwrap();
        assert!(overlay::is_mount_point(&attempt));
        assert_eq!(layers(&attempt), None);
        layered::unmount(&attempt).unwrap();
        std::fs::write(&lower, b"rlwalk1\n\0\0\0\0\0\0\0\0").unwrap();
        assert!(!ralph_sandbox::gitguard::listings_current(&lower));
        base_tree::ensure(&mirror, &url, &commit, None).unwrap();
        assert!(ralph_sandbox::gitguard::listings_current(&lower));
        assert!(layers(&ws).is_some());
        layered::unmount(&ws).unwrap();
        assert_eq!(layers(&ws), None);
    }

    #[test]
    fn only_a_mounted_workspace_made_after_the_listings_is_seeded_and_never_twice() {
        let d = tempfile::tempdir().unwrap();
        let (mirror, url, commit) = mirrored(d.path());
        let tree = base_tree::ensure(&mirror, &url, &commit, None).unwrap().dir;
        // A workspace made before the tree's listings: never seeded.
        let early = d.path().join("workspaces").join("early");
        std::fs::create_dir_all(&early).unwrap();
        layered::create(&early, &tree).unwrap();
        wait_until_quiet(&tree.join(".git").join("index"));
        let base = base_tree::ensure(&mirror, &url, &commit, None).unwrap();
        assert!(base.walk_listings);
        assert!(base_tree::walk_listings(&tree).is_file());

        let ws = d.path().join("workspaces").join("j1");
        std::fs::create_dir_all(&ws).unwrap();
        layered::create(&ws, &tree).unwrap();
        layered::mark_made_after(&ws, layered::BaseFile::WalkListings).unwrap();
        let to = d.path().join("j1-walk-listings");
        // Not mounted: not seeded.
        assert_eq!(seed(&ws, &to), None);
        if let Err(e) = layered::mount(&ws) {
            assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
            eprintln!("skipped: an overlay needs root here ({e})");
            return;
        }
        let n = seed(&ws, &to).unwrap();
        assert!(n >= 2, "{n}");
        // The job's own listings are never replaced.
        let own = std::fs::read(&to).unwrap();
        assert_eq!(seed(&ws, &to), None);
        assert_eq!(std::fs::read(&to).unwrap(), own);
        layered::unmount(&ws).unwrap();

        layered::mount(&early).unwrap();
        let early_to = d.path().join("early-walk-listings");
        assert_eq!(seed(&early, &early_to), None);
        assert!(!early_to.exists());
        layered::unmount(&early).unwrap();
    }
}
