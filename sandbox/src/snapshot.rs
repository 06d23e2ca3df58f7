//! Protected paths hold in fact, not only by mount (SPEC §5 "The host boundary"): before a run,
//! every protected path is walked (never following a symlink) and what it holds is recorded —
//! each entry's identity (kind, device, inode, mode, owner, size, modification and change
//! times) and a copy of each regular file's content and each symlink's target, in the run's
//! control directory; after the run, once its processes are gone, the walk is repeated and every
//! difference, by whatever route it came (a mount that did not hold, a rename, a hard link made
//! earlier), is undone from the copy and reported as a [`Violation`] naming the path.
//!
//! A protected regular file with more than one hard link is refused before the run (exit 64): a
//! link elsewhere in a writable tree would let the round change it. The copies are bounded
//! ([`COPY_BUDGET`]); a change to a file beyond the budget is still found, but reported as not
//! undone.

use std::ffi::{OsStr, OsString};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;

use crate::beneath::{self, Dir, Found, Kind, TreePath};
use crate::error::SandboxError;
use crate::fsat::{self, Access};
use crate::outcome::{Violation, ViolationKind};

/// Bytes of protected content copied before a run.
pub const COPY_BUDGET: u64 = 64 * 1024 * 1024;

/// Entries walked per run (a bound on a protected tree's size).
pub const ENTRY_LIMIT: usize = 100_000;

