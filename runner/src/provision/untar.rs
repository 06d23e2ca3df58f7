//! Safe unpacking of an uploaded workspace (a tar stream) and the client's packing of one
//! (SPEC §11, `ralph submit --upload DIR`).
//!
//! [`unpack`] parses with the `tar` crate but creates every entry itself beneath `dest`'s
//! open fd without following a symlink ([`ralph_sandbox::fsat`]: every directory opened
//! component by component with `O_NOFOLLOW | O_DIRECTORY`, every final name created with a
//! `*at` call that does not follow it, so a symlink made earlier in the same upload cannot
//! redirect a write), so nothing is ever written outside `dest`. It refuses, naming the entry
//! and the rule: absolute paths, `..`, a path through a symlink or a file, symlinks that are
//! absolute or climb out, hard links other than to an earlier regular file of the same upload,
//! devices, fifos and other special entries, and uploads over [`UnpackLimits`] (counted on the
//! bytes actually written and on the raw stream). Modes are masked (no
//! setuid/setgid/sticky/world-write), owners and times are not applied. On any error `dest` is
//! emptied again.

mod entry_path;
mod pack;

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use ralph_sandbox::fsat::{self, Access, Create, FsError};
use tar::EntryType;

use entry_path::{Components, Step};

pub use pack::pack;

/// Upper bounds of one upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Bytes of file content written (sparse holes count as written).
    pub max_bytes: u64,
    /// Entries created (files, directories, symlinks, hard links).
    pub max_files: u64,
}

/// What an [`unpack`] created, or what a [`pack`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnpackSummary {
    /// Entries (files, directories, symlinks, hard links).
    pub files: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// [`pack`] only: sockets, fifos and devices left out.
    pub skipped: u64,
}

/// The rule an upload's entry broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The path starts with `/`.
    AbsolutePath,
    /// The path has a `..` component.
    ParentDir,
    /// The path has a NUL byte.
    NulByte,
    /// A non-directory entry names the workspace itself (`.`).
    EmptyPath,
    /// A parent component is a symlink or not a directory.
    ThroughLink,
    /// The path is already a directory and the entry is not one.
    IsDirectory,
    /// A symlink with an empty target.
    EmptyLinkTarget,
    /// A symlink with an absolute target.
    LinkAbsolute,
    /// A symlink whose target climbs above the workspace.
    LinkOutside,
    /// A symlink whose target climbs `..` out of something that is not a real directory.
    LinkThroughLink,
    /// A hard link to anything but an earlier regular file of the upload.
    HardLinkTarget,
    /// A device, fifo or socket (the kind named).
    Special(&'static str),
    /// An entry type ralph does not unpack (its type byte).
    Unsupported(u8),
    /// More entries than [`UnpackLimits::max_files`].
    TooManyFiles(u64),
    /// More content than [`UnpackLimits::max_bytes`].
    TooManyBytes(u64),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::AbsolutePath => write!(f, "absolute paths are not allowed"),
            Rule::ParentDir => write!(f, "`..` path components are not allowed"),
            Rule::NulByte => write!(f, "NUL bytes in paths are not allowed"),
            Rule::EmptyPath => write!(f, "only a directory may name the workspace itself"),
            Rule::ThroughLink => write!(
                f,
                "a parent component is a symlink or not a directory (nothing is written through a link)"
            ),
            Rule::IsDirectory => write!(f, "the path is already a directory of this upload"),
            Rule::EmptyLinkTarget => write!(f, "the link target is empty"),
            Rule::LinkAbsolute => write!(f, "absolute link targets are not allowed"),
            Rule::LinkOutside => write!(f, "the link target points outside the workspace"),
            Rule::LinkThroughLink => write!(
                f,
                "the link target climbs `..` out of something that is not a directory of this upload"
            ),
            Rule::HardLinkTarget => write!(
                f,
                "a hard link must name an earlier regular file of this upload"
            ),
            Rule::Special(kind) => write!(
                f,
                "{kind} entries are not allowed (only files, directories and links)"
            ),
            Rule::Unsupported(byte) => {
                write!(
                    f,
                    "unsupported entry type `{}`",
                    char::from(*byte).escape_default()
                )
            }
            Rule::TooManyFiles(max) => {
                write!(f, "the upload has more than {max} entries (the limit)")
            }
            Rule::TooManyBytes(max) => {
                write!(f, "the upload's files exceed {max} bytes (the limit)")
            }
        }
    }
}

