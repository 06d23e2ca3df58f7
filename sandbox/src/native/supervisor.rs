//! The supervisor: a single-threaded process that sets up what must be done outside the sandbox
//! (user namespace, cgroups, placeholders), starts the sandbox's init in a new pid namespace (or,
//! without one, the command itself as a child subreaper), enforces the timeout, stops the whole
//! tree on cancel or when the runner dies, and measures what the tree used.
//!
//! It runs either as the helper process spawned by the runner (rounds) or in the `ralph` process
//! itself (`ralph sandbox exec`). Either way no other thread exists, so everything between
//! `fork` and `execve` is safe.

mod start;

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::signalfd::SignalFd;
use nix::unistd::Pid;

use super::cgroup::RunCgroups;
use super::protocol::{HelperResult, SetupFailure};
use super::step::StepFailure;
use super::tree;
use crate::beneath::{self, TreePath};
use crate::gitguard::{self, GitGuard, Inventory};
use crate::mode::BackendKind;
use crate::outcome::git::GitCheck;
use crate::outcome::{
    EndedBy, Enforcement, ExecOutcome, Level, ResourceUsage, Restriction, Termination,
};
use crate::plan::SandboxPlan;
use crate::protect;
use crate::snapshot::Snapshot;
use crate::spec::ExecSpec;
use crate::sys::{self, WaitAny};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Stopping {
        kill_at: Instant,
    },
}

/// The init's report: the command's raw wait status, and how many leftovers it killed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reported {
    status: i32,
    leftovers: u32,
}

impl Reported {
    /// The init's line (`"<status> <leftovers>\n"`); `None` for anything else (an init killed
    /// before it reported closes the pipe empty).
    fn parse(text: &str) -> Option<Self> {
        let mut it = text.split_whitespace().map(str::parse::<i64>);
        match (it.next(), it.next(), it.next()) {
            (Some(Ok(status)), Some(Ok(left)), None) => Some(Self {
                status: i32::try_from(status).ok()?,
                leftovers: u32::try_from(left).ok()?,
            }),
            _ => None,
        }
    }
}

/// Runs `spec` under `plan` to the end. `parent_pid`, when set, is watched: if that process
/// dies the tree is stopped (the runner was killed).
///
/// `from_runner` holds what the runner handed over besides the spec ([`FromRunner`]).
pub fn supervise(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    parent_pid: Option<i32>,
    from_runner: FromRunner,
) -> HelperResult {
    match Supervisor::start(spec, plan, parent_pid, from_runner) {
        Ok(Started::Running(s)) => s.run(),
        Ok(Started::Failed(f)) => HelperResult::SetupFailed {
            failure: SetupFailure {
                restriction: f.restriction,
                step: f.step,
                reason: f.reason,
            },
        },
        Err(message) => HelperResult::Internal { message },
    }
}

/// Descriptors the runner handed to the helper.
#[derive(Debug, Default)]
pub struct FromRunner {
    /// The hand-over of `--network gateway` ([`super::gateway`]), needed when the plan has
    /// gateway ports; the supervisor closes its copy once the init holds it.
    pub gateway: Option<OwnedFd>,
    /// A held run's release ([`super::hold`]): the command is not let go before it.
    pub hold: Option<OwnedFd>,
    /// A network namespace a standby made while it waited for its order ([`super::net::Early`],
    /// made as root: used only by a plan without a user namespace of its own).
    pub netns: Option<super::net::Early>,
    /// The helper's end of the run's hand-back: the view is sent back on it at the end
    /// ([`super::handback`]).
    pub handback: Option<OwnedFd>,
}

enum Started {
    Running(Box<Supervisor>),
    Failed(StepFailure),
}

