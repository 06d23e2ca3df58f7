//! Making one repository safe for the host's git: its `config` replaced by a minimal safe one,
//! `config.worktree` removed, `hooks/` replaced by an empty directory, a `commondir` that points
//! anywhere but a checked git directory of the tree removed, a `.git` file that does the same
//! removed (or, when the tree had one before the run, its earlier content put back), a `.git`
//! symlink removed. Objects, refs, the index, `HEAD` and logs are never touched. Every
//! operation is on descriptors reached without following a symlink ([`crate::beneath`]); a
//! symlinked `config` or `hooks` is removed itself, never followed. The originals go to the
//! run's control directory ([`super::originals`]) first.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::config;
use super::diff::{Action, What};
use super::originals::{Originals, Slot};
use super::pointer;
use super::quote::escape;
use super::walk::{MAX_GITFILE, TreeInventory};
use crate::beneath::{self, TreePath};
use crate::fsat::{self, Access, FsError};
use crate::outcome::git::{RepoKind, Sanitized, Surface};
use crate::outcome::{Violation, ViolationKind};

/// Bytes of an escaped relative path kept in reports.
pub const REL_BOUND: usize = 512;

/// What one sanitizing works with.
#[derive(Debug)]
pub struct Ctx<'a> {
    /// The tree's root.
    pub root: &'a Path,
    /// The tree after the run.
    pub after: &'a TreeInventory,
    /// Where originals go.
    pub originals: &'a mut Originals,
}

/// A failure to make a repository safe: reported as a violation (the round fails).
#[derive(Debug, thiserror::Error)]
pub enum SanitizeError {
    /// A directory on the way could not be opened without following a symlink.
    #[error("failed to open `{path}`: {source}")]
    Open {
        /// The escaped path.
        path: String,
        /// Why.
        source: beneath::BeneathError,
    },
    /// A file could not be replaced.
    #[error("failed to replace `{name}`: {source}")]
    Replace {
        /// The file (`config`, `hooks`, ...).
        name: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A directory could not be created.
    #[error("failed to create `{name}`: {source}")]
    Create {
        /// The directory (`hooks`).
        name: &'static str,
        /// Why.
        source: beneath::BeneathError,
    },
    /// A file could not be removed.
    #[error("failed to remove `{name}`: {source}")]
    Remove {
        /// The file.
        name: &'static str,
        /// Why.
        source: beneath::BeneathError,
    },
}

fn open(root: &Path, rel: &Path) -> Result<beneath::Dir, SanitizeError> {
    let res = if rel.as_os_str().is_empty() {
        beneath::Dir::root(root)
    } else {
        TreePath::new(root, rel)
            .map_err(|e| {
                beneath::BeneathError::from(FsError::Os {
                    call: "resolve",
                    path: root.join(rel),
                    source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()),
                })
            })
            .and_then(|tp| beneath::Dir::open(&tp))
    };
    res.map_err(|source| SanitizeError::Open {
        path: escape(rel.as_os_str().as_bytes(), REL_BOUND),
        source,
    })
}

/// The owner new files get: the git directory's (when this process may hand files over).
fn owner(fd: BorrowedFd<'_>) -> Option<(u32, u32)> {
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    fsat::fstat(fd).ok().map(|st| (st.uid, st.gid))
}

fn give(fd: BorrowedFd<'_>, to: Option<(u32, u32)>) {
    if let Some((uid, gid)) = to {
        // Best effort: the file is safe whoever owns it; this only keeps it the user's.
        let _ = fsat::chown(fd, uid, gid);
    }
}

/// Makes the path of `action` safe. `Ok(None)`: nothing needed replacing after all (a pointer
/// into a checked git directory of the tree, an absent surface).
pub fn apply(ctx: &mut Ctx<'_>, action: &Action) -> Result<Option<Sanitized>, Violation> {
    let out = match &action.what {
        What::Dir { surfaces } => git_dir(ctx, action, surfaces),
        What::File { previous } => git_file(ctx, action, previous.as_deref()),
        What::Link => git_link(ctx, action),
    };
    out.map_err(|e| Violation {
        kind: ViolationKind::GitNotSanitized,
        path: PathBuf::from(display(ctx.root, &action.rel)),
        detail: format!(
            "a git repository the run created or changed could not be made safe for the host's git: {e}"
        ),
        undone: false,
    })
}

