//! One job at a time per workspace on a host (SPEC §5): the workspace lock, and who holds it
//! when it cannot be taken.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` on a descriptor of the workspace directory itself,
//! opened `O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`. A job takes it before its first
//! round (`ralph run` before the job is even journalled, `ralph serve` before it claims the
//! job) and holds it until its run ends: every round and every verify run under it.
//!
//! Why this mechanism:
//! - The kernel releases a `flock` lock when the last descriptor of its open file description
//!   closes: on drop, and however the runner dies (`kill -9`, OOM kill). There is no lock file
//!   or pid file to go stale and no liveness to judge.
//! - The lock belongs to the open file description, not to the process: each job opens its own
//!   descriptor, so two jobs of one `ralph serve` conflict exactly like two processes do.
//! - It is on the directory's inode: every path to the workspace (a bind mount, a symlinked
//!   parent) names the same lock, and nothing is written into the workspace, where an agent
//!   could delete or replace a lock file.
//! - `O_CLOEXEC`: the round's processes never inherit the descriptor, so they can neither keep
//!   the lock alive after the runner is gone nor release it.
//!
//! It is a lock of this host only: two hosts sharing a workspace over a network filesystem are
//! not kept apart by it (docs/operations.md), and the `--write` directories of a job are not
//! locked at all.
//!
//! Who holds it: `/proc/locks` lists every FLOCK lock with its holder's pid and the lock's
//! `major:minor:inode`. [`WorkspaceLockError::Busy`] names that pid and its (bounded) command
//! line; [`Holder::in_store`] turns it into the job that holds the workspace when that process
//! runs a job of the caller's store.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::store::{JobState, Store};
pub use crate::util::flock_holder::{FileId, Holder, holder_of};

/// Exclusive use of a workspace directory by one job on this host; released on drop.
#[derive(Debug)]
pub struct WorkspaceLock {
    path: PathBuf,
    file: File,
}

/// Why a workspace could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceLockError {
    /// The workspace directory could not be opened.
    #[error("failed to open the workspace `{path}` to lock it: {source}")]
    Open {
        /// The workspace.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Another job or process holds the workspace.
    #[error(
        "failed to lock the workspace `{path}`: it is in use by {holder} (one job at a time per workspace on a host)"
    )]
    Busy {
        /// The workspace.
        path: PathBuf,
        /// Who holds it.
        holder: Holder,
    },
    /// The filesystem refused the lock.
    #[error(
        "failed to lock the workspace `{path}`: {source} (its filesystem must allow `flock` on a directory)"
    )]
    Lock {
        /// The workspace.
        path: PathBuf,
        /// The OS error of `flock`.
        source: std::io::Error,
    },
}

impl WorkspaceLock {
    /// Takes the lock of the workspace `path` without waiting: [`WorkspaceLockError::Busy`],
    /// naming the holder's pid, when another job or process has it.
    pub fn try_acquire(path: &Path) -> Result<Self, WorkspaceLockError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .map_err(|source| WorkspaceLockError::Open {
                path: path.to_owned(),
                source,
            })?;
        // SAFETY: `file` is an open descriptor owned by this function; flock only reads it.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(Self {
                path: path.to_owned(),
                file,
            });
        }
        let source = std::io::Error::last_os_error();
        if source.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(WorkspaceLockError::Lock {
                path: path.to_owned(),
                source,
            });
        }
        Err(WorkspaceLockError::Busy {
            path: path.to_owned(),
            holder: holder_of(&file),
        })
    }

    /// The workspace this lock holds.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkspaceLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock too; unlocking first releases it even while
        // a child forked in the meantime still has the descriptor (until its exec closes it).
        // SAFETY: the descriptor is open until `self.file` drops after this.
        unsafe {
            libc::flock(self.file.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

impl Holder {
    /// The same holder, named as a job of `store` when its process runs, on this host, a job
    /// of the store whose workspace is `workspace`. Reads the store's running jobs (blocking).
    pub fn in_store(self, store: &Store, workspace: &Path) -> Holder {
        let pid = match &self {
            Holder::Job { .. } => return self,
            Holder::Process { pid, .. } => Some(*pid),
            Holder::Unknown => None,
        };
        let Ok(target) = std::fs::metadata(workspace).map(|m| FileId::of(&m)) else {
            return self;
        };
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default();
        let Ok(ids) = store.job_ids_in_state(JobState::Running) else {
            return self;
        };
        for id in ids {
            let Ok(view) = store.load(&id) else { continue };
            let Some(runner) = &view.runner else { continue };
            let same_process = match pid {
                Some(pid) => runner.pid == pid,
                None => true,
            };
            if view.state == JobState::Running
                && runner.host == host
                && same_process
                && runner.is_alive() == Some(true)
                && std::fs::metadata(&view.spec.workspace).is_ok_and(|m| FileId::of(&m) == target)
            {
                return Holder::Job {
                    id,
                    role: runner.role.clone(),
                    pid: runner.pid,
                };
            }
        }
        self
    }
}

impl WorkspaceLockError {
    /// The same error with its holder named as a job of `store` where it is one
    /// ([`Holder::in_store`]).
    pub fn in_store(self, store: &Store) -> Self {
        match self {
            WorkspaceLockError::Busy { path, holder } => WorkspaceLockError::Busy {
                holder: holder.in_store(store, &path),
                path,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests;
