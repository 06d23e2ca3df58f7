//! The writable trees a state store knows, asked for by path when a walk meets a symlink
//! ([`super::resolve::WritableTrees::containing`]), instead of read whole for every submission
//! and every round: a store names every workspace it ever ran (a runner that ran 100,000
//! provisioned jobs knows 100,000 trees), and reading them all cost each round ~110 ms there
//! (`docs/benchmarks.md`, "the twelfth pass"). A walk that meets no symlink asks nothing.
//!
//! A question is "which of these directories (a directory and its ancestors) are trees": one
//! indexed query per directory ([`TreeSource::trees_among`]), each answer kept for the lookup's
//! life (a submission, a round's check). A store that cannot answer makes the lookup fail
//! closed: the link is refused ([`super::resolve::ResolveError::TreesUnknown`]) and
//! [`TreeLookup::failure`] tells the caller that the store, not the request, is at fault.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where the trees are kept: answers which of some paths are writable trees. A store's trees
/// are real paths, as resolved when their job was made, so a path is one by exact text.
pub trait TreeSource: Send + Sync {
    /// Which of `paths` (absolute, UTF-8) are writable trees.
    fn trees_among(&self, paths: &[String]) -> Result<Vec<String>, String>;
}

/// Asks a [`TreeSource`] about directories, each at most once.
#[derive(Clone)]
pub struct TreeLookup {
    source: Arc<dyn TreeSource>,
    known: Arc<Mutex<Known>>,
}

/// What the source said so far.
#[derive(Default)]
struct Known {
    /// Whether each path asked about is a tree.
    answers: HashMap<PathBuf, bool>,
    /// Why the source could not answer, the first time it could not.
    failure: Option<String>,
}

impl std::fmt::Debug for TreeLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TreeLookup").finish_non_exhaustive()
    }
}

impl TreeLookup {
    /// Asks `source`.
    pub fn new(source: Arc<dyn TreeSource>) -> Self {
        Self {
            source,
            known: Arc::new(Mutex::new(Known::default())),
        }
    }

    /// The innermost of `dir` and its ancestors that is a tree, looking only at those with more
    /// than `deeper_than` components (a tree already known there makes the shallower ones
    /// moot). `Err` when the source could not answer (kept: [`TreeLookup::failure`]).
    pub fn innermost(&self, dir: &Path, deeper_than: usize) -> Result<Option<PathBuf>, String> {
        let candidates: Vec<&Path> = dir
            .ancestors()
            .filter(|a| a.components().count() > deeper_than)
            .collect();
        let mut known = self
            .known
            .lock()
            .map_err(|_| "the tree lookup's answers were poisoned".to_owned())?;
        // A path that is not UTF-8 cannot be a stored tree (a job's paths are stored as text).
        let ask: Vec<String> = candidates
            .iter()
            .filter(|a| !known.answers.contains_key(**a))
            .filter_map(|a| a.to_str().map(str::to_owned))
            .collect();
        if !ask.is_empty() {
            let trees = match self.source.trees_among(&ask) {
                Ok(t) => t,
                Err(why) => {
                    known.failure.get_or_insert_with(|| why.clone());
                    return Err(why);
                }
            };
            for a in &ask {
                let is_tree = trees.iter().any(|t| t == a);
                known.answers.insert(PathBuf::from(a), is_tree);
            }
        }
        Ok(candidates
            .into_iter()
            .find(|a| known.answers.get(*a).copied().unwrap_or(false))
            .map(Path::to_path_buf))
    }

    /// Why the source could not answer, if it once could not: the store's fault, to report as
    /// such rather than as the refused path's.
    pub fn failure(&self) -> Option<String> {
        self.known.lock().ok().and_then(|k| k.failure.clone())
    }
}

/// A store of given trees that records every question, or that is down (tests).
#[cfg(test)]
pub(crate) struct FakeTrees {
    trees: Vec<String>,
    down: bool,
    /// Every question asked, in order.
    pub(crate) asked: Mutex<Vec<Vec<String>>>,
}

#[cfg(test)]
impl FakeTrees {
    /// A store knowing `trees`; `down`: every question fails.
    pub(crate) fn new(trees: &[&Path], down: bool) -> Arc<Self> {
        Arc::new(Self {
            trees: trees.iter().map(|t| t.display().to_string()).collect(),
            down,
            asked: Mutex::new(Vec::new()),
        })
    }

