//! The loop's decisions on their own, and the whole loop as pid 1 of a throwaway pid namespace:
//! this (multi-threaded) test process forks a child that makes the namespace and forks its
//! init, which runs a scenario's command and the loop, then reports what it saw on a pipe.
//! Nothing after the fork allocates (the loop does not; the scenarios only make system calls).

use std::os::fd::OwnedFd;

use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigmaskHow, sigprocmask};
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork, pipe2};

use super::*;

#[test]
fn only_a_signal_from_outside_other_than_sigchld_is_a_stop_request() {
    let term = libc::SIGTERM as u32;
    assert!(is_stop_request(term, libc::SI_USER, 0));
    assert!(is_stop_request(libc::SIGHUP as u32, libc::SI_USER, 0));
    assert!(!is_stop_request(libc::SIGCHLD as u32, libc::SI_USER, 0));
    // From inside the namespace (the sender's pid there), or queued with an info.
    assert!(!is_stop_request(term, libc::SI_USER, 7));
    assert!(!is_stop_request(term, libc::SI_QUEUE, 0));
    // Not a signal nix knows.
    assert!(!is_stop_request(0, libc::SI_USER, 0));
    assert!(!is_stop_request(u32::MAX, libc::SI_USER, 0));
}

#[test]
fn the_wait_is_rounded_up_and_capped_at_a_minute() {
    let now = Instant::now();
    assert_eq!(poll_timeout(None, now), PollTimeout::NONE);
    assert_eq!(poll_timeout(Some(now), now), PollTimeout::from(1u8));
    assert_eq!(
        poll_timeout(Some(now + Duration::from_millis(10)), now),
        PollTimeout::from(11u8)
    );
    assert_eq!(
        poll_timeout(Some(now + Duration::from_secs(3600)), now),
        PollTimeout::from(60_000u16)
    );
    let past = now.checked_sub(Duration::from_secs(1)).unwrap();
    assert_eq!(poll_timeout(Some(past), now), PollTimeout::from(1u8));
}

#[test]
fn the_loop_ends_with_the_command_or_during_a_stop_once_all_are_gone() {
    let now = Instant::now();
    let mut p = Progress::default();
    assert!(!p.finished(true));
    p.status = Some(0);
    assert!(p.finished(false));
    p.kill_at = Some(now + Duration::from_secs(1));
    assert!(!p.finished(false));
    assert!(p.finished(true));
    assert!(!p.grace_over(now));
    assert!(p.grace_over(now + Duration::from_secs(1)));
}

#[test]
fn the_deadline_counts_only_outside_a_stop_and_the_grace_wakes_first() {
    let now = Instant::now();
    let deadline = Some(now + Duration::from_secs(5));
    let mut p = Progress::default();
    assert!(!p.deadline_passed(None, now));
    assert!(!p.deadline_passed(deadline, now));
    assert!(p.deadline_passed(deadline, now + Duration::from_secs(5)));
    assert_eq!(p.wake(deadline), deadline);
    assert_eq!(p.wake(None), None);
    let kill_at = now + Duration::from_secs(1);
    p.kill_at = Some(kill_at);
    assert!(!p.deadline_passed(deadline, now + Duration::from_secs(5)));
    assert_eq!(p.wake(deadline), Some(kill_at));
}

/// One run of the loop as pid 1: what the command does (in the init's child, every signal
/// still blocked), what the init's parent does from outside the namespace once the init exists
/// (with the write end of the liveness pipe), and the loop's parameters.
struct Scenario {
    command: fn() -> i32,
    outside: fn(Pid, OwnedFd),
    grace: Duration,
    deadline: Option<Duration>,
    liveness: bool,
}

/// What the init saw.
#[derive(Debug)]
struct Seen {
    status: Option<i32>,
    rest: Rest,
    /// From the start of the loop to its end.
    waited: Duration,
    /// No child was left after [`kill_the_rest`].
    none_left: bool,
}