struct Supervisor {
    main: Pid,
    /// `main` is the init of a pid namespace (stop it and the namespace dies).
    ns_init: bool,
    started: Instant,
    /// From the start of the set-up to the command's `execve` (or its failure).
    setup: Duration,
    deadline: Option<Instant>,
    grace: Duration,
    sigfd: SignalFd,
    parent: Option<OwnedFd>,
    /// The init's report (the command's wait status and the leftovers it killed), read once.
    status_r: Option<OwnedFd>,
    /// What the init reported: written only once the command ended and every other process of
    /// the namespace was killed and reaped, so the run's checks need not wait for the init's own
    /// exit (the kernel then tears down its namespaces: their mounts, ~0.3 ms a round).
    reported: Option<Reported>,
    phase: Phase,
    ended_by: EndedBy,
    main_status: Option<i32>,
    main_wall: Option<Duration>,
    leftovers_killed: u32,
    exec_error: Option<String>,
    enforcement: Enforcement,
    cleanup: Cleanup,
    /// Paths that must not exist after the run.
    absent: Vec<TreePath>,
    /// Protected paths on whose way no symlink may stand after the run.
    watch: Vec<TreePath>,
    /// The protected paths as they were before the run.
    snapshot: Snapshot,
    /// The git check: what it covers and what the trees held before the run.
    git: Option<(GitGuard, Inventory)>,
    /// Where the originals of what the git check replaces go.
    control_dir: PathBuf,
    /// Read ends of the runner's output pipes (the command's stdout and stderr), never read
    /// while the runner lives; once it is gone they are drained, so the command's writes neither
    /// fail (EPIPE, SIGPIPE: a shell's "Terminated" would kill it mid-clean-up) nor block during
    /// its grace.
    spare_readers: Vec<OwnedFd>,
    /// The report directory and the supervisor's end of its hand-over (`None` without a tmpfs:
    /// the host directory is checked instead), see [`crate::report_dir`].
    report: Option<(crate::plan::ReportDirPlan, Option<OwnedFd>)>,
    /// Where the view goes at the end, and the view held ([`super::handback`]).
    handback: Option<(OwnedFd, OwnedFd)>,
}

/// What the supervisor created outside the sandbox and removes at the end.
#[derive(Debug, Default)]
struct Cleanup {
    cgroups: RunCgroups,
    placeholders: Vec<TreePath>,
    mask: Option<PathBuf>,
}

impl Cleanup {
    /// Removes the mask file (once the sandbox's mounts hold their own reference to it).
    fn drop_mask(&mut self) {
        if let Some(p) = self.mask.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    fn run(&mut self) {
        self.drop_mask();
        self.cgroups.remove();
        // Placeholders are removed only while still empty (the agent could not write in them),
        // never through a symlink.
        for p in self.placeholders.drain(..).rev() {
            let _ = beneath::rmdir_if_empty(&p);
        }
    }
}

/// Whatever way the supervisor ends, set-up failing half-way included (a pipe or the fork
/// refused after the cgroups, placeholders and mask file were made), what it made goes. `run`
/// is idempotent: the end of a run calls it first, this then finds nothing left.
impl Drop for Cleanup {
    fn drop(&mut self) {
        self.run();
    }
}

fn base_enforcement(spec: &ExecSpec, plan: &SandboxPlan) -> Enforcement {
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
    e.restrictions
        .extend(plan.enforcement.restrictions.iter().cloned());
    e.network.clone_from(&plan.enforcement.network);
    e
}

impl Supervisor {
    fn me() -> i32 {
        nix::unistd::getpid().as_raw()
    }

    /// Starts stopping the tree: SIGTERM now, SIGKILL after the grace period. A second stop
    /// request (another cancel, the runner's death during a cancel's grace) changes nothing:
    /// the grace that runs is kept whole.
    fn stop(&mut self, why: EndedBy) {
        if self.phase != Phase::Running {
            return;
        }
        self.ended_by = why;
        if self.ns_init {
            // The init forwards it to every process of the namespace.
            let _ = kill(self.main, Signal::SIGTERM);
        } else {
            let _ = tree::signal_descendants(Self::me(), libc::SIGTERM);
        }
        self.phase = Phase::Stopping {
            kill_at: Instant::now() + self.grace,
        };
    }

