//! Caches kept across jobs (SPEC §12, `--cache PATH`, `--cache-key TEXT`): directories of the
//! round's private HOME (`~/.cache/pip`, `~/.npm`, `~/.cargo/registry`) that the runner keeps
//! in its state dir, `caches/<key-hash>/<path-name>`. This module owns the rules as data and
//! small file operations:
//!
//! - [`CachePath`]: what a job may name (below `~`, no `..`), and its entry name;
//! - [`key`]: the key (the job's text, or a digest of the lock files it knows in the workspace,
//!   `lock_files.toml`) and the entry it selects;
//! - [`copy`]: a tree copied without following a link (the only way content moves);
//! - [`store`]: lookup (a copy out, under a shared lock), save (built in a temporary directory
//!   and renamed in, under an exclusive lock), sizes, pruning and the host's budget.
//!
//! Only a set-up that passed writes an entry. Rounds and verify get a copy of it in their own
//! attempt directory, bound writable at the path in their HOME: what they write is discarded
//! with the attempt (docs/toolchains.md says why a copy and not an overlay).

pub mod copy;
pub mod key;
pub mod store;

use serde::{Deserialize, Serialize};

pub use key::{CacheEntry, KeySource, entry_for};
pub use store::{CacheStore, PruneReport};

/// Longest `cache` path and `cache_key` text, in bytes.
pub const MAX_TEXT: usize = 256;

/// The most caches a job may name.
pub const MAX_CACHES: usize = 16;

/// The default `cache_budget` of a host (bytes): what `ralph run` keeps, and `ralph serve`
/// without one in its config.
pub const DEFAULT_BUDGET: u64 = 10 << 30;

/// Why a cache operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// A path named by a job is not one a cache may have.
    #[error("`{path}` {why}")]
    Path {
        /// The path as given.
        path: String,
        /// What was expected.
        why: &'static str,
    },
    /// A file operation failed.
    #[error("failed to {op} `{path}`: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: std::path::PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A tree could not be measured or removed safely.
    #[error(transparent)]
    Tree(#[from] ralph_sandbox::beneath::BeneathError),
}

impl CacheError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        CacheError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// A cache's path as a job names it: `~/` and a relative path below the round's HOME.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct CachePath {
    /// Below HOME, `/`-separated, each component a plain name.
    rel: String,
}

impl CachePath {
    /// Parses `~/REL`.
    pub fn parse(text: &str) -> Result<Self, CacheError> {
        let bad = |why| CacheError::Path {
            path: text.to_owned(),
            why,
        };
        if text.len() > MAX_TEXT {
            return Err(bad("is longer than 256 bytes"));
        }
        let Some(rel) = text.strip_prefix("~/") else {
            return Err(bad(
                "must start with `~/`: a cache lives in the round's private HOME (e.g. `~/.cache/pip`)",
            ));
        };
        let rel = rel.trim_end_matches('/');
        if rel.is_empty() {
            return Err(bad("names HOME itself; name a directory below it"));
        }
        for c in rel.split('/') {
            if c.is_empty() || c == "." || c == ".." {
                return Err(bad(
                    "must be a plain path below `~/` (no `.`, `..` or empty component)",
                ));
            }
            if c.chars().any(char::is_control) {
                return Err(bad("must not contain control characters"));
            }
        }
        Ok(Self {
            rel: rel.to_owned(),
        })
    }

    /// The path below HOME (`.cache/pip`).
    pub fn rel(&self) -> &str {
        &self.rel
    }

    /// The entry's directory name in the store (`.cache+pip`): readable, one component.
    pub fn entry_name(&self) -> String {
        self.rel.replace('/', "+")
    }

    /// Whether one of the two lies inside the other (or they are the same).
    pub fn overlaps(&self, other: &CachePath) -> bool {
        let inside = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
        inside(&self.rel, &other.rel) || inside(&other.rel, &self.rel)
    }
}

impl std::fmt::Display for CachePath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "~/{}", self.rel)
    }
}

impl TryFrom<String> for CachePath {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        CachePath::parse(&s).map_err(|e| e.to_string())
    }
}

impl From<CachePath> for String {
    fn from(p: CachePath) -> Self {
        p.to_string()
    }
}

/// Checks a job's caches and key (`field` named in each error by the caller).
pub fn validate(paths: &[CachePath], key: Option<&str>) -> Result<(), (&'static str, String)> {
    if paths.len() > MAX_CACHES {
        return Err(("cache", format!("at most {MAX_CACHES} caches per job")));
    }
    for (i, p) in paths.iter().enumerate() {
        if let Some(q) = paths[..i].iter().find(|q| q.overlaps(p)) {
            return Err((
                "cache",
                format!("`{p}` and `{q}` overlap: name each directory once"),
            ));
        }
    }
    if let Some(k) = key {
        if paths.is_empty() {
            return Err(("cache_key", "`cache_key` needs `cache`".to_owned()));
        }
        if k.trim().is_empty() {
            return Err(("cache_key", "must not be empty".to_owned()));
        }
        if k.len() > MAX_TEXT || k.chars().any(char::is_control) {
            return Err((
                "cache_key",
                "must be at most 256 bytes without control characters".to_owned(),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_path_is_below_home_and_plain() {
        let p = CachePath::parse("~/.cache/pip/").unwrap();
        assert_eq!(p.rel(), ".cache/pip");
        assert_eq!(p.entry_name(), ".cache+pip");
        assert_eq!(p.to_string(), "~/.cache/pip");
        for bad in [
            "/root/.cache",
            ".npm",
            "~",
            "~/",
            "~/../etc",
            "~/a/./b",
            "~/a//b",
            "~user/x",
            "~/a\nb",
        ] {
            let e = CachePath::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("`{bad}`")), "{bad}: {e}");
        }
    }

    #[test]
    fn overlapping_caches_and_a_key_without_caches_are_refused() {
        let p = |s| CachePath::parse(s).unwrap();
        assert!(validate(&[p("~/.npm"), p("~/.cache/pip")], Some("k")).is_ok());
        let (f, m) = validate(&[p("~/.cargo"), p("~/.cargo/registry")], None).unwrap_err();
        assert_eq!(f, "cache");
        assert!(m.contains("overlap"), "{m}");
        assert!(!p("~/.cargo").overlaps(&p("~/.cargo-x")));
        assert_eq!(validate(&[], Some("k")).unwrap_err().0, "cache_key");
        assert_eq!(
            validate(&[p("~/.npm")], Some(" ")).unwrap_err().0,
            "cache_key"
        );
        assert!(serde_json::from_str::<CachePath>("\"/tmp\"").is_err());
    }
}
