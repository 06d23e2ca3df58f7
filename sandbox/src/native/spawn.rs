//! Starting the helper with `posix_spawn(3)` ([`crate::posix_spawn`]): the runner's page
//! tables are not copied and the runner takes no copy-on-write faults afterwards (a `fork` of a
//! runner with its runtime's threads and heap cost about 0.5 ms per round here, and as much
//! again in faults). The descriptors the helper
//! inherits are exactly the ones named: its standard streams and the hand-overs
//! (`posix_spawn_file_actions_adddup2` of a descriptor onto itself clears its close-on-exec in
//! the child only, so no other process the runner starts meanwhile can inherit them). The child
//! is then followed through a pidfd ([`HelperChild`]).

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus};
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use crate::posix_spawn::{self, Attr, CArgs, FileActions, open_null, pipe_pair};

/// What the helper's standard input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stdin {
    /// `/dev/null`.
    Null,
    /// A pipe the runner writes.
    Piped,
    /// The runner's own.
    Inherit,
}

/// What to start.
#[derive(Debug)]
pub struct Spec<'a> {
    /// The program (an absolute path: no `PATH` search).
    pub program: &'a Path,
    /// Its arguments after `argv[0]` (the program).
    pub args: Vec<OsString>,
    /// Its whole environment (`NAME=value`).
    pub env: Vec<OsString>,
    /// Its standard input.
    pub stdin: Stdin,
    /// Descriptors it inherits under the same numbers.
    pub keep: Vec<RawFd>,
}

/// A started helper: its pipes (stdout and stderr always piped) and the child.
#[derive(Debug)]
pub struct Spawned {
    /// The pipe to its standard input ([`Stdin::Piped`]).
    pub stdin: Option<pipe::Sender>,
    /// Its standard output.
    pub stdout: pipe::Receiver,
    /// Its standard error.
    pub stderr: pipe::Receiver,
    /// The process.
    pub child: HelperChild,
}

/// A helper process followed through its pidfd; killed (and reaped) if dropped before it was
/// waited for, as `tokio::process::Command::kill_on_drop` does.
#[derive(Debug)]
pub struct HelperChild {
    pid: u32,
    pidfd: AsyncFd<OwnedFd>,
    status: Option<ExitStatus>,
}

/// A started process nothing follows yet: plain descriptors, registered with no runtime, so it
/// can wait in a [`super::standby::Standby`] across runtimes. Dropped unregistered, the child is
/// killed and reaped.
#[derive(Debug)]
pub struct Started {
    /// Our end of its standard input ([`Stdin::Piped`]).
    pub stdin: Option<OwnedFd>,
    /// The read end of its standard output.
    pub stdout: OwnedFd,
    /// The read end of its standard error.
    pub stderr: OwnedFd,
    /// The process and its pidfd.
    pub child: Pending,
}

/// A child process held by a pidfd and not yet followed by the runtime ([`HelperChild`]).
#[derive(Debug)]
pub struct Pending {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

/// Starts `spec` in a process group of its own (its pid), with every signal at its default
/// disposition and none blocked (as `std::process::Command` does).
pub fn spawn(spec: &Spec<'_>) -> io::Result<Spawned> {
    start(spec)?.follow()
}

/// [`spawn`] without the runtime: the child's pipes and pidfd as plain descriptors.
pub fn start(spec: &Spec<'_>) -> io::Result<Started> {
    let argv = CArgs::new(
        std::iter::once(spec.program.as_os_str().as_encoded_bytes().to_vec())
            .chain(spec.args.iter().map(|a| a.clone().into_vec())),
    )?;
    let envp = CArgs::new(spec.env.iter().map(|e| e.clone().into_vec()))?;

    let (stdin_child, stdin_ours) = match spec.stdin {
        Stdin::Null => (Some(open_null()?), None),
        Stdin::Piped => {
            let (r, w) = pipe_pair()?;
            (Some(r), Some(w))
        }
        Stdin::Inherit => (None, None),
    };
    let (out_r, out_w) = pipe_pair()?;
    let (err_r, err_w) = pipe_pair()?;

    let mut actions = FileActions::new()?;
    if let Some(fd) = &stdin_child {
        actions.dup2(fd.as_raw_fd(), 0)?;
    }
    actions.dup2(out_w.as_raw_fd(), 1)?;
    actions.dup2(err_w.as_raw_fd(), 2)?;
    for fd in &spec.keep {
        actions.dup2(*fd, *fd)?;
    }
    let attr = Attr::new(true)?;
    let pid = posix_spawn::spawn(&argv, &envp, &actions, &attr)?;
    // The child's ends are the child's now.
    drop((stdin_child, out_w, err_w));
    let pid_u = u32::try_from(pid).map_err(|_| io::Error::other("posix_spawn returned no pid"))?;
    let child = Pending::open(pid_u)?;
    Ok(Started {
        stdin: stdin_ours,
        stdout: out_r,
        stderr: err_r,
        child,
    })
}

impl Started {
    /// Follows the child on the current runtime: its pipes become the runtime's
    /// (`from_owned_fd` checks each is a pipe and makes it non-blocking), its pidfd too.
    pub fn follow(self) -> io::Result<Spawned> {
        let child = self.child.follow()?;
        Ok(Spawned {
            stdin: self.stdin.map(pipe::Sender::from_owned_fd).transpose()?,
            stdout: pipe::Receiver::from_owned_fd(self.stdout)?,
            stderr: pipe::Receiver::from_owned_fd(self.stderr)?,
            child,
        })
    }
}

impl Pending {
    /// Holds the child `pid` (just started by this process and not reaped, so the pid is still
    /// its) by a pidfd; when that fails, the child is killed and reaped here.
    fn open(pid: u32) -> io::Result<Self> {
        match crate::sys::pidfd_open(pid as libc::pid_t) {
            Ok(fd) => Ok(Self {
                pid,
                pidfd: Some(fd),
            }),
            Err(e) => {
                // Not followed, so not left running or unreaped.
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
                Err(e)
            }
        }
    }