    fn kill_everything(&mut self) {
        if self.ns_init {
            // The namespace dies with its init.
            let _ = kill(self.main, Signal::SIGKILL);
        } else {
            let _ = tree::signal_descendants(Self::me(), libc::SIGKILL);
        }
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

    fn run(mut self: Box<Self>) -> HelperResult {
        let result = self.run_inner();
        if result.is_err() {
            self.kill_everything();
            let _ = nix::sys::wait::waitpid(self.main, None);
        }
        self.cleanup.run();
        if let Some((chan, view)) = self.handback.take() {
            super::handback::send(chan, view);
        }
        match result {
            Ok(outcome) => HelperResult::Ran { outcome },
            Err(message) => HelperResult::Internal { message },
        }
    }

    /// Reads the init's report once its pipe is readable (the init writes it in one write and
    /// exits at once, so the read to end-of-file does not wait on anything of the run).
    fn read_report(&mut self) {
        if let Some(r) = self.status_r.take() {
            let mut text = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut text);
            self.reported = Reported::parse(&text);
            if self.reported.is_some() && self.main_wall.is_none() {
                self.main_wall = Some(self.started.elapsed());
            }
        }
    }

    fn run_inner(&mut self) -> Result<ExecOutcome, String> {
        loop {
            if self.reported.is_some() {
                // Every process of the namespace but the init is gone: the checks may start.
                break;
            }
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
                let _ = tree::signal_descendants(Self::me(), libc::SIGKILL);
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
                        .saturating_add(1)
                        .min(60_000);
                    PollTimeout::try_from(i32::try_from(ms).unwrap_or(60_000))
                        .unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = vec![PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN)];
            // The init's report (only a namespace's init writes one; read below).
            let report_at = match (&self.status_r, self.ns_init) {
                (Some(r), true) => {
                    fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                    Some(fds.len() - 1)
                }
                _ => None,
            };
            let parent_at = fds.len();
            if let Some(p) = &self.parent {
                fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
            } else {
                // The runner is gone: nobody reads the command's output but us.
                for r in &self.spare_readers {
                    fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
                }
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(e) => return Err(format!("failed to wait for events (poll): {}", e.desc())),
            }
            let parent_gone = self.parent.is_some()
                && fds
                    .get(parent_at)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty());
            let report_ready = report_at
                .and_then(|i| fds.get(i))
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty());
            drop(fds);
            if report_ready {
                self.read_report();
            }
            if self.parent.is_none() {
                for r in &self.spare_readers {
                    discard_available(r);
                }
            }
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
        // In a pid namespace the init reports the command's own status and its leftovers (read
        // here when the init ended without the loop seeing its report first).
        if self.reported.is_none() {
            self.read_report();
        }
        let mut raw = self.main_status.unwrap_or(0);
        if let Some(r) = self.reported {
            raw = r.status;
            self.leftovers_killed = r.leftovers;
        }
        let termination = if libc::WIFSIGNALED(raw) {
            Termination::Signaled {
                signal: libc::WTERMSIG(raw),
            }
        } else {
            Termination::Exited {
                code: libc::WEXITSTATUS(raw),
            }
        };
        // The report directory, now that nothing of the run is left to write it: its report
        // files copied out of the tmpfs the init handed over (or, without one, the host
        // directory checked).
        let report_dir = self
            .report
            .take()
            .map(|(r, chan)| match chan {
                Some(chan) => {
                    crate::report_dir::deliver(&r.dir, crate::report_dir::receive(chan.as_fd()))
                }
                None => crate::report_dir::check_host(&r.dir),
            })
            .map(Box::new);
        // Symlinks where protected paths should be, paths the agent may not create (the tree is
        // dead: nothing races this).
        let mut violations = protect::check_after_run(&self.watch, &self.absent);
        violations.extend(self.snapshot.check_and_restore());
        // Git repositories the run created or changed, made safe for the host's git.
        let git = match self.git.take() {
            Some((guard, before)) => {
                let (check, more) = gitguard::check_after_run(&guard, &before, &self.control_dir);
                violations.extend(more);
                check
            }
            None => GitCheck::default(),
        };
        if self.ended_by == EndedBy::Exit && self.cleanup.cgroups.oom_kills() > 0 {
            self.ended_by = EndedBy::MemoryLimit;
        }
        // The init itself, reaped now if the checks started on its report: its usage (and its
        // children's) counts once it is reaped, and its cgroups can go only once it left them.
        // (An init already reaped, or a command without one: nothing to wait for.)
        let _ = nix::sys::wait::waitpid(self.main, None);
        self.reap()?;
        let usage = sys::rusage_children()
            .map_err(|e| format!("failed to read resource usage (getrusage): {e}"))?;
        let ms = |tv: libc::timeval| (tv.tv_sec as u64) * 1000 + (tv.tv_usec as u64) / 1000;
        Ok(ExecOutcome {
            termination,
            ended_by: self.ended_by,
            wall: self.main_wall.unwrap_or_else(|| self.started.elapsed()),
            setup: Some(self.setup),
            resources: Some(ResourceUsage {
                user_cpu_ms: ms(usage.ru_utime),
                system_cpu_ms: ms(usage.ru_stime),
                max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
            }),
            leftovers_killed: self.leftovers_killed,
            exec_error: self.exec_error.take(),
            violations,
            git,
            report_dir,
            enforcement: self.enforcement.clone(),
        })
    }
}