/// `root/rel` as text, the agent's part escaped.
pub fn display(root: &Path, rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        root.display().to_string()
    } else {
        format!(
            "{}/{}",
            root.display(),
            escape(rel.as_os_str().as_bytes(), REL_BOUND)
        )
    }
}

fn report(ctx: &Ctx<'_>, action: &Action, kind: RepoKind) -> Sanitized {
    Sanitized {
        tree: ctx.root.to_owned(),
        rel: escape(action.rel.as_os_str().as_bytes(), REL_BOUND),
        kind,
        change: action.change,
        replaced: Vec::new(),
        dropped: Vec::new(),
        originals: None,
        notes: Vec::new(),
    }
}

fn slot(ctx: &mut Ctx<'_>, action: &Action, s: &mut Sanitized) -> Option<Slot> {
    let what = format!(
        "{} ({} {})",
        display(ctx.root, &action.rel),
        s.change,
        s.kind
    );
    match ctx.originals.slot(what) {
        Ok(slot) => Some(slot),
        Err(e) => {
            s.notes
                .push(format!("the originals could not be kept: {e}"));
            None
        }
    }
}

fn git_dir(
    ctx: &mut Ctx<'_>,
    action: &Action,
    surfaces: &[Surface],
) -> Result<Option<Sanitized>, SanitizeError> {
    let dir = open(ctx.root, &action.rel)?;
    let fd = dir.fd();
    let mut todo = Vec::new();
    for &s in surfaces {
        let name = OsStr::new(s.name());
        let present = matches!(dir.stat(name), Ok(Some(_)));
        let wanted = match s {
            // Compared only: git reads no configuration through it.
            Surface::Gitdir | Surface::GitFile | Surface::GitLink => false,
            Surface::Commondir => present && !commondir_is_checked(ctx, &action.rel, fd),
            Surface::Config | Surface::ConfigWorktree | Surface::Hooks => present,
        };
        if wanted {
            todo.push(s);
        }
    }
    if todo.is_empty() {
        return Ok(None);
    }
    let mut s = report(ctx, action, RepoKind::GitDir);
    let mut slot = slot(ctx, action, &mut s);
    let to = owner(fd);
    for surface in todo {
        let name = OsStr::new(surface.name());
        if let Some(slot) = slot.as_mut() {
            ctx.originals
                .keep(slot, fd, name, Path::new(surface.name()));
        }
        if let Ok(Some(st)) = dir.stat(name) {
            if st.kind == beneath::Kind::Symlink {
                s.notes.push(format!(
                    "`{}` was a symlink (to {}): removed, never followed",
                    surface.name(),
                    dir.link_target(name)
                ));
            }
        }
        match surface {
            Surface::Config => {
                let reading = read_config(fd);
                dir.remove_all(name)
                    .map_err(|source| SanitizeError::Remove {
                        name: "config",
                        source,
                    })?;
                let text = config::render(&reading.safe);
                let f = fsat::create_new(fd, name, 0o644)
                    .map_err(FsError::into_io)
                    .and_then(|mut f| f.write_all(text.as_bytes()).map(|()| f))
                    .map_err(|source| SanitizeError::Replace {
                        name: "config",
                        source,
                    })?;
                give(f.as_fd(), to);
                s.dropped = reading.dropped;
                s.notes.extend(reading.unreadable);
            }
            Surface::Hooks => {
                dir.remove_all(name)
                    .map_err(|source| SanitizeError::Remove {
                        name: "hooks",
                        source,
                    })?;
                dir.mkdir(name, 0o755)
                    .map_err(|source| SanitizeError::Create {
                        name: "hooks",
                        source,
                    })?;
                if let Ok(d) = fsat::open_dir(fd, name, Access::Read) {
                    give(d.as_fd(), to);
                }
            }
            Surface::ConfigWorktree | Surface::Commondir => {
                dir.remove_all(name)
                    .map_err(|source| SanitizeError::Remove {
                        name: surface.name(),
                        source,
                    })?;
            }
            Surface::Gitdir | Surface::GitFile | Surface::GitLink => continue,
        }
        s.replaced.push(surface);
    }
    s.originals = slot.map(Slot::finish);
    Ok(Some(s))
}

