//! Where the supervisor's helpers run: off the supervisor's CPU while both work.
//!
//! A new thread or process starts on its creator's CPU (the kernel picks it at `clone` time and
//! rarely moves it before the creator sleeps), so the two then run in turn instead of side by
//! side: `perf sched` showed the init waiting on the supervisor's CPU, the other one idle, in
//! half of the starts, the supervisor meanwhile walking the writable trees and copying the
//! protected files. The supervisor therefore narrows a forked init to the other allowed CPUs
//! while it does that work (only when the host has an idle CPU to give it), and widens it back
//! to its own set once done, before it says go: the command and its tree may run on every CPU
//! they could before, and the init is pinned only while the two work side by side (a pinned
//! init could not take the supervisor's CPU once that one sleeps). Both calls are the
//! supervisor's, in order: no race with the init.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

use super::step::{StepFailure, restriction};

/// The CPU the caller runs on now, or `None` when the kernel does not say.
fn this_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes nothing and returns a CPU number or -1.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// How many CPUs `set` holds.
fn count(set: &CpuSet) -> usize {
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .count()
}

/// `set` without `cpu`, when another CPU of it is left.
fn without(set: &CpuSet, cpu: usize) -> Option<CpuSet> {
    let others = (0..CpuSet::count())
        .filter(|&c| c != cpu && set.is_set(c).unwrap_or(false))
        .count();
    let mut narrowed = *set;
    (others > 0 && narrowed.unset(cpu).is_ok()).then_some(narrowed)
}

/// Moves the calling thread off the CPU it runs on, when another one is allowed and the host
/// has an idle CPU (see [`Spread::push_off_this_cpu`]); for a thread that lives only while its
/// creator works: nothing inherits its narrowed set.
pub fn leave_this_cpu() {
    let me = Pid::from_raw(0);
    let (Some(here), Ok(set)) = (this_cpu(), sched_getaffinity(me)) else {
        return;
    };
    if let Some(narrowed) = without(&set, here)
        && runnable_now().is_some_and(|n| n <= count(&set))
    {
        let _ = sched_setaffinity(me, &narrowed);
    }
}

/// The CPUs the supervisor may run on, taken before it forks the init; `None` with only one.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    allowed: CpuSet,
    /// How many CPUs `allowed` holds (more than one).
    count: usize,
}

/// The tasks runnable on the whole host right now (`/proc/loadavg`'s fourth field, before the
/// `/`: the kernel's instantaneous count, not an average).
fn runnable_now() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    parse_runnable(&text)
}

fn parse_runnable(loadavg: &str) -> Option<usize> {
    loadavg
        .split_whitespace()
        .nth(3)?
        .split_once('/')?
        .0
        .parse()
        .ok()
}