/// Why the protected paths could not be recorded, checked or put back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// A step inside a tree (never through a link) failed.
    #[error(transparent)]
    Beneath(#[from] beneath::BeneathError),
    /// A file operation on a named path failed.
    #[error("failed to {op} `{}`: {source}", path.display())]
    Path {
        /// What was done (`fstatat`, `list`, `read`, `create`, `copy`).
        op: &'static str,
        /// Where.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A call on an entry reached through its directory failed.
    #[error("{call}: {source}")]
    Call {
        /// The call (`openat`, `fchmodat`, `fchmod`, `symlinkat`).
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// Reading a copy back or writing an entry failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A name or a link target holds a NUL byte.
    #[error("NUL in a {0}")]
    Nul(&'static str),
    /// The protected paths are too big to walk.
    #[error("the protected paths hold more than {ENTRY_LIMIT} entries; protect less")]
    TooManyEntries,
    /// The protected paths nest too deep to walk.
    #[error("the protected paths nest more than {DEPTH_LIMIT} directories deep; protect less")]
    TooDeep,
    /// An entry that cannot be put back as it was.
    #[error("{0}")]
    NotRestorable(&'static str),
}

/// The last OS error of a raw call, as a [`SnapshotError::Call`].
fn call_failed(call: &'static str) -> SnapshotError {
    SnapshotError::Call {
        call,
        source: std::io::Error::last_os_error(),
    }
}

/// What identifies an entry's state (atime left out: reading is not a change).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ident {
    kind: Kind,
    dev: u64,
    ino: u64,
    mode: u32,
    nlink: u64,
    uid: u32,
    gid: u32,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

#[derive(Debug)]
struct Entry {
    at: TreePath,
    ident: Ident,
    /// The content's copy (regular files within the budget).
    copy: Option<PathBuf>,
    /// A symlink's target.
    link: Option<OsString>,
}

/// The recorded state of a run's protected paths.
#[derive(Debug, Default)]
pub struct Snapshot {
    roots: Vec<TreePath>,
    entries: Vec<Entry>,
    store: Option<PathBuf>,
    /// Where this run's copies go (`store`, once made).
    store_dir: PathBuf,
    /// Files copied by this take (a kept copy reused is not counted).
    copied: usize,
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)` of `name` in `dir` as an [`Ident`]; `None` when absent.
fn lstat_ident(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
) -> Result<Option<Ident>, SnapshotError> {
    let st = fsat::lstat(dir, name).map_err(|e| fs_failed("fstatat", path, e))?;
    Ok(st.map(|st| Ident {
        kind: st.kind,
        dev: st.dev,
        ino: st.ino,
        mode: st.mode,
        nlink: st.nlink,
        uid: st.uid,
        gid: st.gid,
        size: st.size,
        mtime: st.mtime,
        ctime: st.ctime,
    }))
}

fn fs_failed(op: &'static str, path: &Path, e: fsat::FsError) -> SnapshotError {
    SnapshotError::Path {
        op,
        path: path.to_owned(),
        source: e.into_io(),
    }
}

fn child(p: &TreePath, name: &OsStr) -> TreePath {
    TreePath {
        root: p.root.clone(),
        rel: p.rel.join(name),
    }
}

/// Directory levels below a protected path that are walked (a bound on the walk's open
/// descriptors: one per level).
pub const DEPTH_LIMIT: usize = 64;

/// What [`walk_with`] calls for each entry: where it is, what it is, and the directory holding
/// it (open for reading, so the entry is reached by name from it, never by path again).
type Visit<'v> =
    dyn FnMut(&TreePath, &Ident, BorrowedFd<'_>, &OsStr) -> Result<(), SnapshotError> + 'v;

/// Walks `root` (a protected path) and what is below it, never following a symlink: each entry
/// with its identity, directories before what they hold, each directory listed once from a
/// descriptor opened from its parent's (and checked to be the entry just seen there).
fn walk_with(
    root: &TreePath,
    visit: &mut Visit<'_>,
) -> Result<Vec<(TreePath, Ident)>, SnapshotError> {
    let mut out = Vec::new();
    let parent = Dir::parent_of(root)?;
    let name = root.rel.file_name().unwrap_or_default();
    let Some(top) = lstat_ident(parent.fd(), name, &root.full())? else {
        return Ok(out);
    };
    visit(root, &top, parent.fd(), name)?;
    out.push((root.clone(), top));
    if top.kind == Kind::Dir {
        let fd = open_seen_dir(parent.fd(), name, &top, root)?;
        walk_below(root, fd.as_fd(), 1, visit, &mut out)?;
    }
    Ok(out)
}

fn walk_below(
    d: &TreePath,
    fd: BorrowedFd<'_>,
    depth: usize,
    visit: &mut Visit<'_>,
    out: &mut Vec<(TreePath, Ident)>,
) -> Result<(), SnapshotError> {
    if depth > DEPTH_LIMIT {
        return Err(SnapshotError::TooDeep);
    }
    let mut names: Vec<OsString> = fsat::entries(fd)
        .map_err(|e| fs_failed("list", &d.full(), e))?
        .into_iter()
        .map(|e| e.name)
        .collect();
    names.sort();
    for n in names {
        if out.len() >= ENTRY_LIMIT {
            return Err(SnapshotError::TooManyEntries);
        }
        let at = child(d, &n);
        if let Some(ident) = lstat_ident(fd, &n, &at.full())? {
            visit(&at, &ident, fd, &n)?;
            out.push((at.clone(), ident));
            if ident.kind == Kind::Dir {
                let sub = open_seen_dir(fd, &n, &ident, &at)?;
                walk_below(&at, sub.as_fd(), depth + 1, visit, out)?;
            }
        }
    }
    Ok(())
}

/// The directory `name` in `dir` opened for listing: a symlink is never followed, and what is
/// opened must be the entry `seen` a moment ago (not one swapped in since).
fn open_seen_dir(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    seen: &Ident,
    at: &TreePath,
) -> Result<OwnedFd, SnapshotError> {
    let fd =
        fsat::open_dir(dir, name, Access::Read).map_err(|e| fs_failed("open", &at.full(), e))?;
    let st = fsat::fstat(fd.as_fd()).map_err(|e| fs_failed("fstat", &at.full(), e))?;
    if (st.dev, st.ino) != (seen.dev, seen.ino) {
        return Err(SnapshotError::Path {
            op: "open",
            path: at.full(),
            source: std::io::Error::other("replaced while it was being walked"),
        });
    }
    Ok(fd)
}

/// [`walk_with`] without a visit.
fn walk(root: &TreePath) -> Result<Vec<(TreePath, Ident)>, SnapshotError> {
    walk_with(root, &mut |_, _, _, _| Ok(()))
}

/// Refuses protected regular files with more than one hard link (before a run).
pub fn refuse_hard_links(protected: &[TreePath]) -> Result<(), SandboxError> {
    for root in protected {
        let entries = walk(root).map_err(|e| SandboxError::invalid("protect", e.to_string()))?;
        if let Some((at, ident)) = entries
            .iter()
            .find(|(_, i)| i.kind == Kind::File && i.nlink > 1)
        {
            return Err(SandboxError::invalid(
                "protect",
                format!(
                    "the protected file `{}` has {} hard links: a link elsewhere in a writable tree would let a round change it; replace it with a copy (cp --remove-destination)",
                    at.full().display(),
                    ident.nlink
                ),
            ));
        }
    }
    Ok(())
}

/// Copies the regular file `name` in `dir` (the entry `ident` at `at`, checked to be the one
/// opened) into `store` as its `n`th copy, up to `budget` bytes; `created` records that the
/// store exists. Returns the copy's path and the bytes copied.
#[allow(clippy::too_many_arguments)]
fn copy_out(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    ident: &Ident,
    at: &TreePath,
    store: &Path,
    created: &mut Option<PathBuf>,
    n: usize,
    budget: u64,
) -> Result<(PathBuf, u64), SnapshotError> {
    if created.is_none() {
        std::fs::create_dir_all(store).map_err(|source| SnapshotError::Path {
            op: "create",
            path: store.to_owned(),
            source,
        })?;
        *created = Some(store.to_owned());
    }
    let mut src = open_recorded(dir, name, ident, at)?;
    let copy = store.join(n.to_string());
    let copied = copy_into(&mut src, &copy, budget)?;
    Ok((copy, copied))
}

/// The regular file `name` in `dir` opened for reading, checked to be the entry `ident` at `at`
/// (not one swapped in since it was seen).
fn open_recorded(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    ident: &Ident,
    at: &TreePath,
) -> Result<std::fs::File, SnapshotError> {
    let (src, st) = fsat::open_regular(dir, name).map_err(|e| fs_failed("read", &at.full(), e))?;
    if (st.dev, st.ino) != (ident.dev, ident.ino) {
        return Err(SnapshotError::Path {
            op: "read",
            path: at.full(),
            source: std::io::Error::other("replaced while it was being recorded"),
        });
    }
    Ok(src)
}

/// Copies up to `budget` bytes of `src` into a new file at `copy` (owner-only).
fn copy_into(src: &mut std::fs::File, copy: &Path, budget: u64) -> Result<u64, SnapshotError> {
    use std::os::unix::fs::OpenOptionsExt;
    let on_copy = |op| {
        let path = copy.to_owned();
        move |source| SnapshotError::Path { op, path, source }
    };
    let mut dst = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(copy)
        .map_err(on_copy("create"))?;
    std::io::copy(&mut src.take(budget), &mut dst).map_err(on_copy("copy"))
}

/// Copies the regular file `name` in `dir` (the entry `ident` at `at`) for a kept copy: into
/// `tmp`, renamed to `path` once whole (a file that changed meanwhile keeps its copy at `tmp`,
/// for this run only: the next take sweeps it). Returns the copy's path and the bytes copied.
fn copy_kept(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    ident: &Ident,
    at: &TreePath,
    (tmp, path): (PathBuf, PathBuf),
    budget: u64,
) -> Result<(PathBuf, u64), SnapshotError> {
    let mut src = open_recorded(dir, name, ident, at)?;
    let copied = copy_into(&mut src, &tmp, budget)?;
    let after = fsat::fstat(src.as_fd()).map_err(|e| fs_failed("fstat", &at.full(), e))?;
    if copied != ident.size
        || (after.size, after.mtime, after.ctime) != (ident.size, ident.mtime, ident.ctime)
    {
        return Ok((tmp, copied));
    }
    std::fs::rename(&tmp, &path).map_err(|source| SnapshotError::Path {
        op: "keep",
        path: path.clone(),
        source,
    })?;
    Ok((path, copied))
}

impl Snapshot {
    /// Records `protected` (after the run's placeholders exist), copying content into `store`
    /// (a runner-owned directory, created here).
    pub fn take(protected: &[TreePath], store: &Path) -> Result<Snapshot, SnapshotError> {
        Self::take_kept(protected, store, None)
    }

    /// [`Snapshot::take`], reusing the copies kept in `kept` (a runner-owned directory of the
    /// job, created here) by the earlier runs of the job for the files that did not change
    /// since, and keeping there the copies it makes ([`kept`]). A `kept` that cannot be made
    /// only costs the copies.
    pub fn take_kept(
        protected: &[TreePath],
        store: &Path,
        kept: Option<&Path>,
    ) -> Result<Snapshot, SnapshotError> {
        Self::take_at(protected, store, kept, std::time::SystemTime::now())
    }

    /// [`Snapshot::take_kept`] as if the clock said `now` (tests: a take a while after the
    /// files were written).
    fn take_at(
        protected: &[TreePath],
        store: &Path,
        kept: Option<&Path>,
        now: std::time::SystemTime,
    ) -> Result<Snapshot, SnapshotError> {
        let mut kept = kept.and_then(|d| kept::Kept::open(d, now).ok());
        let mut snap = Snapshot {
            roots: protected.to_vec(),
            entries: Vec::new(),
            store: None,
            store_dir: store.to_owned(),
            copied: 0,
        };
        let mut budget = COPY_BUDGET;
        for root in protected {
            let mut entries = Vec::new();
            walk_with(root, &mut |at, ident, dir, name| {
                let mut entry = Entry {
                    at: at.clone(),
                    ident: *ident,
                    copy: None,
                    link: None,
                };
                match ident.kind {
                    Kind::File if ident.size <= budget => {
                        let (copy, copied) = match kept.as_mut().map(|k| k.place(ident)) {
                            Some(kept::Place::Kept(copy)) => (copy, ident.size),
                            Some(kept::Place::Copy(tmp, path)) => {
                                snap.copied += 1;
                                copy_kept(dir, name, ident, at, (tmp, path), budget)?
                            }
                            Some(kept::Place::NotKept) | None => {
                                snap.copied += 1;
                                let n = snap.entries.len() + entries.len();
                                copy_out(dir, name, ident, at, store, &mut snap.store, n, budget)?
                            }
                        };
                        budget = budget.saturating_sub(copied);
                        entry.copy = Some(copy);
                    }
                    Kind::Symlink => {
                        entry.link = fsat::read_link(dir, name).ok().map(OsString::from_vec);
                    }
                    _ => {}
                }
                entries.push(entry);
                Ok(())
            })?;
            snap.entries.extend(entries);
        }
        if let Some(k) = &kept {
            k.sweep();
        }
        Ok(snap)
    }

    /// How many files this take copied (a kept copy reused is not one).
    pub fn copied(&self) -> usize {
        self.copied
    }

    /// After the run (its processes gone): every difference from the recorded state is undone
    /// and reported. The copies are removed when nothing changed.
    pub fn check_and_restore(&self) -> Vec<Violation> {
        let mut out = Vec::new();
        let mut now = Vec::new();
        for root in &self.roots {
            match walk(root) {
                Ok(entries) => now.extend(entries),
                Err(e) => out.push(Violation {
                    kind: ViolationKind::Uncheckable,
                    path: root.full(),
                    detail: format!("could not be checked after the run: {e}"),
                    undone: false,
                }),
            }
        }
        // Entries that appeared: removed (deepest first, so a new directory goes with its
        // content in one step at its top).
        for (at, _) in &now {
            if self.entries.iter().any(|e| e.at == *at) {
                continue;
            }
            // Below another new entry: removed with it.
            let under_new = now.iter().any(|(p, _)| {
                p != at
                    && p.root == at.root
                    && at.rel.starts_with(&p.rel)
                    && !self.entries.iter().any(|e| e.at == *p)
            });
            if under_new {
                continue;
            }
            let removed = beneath::remove_all(at);
            out.push(Violation {
                kind: ViolationKind::ProtectedChanged,
                path: at.full(),
                detail: format!(
                    "appeared in a protected path during the run{}",
                    match &removed {
                        Ok(_) => "; it has been removed".to_owned(),
                        Err(e) => format!("; it could not be removed: {e}"),
                    }
                ),
                undone: removed.is_ok(),
            });
        }
        // Entries that changed or disappeared: restored from the record (parents first).
        for (i, e) in self.entries.iter().enumerate() {
            let current = now.iter().find(|(p, _)| *p == e.at).map(|(_, i)| *i);
            if current == Some(e.ident) {
                continue;
            }
            self.keep_as_evidence(i, e);
            let what = match current {
                None => "disappeared",
                Some(c) if c.kind != e.ident.kind => "was replaced",
                Some(_) => "was changed",
            };
            let restored = self.restore(e, current.is_some());
            out.push(Violation {
                kind: ViolationKind::ProtectedChanged,
                path: e.at.full(),
                detail: format!(
                    "{what} during the run although it is protected{}",
                    match &restored {
                        Ok(()) => "; it has been restored".to_owned(),
                        Err(m) => format!("; it could not be restored: {m}"),
                    }
                ),
                undone: restored.is_ok(),
            });
        }
        if out.is_empty() {
            if let Some(store) = &self.store {
                let _ = std::fs::remove_dir_all(store);
            }
        }
        out
    }

    /// Copies the `i`th entry's content into this run's copies when it is a copy kept for the
    /// job ([`kept`]): what was undone stays next to the round's logs, as evidence, after the
    /// job's kept copies are gone.
    fn keep_as_evidence(&self, i: usize, e: &Entry) {
        let Some(copy) = e.copy.as_ref().filter(|c| !c.starts_with(&self.store_dir)) else {
            return;
        };
        if std::fs::create_dir_all(&self.store_dir).is_ok() {
            let _ = std::fs::copy(copy, self.store_dir.join(i.to_string()));
        }
    }

    /// Puts `e` back as recorded.
    fn restore(&self, e: &Entry, exists: bool) -> Result<(), SnapshotError> {
        let dir = Dir::parent_of(&e.at)?;
        let name = e.at.rel.file_name().unwrap_or_default();
        let mode = e.ident.mode & 0o7777;
        match e.ident.kind {
            Kind::Dir => {
                if exists {
                    if let Ok(Found::Exists(st)) = beneath::inspect(&e.at) {
                        if st.kind != Kind::Dir {
                            dir.unlink(name, false)?;
                        }
                    }
                }
                dir.mkdir(name, mode)?;
                chmod_at(&dir, name, mode)
            }
            Kind::File => {
                let copy = e.copy.as_ref().ok_or(SnapshotError::NotRestorable(
                    "its content was over the copy budget",
                ))?;
                if exists {
                    beneath::remove_all(&e.at)?;
                }
                let mut src = std::fs::File::open(copy)?;
                let mut data = Vec::new();
                src.read_to_end(&mut data)?;
                write_new_at(&dir, name, mode, &data)
            }
            Kind::Symlink => {
                let target = e
                    .link
                    .as_ref()
                    .ok_or(SnapshotError::NotRestorable("its target was not recorded"))?;
                if exists {
                    beneath::remove_all(&e.at)?;
                }
                symlink_at(&dir, name, target)
            }
            Kind::Special => {
                if exists {
                    beneath::remove_all(&e.at)?;
                }
                Err(SnapshotError::NotRestorable(
                    "special files are removed, not recreated",
                ))
            }
        }
    }
}

fn cname(name: &std::ffi::OsStr) -> Result<std::ffi::CString, SnapshotError> {
    std::ffi::CString::new(name.as_bytes()).map_err(|_| SnapshotError::Nul("name"))
}

fn chmod_at(dir: &Dir, name: &std::ffi::OsStr, mode: u32) -> Result<(), SnapshotError> {
    let c = cname(name)?;
    // SAFETY: a valid descriptor and a NUL-terminated name; AT_SYMLINK_NOFOLLOW is refused by
    // some kernels for fchmodat, so the entry is checked to be a directory by the caller.
    let rc = unsafe {
        libc::fchmodat(
            std::os::fd::AsRawFd::as_raw_fd(&dir.fd()),
            c.as_ptr(),
            mode,
            0,
        )
    };
    if rc != 0 {
        return Err(call_failed("fchmodat"));
    }
    Ok(())
}

/// Creates `name` in `dir` exclusively (no symlink followed) with `data` and `mode`.
fn write_new_at(
    dir: &Dir,
    name: &std::ffi::OsStr,
    mode: u32,
    data: &[u8],
) -> Result<(), SnapshotError> {
    use std::os::fd::FromRawFd;
    let c = cname(name)?;
    // SAFETY: a valid descriptor and a NUL-terminated name; O_EXCL|O_NOFOLLOW never follows.
    let fd = unsafe {
        libc::openat(
            std::os::fd::AsRawFd::as_raw_fd(&dir.fd()),
            c.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        )
    };
    if fd < 0 {
        return Err(call_failed("openat"));
    }
    // SAFETY: the kernel just returned this descriptor.
    let mut f = unsafe { std::fs::File::from_raw_fd(fd) };
    f.write_all(data)?;
    // SAFETY: fchmod on a descriptor we own.
    if unsafe { libc::fchmod(fd, mode) } != 0 {
        return Err(call_failed("fchmod"));
    }
    Ok(())
}

fn symlink_at(dir: &Dir, name: &std::ffi::OsStr, target: &OsString) -> Result<(), SnapshotError> {
    let c = cname(name)?;
    let t = std::ffi::CString::new(target.as_bytes()).map_err(|_| SnapshotError::Nul("target"))?;
    // SAFETY: two NUL-terminated strings and a valid descriptor.
    let rc = unsafe {
        libc::symlinkat(
            t.as_ptr(),
            std::os::fd::AsRawFd::as_raw_fd(&dir.fd()),
            c.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(call_failed("symlinkat"));
    }
    Ok(())
}

mod kept;

#[cfg(test)]
mod tests;