    /// Holds the child `pid` made for this process by another (a standby forked by the zygote
    /// as this process's child: [`super::zygote`]) by `pidfd`, made with it; refused unless the
    /// pidfd names a child of this process (so one this process waits for and reaps).
    pub(super) fn adopt(pid: u32, pidfd: OwnedFd) -> io::Result<Self> {
        if let Err(e) = nix::sys::wait::waitid(
            Id::PIDFd(pidfd.as_fd()),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
        ) {
            // Not left running (the pidfd names it, whoever it is a child of).
            let _ = crate::sys::pidfd_send_signal(&pidfd, libc::SIGKILL);
            reap_in_background(pid, pidfd);
            return Err(e.into());
        }
        Ok(Self {
            pid,
            pidfd: Some(pidfd),
        })
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Whether it has exited (without reaping it: a zombie answers yes).
    pub fn exited(&self) -> bool {
        let Some(fd) = &self.pidfd else {
            return true;
        };
        matches!(
            nix::sys::wait::waitid(
                Id::PIDFd(fd.as_fd()),
                WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT,
            ),
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) | Err(_)
        )
    }

    /// Kills it and reaps it here when it has died within `within` (a process blocked in a
    /// system call dies at once); else it is reaped off this thread, as a dropped one is.
    pub fn stop(mut self, within: std::time::Duration) {
        self.kill(Some(within));
    }

    /// Kills it (not reaped, so the pidfd still names our child) and reaps it: here when it has
    /// died `within` that long, else (or with no wait) off this thread.
    fn kill(&mut self, within: Option<std::time::Duration>) {
        let Some(fd) = self.pidfd.take() else {
            return;
        };
        let _ = crate::sys::pidfd_send_signal(&fd, libc::SIGKILL);
        if let Some(within) = within {
            let mut poll = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = libc::c_int::try_from(within.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd, alive for the call.
            let ready = unsafe { libc::poll(&mut poll, 1, ms) };
            if ready == 1
                && nix::sys::wait::waitid(Id::PIDFd(fd.as_fd()), WaitPidFlag::WEXITED).is_ok()
            {
                return;
            }
        }
        reap_in_background(self.pid, fd);
    }

    /// Followed on the current runtime from now on.
    fn follow(mut self) -> io::Result<HelperChild> {
        let fd = self
            .pidfd
            .take()
            .ok_or_else(|| io::Error::other("the child was already followed"))?;
        // SAFETY: `fd` is an open descriptor the `AsyncFd` owns for its whole life (an `OwnedFd`
        // always returns the same number). Called inside a runtime (as every caller is: `start`).
        let pidfd =
            match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
                Ok(p) => p,
                Err(e) => {
                    // Given back: killed and reaped as an unfollowed child is.
                    let (fd, e) = e.into_parts();
                    self.pidfd = Some(fd);
                    return Err(e);
                }
            };
        Ok(HelperChild {
            pid: self.pid,
            pidfd,
            status: None,
        })
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.kill(None);
    }
}

/// Reaps `pid` off this thread (a killed child may take a moment to die: its namespaces go with
/// it); `pidfd` is held until then, so the pid is not reused meanwhile.
fn reap_in_background(pid: u32, pidfd: OwnedFd) {
    let pid = nix::unistd::Pid::from_raw(pid as i32);
    let _ = std::thread::Builder::new()
        .name("ralph-reap".into())
        .spawn(move || {
            let _ = nix::sys::wait::waitpid(pid, None);
            drop(pidfd);
        });
}

impl HelperChild {
    /// Its pid.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits for it to exit and reaps it (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(s) = self.try_reap()? {
                return Ok(s);
            }
            let mut ready = self.pidfd.readable().await?;
            ready.clear_ready();
        }
    }

    /// Its status if it exited (reaping it), else `None`.
    fn try_reap(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(s) = self.status {
            return Ok(Some(s));
        }
        let status = match nix::sys::wait::waitid(
            Id::PIDFd(self.pidfd.get_ref().as_fd()),
            WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG,
        )? {
            WaitStatus::Exited(_, code) => ExitStatus::from_raw((code & 0xff) << 8),
            WaitStatus::Signaled(_, sig, core) => {
                ExitStatus::from_raw(sig as i32 | if core { 0x80 } else { 0 })
            }
            _ => return Ok(None),
        };
        self.status = Some(status);
        Ok(Some(status))
    }

    /// Sends it `SIGKILL` (once it was reaped, nothing: its pid may be another's).
    pub fn start_kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        crate::sys::pidfd_send_signal(self.pidfd.get_ref(), libc::SIGKILL)
    }
}

impl Drop for HelperChild {
    fn drop(&mut self) {
        if matches!(self.try_reap(), Ok(Some(_))) {
            return;
        }
        let _ = self.start_kill();
        // Reaped off this thread: the helper may take a moment to die (its namespaces go with
        // it). A pidfd keeps the pid from being reused until then.
        let pid = nix::unistd::Pid::from_raw(self.pid as i32);
        let _ = std::thread::Builder::new()
            .name("ralph-reap".into())
            .spawn(move || {
                let _ = nix::sys::wait::waitpid(pid, None);
            });
    }
}

#[cfg(test)]
mod tests;