const RECORD: usize = 26;
/// The namespace cannot be made (no privilege): the test is skipped.
const SKIP: i32 = 77;

fn encode(seen: &Seen) -> [u8; RECORD] {
    let mut out = [0u8; RECORD];
    let opt = |v: Option<i32>| {
        v.map_or([0u8; 5], |v| {
            let b = v.to_le_bytes();
            [1, b[0], b[1], b[2], b[3]]
        })
    };
    out[0..5].copy_from_slice(&opt(seen.status));
    out[5..10].copy_from_slice(&opt(seen.rest.command_status));
    out[10..14].copy_from_slice(&seen.rest.reaped.to_le_bytes());
    let ms = u64::try_from(seen.waited.as_millis()).unwrap_or(u64::MAX);
    out[14..22].copy_from_slice(&ms.to_le_bytes());
    out[22] = u8::from(seen.none_left);
    out
}

fn decode(b: &[u8]) -> Seen {
    let i32_at = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    let opt = |i: usize| (b[i] == 1).then(|| i32_at(i + 1));
    Seen {
        status: opt(0),
        rest: Rest {
            command_status: opt(5),
            reaped: u32::from_le_bytes(b[10..14].try_into().unwrap()),
        },
        waited: Duration::from_millis(u64::from_le_bytes(b[14..22].try_into().unwrap())),
        none_left: b[22] == 1,
    }
}

/// Runs `s` with its init as pid 1 of a new pid namespace; `None` when no namespace can be
/// made here.
fn run_as_pid1(s: &Scenario) -> Option<Seen> {
    let (report_r, report_w) = pipe2(OFlag::O_CLOEXEC).unwrap();
    // SAFETY: the child only makes system calls and runs the loop, which does not allocate,
    // then leaves with _exit: nothing depends on a lock another thread of this process held.
    match unsafe { fork() }.unwrap() {
        ForkResult::Child => {
            drop(report_r);
            outside_the_namespace(s, report_w)
        }
        ForkResult::Parent { child } => {
            drop(report_w);
            let record = read_record(&report_r, child);
            let ended = waitpid(child, None).unwrap();
            if ended == WaitStatus::Exited(child, SKIP) {
                assert!(
                    !nix::unistd::geteuid().is_root(),
                    "root cannot make a pid namespace"
                );
                eprintln!("skipped: no pid namespace without privilege");
                return None;
            }
            assert_eq!(ended, WaitStatus::Exited(child, 0));
            assert_eq!(record.len(), RECORD, "the init's record: {record:?}");
            Some(decode(&record))
        }
    }
}

/// Everything the init writes on `report_r` until end-of-file; the scenario killed (and the
/// test failed) if that takes longer than half a minute.
fn read_record(report_r: &OwnedFd, child: Pid) -> Vec<u8> {
    let limit = Instant::now() + Duration::from_secs(30);
    let mut record = Vec::new();
    loop {
        let left = limit.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(report_r.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::try_from(left).unwrap()).unwrap();
        if ready == 0 {
            let _ = kill(child, Signal::SIGKILL);
            let _ = waitpid(child, None);
            panic!("the scenario did not end within 30 s");
        }
        let mut buf = [0u8; 64];
        match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(report_r), &mut buf) {
            Ok(0) => return record,
            Ok(n) => record.extend_from_slice(&buf[..n]),
            Err(nix::Error::EINTR) => {}
            Err(e) => panic!("reading the init's record: {e}"),
        }
    }
}

