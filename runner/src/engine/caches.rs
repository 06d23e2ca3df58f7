//! The job's caches in its runs (SPEC §12, [`crate::cache`]). Once per run of the job, before
//! its set-up, each `cache` path is resolved to its store entry and looked up
//! (`cache_lookup`). Every process of the job (the set-up, each round attempt, each verify) then
//! gets its own copy of the entry — or an empty directory on a miss — in its attempt
//! directory's HOME, bound writable at the path in the round's private HOME (whose tmpfs hides
//! the host's directory). Only a set-up that passed has its copy kept: saved whole into the
//! store (`cache_saved`), then the host's `cache_budget` applied. Every other copy goes with its
//! attempt's HOME, so no round or verify can change what another job gets.

use std::path::PathBuf;

use super::EngineError;
use super::artifacts::AttemptDirs;
use super::job_run::JobRun;
use crate::cache::{CacheEntry, CacheStore, entry_for};
use crate::job::FinishReason;
use crate::store::EventKind;

impl JobRun<'_> {
    /// The store of this host.
    fn cache_store(&self) -> CacheStore {
        CacheStore::new(&self.engine.state_dir)
    }

    /// Resolves the job's caches and journals each lookup.
    pub(super) fn resolve_caches(&mut self) -> Result<(), (FinishReason, String)> {
        let store = self.cache_store();
        let internal = |e: crate::store::StoreError| (FinishReason::InternalError, e.to_string());
        let mut entries = Vec::new();
        for path in self.spec.cache.clone() {
            let e = entry_for(
                &path,
                self.spec.cache_key.as_deref(),
                &self.spec.workspace,
                self.spec.submitted_by.as_deref(),
            );
            let dir = store.root().join(e.rel_dir());
            let bytes = ralph_sandbox::beneath::tree::measure(&dir)
                .ok()
                .flatten()
                .map(|t| t.bytes);
            self.journal
                .record(EventKind::CacheLookup {
                    path: path.to_string(),
                    key_hash: e.hash.clone(),
                    key_source: e.source.clone(),
                    hit: bytes.is_some(),
                    bytes: bytes.unwrap_or(0),
                })
                .map_err(internal)?;
            entries.push(e);
        }
        self.caches = entries;
        Ok(())
    }

    /// Gives the process of `dirs` its copy of each cache (or an empty directory) in its HOME,
    /// owned by the ids it runs as; returns the directories to bind writable.
    pub(super) fn prepare_caches(&self, dirs: &AttemptDirs) -> Result<Vec<PathBuf>, EngineError> {
        if self.caches.is_empty() {
            return Ok(Vec::new());
        }
        let req = self.sandbox_request(dirs, Vec::new(), Vec::new());
        let owner = ralph_sandbox::plan::run_owner(&req).map_err(|e| EngineError::Config {
            message: e.to_string(),
        })?;
        let store = self.cache_store();
        let mut out = Vec::new();
        for e in &self.caches {
            let at = cache_dir(dirs, e);
            if let Some(parent) = at.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|x| EngineError::io("create", parent, x))?;
            }
            let restored = store.restore(e, &at, owner).map_err(cache_err(&at))?;
            if restored.is_none() {
                std::fs::create_dir(&at).map_err(|x| EngineError::io("create", &at, x))?;
                if let Some((u, g)) = owner {
                    std::os::unix::fs::lchown(&at, Some(u), Some(g))
                        .map_err(|x| EngineError::io("chown", &at, x))?;
                }
            }
            out.push(at);
        }
        Ok(out)
    }

    /// After a set-up that passed: keeps its copy of each cache, then applies the host's
    /// budget. A cache that cannot be kept is journalled with why; the job goes on.
    pub(super) fn keep_caches(&mut self, dirs: &AttemptDirs) -> Result<(), EngineError> {
        let store = self.cache_store();
        let mut saved = Vec::new();
        for e in &self.caches {
            let at = cache_dir(dirs, e);
            saved.push((e.clone(), store.save(e, &at)));
        }
        if saved.is_empty() {
            return Ok(());
        }
        let total = match store.prune(None, Some(self.engine.cache_budget), false) {
            Ok(r) => r.kept_bytes,
            Err(_) => store.total_bytes(),
        };
        for (e, r) in saved {
            let (bytes, files, error) = match r {
                Ok(c) => (c.bytes, c.files, None),
                Err(x) => (0, 0, Some(crate::util::text::bounded(&x.to_string(), 1024))),
            };
            self.journal.record(EventKind::CacheSaved {
                path: e.path.to_string(),
                key_hash: e.hash.clone(),
                bytes,
                files,
                error,
                total_bytes: total,
            })?;
        }
        Ok(())
    }
}

/// Where the process of `dirs` has its copy of `e`: the path in its HOME, on the host.
fn cache_dir(dirs: &AttemptDirs, e: &CacheEntry) -> PathBuf {
    dirs.home.join(e.path.rel())
}

fn cache_err(at: &std::path::Path) -> impl Fn(crate::cache::CacheError) -> EngineError + '_ {
    move |e| match e {
        crate::cache::CacheError::Io { op, path, source } => EngineError::Io {
            action: op,
            path,
            source,
        },
        other => EngineError::Io {
            action: "copy the cache to",
            path: at.to_path_buf(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}
