//! The standbys' zygote (issue 30, item 2): one `ralph` process per backend, started once (and
//! again after a job ends), from which each later standby ([`super::standby`]) is forked instead
//! of started with `posix_spawn`. A standby started so pays the static binary's `execve`, its
//! ~33,000 relocations (~130 pages of `.data.rel.ro` copied on write), glibc's start and Rust's:
//! 1.3-2.2 ms on a 2-CPU host busy with the previous round's end, the runner's next order often
//! came first and waited for it (a median of ~1 ms a round). Forked from a process that already
//! did all that, a standby is waiting in `recvmsg` in a fraction of it.
//!
//! ```text
//! runner ──posix_spawn──▶ zygote (`ralph __sandbox-zygote --kill-grace-ms=N`, env: ZYGOTE_ENV=fd)
//!    │                       │ recvmsg (blocked; end-of-file = the runner is gone or let it go:
//!    │                       │   exit 0)
//!    └── request ───────────▶│ [1] + SCM_RIGHTS: the standby's order socket end, its stdout
//!                            │   and stderr write ends
//!                            │ clone3(CLONE_PARENT | CLONE_PIDFD): the standby, a child of the
//!    ◀── answer ─────────────┤   runner (which waits for it and reaps it as its own)
//!        [pid] + its pidfd   └─▶ standby: own process group, streams on 1 and 2, the zygote's
//!                                socket closed, argv[1] rewritten to `__sandbox-helper` (same
//!                                length): as if started with `posix_spawn` (its environment:
//!                                the zygote's one variable)
//! ```
//!
//! The zygote never starts a thread (the fork needs a single-threaded process) and never reads
//! anything but its socket, which only the runner holds the other end of: it holds nothing of
//! any round, and a standby forked from it holds what a standby started for it would (its
//! streams, its order socket, one environment variable (the zygote's), the same command line). What is shared:
//! every standby of a zygote has the zygote's address-space layout (as any fork server's
//! children do). A zygote that fails in any way (gone, a malformed answer, no answer within
//! [`ANSWER_WAIT`]) is dropped, and the standby is started with `posix_spawn` as before; an
//! answer that came after the runner stopped waiting is read as the zygote is stopped, and the
//! standby it names (the runner's child) killed and reaped.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use super::inherit::{self, Kind};
use super::protocol::{HELPER_ARG, ZYGOTE_ARG, ZYGOTE_ENV};
use super::spawn::{Pending, Started};
use super::standby::{args_with_grace, start_on_socket};
use crate::fd_pass;
use crate::posix_spawn::pipe_pair;

/// The one kind of request: fork a standby.
const REQUEST: u8 = 1;

/// How long the runner waits for the zygote's answer (a fork: normally well under a millisecond).
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// How long a zygote stopped is waited for before it is left to be reaped off the thread (one
/// blocked in `recvmsg` dies at once).
const STOP_WAIT: Duration = Duration::from_millis(100);

/// A zygote process, seen from the runner.
#[derive(Debug)]
pub struct Zygote {
    grace_ms: u128,
    /// The runner's end of the request socket.
    requests: OwnedFd,
    process: Pending,
    /// The read ends of its standard output and error: held, never read (it writes to them only
    /// when it fails), so that its writes never fail.
    _streams: [OwnedFd; 2],
}

/// The zygote's command line for standbys whose grace is `grace`.
pub fn zygote_args(grace: Duration) -> Vec<std::ffi::OsString> {
    args_with_grace(ZYGOTE_ARG, grace)
}

impl Zygote {
    /// Starts `helper_exe` as the zygote of standbys whose kill grace is `grace`.
    pub fn start(helper_exe: &Path, grace: Duration) -> io::Result<Self> {
        let (requests, started) = start_on_socket(helper_exe, zygote_args(grace), ZYGOTE_ENV)?;
        Ok(Self {
            grace_ms: grace.as_millis(),
            requests,
            process: started.child,
            _streams: [started.stdout, started.stderr],
        })
    }

    /// Whether its standbys serve rounds whose kill grace is `grace`.
    pub fn fits(&self, grace: Duration) -> bool {
        self.grace_ms == grace.as_millis()
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.process.id()
    }

