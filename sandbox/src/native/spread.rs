//! Where the supervisor's helpers run: off the supervisor's CPU while both work.
//!
//! A new thread or process starts on its creator's CPU (the kernel picks it at `clone` time and
//! rarely moves it before the creator sleeps), so the two then run in turn instead of side by
//! side: `perf sched` showed the init waiting on the supervisor's CPU, the other one idle, in
//! half of the starts, the supervisor meanwhile walking the writable trees and copying the
//! protected files. The supervisor therefore narrows a forked init to the other allowed CPUs,
//! and the init widens itself back to the set it was born with before it forks the command, so
//! the command and its tree may run on every CPU they could before.

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPU the caller runs on now, or `None` when the kernel does not say.
fn this_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu takes nothing and returns a CPU number or -1.
    usize::try_from(unsafe { libc::sched_getcpu() }).ok()
}

/// `set` without `cpu`, when another CPU of it is left.
fn without(set: &CpuSet, cpu: usize) -> Option<CpuSet> {
    let others = (0..CpuSet::count())
        .filter(|&c| c != cpu && set.is_set(c).unwrap_or(false))
        .count();
    let mut narrowed = *set;
    (others > 0 && narrowed.unset(cpu).is_ok()).then_some(narrowed)
}

/// Moves the calling thread off the CPU it runs on, when another one is allowed (for a thread
/// that lives only while its creator works: nothing inherits its narrowed set).
pub fn leave_this_cpu() {
    let me = Pid::from_raw(0);
    let (Some(here), Ok(set)) = (this_cpu(), sched_getaffinity(me)) else {
        return;
    };
    if let Some(narrowed) = without(&set, here) {
        let _ = sched_setaffinity(me, &narrowed);
    }
}

/// The CPUs the supervisor may run on, taken before it forks the init; `None` with only one.
#[derive(Clone, Copy, Debug)]
pub struct Spread {
    allowed: CpuSet,
}

impl Spread {
    /// The caller's allowed CPUs, when there is more than one.
    pub fn take() -> Option<Spread> {
        let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
        let count = (0..CpuSet::count())
            .filter(|&c| allowed.is_set(c).unwrap_or(false))
            .count();
        (count > 1).then_some(Spread { allowed })
    }

    /// In the supervisor: moves `child` (just forked, still on this CPU) to the other allowed
    /// CPUs. Best effort.
    pub fn push_off_this_cpu(&self, child: Pid) {
        if let Some(narrowed) = this_cpu().and_then(|here| without(&self.allowed, here)) {
            let _ = sched_setaffinity(child, &narrowed);
        }
    }

    /// In the init, before it forks the command: back to every CPU the supervisor was allowed
    /// (the supervisor narrowed it before it said go, so nothing narrows it after this).
    pub fn restore(&self) -> Result<(), nix::Error> {
        sched_setaffinity(Pid::from_raw(0), &self.allowed)
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
    fn a_pushed_child_is_off_this_cpu_and_restores_the_whole_set() {
        let Some(spread) = Spread::take() else {
            eprintln!("skipped: this process may run on one CPU only");
            return;
        };
        let (r, w) = nix::unistd::pipe().unwrap();
        let (r2, w2) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only makes raw syscalls and `_exit`s.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                drop(w);
                let mut b = [0u8; 1];
                let _ = nix::unistd::read(r.as_raw_fd(), &mut b);
                let narrowed = sched_getaffinity(Pid::from_raw(0)).unwrap();
                let ok_restore = spread.restore().is_ok();
                let widened = sched_getaffinity(Pid::from_raw(0)).unwrap();
                let report = [
                    u8::from(cpus(&narrowed).len() + 1 == cpus(&spread.allowed).len()),
                    u8::from(ok_restore && cpus(&widened) == cpus(&spread.allowed)),
                ];
                let _ = nix::unistd::write(&w2, &report);
                // SAFETY: _exit in a forked child.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop((r, w2));
                spread.push_off_this_cpu(child);
                nix::unistd::write(&w, b"g").unwrap();
                let mut report = [0u8; 2];
                let n = nix::unistd::read(r2.as_raw_fd(), &mut report).unwrap();
                nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(n, 2);
                assert_eq!(
                    report,
                    [1, 1],
                    "narrowed by one CPU, then widened to the whole set"
                );
            }
        }
    }
}
