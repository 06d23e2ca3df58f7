//! Who holds a `flock` lock on this host: `/proc/locks` lists every FLOCK lock with its
//! holder's pid and the lock's `major:minor:inode`; the holder is named by its pid and its
//! (bounded) command line. Used by the workspace lock ([`crate::engine::WorkspaceLock`]) and by
//! the store's run holds and serve lock ([`crate::store::hold`]), which therefore do not depend
//! on the engine.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::util::text::bounded;

/// Where the kernel's process and lock tables are.
const PROC: &str = "/proc";

/// The most of a holder's command line a message shows.
const COMMAND_BOUND: usize = 200;

/// A directory's identity: its device and inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl FileId {
    /// The identity of the file `meta` describes.
    pub fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// Who holds a `flock` lock (a workspace, a run hold, the serve lock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// A job of the caller's store, run by the process `pid` (`ralph <role>`).
    Job {
        /// The job id.
        id: String,
        /// The runner's role (`run`, `serve`).
        role: String,
        /// The runner's pid.
        pid: u32,
    },
    /// A process of this host (another store's runner, or any program holding the lock).
    Process {
        /// Its pid.
        pid: u32,
        /// Its command line, bounded; empty when it could not be read.
        command: String,
    },
    /// No process visible from here is listed as the holder (another pid namespace).
    Unknown,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Holder::Job { id, role, pid } => write!(f, "job `{id}` (`ralph {role}`, pid {pid})"),
            Holder::Process { pid, command } if command.is_empty() => write!(f, "pid {pid}"),
            Holder::Process { pid, command } => write!(f, "pid {pid} (`{command}`)"),
            Holder::Unknown => f.write_str("a process not visible from here"),
        }
    }
}

/// Who holds the `flock` lock of the file open as `file` (its pid and command line, from
/// `/proc/locks`): the workspace lock ([`crate::engine::WorkspaceLock`]), the run holds and the
/// serve lock ([`crate::store::hold`]).
pub fn holder_of(file: &File) -> Holder {
    file.metadata()
        .ok()
        .and_then(|m| holder_pid(&read_locks(Path::new(PROC)), FileId::of(&m)))
        .map_or(Holder::Unknown, |pid| Holder::Process {
            pid,
            command: command_line(Path::new(PROC), pid),
        })
}

/// `<proc>/locks`, or nothing when it cannot be read.
pub(crate) fn read_locks(proc: &Path) -> String {
    std::fs::read_to_string(proc.join("locks")).unwrap_or_default()
}

/// The pid holding a FLOCK lock on `id`, from the text of `/proc/locks`. A line looks like
/// `3: FLOCK  ADVISORY  WRITE 4711 fd:01:1835017 0 EOF` (device as hex `major:minor`, inode in
/// decimal); waiters (`3: -> FLOCK …`) are skipped. When no line matches the device (the inode's
/// superblock device can differ from `st_dev`, e.g. on a btrfs subvolume), a single FLOCK holder
/// of the same inode is taken. A pid of 0 (not visible in this pid namespace) is no answer.
pub(crate) fn holder_pid(locks: &str, id: FileId) -> Option<u32> {
    let (major, minor) = (nix::sys::stat::major(id.dev), nix::sys::stat::minor(id.dev));
    let mut same_inode = Vec::new();
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, "FLOCK", _, _, pid, file, ..] = fields.as_slice() else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        let mut parts = file.split(':');
        let (Some(maj), Some(min), Some(ino), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if ino.parse::<u64>().ok() != Some(id.ino) {
            continue;
        }
        let dev_matches = u64::from_str_radix(maj, 16).ok() == Some(major)
            && u64::from_str_radix(min, 16).ok() == Some(minor);
        if dev_matches {
            return (pid != 0).then_some(pid);
        }
        same_inode.push(pid);
    }
    match same_inode.as_slice() {
        [pid] if *pid != 0 => Some(*pid),
        _ => None,
    }
}

/// The command line of `pid`, arguments joined by spaces, bounded; empty when unreadable.
pub(crate) fn command_line(proc: &Path, pid: u32) -> String {
    let mut raw = Vec::new();
    let read = File::open(proc.join(pid.to_string()).join("cmdline"))
        .and_then(|f| f.take(4 * COMMAND_BOUND as u64).read_to_end(&mut raw));
    if read.is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&raw).replace('\0', " ");
    bounded(text.trim(), COMMAND_BOUND)
}

#[cfg(test)]
mod tests;
