//! What a dead runner of this host left of its native rounds — sandbox helpers re-parented to
//! init, `ralph-*` cgroups whose maker is gone — ended without cutting a round's grace.
//!
//! A helper whose runner died is not stuck: it noticed through its pidfd and is stopping its
//! round (SIGTERM, `--kill-grace`, SIGKILL), then exits; the init of a round whose helper died
//! does the same on its own (`PR_SET_PDEATHSIG`). Whoever finds them (the next `ralph serve`
//! start-up) therefore waits, from the moment it finds them, for the grace the helper's command
//! line names ([`super::protocol::GRACE_ARG_PREFIX`]; the init, a fork of the helper, shows the
//! same) plus [`MARGIN`], and kills only what is still there then. Killing them at once cut the
//! clean-up of a round whose runner had just been killed (issue 27: a `ralph serve` or a docker
//! `ralph run` starting elsewhere on a busy host took the grace of `tests/it/kill_grace.rs`).

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::protocol::{GRACE_ARG_PREFIX, HELPER_ARG};
use super::tree;
use crate::sys;

/// Time given past a round's grace before what is left of it is killed: the helper's own
/// SIGKILL at the end of the grace, its reaping and its exit, on a loaded host.
pub const MARGIN: Duration = Duration::from_secs(5);

/// The grace assumed for a helper whose command line names none (an older version's).
pub const FALLBACK_GRACE: Duration = Duration::from_secs(10);

/// The grace named by a helper's (or its init's) command line (`/proc/PID/cmdline`, NUL
/// separated); `None` for any other process. A helper without the argument gets
/// [`FALLBACK_GRACE`].
pub fn grace_of_cmdline(cmdline: &[u8]) -> Option<Duration> {
    let mut args = cmdline.split(|b| *b == 0);
    let _exe = args.next()?;
    if args.next()? != HELPER_ARG.as_bytes() {
        return None;
    }
    let named = args
        .next()
        .and_then(|a| a.strip_prefix(GRACE_ARG_PREFIX.as_bytes()))
        .and_then(|ms| std::str::from_utf8(ms).ok())
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(Duration::from_millis);
    Some(named.unwrap_or(FALLBACK_GRACE))
}

/// The grace of process `pid` when it is a helper or a round's init (see [`grace_of_cmdline`]).
pub fn grace_of(pid: i32) -> Option<Duration> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|c| grace_of_cmdline(&c))
}

/// A sandbox helper re-parented to init (its runner is gone), held by a pidfd.
#[derive(Debug)]
struct Orphan {
    pidfd: OwnedFd,
    deadline: Instant,
}

/// The leftovers found at one moment; [`Leftovers::end`] ends them.
#[derive(Debug)]
pub struct Leftovers {
    orphans: Vec<Orphan>,
    cgroup_parents: Vec<PathBuf>,
}

/// What [`Leftovers::end`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ended {
    /// Helpers still there past their grace and [`MARGIN`], killed.
    pub helpers_killed: u32,
    /// Cgroups of dead makers removed (see [`super::cgroup_owner::reap_leftovers`]).
    pub cgroups_removed: u32,
}