    /// Kills and reaps it (its standbys live on: they are the runner's children). An answer it
    /// sent that was never read (the runner gave up waiting for it) names a standby that is this
    /// process's child: that one is killed and reaped too, not left to end as a zombie nobody
    /// waits for.
    pub fn stop(self) {
        let Self {
            requests, process, ..
        } = self;
        process.stop(STOP_WAIT);
        let mut buf = [0u8; 8];
        let Ok(got) = fd_pass::recv(requests.as_fd(), &mut buf, 1, libc::MSG_DONTWAIT) else {
            return;
        };
        if let (false, 4, Some(pidfd)) = (got.truncated, got.len, got.fds.into_iter().next()) {
            let pid = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
            // Dropped at once: killed and reaped (or, not ours, killed through its pidfd).
            drop(Pending::adopt(pid, pidfd));
        }
    }

    /// Forks a standby: the runner's end of its order socket and the standby as started (its
    /// streams; the process, a child of this process, held by the pidfd the fork made).
    pub fn fork(&self) -> io::Result<(OwnedFd, Started)> {
        self.fork_within(ANSWER_WAIT)
    }

    /// [`Zygote::fork`], waiting at most `wait` for the answer.
    fn fork_within(&self, wait: Duration) -> io::Result<(OwnedFd, Started)> {
        if self.process.exited() {
            return Err(io::Error::other("the zygote is gone"));
        }
        let (orders, theirs) = fd_pass::channel()?;
        let (out_r, out_w) = pipe_pair()?;
        let (err_r, err_w) = pipe_pair()?;
        fd_pass::send(
            self.requests.as_fd(),
            &[REQUEST],
            &[theirs.as_fd(), out_w.as_fd(), err_w.as_fd()],
        )?;
        // The standby's ends are the zygote's now (and its child's).
        drop((theirs, out_w, err_w));
        let (pid, pidfd) = self.answer(wait)?;
        let child = Pending::adopt(pid, pidfd)?;
        Ok((
            orders,
            Started {
                stdin: None,
                stdout: out_r,
                stderr: err_r,
                child,
            },
        ))
    }

    /// The answer to the request just sent: the standby's pid and pidfd, within `wait`.
    fn answer(&self, wait: Duration) -> io::Result<(u32, OwnedFd)> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let mut poll = libc::pollfd {
                fd: self.requests.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd, alive for the call.
            let ready = unsafe { libc::poll(&mut poll, 1, ms) };
            if ready > 0 {
                break;
            }
            if ready == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the zygote did not answer",
                ));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        let mut buf = [0u8; 8];
        let got = fd_pass::recv(self.requests.as_fd(), &mut buf, 1, libc::MSG_DONTWAIT)?;
        if got.len == 0 && got.fds.is_empty() {
            return Err(io::Error::other("the zygote is gone"));
        }
        let mut fds = got.fds.into_iter();
        match (got.truncated, got.len, fds.next(), fds.next()) {
            (false, 4, Some(pidfd), None) => {
                let pid = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]);
                Ok((pid, pidfd))
            }
            _ => Err(io::Error::other("the zygote's answer is malformed")),
        }
    }
}