/// A failure to unpack or pack an upload.
#[derive(Debug, thiserror::Error)]
pub enum UntarError {
    /// An entry broke a rule; nothing of the upload was kept.
    #[error("failed to unpack `{path}`: {rule}")]
    Refused {
        /// The entry's path as the archive gives it.
        path: String,
        /// The rule broken.
        rule: Rule,
    },
    /// A link entry broke a rule about its target; nothing of the upload was kept.
    #[error("failed to unpack `{path}` (a link to `{target}`): {rule}")]
    LinkRefused {
        /// The link's path as the archive gives it.
        path: String,
        /// Its target as the archive gives it.
        target: String,
        /// The rule broken.
        rule: Rule,
    },
    /// The raw stream is larger than the limits allow (a bomb of metadata or padding).
    #[error("failed to unpack the upload: its tar stream exceeds {max} bytes (the limit)")]
    StreamTooLarge {
        /// The stream's bound, derived from [`UnpackLimits`].
        max: u64,
    },
    /// The stream is not a valid tar archive or could not be read.
    #[error("failed to read the upload's tar stream after {entries} entries: {source}")]
    Stream {
        /// Entries unpacked before the failure.
        entries: u64,
        /// The error.
        source: io::Error,
    },
    /// Creating or writing an entry failed.
    #[error("failed to {action} `{path}` of the upload: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The entry's path as the archive gives it.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// The destination is missing, not a directory, or not empty.
    #[error("failed to unpack into `{dest}`: expected an empty directory ({reason})")]
    Dest {
        /// The destination.
        dest: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Emptying the destination after a failure failed too.
    #[error("failed to empty `{dest}` after a refused upload ({first}): {source}")]
    Cleanup {
        /// The destination.
        dest: PathBuf,
        /// Why the upload failed.
        first: Box<UntarError>,
        /// Why the cleanup failed.
        source: io::Error,
    },
    /// Packing a directory failed.
    #[error("failed to pack `{path}`: {source}")]
    Pack {
        /// The file or directory being packed.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// Unpacks the tar stream `reader` into `dest`, an empty directory (created when missing).
/// On error `dest` is left empty and nothing was written outside it.
pub fn unpack(
    reader: impl Read,
    dest: &Path,
    limits: &UnpackLimits,
) -> Result<UnpackSummary, UntarError> {
    let root = open_dest(dest)?;
    let mut capped = Capped {
        inner: reader,
        left: stream_bound(limits),
        exceeded: false,
    };
    let result = unpack_into(&mut capped, &root, limits);
    let result = match result {
        Err(_) if capped.exceeded => Err(UntarError::StreamTooLarge {
            max: stream_bound(limits),
        }),
        other => other,
    };
    drop(root);
    result.map_err(|first| match empty_dir(dest) {
        Ok(()) => first,
        Err(source) => UntarError::Cleanup {
            dest: dest.to_path_buf(),
            first: Box::new(first),
            source,
        },
    })
}

/// The raw stream's bound: the content plus generous room per entry for headers, long names
/// and PAX records, so that metadata cannot be a bomb either.
fn stream_bound(limits: &UnpackLimits) -> u64 {
    limits.max_bytes.saturating_add(
        limits
            .max_files
            .saturating_add(16)
            .saturating_mul(64 * 1024),
    )
}

fn open_dest(dest: &Path) -> Result<OwnedFd, UntarError> {
    let bad = |reason: String| UntarError::Dest {
        dest: dest.to_path_buf(),
        reason,
    };
    match std::fs::create_dir(dest) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(bad(format!("cannot create it: {e}"))),
    }
    let root = fsat::open_root_nofollow(dest, Access::Read)
        .map_err(|e| bad(format!("cannot open it: {}", errno_text(&e))))?;
    let mut listing = std::fs::read_dir(dest).map_err(|e| bad(format!("cannot list it: {e}")))?;
    if listing.next().is_some() {
        return Err(bad("it is not empty".to_string()));
    }
    Ok(root)
}

/// Why `e` failed, in `nix`'s words (`ENOTDIR: Not a directory`).
fn errno_text(e: &FsError) -> String {
    match e.errno() {
        Some(n) => Errno::from_raw(n).to_string(),
        None => e.cause().to_string(),
    }
}

/// Removes everything in `dest` (symlinks removed, never followed).
fn empty_dir(dest: &Path) -> io::Result<()> {
    for child in std::fs::read_dir(dest)? {
        let path = child?.path();
        if std::fs::symlink_metadata(&path)?.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// Mode of directories created on the way to an entry (the archive did not list them).
const PARENT_MODE: u32 = 0o755;

/// A reader that fails once `left` bytes were read.
struct Capped<R> {
    inner: R,
    left: u64,
    exceeded: bool,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.left.checked_sub(n as u64) {
            Some(left) => {
                self.left = left;
                Ok(n)
            }
            None => {
                self.exceeded = true;
                Err(io::Error::other("the tar stream exceeds its bound"))
            }
        }
    }
}

/// What was unpacked so far.
#[derive(Default)]
struct State {
    summary: UnpackSummary,
    /// Regular files this upload wrote (the only allowed hard link targets).
    regular: HashSet<Components>,
}

fn unpack_into(
    reader: impl Read,
    root: &OwnedFd,
    limits: &UnpackLimits,
) -> Result<UnpackSummary, UntarError> {
    let mut archive = tar::Archive::new(reader);
    let mut state = State::default();
    let stream = |state: &State, source| UntarError::Stream {
        entries: state.summary.files,
        source,
    };
    let entries = archive.entries().map_err(|e| stream(&state, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| stream(&state, e))?;
        unpack_entry(&mut entry, root, limits, &mut state)?;
    }
    Ok(state.summary)
}

fn unpack_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    root: &OwnedFd,
    limits: &UnpackLimits,
    state: &mut State,
) -> Result<(), UntarError> {
    let raw = entry.path_bytes().into_owned();
    let path = entry_path::shown(&raw);
    let refused = |rule| UntarError::Refused {
        path: path.clone(),
        rule,
    };
    let kind = entry.header().entry_type();
    match kind {
        EntryType::XGlobalHeader => return Ok(()),
        EntryType::Char => return Err(refused(Rule::Special("character device"))),
        EntryType::Block => return Err(refused(Rule::Special("block device"))),
        EntryType::Fifo => return Err(refused(Rule::Special("fifo"))),
        EntryType::Regular
        | EntryType::Continuous
        | EntryType::GNUSparse
        | EntryType::Directory
        | EntryType::Symlink
        | EntryType::Link => {}
        other => return Err(refused(Rule::Unsupported(other.as_byte()))),
    }
    let comps = entry_path::components(&raw).map_err(refused)?;
    let Some((name, parents)) = comps.split_last() else {
        return match kind {
            EntryType::Directory => Ok(()),
            _ => Err(refused(Rule::EmptyPath)),
        };
    };
    if state.summary.files >= limits.max_files {
        return Err(refused(Rule::TooManyFiles(limits.max_files)));
    }
    state.summary.files += 1;
    let io_err = |action, source: io::Error| UntarError::Io {
        action,
        path: path.clone(),
        source,
    };
    let parent = fsat::walk(root.as_fd(), parents, Create::Missing(PARENT_MODE)).map_err(|e| {
        match e.errno() {
            Some(libc::ELOOP | libc::ENOTDIR) => refused(Rule::ThroughLink),
            _ => io_err("create the parent directories of", e.into_io()),
        }
    })?;
    state.regular.remove(&comps);
    let mode = entry.header().mode().unwrap_or(0o644) & 0o775;
    match kind {
        EntryType::Directory => {
            match fsat::mkdir(parent.as_fd(), name, 0o700) {
                Ok(()) => {}
                Err(e) if e.is(libc::EEXIST) => {}
                Err(e) => return Err(io_err("create the directory", e.into_io())),
            }
            let dir = fsat::open_dir(parent.as_fd(), name, Access::Read).map_err(|e| {
                match e.errno() {
                    Some(libc::ELOOP | libc::ENOTDIR) => refused(Rule::ThroughLink),
                    _ => io_err("open the directory", e.into_io()),
                }
            })?;
            set_mode(std::fs::File::from(dir), mode | 0o700)
                .map_err(|e| io_err("set the mode of", e))?;
        }
        EntryType::Symlink => {
            let target = entry.link_name_bytes().map(|t| t.into_owned());
            let target = target.unwrap_or_default();
            let link_refused = |rule| UntarError::LinkRefused {
                path: path.clone(),
                target: entry_path::shown(&target),
                rule,
            };
            let steps = entry_path::link_steps(parents, &target).map_err(link_refused)?;
            check_ups(root, parents, &steps).map_err(link_refused)?;
            let target = std::ffi::OsStr::from_bytes(&target);
            make_new(parent.as_fd(), name, &refused, &io_err, |at, n| {
                fsat::symlink(target, at, n)
            })?;
        }
        EntryType::Link => {
            let target = entry.link_name_bytes().map(|t| t.into_owned());
            let target = target.unwrap_or_default();
            let link_refused = |rule| UntarError::LinkRefused {
                path: path.clone(),
                target: entry_path::shown(&target),
                rule,
            };
            let to = entry_path::components(&target).map_err(link_refused)?;
            if !state.regular.contains(&to) {
                return Err(link_refused(Rule::HardLinkTarget));
            }
            let Some((to_name, to_parents)) = to.split_last() else {
                return Err(link_refused(Rule::HardLinkTarget));
            };
            let from = fsat::walk(root.as_fd(), to_parents, Create::No)
                .map_err(|_| link_refused(Rule::HardLinkTarget))?;
            make_new(parent.as_fd(), name, &refused, &io_err, |at, n| {
                fsat::hard_link(from.as_fd(), to_name, at, n)
            })?;
            state.regular.insert(comps.clone());
        }
        _ => {
            let remaining = limits.max_bytes.saturating_sub(state.summary.bytes);
            if entry.size() > remaining {
                return Err(refused(Rule::TooManyBytes(limits.max_bytes)));
            }
            let mut file = None;
            make_new(parent.as_fd(), name, &refused, &io_err, |at, n| {
                file = Some(fsat::create_new(at, n, 0o600)?);
                Ok(())
            })?;
            let Some(mut file) = file else {
                return Err(io_err("create the file", Errno::EIO.into()));
            };
            copy_counted(entry, &mut file, limits, state).map_err(|e| match e {
                Copy::Limit => refused(Rule::TooManyBytes(limits.max_bytes)),
                Copy::Read(source) => UntarError::Stream {
                    entries: state.summary.files,
                    source,
                },
                Copy::Write(source) => UntarError::Io {
                    action: "write the file",
                    path: path.clone(),
                    source,
                },
            })?;
            set_mode(file, mode).map_err(|e| io_err("set the mode of", e))?;
            state.regular.insert(comps.clone());
        }
    }
    Ok(())
}

/// Creates a non-directory entry with `make`; a name already taken by a non-directory of the
/// upload (a duplicate entry) is removed first, never opened or followed.
fn make_new(
    parent: BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    refused: &dyn Fn(Rule) -> UntarError,
    io_err: &dyn Fn(&'static str, io::Error) -> UntarError,
    mut make: impl FnMut(BorrowedFd<'_>, &std::ffi::OsStr) -> Result<(), FsError>,
) -> Result<(), UntarError> {
    match make(parent, name) {
        Err(e) if e.is(libc::EEXIST) => {}
        other => return other.map_err(|e| io_err("create", e.into_io())),
    }
    let st = fsat::lstat(parent, name).map_err(|e| io_err("inspect", e.into_io()))?;
    match st.map(|st| st.kind) {
        Some(fsat::Kind::Dir) => return Err(refused(Rule::IsDirectory)),
        Some(_) => {}
        None => return Err(io_err("inspect", Errno::ENOENT.into())),
    }
    fsat::unlink(parent, name).map_err(|e| io_err("replace", e.into_io()))?;
    make(parent, name).map_err(|e| io_err("create", e.into_io()))
}

/// Checks that every `..` of a symlink's target climbs out of a real directory of the upload
/// (one that exists now, reached without a symlink): directories are never removed during an
/// unpack, so the lexical check of [`entry_path::link_steps`] then matches the kernel's walk.
fn check_ups(root: &OwnedFd, parents: &[OsString], steps: &[Step]) -> Result<(), Rule> {
    let mut at: Vec<OsString> = parents.to_vec();
    for step in steps {
        match step {
            Step::Down(name) => at.push(name.clone()),
            Step::Up => {
                fsat::walk(root.as_fd(), &at, Create::No).map_err(|_| Rule::LinkThroughLink)?;
                at.pop().ok_or(Rule::LinkOutside)?;
            }
        }
    }
    Ok(())
}

fn set_mode(file: std::fs::File, mode: u32) -> io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Why copying an entry's content stopped.
enum Copy {
    Limit,
    Read(io::Error),
    Write(io::Error),
}

/// Copies an entry's content, counting every byte against the limit as it is written.
fn copy_counted(
    mut from: impl Read,
    to: &mut impl Write,
    limits: &UnpackLimits,
    state: &mut State,
) -> Result<(), Copy> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Copy::Read(e)),
        };
        let bytes = state.summary.bytes.saturating_add(n as u64);
        if bytes > limits.max_bytes {
            return Err(Copy::Limit);
        }
        state.summary.bytes = bytes;
        to.write_all(buf.get(..n).unwrap_or_default())
            .map_err(Copy::Write)?;
    }
}

#[cfg(test)]
#[path = "untar_tests.rs"]
mod tests;