impl Leftovers {
    /// The orphaned helpers of this pid namespace (found now; each one's grace counts from
    /// now) and the cgroup directories under `cgroup_parents` to reap after them.
    pub fn find(cgroup_parents: Vec<PathBuf>) -> Self {
        let now = Instant::now();
        let mut orphans = Vec::new();
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                if grace_of(pid).is_none() || tree::parent_of(pid) != Some(1) {
                    continue;
                }
                // Opened first, checked again after: a pid recycled meanwhile is left alone.
                let Ok(pidfd) = sys::pidfd_open(pid) else {
                    continue;
                };
                let Some(grace) = grace_of(pid) else {
                    continue;
                };
                if tree::parent_of(pid) != Some(1) {
                    continue;
                }
                orphans.push(Orphan {
                    pidfd,
                    deadline: now + grace + MARGIN,
                });
            }
        }
        Self {
            orphans,
            cgroup_parents,
        }
    }

    /// Whether anything found still runs (ending it then takes up to a grace).
    pub fn running(&self) -> bool {
        !self.orphans.is_empty()
            || self
                .cgroup_parents
                .iter()
                .any(|p| super::cgroup_owner::populated_leftovers(p))
    }

    /// Ends them: each orphaned helper is waited for until its deadline and killed only if it
    /// is still there; then the cgroups of dead makers are reaped, each one's processes given
    /// the grace of the round's init among them. Blocks up to the longest grace (plus
    /// [`MARGIN`], twice when a helper had to be killed: its init then stops the round itself).
    pub fn end(self) -> Ended {
        let mut ended = Ended::default();
        let mut waiting = self.orphans;
        while !waiting.is_empty() {
            let now = Instant::now();
            let mut still = Vec::new();
            for o in waiting {
                if exited(&o.pidfd, Duration::ZERO) {
                    continue;
                }
                if now >= o.deadline {
                    if sys::pidfd_send_signal(&o.pidfd, libc::SIGKILL).is_ok() {
                        ended.helpers_killed += 1;
                    }
                    let _ = exited(&o.pidfd, MARGIN);
                    continue;
                }
                still.push(o);
            }
            waiting = still;
            if let Some(first) = waiting.first() {
                // Wake for the first helper's exit or the earliest deadline, whichever comes.
                let next = waiting.iter().map(|o| o.deadline).min().unwrap_or(now);
                let _ = exited(
                    &first.pidfd,
                    next.saturating_duration_since(Instant::now())
                        .min(Duration::from_millis(200)),
                );
            }
        }
        ended.cgroups_removed = self
            .cgroup_parents
            .iter()
            .map(|p| super::cgroup_owner::reap_leftovers(p))
            .sum();
        ended
    }
}

/// Whether the process behind `pidfd` has exited, waiting up to `limit` for it.
fn exited(pidfd: &OwnedFd, limit: Duration) -> bool {
    let ms = i32::try_from(limit.as_millis()).unwrap_or(i32::MAX);
    let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, timeout), Ok(n) if n > 0)
}

/// The processes of cgroup `dir` now (`cgroup.procs`; none when it cannot be read).
pub fn cgroup_procs(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse::<i32>().ok())
        .collect()
}

/// Waits until cgroup `dir` holds no process, for as long as the grace of the round's init
/// among its processes (plus [`MARGIN`]) from now; a cgroup without one (a round without a pid
/// namespace: nothing of it is stopping) is not waited for. Returns the processes left.
pub fn wait_for_round(dir: &Path) -> Vec<i32> {
    let procs = cgroup_procs(dir);
    let Some(grace) = procs.iter().filter_map(|p| grace_of(*p)).max() else {
        return procs;
    };
    let deadline = Instant::now() + grace + MARGIN;
    loop {
        let procs = cgroup_procs(dir);
        if procs.is_empty() || Instant::now() >= deadline {
            return procs;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmdline(args: &[&str]) -> Vec<u8> {
        args.iter()
            .flat_map(|a| a.bytes().chain([0]))
            .collect::<Vec<u8>>()
    }

    #[test]
    fn a_helper_names_its_grace_and_nothing_else_is_a_helper() {
        let g = |a: &[&str]| grace_of_cmdline(&cmdline(a));
        assert_eq!(
            g(&["/usr/bin/ralph", HELPER_ARG, "--kill-grace-ms=2500"]),
            Some(Duration::from_millis(2500))
        );
        // An older helper: no argument, the fallback.
        assert_eq!(g(&["/usr/bin/ralph", HELPER_ARG]), Some(FALLBACK_GRACE));
        assert_eq!(
            g(&["/usr/bin/ralph", HELPER_ARG, "--kill-grace-ms=x"]),
            Some(FALLBACK_GRACE)
        );
        // Not a helper: another `ralph` command, the helper's name elsewhere in the line.
        assert_eq!(g(&["/usr/bin/ralph", "run", HELPER_ARG]), None);
        assert_eq!(g(&["sh", "-c", HELPER_ARG]), None);
        assert_eq!(grace_of_cmdline(b""), None);
    }

    #[test]
    fn a_cgroup_without_a_round_init_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let started = Instant::now();
        assert!(wait_for_round(dir.path()).is_empty());
        std::fs::write(
            dir.path().join("cgroup.procs"),
            format!("{}\n", std::process::id()),
        )
        .unwrap();
        // This test process is no helper: returned at once, to be killed.
        assert_eq!(
            wait_for_round(dir.path()),
            vec![i32::try_from(std::process::id()).unwrap()]
        );
        assert!(started.elapsed() < MARGIN);
    }
}