/// In the zygote (the helper started with [`ZYGOTE_ARG`] and [`ZYGOTE_ENV`] set to `fd`): forks
/// one standby per request until the runner closes the socket. Never returns.
pub fn serve(fd: &str) -> ! {
    let requests = match fd
        .parse::<i32>()
        .map_err(|_| format!("{ZYGOTE_ENV} is not a descriptor number: `{fd}`"))
        .and_then(|fd| inherit::adopt(fd, Kind::Socket))
    {
        Ok(s) => s,
        Err(e) => give_up(&e),
    };
    let mut buf = [0u8; 2];
    loop {
        let got = match fd_pass::recv(requests.as_fd(), &mut buf, 3, 0) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => give_up(&format!("failed to read a request: {e}")),
            Ok(got) => got,
        };
        if got.len == 0 && got.fds.is_empty() {
            // The runner is gone, or let its zygote go.
            std::process::exit(0);
        }
        if got.truncated || got.len != 1 || buf[0] != REQUEST || got.fds.len() != 3 {
            give_up("a malformed request");
        }
        let mut fds = got.fds.into_iter();
        let (Some(orders), Some(out), Some(err)) = (fds.next(), fds.next(), fds.next()) else {
            give_up("a malformed request");
        };
        for (fd, kind) in [
            (&orders, libc::S_IFSOCK),
            (&out, libc::S_IFIFO),
            (&err, libc::S_IFIFO),
        ] {
            if !is_kind(fd, kind) {
                give_up("a request's descriptor is not what it must be");
            }
        }
        // SAFETY: this process is single-threaded (it never starts a thread), and the child, a
        // standby, uses no mutex that records libc's thread id (as the supervisor's children).
        match unsafe { crate::sys::fork_sibling() } {
            Ok((0, _)) => {
                drop(requests);
                become_standby(orders, out, err)
            }
            Ok((pid, Some(pidfd))) => {
                drop((orders, out, err));
                let Ok(pid) = u32::try_from(pid) else {
                    give_up("the fork returned a negative pid");
                };
                if let Err(e) =
                    fd_pass::send(requests.as_fd(), &pid.to_le_bytes(), &[pidfd.as_fd()])
                {
                    // The standby is the runner's child: it reaps it when its socket closes.
                    give_up(&format!("failed to answer: {e}"));
                }
            }
            Ok((_, None)) => give_up("the fork made no pidfd"),
            Err(e) => give_up(&format!("failed to fork a standby (clone3): {e}")),
        }
    }
}

fn give_up(why: &str) -> ! {
    eprintln!("ralph sandbox zygote: {why}");
    std::process::exit(70)
}

fn is_kind(fd: &OwnedFd, kind: libc::mode_t) -> bool {
    // SAFETY: fstat fills a stat buffer we own; `fd` is only read.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } == 0) && st.st_mode & libc::S_IFMT == kind
}

/// In the forked child: becomes the standby a `posix_spawn` would have started (its own process
/// group, `out` and `err` as its standard output and error, a standby's argv[1]) and waits for
/// its order. Never returns.
fn become_standby(orders: OwnedFd, out: OwnedFd, err: OwnedFd) -> ! {
    let own_group =
        nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0));
    // SAFETY: dup2 of descriptors we own onto 1 and 2 (the new ones are not close-on-exec, as a
    // spawned helper's streams are not).
    let streams =
        unsafe { libc::dup2(out.as_raw_fd(), 1) >= 0 && libc::dup2(err.as_raw_fd(), 2) >= 0 };
    if own_group.is_err() || !streams {
        // Exits without an order: the runner sees the standby gone and starts a helper instead.
        std::process::exit(70);
    }
    drop((out, err));
    name_as_helper();
    // Its environment stays the zygote's one variable (which names no descriptor the standby
    // holds: the zygote's request socket was closed above); nothing reads it from here on.
    super::standby_main(orders)
}

unsafe extern "C" {
    /// glibc's `argv[0]`, in the process's argument area (set before `main`, never moved).
    static program_invocation_name: *mut libc::c_char;
}

/// Rewrites argv[1] in place from [`ZYGOTE_ARG`] to [`HELPER_ARG`] (the same length): the
/// standby's `/proc/PID/cmdline`, which [`super::leftovers`] and operators read, is then a
/// standby's. Leaves anything else untouched.
fn name_as_helper() {
    const _: () = assert!(ZYGOTE_ARG.len() == HELPER_ARG.len());
    let want = ZYGOTE_ARG.as_bytes();
    // SAFETY: glibc points `program_invocation_name` at argv[0] in the argument area the kernel
    // laid out (argv[0] NUL argv[1] NUL ...); this process was started with argv[1] =
    // ZYGOTE_ARG (that is how it became the zygote), so the bytes after argv[0]'s NUL are
    // ZYGOTE_ARG's and its NUL, which are checked before being overwritten with as many bytes.
    unsafe {
        let argv0 = program_invocation_name;
        if argv0.is_null() {
            return;
        }
        let argv1 = argv0.add(libc::strlen(argv0) + 1).cast::<u8>();
        if std::slice::from_raw_parts(argv1, want.len() + 1) != [want, &[0]].concat().as_slice() {
            return;
        }
        std::ptr::copy_nonoverlapping(HELPER_ARG.as_ptr(), argv1, want.len());
    }
}

#[cfg(test)]
mod tests;
