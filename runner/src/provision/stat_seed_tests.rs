//! The seeded staging with real git ([`super::super::stage`] with a [`super::super::stage::Base`]
//! seed): whatever the seed holds, the staged tree is the one an unseeded staging makes.

use std::path::Path;

use crate::provision::git_bound::{Bound, PeakRss};
use crate::provision::patch::tests::{based, sh};
use crate::provision::stage::{self, Base, StageLimits};

/// The tree `ws` stages to from `base`, seeded with `seed`.
fn staged(ws: &Path, base: &str, seed: Option<&Path>) -> stage::Staged {
    let index = ws.parent().unwrap().join("staging.index");
    let meter = PeakRss::default();
    let out = stage::stage(
        ws,
        Some(Base {
            commit: base,
            staged: None,
            stat_seed: seed,
            roots: None,
        }),
        &index,
        &StageLimits::default(),
        &Bound::new(&meter),
    )
    .unwrap();
    std::fs::remove_file(&index).unwrap();
    out
}

/// A copy of the workspace's own index as it is now, as a seed beside the workspace.
fn seed_of(ws: &Path) -> std::path::PathBuf {
    let seed = ws.parent().unwrap().join("seed.index");
    std::fs::copy(ws.join(".git/index"), &seed).unwrap();
    seed
}

#[test]
fn a_seed_of_the_base_stages_the_same_tree_as_none() {
    let (_d, ws, base) = based();
    // The base's index with the stat data of its checkout: what a base tree's index is.
    let seed = seed_of(&ws);
    sh(
        &ws,
        "echo fixed > a.txt && rm tracked.txt && mkdir -p src && echo lib > src/lib.rs",
    );
    let plain = staged(&ws, &base, None);
    let seeded = staged(&ws, &base, Some(&seed));
    assert_eq!(seeded, plain);
    assert!(plain.skipped.is_empty());
    // The changes are in it: the tree is not the base's.
    sh(
        &ws,
        &format!(
            "test \"$(git --git-dir={} diff-tree -r --name-only {base} {})\" = \"$(printf 'a.txt\\nsrc/lib.rs\\ntracked.txt')\"",
            crate::provision::private_git_dir(&ws).display(),
            plain.tree
        ),
    );
}

#[test]
fn a_seed_naming_the_changed_files_as_they_are_now_cannot_hide_them() {
    let (_d, ws, base) = based();
    sh(&ws, "echo fixed > a.txt && echo new > new.txt");
    let plain = staged(&ws, &base, None);
    // An index that names the changed content with fresh stat data, as if it were the base.
    sh(&ws, "git add -A");
    let seed = seed_of(&ws);
    assert_eq!(staged(&ws, &base, Some(&seed)), plain);
}

#[test]
fn a_seed_that_is_not_an_index_or_is_missing_is_dropped() {
    let (_d, ws, base) = based();
    sh(&ws, "echo fixed > a.txt");
    let plain = staged(&ws, &base, None);
    let junk = ws.parent().unwrap().join("junk.index");
    std::fs::write(&junk, b"not an index").unwrap();
    assert_eq!(staged(&ws, &base, Some(&junk)), plain);
    let missing = ws.parent().unwrap().join("missing.index");
    assert_eq!(staged(&ws, &base, Some(&missing)), plain);
}