/// Reads and drops whatever `fd` (non-blocking) holds now.
fn discard_available(fd: &OwnedFd) {
    let mut buf = [0u8; 8192];
    while matches!(nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(fd), &mut buf), Ok(n) if n > 0)
    {
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// Only the init's whole line is a report: an init killed before it wrote one (its pipe
    /// closed empty, or cut) leaves the supervisor to wait for the namespace to die.
    #[test]
    fn only_the_inits_whole_line_is_a_report() {
        assert_eq!(
            Reported::parse("256 2\n"),
            Some(Reported {
                status: 256,
                leftovers: 2
            })
        );
        for bad in [
            "",
            "256",
            "256 ",
            "x 2",
            "256 -1",
            "256 2 3",
            "99999999999 0",
        ] {
            assert_eq!(Reported::parse(bad), None, "{bad:?}");
        }
    }

    /// A set-up abandoned at any `?` drops its `Cleanup`: the placeholders (only while still
    /// empty) and the mask file go, and running it again finds nothing.
    #[test]
    fn a_dropped_cleanup_removes_what_the_setup_made() {
        let root = tempfile::tempdir().unwrap();
        let empty = root.path().join("empty");
        let used = root.path().join("used");
        let mask = root.path().join("mask");
        std::fs::create_dir(&empty).unwrap();
        std::fs::create_dir(&used).unwrap();
        std::fs::write(used.join("kept"), b"x").unwrap();
        std::fs::write(&mask, b"").unwrap();
        let at = |rel: &str| TreePath::new(root.path(), Path::new(rel)).unwrap();
        let mut c = Cleanup::default();
        c.placeholders = vec![at("empty"), at("used")];
        c.mask = Some(mask.clone());
        c.run();
        assert!(!empty.exists() && !mask.exists());
        assert!(
            used.join("kept").exists(),
            "a written placeholder is not removed"
        );
        std::fs::create_dir(&empty).unwrap();
        std::fs::write(&mask, b"").unwrap();
        drop(c);
        assert!(
            empty.exists() && mask.exists(),
            "a second run removes nothing"
        );

        let mut c = Cleanup::default();
        c.placeholders = vec![at("empty")];
        c.mask = Some(mask.clone());
        drop(c);
        assert!(!empty.exists() && !mask.exists());
    }
}