    /// How many questions were asked.
    pub(crate) fn questions(&self) -> usize {
        self.asked.lock().map(|a| a.len()).unwrap_or(0)
    }
}

#[cfg(test)]
impl TreeSource for FakeTrees {
    fn trees_among(&self, paths: &[String]) -> Result<Vec<String>, String> {
        if let Ok(mut a) = self.asked.lock() {
            a.push(paths.to_vec());
        }
        if self.down {
            return Err("the store is down".into());
        }
        Ok(paths
            .iter()
            .filter(|p| self.trees.contains(p))
            .cloned()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recording(trees: &[&str], down: bool) -> Arc<FakeTrees> {
        let trees: Vec<&Path> = trees.iter().map(Path::new).collect();
        FakeTrees::new(&trees, down)
    }

    #[test]
    fn the_innermost_tree_is_found_and_each_directory_is_asked_about_once() {
        let src = recording(&["/w", "/w/a/b", "/other"], false);
        let l = TreeLookup::new(src.clone());
        assert_eq!(
            l.innermost(Path::new("/w/a/b/c"), 0).unwrap(),
            Some(PathBuf::from("/w/a/b"))
        );
        assert_eq!(
            src.asked.lock().unwrap().clone(),
            vec![vec!["/w/a/b/c", "/w/a/b", "/w/a", "/w", "/"]]
        );
        // Its ancestors are known now: only the new directory is asked about.
        assert_eq!(
            l.innermost(Path::new("/w/a/x"), 0).unwrap(),
            Some(PathBuf::from("/w"))
        );
        assert_eq!(src.asked.lock().unwrap()[1], vec!["/w/a/x"]);
        // Nothing new: no question.
        assert_eq!(
            l.innermost(Path::new("/w/a"), 0).unwrap(),
            Some(PathBuf::from("/w"))
        );
        assert_eq!(src.asked.lock().unwrap().len(), 2);
        assert_eq!(l.innermost(Path::new("/x/y"), 0).unwrap(), None);
        // A clone shares the answers.
        let c = l.clone();
        assert_eq!(
            c.innermost(Path::new("/x/y"), 0).unwrap(),
            None,
            "already known"
        );
        assert_eq!(src.asked.lock().unwrap().len(), 3);
    }

    #[test]
    fn only_directories_deeper_than_a_known_tree_are_asked_about() {
        let src = recording(&["/w/a"], false);
        let l = TreeLookup::new(src.clone());
        // A tree known elsewhere at `/w` (2 components): `/w/a/b` and `/w/a` are asked about.
        assert_eq!(
            l.innermost(Path::new("/w/a/b"), 2).unwrap(),
            Some(PathBuf::from("/w/a"))
        );
        assert_eq!(src.asked.lock().unwrap()[0], vec!["/w/a/b", "/w/a"]);
        assert_eq!(l.innermost(Path::new("/w/z"), 3).unwrap(), None);
        assert_eq!(src.asked.lock().unwrap().len(), 1, "nothing deeper than 3");
    }

    #[test]
    fn a_store_that_cannot_answer_fails_and_says_so() {
        let l = TreeLookup::new(recording(&["/w"], true));
        assert_eq!(l.failure(), None);
        let e = l.innermost(Path::new("/w/a"), 0).unwrap_err();
        assert!(e.contains("the store is down"), "{e}");
        assert_eq!(l.failure().as_deref(), Some("the store is down"));
        // Asked again: asked again, and failing again.
        assert!(l.innermost(Path::new("/w/a"), 0).is_err());
    }

    #[test]
    fn a_path_that_is_not_utf8_is_not_asked_about() {
        use std::os::unix::ffi::OsStrExt;
        let src = recording(&["/w"], false);
        let l = TreeLookup::new(src.clone());
        let odd = Path::new("/w").join(std::ffi::OsStr::from_bytes(b"\xff"));
        assert_eq!(l.innermost(&odd, 0).unwrap(), Some(PathBuf::from("/w")));
        assert_eq!(src.asked.lock().unwrap()[0], vec!["/w", "/"]);
    }
}