/// The init's parent: makes the namespace, forks the init into it, and plays the outside.
fn outside_the_namespace(s: &Scenario, report_w: OwnedFd) -> ! {
    let flags = if nix::unistd::geteuid().is_root() {
        CloneFlags::CLONE_NEWPID
    } else {
        CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID
    };
    if nix::sched::unshare(flags).is_err() {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(SKIP) }
    }
    // Blocked before the init exists: a stop request sent early waits for its signalfd.
    if sigprocmask(SigmaskHow::SIG_BLOCK, Some(&watched_set()), None).is_err() {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(1) }
    }
    let Ok((alive_r, alive_w)) = pipe2(OFlag::O_CLOEXEC) else {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(1) }
    };
    // SAFETY: a single-threaded process (a fork's child).
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            drop(alive_w);
            // SAFETY: PR_SET_PDEATHSIG takes a signal number: the namespace dies with its
            // parent (the test's timeout kills it).
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
            init(s, report_w, alive_r)
        }
        Ok(ForkResult::Parent { child }) => {
            drop((report_w, alive_r));
            (s.outside)(child, alive_w);
            let code = match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 0)) => 0,
                _ => 1,
            };
            // SAFETY: _exit in a forked child.
            unsafe { libc::_exit(code) }
        }
        // SAFETY: _exit in a forked child.
        Err(_) => unsafe { libc::_exit(1) },
    }
}

/// Pid 1: forks the command, runs the loop and the final reap, writes what it saw.
fn init(s: &Scenario, report_w: OwnedFd, alive_r: OwnedFd) -> ! {
    let Ok(sigfd) = signalfd() else {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(1) }
    };
    // SAFETY: a single-threaded process (a fork's child).
    let command = match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let code = (s.command)();
            // SAFETY: _exit in a forked child.
            unsafe { libc::_exit(code) }
        }
        Ok(ForkResult::Parent { child }) => child,
        // SAFETY: _exit in a forked child.
        Err(_) => unsafe { libc::_exit(1) },
    };
    let mut alive = s.liveness.then_some(alive_r);
    let started = Instant::now();
    let status = wait_for_command(Watch {
        command,
        sigfd: &sigfd,
        grace: s.grace,
        deadline: s.deadline.map(|d| started + d),
        alive: &mut alive,
    });
    let waited = started.elapsed();
    let rest = kill_the_rest(command);
    let none_left = matches!(sys::wait_any_nohang(), Ok(WaitAny::NoChildren));
    let record = encode(&Seen {
        status,
        rest,
        waited,
        none_left,
    });
    let ok = nix::unistd::write(&report_w, &record).is_ok_and(|n| n == RECORD);
    // SAFETY: _exit in a forked child.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

/// In the command: every signal back to its default and unblocked.
fn clean_signals() {
    let _ = sys::reset_signals();
}

fn sleep_ms(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

/// Forks a process that runs `f` and exits with its code.
fn spawn(f: fn() -> i32) {
    // SAFETY: a single-threaded process (a fork's child); the child only runs `f` and _exit.
    if let Ok(ForkResult::Child) = unsafe { fork() } {
        let code = f();
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(code) }
    }
}

fn sleeper() -> i32 {
    clean_signals();
    sleep_ms(10_000);
    0
}

fn nothing_outside(_init: Pid, _alive: OwnedFd) {}

fn stop_from_outside(init: Pid, _alive: OwnedFd) {
    sleep_ms(50);
    let _ = kill(init, Signal::SIGTERM);
}

fn runner_gone(_init: Pid, alive: OwnedFd) {
    sleep_ms(50);
    drop(alive);
}

fn scenario(command: fn() -> i32, outside: fn(Pid, OwnedFd)) -> Scenario {
    Scenario {
        command,
        outside,
        grace: Duration::from_secs(20),
        deadline: None,
        liveness: false,
    }
}

fn signaled(status: Option<i32>, signal: i32) -> bool {
    status.is_some_and(|s| libc::WIFSIGNALED(s) && libc::WTERMSIG(s) == signal)
}

