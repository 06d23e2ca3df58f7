//! The supervisor: a single-threaded process that forks the command, reaps everything, enforces
//! the timeout, stops the whole tree on cancel or when the runner dies, and measures what the
//! tree used.
//!
//! It runs either as the helper process spawned by the runner (rounds) or in the `ralph` process
//! itself (`ralph sandbox exec`). Either way it never runs inside a multithreaded runtime, so
//! the work between `fork` and `execve` is safe.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::{ForkResult, Pid, fork, pipe2};

use super::child::{self, ChildFailure, ExecPlan};
use super::protocol::{HelperResult, SetupFailure};
use super::tree;
use crate::mode::BackendKind;
use crate::outcome::{
    EndedBy, Enforcement, ExecOutcome, Level, ResourceUsage, Restriction, Termination,
};
use crate::spec::ExecSpec;
use crate::sys::{self, WaitAny};

/// Signals the supervisor handles itself (blocked and read through a signalfd).
const HANDLED: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// What stops the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Stopping {
        kill_at: Instant,
    },
}

/// How the supervisor reacts to runner-initiated signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalPolicy {
    /// Helper process: SIGTERM/SIGINT/SIGHUP from the runner mean "cancel".
    Cancel,
}

/// Runs `spec` to the end. `parent_pid`, when set, is watched: if that process dies the tree is
/// stopped (the runner was killed).
pub fn supervise(
    spec: &ExecSpec,
    parent_pid: Option<i32>,
    enforcement: Enforcement,
) -> HelperResult {
    match Supervisor::start(spec, parent_pid, enforcement) {
        Ok(Started::Running(s)) => s.run(),
        Ok(Started::Failed(failure)) => HelperResult::SetupFailed { failure },
        Err(message) => HelperResult::Internal { message },
    }
}

enum Started {
    Running(Supervisor),
    Failed(SetupFailure),
}

struct Supervisor {
    main: Pid,
    started: Instant,
    deadline: Option<Instant>,
    grace: Duration,
    sigfd: SignalFd,
    parent: Option<OwnedFd>,
    phase: Phase,
    ended_by: EndedBy,
    main_status: Option<i32>,
    main_wall: Option<Duration>,
    leftovers_killed: u32,
    exec_error: Option<String>,
    enforcement: Enforcement,
}

fn restriction_of_step(step: &str) -> &'static str {
    match step {
        "setrlimit" => "resource limits (rlimits)",
        "prctl" => "no_new_privs",
        "close_range" => "descriptor hygiene",
        "chdir" => "the working directory",
        _ => "process setup",
    }
}

