//! The reaping loop of ralph's two inits, pid 1 of the native sandbox's pid namespace
//! ([`crate::native::init`]) and pid 1 of a docker round's container ([`crate::docker::init`]):
//! it reaps every process, notices the command's end, turns a stop request from outside the
//! namespace (never one from inside: [`crate::sys::from_outside`]) into SIGTERM (and SIGCONT) to
//! every process and waits for all of them up to the grace, and at the end SIGKILLs and reaps
//! whatever is left.
//!
//! Where the two inits differ, [`Watch`] says so: the docker init has a backstop deadline of its
//! own and watches the runner's liveness FIFO; the native init has neither (its supervisor's
//! timer stops it, and the supervisor's death reaches it as `PR_SET_PDEATHSIG`, a signal like
//! any stop request). What each init does before (set-up, the fork) and after (its report) stays
//! with it. Neither the loop nor [`kill_the_rest`] allocates.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal, kill};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::Pid;

use crate::sys::{self, WaitAny};

/// The signals an init reads from its signalfd: SIGCHLD (a child ended) and the stop requests.
/// They must be blocked: the native init inherits the supervisor's mask (the same set), the
/// docker init blocks them itself.
pub const WATCHED: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// The longest single wait: a wake-up at least once a minute whatever the deadlines say.
const MAX_WAIT_MS: u128 = 60_000;

/// [`WATCHED`] as a signal set.
pub fn watched_set() -> SigSet {
    let mut mask = SigSet::empty();
    for s in WATCHED {
        mask.add(s);
    }
    mask
}

/// A non-blocking, close-on-exec signalfd that reads [`WATCHED`] (blocked by the caller).
pub fn signalfd() -> nix::Result<SignalFd> {
    SignalFd::with_flags(
        &watched_set(),
        SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK,
    )
}

/// What the loop watches, and what differs between the two inits.
#[derive(Debug)]
pub struct Watch<'a> {
    /// The command (the init's only own child; everything else is an orphan it adopted).
    pub command: Pid,
    /// The signals, from [`signalfd`].
    pub sigfd: &'a SignalFd,
    /// How long every process has between SIGTERM and SIGKILL once a stop began.
    pub grace: Duration,
    /// Docker: when the init stops the round itself (a backstop for a runner that stopped
    /// watching). Native: `None`, the supervisor's timer does it.
    pub deadline: Option<Instant>,
    /// Docker: the runner's liveness FIFO (read end); end-of-file (the runner is gone) is a stop
    /// request, and the descriptor is closed then. Native: `None`, the supervisor's death is a
    /// signal (`PR_SET_PDEATHSIG`).
    pub alive: &'a mut Option<OwnedFd>,
}

/// Where the loop stands: the command's status once reaped, the end of the grace once stopping.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Progress {
    /// The command's raw wait status.
    status: Option<i32>,
    /// Set by the first stop request: every process got SIGTERM and has until then.
    kill_at: Option<Instant>,
}

impl Progress {
    /// The loop is done: the command ended and, during a stop, so did every other process (the
    /// command, often only a `sh -c` wrapper, ending first must not cut the others' clean-up
    /// short).
    fn finished(&self, all_gone: bool) -> bool {
        self.status.is_some() && (self.kill_at.is_none() || all_gone)
    }

    /// The grace is over (whatever is left is killed).
    fn grace_over(&self, now: Instant) -> bool {
        self.kill_at.is_some_and(|at| now >= at)
    }

    /// The init's own deadline passed outside a stop.
    fn deadline_passed(&self, deadline: Option<Instant>, now: Instant) -> bool {
        self.kill_at.is_none() && deadline.is_some_and(|d| now >= d)
    }

    /// When the loop must wake up whatever happens.
    fn wake(&self, deadline: Option<Instant>) -> Option<Instant> {
        self.kill_at.or(deadline)
    }

    /// Starts a stop (once; a second request keeps the grace that runs whole).
    fn stop(&mut self, grace: Duration) {
        if self.kill_at.is_none() {
            let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
            let _ = kill(Pid::from_raw(-1), Signal::SIGCONT);
            self.kill_at = Some(Instant::now() + grace);
        }
    }