#[test]
fn the_commands_status_comes_back_and_orphans_are_reaped_or_killed() {
    fn command() -> i32 {
        clean_signals();
        // A zombie the command never reaps, and a process that outlives it.
        spawn(|| 3);
        spawn(sleeper);
        sleep_ms(50);
        7
    }
    let Some(seen) = run_as_pid1(&scenario(command, nothing_outside)) else {
        return;
    };
    assert_eq!(seen.status, Some(7 << 8), "{seen:?}");
    // The zombie went with the command; the sleeper was killed and reaped at the end.
    assert_eq!(seen.rest.command_status, None, "{seen:?}");
    assert_eq!(seen.rest.reaped, 1, "{seen:?}");
    assert!(seen.none_left, "{seen:?}");
    assert!(seen.waited < Duration::from_secs(5), "{seen:?}");
}

#[test]
fn a_stop_from_outside_terminates_everyone_and_waits_for_all_of_them() {
    fn command() -> i32 {
        clean_signals();
        spawn(sleeper);
        sleep_ms(10_000);
        0
    }
    let Some(seen) = run_as_pid1(&scenario(command, stop_from_outside)) else {
        return;
    };
    assert!(signaled(seen.status, libc::SIGTERM), "{seen:?}");
    // The other process ended in the loop, within the grace.
    assert_eq!(seen.rest, Rest::default(), "{seen:?}");
    assert!(seen.none_left, "{seen:?}");
    assert!(seen.waited < Duration::from_secs(5), "{seen:?}");
}

#[test]
fn after_the_grace_what_is_left_is_killed() {
    fn command() -> i32 {
        // SAFETY: SIG_IGN for SIGTERM (still blocked, so none is lost to the default).
        unsafe { libc::signal(libc::SIGTERM, libc::SIG_IGN) };
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
        sleep_ms(10_000);
        0
    }
    let s = Scenario {
        grace: Duration::from_millis(300),
        ..scenario(command, stop_from_outside)
    };
    let Some(seen) = run_as_pid1(&s) else {
        return;
    };
    assert_eq!(seen.status, None, "{seen:?}");
    assert_eq!(
        seen.rest,
        Rest {
            command_status: Some(libc::SIGKILL),
            reaped: 1
        },
        "{seen:?}"
    );
    assert!(seen.none_left, "{seen:?}");
    assert!(seen.waited >= Duration::from_millis(300), "{seen:?}");
    assert!(seen.waited < Duration::from_secs(5), "{seen:?}");
}

#[test]
fn a_stop_request_from_inside_is_ignored() {
    fn command() -> i32 {
        clean_signals();
        for sig in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
            let _ = kill(Pid::from_raw(1), sig);
        }
        // A stop would have terminated this command by now.
        sleep_ms(200);
        5
    }
    let Some(seen) = run_as_pid1(&scenario(command, nothing_outside)) else {
        return;
    };
    assert_eq!(seen.status, Some(5 << 8), "{seen:?}");
    assert!(seen.none_left, "{seen:?}");
}

#[test]
fn the_inits_own_deadline_stops_the_round() {
    let s = Scenario {
        deadline: Some(Duration::from_millis(100)),
        ..scenario(sleeper, nothing_outside)
    };
    let Some(seen) = run_as_pid1(&s) else {
        return;
    };
    assert!(signaled(seen.status, libc::SIGTERM), "{seen:?}");
    assert!(seen.waited >= Duration::from_millis(100), "{seen:?}");
    assert!(seen.waited < Duration::from_secs(5), "{seen:?}");
}

#[test]
fn the_runner_gone_from_the_liveness_pipe_stops_the_round() {
    let s = Scenario {
        liveness: true,
        ..scenario(sleeper, runner_gone)
    };
    let Some(seen) = run_as_pid1(&s) else {
        return;
    };
    assert!(signaled(seen.status, libc::SIGTERM), "{seen:?}");
    assert!(seen.waited < Duration::from_secs(5), "{seen:?}");
}

#[test]
fn without_the_liveness_pipe_its_end_changes_nothing() {
    fn command() -> i32 {
        clean_signals();
        sleep_ms(300);
        4
    }
    let Some(seen) = run_as_pid1(&scenario(command, runner_gone)) else {
        return;
    };
    assert_eq!(seen.status, Some(4 << 8), "{seen:?}");
}