impl Supervisor {
    fn start(
        spec: &ExecSpec,
        parent_pid: Option<i32>,
        mut enforcement: Enforcement,
    ) -> Result<Started, String> {
        let plan = match ExecPlan::new(spec) {
            Ok(p) => p,
            Err(f) => return Err(f.detail),
        };
        nix::sys::prctl::set_child_subreaper(true)
            .map_err(|e| format!("failed to become a child subreaper (prctl): {}", e.desc()))?;
        let mut mask = SigSet::empty();
        for s in HANDLED {
            mask.add(s);
        }
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
            .map_err(|e| format!("failed to block signals (sigprocmask): {}", e.desc()))?;
        let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| format!("failed to create a signalfd: {}", e.desc()))?;
        let parent = match parent_pid {
            None => None,
            Some(pid) => {
                if nix::unistd::getppid().as_raw() != pid {
                    return Err("the runner exited before the sandbox started".into());
                }
                Some(
                    sys::pidfd_open(pid)
                        .map_err(|e| format!("failed to watch the runner (pidfd_open): {e}"))?,
                )
            }
        };
        let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC)
            .map_err(|e| format!("failed to create a pipe: {}", e.desc()))?;
        let started = Instant::now();
        // SAFETY: this process is single-threaded (the helper never starts a runtime, and
        // `ralph sandbox exec` runs before any thread is created), so the child may run arbitrary
        // code until `execve`.
        let fork = unsafe { fork() }.map_err(|e| format!("failed to fork: {}", e.desc()))?;
        let main = match fork {
            ForkResult::Child => {
                drop(err_r);
                child::exec(spec, &plan, &err_w)
            }
            ForkResult::Parent { child } => child,
        };
        drop(err_w);
        let mut buf = Vec::new();
        let _ = std::fs::File::from(err_r).read_to_end(&mut buf);
        let mut exec_error = None;
        if !buf.is_empty() {
            let failure: ChildFailure = serde_json::from_slice(&buf)
                .map_err(|e| format!("unreadable report from the sandboxed child: {e}"))?;
            if failure.step == "exec" {
                exec_error = Some(failure.detail);
            } else {
                // Setup failed: nothing of the command ran. Reap the child before answering.
                let _ = nix::sys::wait::waitpid(main, None);
                return Ok(Started::Failed(SetupFailure {
                    restriction: restriction_of_step(&failure.step).to_owned(),
                    step: failure.step,
                    reason: failure.detail,
                }));
            }
        }
        enforcement.record(
            Restriction::ProcessTree,
            Level::Full,
            "child subreaper; the whole tree is killed at the end",
        );
        Ok(Started::Running(Supervisor {
            main,
            started,
            deadline: spec.timeout.map(|t| started + t),
            grace: spec.kill_grace,
            sigfd,
            parent,
            phase: Phase::Running,
            ended_by: EndedBy::Exit,
            main_status: None,
            main_wall: None,
            leftovers_killed: 0,
            exec_error,
            enforcement,
        }))
    }

    fn me() -> i32 {
        nix::unistd::getpid().as_raw()
    }

    /// Starts stopping the tree: SIGTERM now, SIGKILL after the grace period.
    fn stop(&mut self, why: EndedBy) {
        if self.phase != Phase::Running {
            if why == EndedBy::RunnerGone {
                self.kill_everything();
            }
            return;
        }
        self.ended_by = why;
        let _ = tree::signal_descendants(Self::me(), libc::SIGTERM);
        self.phase = Phase::Stopping {
            kill_at: Instant::now() + self.grace,
        };
    }

    fn kill_everything(&mut self) {
        let _ = tree::signal_descendants(Self::me(), libc::SIGKILL);
    }

    fn reap(&mut self) -> Result<bool, String> {
        loop {
            match sys::wait_any_nohang()
                .map_err(|e| format!("failed to reap children (wait4): {e}"))?
            {
                WaitAny::Reaped(r) => {
                    if r.pid == self.main.as_raw() {
                        self.main_status = Some(r.status);
                        self.main_wall = Some(self.started.elapsed());
                    }
                }
                WaitAny::StillRunning => return Ok(false),
                WaitAny::NoChildren => return Ok(true),
            }
        }
    }

    fn next_wakeup(&self) -> Option<Instant> {
        match self.phase {
            Phase::Running => self.deadline,
            Phase::Stopping { kill_at } => Some(kill_at),
        }
    }

    fn run(mut self) -> HelperResult {
        match self.run_inner() {
            Ok(outcome) => HelperResult::Ran { outcome },
            Err(message) => {
                self.kill_everything();
                HelperResult::Internal { message }
            }
        }
    }

    fn run_inner(&mut self) -> Result<ExecOutcome, String> {
        loop {
            let all_gone = self.reap()?;
            if self.main_status.is_some() {
                if all_gone {
                    break;
                }
                // The main process is done; whatever it left behind goes now.
                let pids = tree::descendants(Self::me())
                    .map_err(|e| format!("failed to list processes: {e}"))?;
                self.leftovers_killed = self
                    .leftovers_killed
                    .max(u32::try_from(pids.len()).unwrap_or(u32::MAX));
                self.kill_everything();
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let now = Instant::now();
            if let Some(at) = self.next_wakeup() {
                if now >= at {
                    match self.phase {
                        Phase::Running => self.stop(EndedBy::Timeout),
                        Phase::Stopping { .. } => {
                            self.kill_everything();
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                    continue;
                }
            }
            let timeout = match self.next_wakeup() {
                None => PollTimeout::NONE,
                Some(at) => {
                    let ms = at
                        .saturating_duration_since(now)
                        .as_millis()
                        .saturating_add(1);
                    PollTimeout::try_from(ms.min(60_000) as i32).unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = vec![PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN)];
            if let Some(p) = &self.parent {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(format!("failed to wait for events (poll): {}", e.desc())),
            }
            let parent_gone = fds
                .get(1)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty());
            drop(fds);
            while let Ok(Some(info)) = self.sigfd.read_signal() {
                match Signal::try_from(info.ssi_signo as i32) {
                    Ok(Signal::SIGCHLD) | Err(_) => {}
                    Ok(_) => self.stop(EndedBy::Cancel),
                }
            }
            if parent_gone {
                self.parent = None;
                self.stop(EndedBy::RunnerGone);
            }
        }
        let usage = sys::rusage_children()
            .map_err(|e| format!("failed to read resource usage (getrusage): {e}"))?;
        let raw = self.main_status.unwrap_or(0);
        let termination = if libc::WIFSIGNALED(raw) {
            Termination::Signaled {
                signal: libc::WTERMSIG(raw),
            }
        } else {
            Termination::Exited {
                code: libc::WEXITSTATUS(raw),
            }
        };
        let ms = |tv: libc::timeval| (tv.tv_sec as u64) * 1000 + (tv.tv_usec as u64) / 1000;
        Ok(ExecOutcome {
            termination,
            ended_by: self.ended_by,
            wall: self.main_wall.unwrap_or_else(|| self.started.elapsed()),
            resources: ResourceUsage {
                user_cpu_ms: ms(usage.ru_utime),
                system_cpu_ms: ms(usage.ru_stime),
                max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
            },
            leftovers_killed: self.leftovers_killed,
            exec_error: self.exec_error.take(),
            enforcement: self.enforcement.clone(),
        })
    }
}

/// The enforcement lines every native run starts with.
pub fn base_enforcement(spec: &ExecSpec) -> Enforcement {
    let mut e = Enforcement::new(BackendKind::Native, spec.sandbox.mode);
    e.record(
        Restriction::Environment,
        Level::Full,
        format!("cleared; {} variables set", spec.env.len()),
    );
    e.record(
        Restriction::Descriptors,
        Level::Full,
        "inherited descriptors closed on exec (close_range)",
    );
    e.record(
        Restriction::NoNewPrivs,
        Level::Full,
        "prctl PR_SET_NO_NEW_PRIVS",
    );
    e.record(Restriction::CoreDumps, Level::Full, "RLIMIT_CORE 0");
    let rl = |e: &mut Enforcement, r, v: Option<u64>, name: &str| match v {
        Some(n) => e.record(r, Level::Full, format!("{name} {n}")),
        None => e.record(r, Level::NotRequested, "no limit requested"),
    };
    rl(
        &mut e,
        Restriction::OpenFiles,
        spec.sandbox.limits.open_files,
        "RLIMIT_NOFILE",
    );
    rl(
        &mut e,
        Restriction::FileSize,
        spec.sandbox.limits.file_size_bytes,
        "RLIMIT_FSIZE",
    );
    e
}