    /// Reaps every child that ended (the command's status kept); whether none is left.
    fn reap(&mut self, command: Pid) -> bool {
        loop {
            match sys::wait_any_nohang() {
                Ok(WaitAny::Reaped(r)) if r.pid == command.as_raw() => self.status = Some(r.status),
                Ok(WaitAny::Reaped(_)) => {}
                Ok(WaitAny::NoChildren) => return true,
                Ok(WaitAny::StillRunning) | Err(_) => return false,
            }
        }
    }
}

/// Reaps and watches until the command ended (and, during a stop, every other process too) or
/// the grace ran out. Returns the command's raw wait status if it was reaped.
pub fn wait_for_command(watch: Watch<'_>) -> Option<i32> {
    let Watch {
        command,
        sigfd,
        grace,
        deadline,
        alive,
    } = watch;
    let mut progress = Progress::default();
    loop {
        let all_gone = progress.reap(command);
        if progress.finished(all_gone) {
            break;
        }
        let now = Instant::now();
        if progress.grace_over(now) {
            break;
        }
        if progress.deadline_passed(deadline, now) {
            progress.stop(grace);
            continue;
        }
        let timeout = poll_timeout(progress.wake(deadline), now);
        let runner_gone = wait_for_events(sigfd, alive.as_ref(), timeout);
        while let Ok(Some(info)) = sigfd.read_signal() {
            if is_stop_request(info.ssi_signo, info.ssi_code, info.ssi_pid) {
                progress.stop(grace);
            }
        }
        if runner_gone {
            *alive = None;
            progress.stop(grace);
        }
    }
    progress.status
}

/// How long to wait for events until `wake` (forever without one), rounded up to the next
/// millisecond and at most [`MAX_WAIT_MS`].
fn poll_timeout(wake: Option<Instant>, now: Instant) -> PollTimeout {
    wake.map_or(PollTimeout::NONE, |at| {
        let ms = at
            .saturating_duration_since(now)
            .as_millis()
            .saturating_add(1)
            .min(MAX_WAIT_MS);
        PollTimeout::try_from(i32::try_from(ms).unwrap_or(60_000)).unwrap_or(PollTimeout::MAX)
    })
}

/// Waits up to `timeout` for a signal or, with `alive`, the liveness FIFO's end-of-file;
/// whether the FIFO says the runner is gone.
fn wait_for_events(sigfd: &SignalFd, alive: Option<&OwnedFd>, timeout: PollTimeout) -> bool {
    let signals = PollFd::new(sigfd.as_fd(), PollFlags::POLLIN);
    match alive {
        None => {
            let _ = poll(&mut [signals], timeout);
            false
        }
        Some(fifo) => {
            let mut fds = [signals, PollFd::new(fifo.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, timeout);
            let [_, fifo] = &fds;
            fifo.revents()
                .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
        }
    }
}

/// Whether a signal read from the signalfd is a stop request: not SIGCHLD, and sent from
/// outside the namespace (the same signal from the command, by any route, is ignored).
fn is_stop_request(signo: u32, code: i32, pid: u32) -> bool {
    !matches!(
        Signal::try_from(i32::try_from(signo).unwrap_or(0)),
        Ok(Signal::SIGCHLD) | Err(_)
    ) && sys::from_outside(code, pid)
}

/// What [`kill_the_rest`] reaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rest {
    /// The command's status if it was among them (its exit code shifted as a raw wait status,
    /// or the bare signal number that killed it).
    pub command_status: Option<i32>,
    /// How many processes were reaped.
    pub reaped: u32,
}

/// The command is done (or the grace is over): SIGKILL to every process of the namespace, and
/// each of them reaped until no child is left.
pub fn kill_the_rest(command: Pid) -> Rest {
    let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    let mut rest = Rest::default();
    while let Ok((pid, raw)) = wait_any() {
        let status = if libc::WIFEXITED(raw) {
            raw
        } else if libc::WIFSIGNALED(raw) {
            libc::WTERMSIG(raw)
        } else {
            continue;
        };
        rest.reaped = rest.reaped.saturating_add(1);
        if pid == command.as_raw() {
            rest.command_status = Some(status);
        }
    }
    rest
}

/// Waits for any child to end (`wait4(-1, __WALL)`, retried on EINTR): its pid and raw status.
/// `ECHILD` once none is left.
fn wait_any() -> io::Result<(i32, i32)> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; a null rusage pointer is allowed.
        let pid = unsafe { libc::wait4(-1, &mut status, libc::__WALL, std::ptr::null_mut()) };
        if pid > 0 {
            return Ok((pid, status));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests;
