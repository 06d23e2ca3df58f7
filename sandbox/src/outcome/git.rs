//! What the git check of a run found and did (see [`crate::gitguard`]): the repositories in the
//! writable trees that the run created, replaced or changed, and what of each was replaced so
//! that the host's `git` cannot run anything from them. Plain data: it travels back from the
//! native helper as JSON and is journalled by the runner.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// How a repository differs from what the tree held before the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// It was not there before the run.
    New,
    /// Something else stood at its path before the run (another inode, or another kind).
    Replaced,
    /// The same repository, with changed configuration, hooks or pointers.
    Changed,
}

impl Change {
    /// Every value, for pre-initialised metric labels.
    pub const ALL: [Change; 3] = [Change::New, Change::Replaced, Change::Changed];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            Change::New => "new",
            Change::Replaced => "replaced",
            Change::Changed => "changed",
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What was found at a repository's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoKind {
    /// A git directory: a `.git` directory, a bare repository, `.git/modules/*`,
    /// `.git/worktrees/*`.
    GitDir,
    /// A `.git` file (`gitdir: …`).
    GitFile,
    /// A `.git` symlink.
    GitLink,
}

impl fmt::Display for RepoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RepoKind::GitDir => "git directory",
            RepoKind::GitFile => "`.git` file",
            RepoKind::GitLink => "`.git` symlink",
        })
    }
}

/// A file through which the host's git would read configuration or run a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// `config` (replaced by a minimal safe one).
    Config,
    /// `config.worktree` (removed).
    ConfigWorktree,
    /// `hooks/` (replaced by an empty directory).
    Hooks,
    /// `commondir` (removed unless it points at a checked git directory of the same tree).
    Commondir,
    /// `gitdir` of a linked worktree's git directory (compared, never replaced: git reads no
    /// configuration through it).
    Gitdir,
    /// A `.git` file (removed, or its content before the run restored).
    GitFile,
    /// A `.git` symlink (removed, never followed).
    GitLink,
}

impl Surface {
    /// The file's name inside a git directory (or `.git` for the last two).
    pub const fn name(self) -> &'static str {
        match self {
            Surface::Config => "config",
            Surface::ConfigWorktree => "config.worktree",
            Surface::Hooks => "hooks",
            Surface::Commondir => "commondir",
            Surface::Gitdir => "gitdir",
            Surface::GitFile | Surface::GitLink => ".git",
        }
    }
}

impl fmt::Display for Surface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Surface::Config => "config",
            Surface::ConfigWorktree => "config.worktree",
            Surface::Hooks => "hooks/",
            Surface::Commondir => "commondir",
            Surface::Gitdir => "gitdir",
            Surface::GitFile => "the `.git` file",
            Surface::GitLink => "the `.git` symlink",
        })
    }
}

/// One repository (or `.git` file, or `.git` symlink) made safe after a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sanitized {
    /// The writable tree holding it (the workspace or a `--write` root: a trusted path).
    pub tree: PathBuf,
    /// Its path below the tree, escaped (the bytes are the agent's: anything but printable
    /// ASCII, and `\` and `"`, written as `\xNN`, `\\`, `\"`) and bounded; empty for the tree
    /// itself.
    pub rel: String,
    /// What it is.
    pub kind: RepoKind,
    /// How it differs from before the run.
    pub change: Change,
    /// What was replaced or removed.
    pub replaced: Vec<Surface>,
    /// Configuration keys of the replaced `config` that were not kept (escaped, bounded).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// Where the originals are kept (under the run's control directory).
    pub originals: Option<PathBuf>,
    /// Anything else worth saying (a symlink removed, an original too large to keep, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Sanitized {
    /// The host path, as text (the relative part escaped).
    pub fn path(&self) -> String {
        if self.rel.is_empty() {
            self.tree.display().to_string()
        } else {
            format!("{}/{}", self.tree.display(), self.rel)
        }
    }
}

impl fmt::Display for Sanitized {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let replaced: Vec<String> = self.replaced.iter().map(ToString::to_string).collect();
        write!(
            f,
            "\"{}\" ({} {}): replaced {}",
            self.path(),
            self.change,
            self.kind,
            replaced.join(", ")
        )?;
        if !self.dropped.is_empty() {
            write!(f, "; dropped {}", self.dropped.join(", "))?;
        }
        for n in &self.notes {
            write!(f, "; {n}")?;
        }
        if let Some(o) = &self.originals {
            write!(f, "; originals in {}", o.display())?;
        }
        Ok(())
    }
}

/// How many repositories were made safe, by [`Change`] (all of them, itemised or not).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// New ones.
    pub new: u32,
    /// Replaced ones.
    pub replaced: u32,
    /// Changed ones.
    pub changed: u32,
}

impl Counts {
    /// The count of `change`.
    pub const fn get(&self, change: Change) -> u32 {
        match change {
            Change::New => self.new,
            Change::Replaced => self.replaced,
            Change::Changed => self.changed,
        }
    }

    /// Counts one more of `change`.
    pub fn add(&mut self, change: Change) {
        let c = match change {
            Change::New => &mut self.new,
            Change::Replaced => &mut self.replaced,
            Change::Changed => &mut self.changed,
        };
        *c = c.saturating_add(1);
    }

    /// All of them.
    pub const fn total(&self) -> u32 {
        self.new
            .saturating_add(self.replaced)
            .saturating_add(self.changed)
    }
}

/// The git check of one run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitCheck {
    /// The repositories made safe, at most [`GitCheck::MAX_ITEMS`] of them (the counts cover
    /// all).
    #[serde(default)]
    pub sanitized: Vec<Sanitized>,
    /// How many were made safe, by change.
    #[serde(default)]
    pub counts: Counts,
    /// Set when the check could not look at everything (a bound of the walk was reached, a
    /// directory could not be read): what was not looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unchecked: Option<String>,
}

impl GitCheck {
    /// Repositories itemised in [`GitCheck::sanitized`]; the rest are only counted.
    pub const MAX_ITEMS: usize = 64;

    /// Nothing was sanitized and everything was checked.
    pub fn is_empty(&self) -> bool {
        self.counts.total() == 0 && self.unchecked.is_none()
    }
}
