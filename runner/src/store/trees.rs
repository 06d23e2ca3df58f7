//! The state store as the source of the writable trees a path walk asks about when it meets a
//! symlink ([`crate::job::tree_lookup`]): a few indexed lookups instead of every tree the store
//! ever knew.

use std::sync::Arc;

use super::Store;
use super::journal::{blocking, patiently};
use crate::job::resolve::WritableTrees;
use crate::job::tree_lookup::TreeSource;

/// How long a question may wait for an unreachable store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Patience {
    /// A running job's check: an outage is waited out as its events are
    /// ([`crate::store::journal::OUTAGE_PATIENCE`]).
    OfARunningJob,
    /// A submission: the caller is told at once (the store's fault, not the request's).
    None,
}

/// A store's trees, asked for by path.
struct StoredTrees {
    store: Arc<Store>,
    patience: Patience,
}

impl TreeSource for StoredTrees {
    fn trees_among(&self, paths: &[String]) -> Result<Vec<String>, String> {
        let ask = || self.store.writable_trees_among(paths);
        match self.patience {
            Patience::OfARunningJob => patiently(ask),
            Patience::None => blocking(ask),
        }
        .map_err(|e| e.to_string())
    }
}

/// The writable trees `store` knows, looked up when a walk meets a symlink.
pub fn writable_trees(store: &Arc<Store>, patience: Patience) -> WritableTrees {
    WritableTrees::stored(Arc::new(StoredTrees {
        store: store.clone(),
        patience,
    }))
}
