//! Before and after a run, compared: what is new, replaced or changed, and which of its surfaces
//! must be made safe. Pure: it looks only at the two inventories.

use std::path::PathBuf;

use super::walk::{Found, TreeInventory};
use crate::outcome::git::{Change, Surface};

/// What to do about one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// Its path below the tree's root.
    pub rel: PathBuf,
    /// How it differs from before the run.
    pub change: Change,
    /// What it is now, and what to look at.
    pub what: What,
}

/// The kind of thing an [`Action`] is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A git directory: these surfaces (present after the run) are the run's.
    Dir {
        /// Surfaces to make safe.
        surfaces: Vec<Surface>,
    },
    /// A `.git` file, with its content before the run when it was a `.git` file then too.
    File {
        /// The content before the run.
        previous: Option<Vec<u8>>,
    },
    /// A `.git` symlink.
    Link,
}

/// Everything in `after` that `before` did not have in the same form.
pub fn compare(before: &TreeInventory, after: &TreeInventory) -> Vec<Action> {
    let mut out = Vec::new();
    for (rel, now) in &after.repos {
        let was = before.repos.get(rel);
        let change = match (was, now) {
            (None, _) => Change::New,
            (
                Some(Found::Dir { dev, ino, .. }),
                Found::Dir {
                    dev: d2, ino: i2, ..
                },
            )
            | (
                Some(Found::File { dev, ino, .. }),
                Found::File {
                    dev: d2, ino: i2, ..
                },
            ) if (dev, ino) != (d2, i2) => Change::Replaced,
            (Some(Found::Dir { .. }), Found::Dir { .. })
            | (Some(Found::File { .. }), Found::File { .. })
            | (Some(Found::Link { .. }), Found::Link { .. }) => Change::Changed,
            (Some(_), _) => Change::Replaced,
        };
        let what = match (now, was, change) {
            (
                Found::Dir { surfaces, .. },
                Some(Found::Dir { surfaces: old, .. }),
                Change::Changed,
            ) => {
                let changed: Vec<Surface> = surfaces
                    .iter()
                    .filter(|(s, d)| old.get(s) != Some(d))
                    .map(|(s, _)| *s)
                    .collect();
                if changed.is_empty() {
                    continue;
                }
                What::Dir { surfaces: changed }
            }
            (Found::Dir { surfaces, .. }, _, _) => What::Dir {
                surfaces: surfaces.keys().copied().collect(),
            },
            (
                Found::File { digest, .. },
                Some(Found::File { digest: old, .. }),
                Change::Changed,
            ) if digest == old => {
                continue;
            }
            (Found::File { .. }, was, _) => What::File {
                previous: match was {
                    Some(Found::File { content, .. }) => content.clone(),
                    _ => None,
                },
            },
            (Found::Link { target }, Some(Found::Link { target: old }), Change::Changed)
                if target == old =>
            {
                continue;
            }
            (Found::Link { .. }, _, _) => What::Link,
        };
        out.push(Action {
            rel: rel.clone(),
            change,
            what,
        });
    }
    out
}