/// The original `config`, read if it is a regular file (anything else keeps nothing).
fn read_config(fd: BorrowedFd<'_>) -> config::Reading {
    match fsat::read_regular(fd, OsStr::new("config"), config::MAX_CONFIG_BYTES) {
        Ok((bytes, complete)) => config::read(&bytes, complete),
        Err(e) => config::Reading {
            unreadable: Some(format!(
                "the original `config` could not be read as a regular file ({}): nothing of it was kept",
                e.cause()
            )),
            ..config::Reading::default()
        },
    }
}

/// Whether the git directory's `commondir` points at a git directory this walk checked.
fn commondir_is_checked(ctx: &Ctx<'_>, rel: &Path, fd: BorrowedFd<'_>) -> bool {
    let Ok((bytes, true)) = fsat::read_regular(fd, OsStr::new("commondir"), 4096) else {
        return false;
    };
    pointer::commondir_target(&bytes)
        .and_then(|t| pointer::resolve(ctx.root, rel, t))
        .is_some_and(|target| ctx.after.is_git_dir(&target))
}

fn parent(rel: &Path) -> &Path {
    rel.parent().unwrap_or(Path::new(""))
}

fn git_file(
    ctx: &mut Ctx<'_>,
    action: &Action,
    previous: Option<&[u8]>,
) -> Result<Option<Sanitized>, SanitizeError> {
    let base = parent(&action.rel);
    let dir = open(ctx.root, base)?;
    let fd = dir.fd();
    let name = OsStr::new(".git");
    let current = fsat::read_regular(fd, name, MAX_GITFILE).ok();
    if let Some((bytes, true)) = &current {
        let checked = pointer::gitfile_target(bytes)
            .and_then(|t| pointer::resolve(ctx.root, base, t))
            .is_some_and(|target| ctx.after.is_git_dir(&target));
        if checked {
            return Ok(None);
        }
    }
    let mut s = report(ctx, action, RepoKind::GitFile);
    let mut slot = slot(ctx, action, &mut s);
    if let Some(slot) = slot.as_mut() {
        ctx.originals.keep(slot, fd, name, Path::new("git-file"));
    }
    dir.remove_all(name)
        .map_err(|source| SanitizeError::Remove {
            name: ".git",
            source,
        })?;
    match previous {
        Some(before) => {
            let f = fsat::create_new(fd, name, 0o644)
                .map_err(FsError::into_io)
                .and_then(|mut f| f.write_all(before).map(|()| f))
                .map_err(|source| SanitizeError::Replace {
                    name: ".git",
                    source,
                })?;
            give(f.as_fd(), owner(fd));
            s.notes.push(
                "it pointed elsewhere than a git directory of this tree: the content it had before the run was put back".into(),
            );
        }
        None => s
            .notes
            .push("it pointed elsewhere than a git directory of this tree: removed".into()),
    }
    s.replaced.push(Surface::GitFile);
    s.originals = slot.map(Slot::finish);
    Ok(Some(s))
}

fn git_link(ctx: &mut Ctx<'_>, action: &Action) -> Result<Option<Sanitized>, SanitizeError> {
    let dir = open(ctx.root, parent(&action.rel))?;
    let name = OsStr::new(".git");
    let mut s = report(ctx, action, RepoKind::GitLink);
    let mut slot = slot(ctx, action, &mut s);
    if let Some(slot) = slot.as_mut() {
        ctx.originals
            .keep(slot, dir.fd(), name, Path::new("git-link"));
    }
    s.notes.push(format!(
        "a symlink (to {}): removed, never followed",
        dir.link_target(name)
    ));
    dir.unlink(name, false)
        .map_err(|source| SanitizeError::Remove {
            name: ".git",
            source,
        })?;
    s.replaced.push(Surface::GitLink);
    s.originals = slot.map(Slot::finish);
    Ok(Some(s))
}