impl Spread {
    /// The caller's allowed CPUs, when there is more than one.
    pub fn take() -> Option<Spread> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let count = count(&allowed);
        (count > 1).then_some(Spread { allowed, count })
    }

    /// In the supervisor: moves `child` (just forked, still on this CPU) to the other allowed
    /// CPUs, when the host has no more runnable tasks than those CPUs (the supervisor and the
    /// child among them): another CPU is then idle. On a busier host the kernel's own placement
    /// is kept: pinned next to a busy task, the init would wait for its share of that CPU
    /// (one CPU hog beside `sandbox exec`: 15.9 ms a start with the init pinned until the go,
    /// 12.2 ms unpinned). Best effort.
    pub fn push_off_this_cpu(&self, child: Pid) {
        if runnable_now().is_some_and(|n| n <= self.count) {
            self.narrow(child);
        }
    }

    /// `child` off the caller's CPU, whatever the host's load.
    fn narrow(&self, child: Pid) {
        if let Some(narrowed) = this_cpu().and_then(|here| without(&self.allowed, here)) {
            let _ = sched_setaffinity(child, &narrowed);
        }
    }

    /// In the supervisor, before the go-ahead: `child` back to every CPU the supervisor was
    /// allowed. A failure fails the start: the command would inherit the narrowed set. A child
    /// already gone (its set-up failed) is no failure here: its own report says why.
    pub fn widen(&self, child: Pid) -> Result<(), StepFailure> {
        match sched_setaffinity(child, &self.allowed) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
            Err(e) => Err(StepFailure::nix(
                restriction::PROCESS,
                "sched_setaffinity",
                "give the sandbox's init every CPU the runner may use",
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn cpus(set: &CpuSet) -> Vec<usize> {
        (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect()
    }

    /// This process's spread, or `None` where it may run on one CPU only (the test then skips,
    /// saying why).
    fn spread_or_skip() -> Option<Spread> {
        let spread = Spread::take();
        if spread.is_none() {
            eprintln!("skipped: this process may run on one CPU only");
        }
        spread
    }

    #[test]
    fn the_runnable_count_is_the_fourth_fields_numerator() {
        assert_eq!(parse_runnable("2.06 1.79 1.80 3/155 2699\n"), Some(3));
        assert_eq!(parse_runnable("0.00 0.00 0.00 1/80 12"), Some(1));
        assert_eq!(parse_runnable("0.00 0.00 0.00"), None);
        assert_eq!(parse_runnable("a b c x/y z"), None);
        assert!(
            runnable_now().is_some_and(|n| n >= 1),
            "this test itself runs"
        );
    }

    #[test]
    fn widening_a_child_already_gone_is_no_failure() {
        let Some(spread) = spread_or_skip() else {
            return;
        };
        // SAFETY: the child `_exit`s at once.
        match unsafe { nix::unistd::fork() }.unwrap() {
            // SAFETY: _exit in a forked child.
            nix::unistd::ForkResult::Child => unsafe { libc::_exit(0) },
            nix::unistd::ForkResult::Parent { child } => {
                nix::sys::wait::waitpid(child, None).unwrap();
                assert!(spread.widen(child).is_ok());
            }
        }
    }

    #[test]
    fn without_keeps_the_others_and_never_empties_the_set() {
        let mut two = CpuSet::new();
        two.set(0).unwrap();
        two.set(3).unwrap();
        assert_eq!(cpus(&without(&two, 0).unwrap()), [3]);
        assert_eq!(cpus(&without(&two, 5).unwrap()), [0, 3]);
        let mut one = CpuSet::new();
        one.set(2).unwrap();
        assert!(
            without(&one, 2).is_none(),
            "the last CPU is never taken away"
        );
    }

    #[test]
    fn a_pushed_child_is_off_this_cpu_until_widened_to_the_whole_set() {
        let Some(spread) = spread_or_skip() else {
            return;
        };
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only makes raw syscalls and `_exit`s.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                drop((w, r2));
                // At each byte from the parent: how many CPUs this process may use now.
                let mut b = [0u8; 1];
                while matches!(nix::unistd::read(r.as_raw_fd(), &mut b), Ok(1)) {
                    let set = sched_getaffinity(Pid::from_raw(0)).unwrap();
                    let n = u8::try_from(cpus(&set).len()).unwrap_or(u8::MAX);
                    let _ = nix::unistd::write(&w2, &[n]);
                }
                // SAFETY: _exit in a forked child.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop((r, w2));
                let all = u8::try_from(cpus(&spread.allowed).len()).unwrap();
                let ask = || {
                    nix::unistd::write(&w, b"?").unwrap();
                    let mut n = [0u8; 1];
                    assert_eq!(nix::unistd::read(r2.as_raw_fd(), &mut n).unwrap(), 1);
                    n[0]
                };
                spread.narrow(child);
                assert_eq!(ask(), all - 1, "narrowed by this CPU");
                spread.widen(child).unwrap();
                assert_eq!(ask(), all, "widened to the whole set");
                drop(w);
                nix::sys::wait::waitpid(child, None).unwrap();
            }
        }
    }
}
