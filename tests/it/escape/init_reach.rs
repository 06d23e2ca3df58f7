//! The sandbox's init out of reach (SPEC §5; issue 25 item 7), one route per row, run against
//! each backend by `tests/it/boundary_matrix.rs`: for each way a command could signal the init or
//! change how it is scheduled, the command tries it, and the init's state is read **from the
//! host** before and after (`/proc/<host pid>/stat` nice, policy and real-time priority, its start
//! time, `oom_score_adj`, `autogroup`, `timerslack_ns`, the CPU affinity, the I/O priority, the
//! limits); it must be unchanged, the init alive, and the run must end normally (exit 0 once the
//! test lets the command finish). The syscall's own answer is shown on a failure, never judged:
//! the guarantee is the host's state.
//!
//! One run goes like this, over the command's stdin and stdout (so that it works in read-only as
//! in workspace-write, natively as in a container):
//!
//! ```text
//! command: prints `started`, waits for a line     test: finds the init, reads its state, `go`
//! command: tries the route, prints its result     test: reads the state again, `done`
//! command: prints `done`, exits 0                 test: the run's exit status is 0
//! ```
//!
//! The init's host pid: natively a child of the `ralph sandbox exec` process (the supervisor)
//! that is pid 1 of its namespace (`NSpid: <pid> 1`); in docker the `State.Pid` of the container
//! whose `io.ralph.owner` label names that process.
#![allow(dead_code)]

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use super::{PYTHON, Sb, World, backend_flags, ralph};

/// One way to reach the init: a name and the Python that tries it (`ret = ...`; an `OSError`
/// or a negative `sc(...)` result is the call's errno).
pub struct Route {
    pub name: &'static str,
    pub py: &'static str,
}

const fn route(name: &'static str, py: &'static str) -> Route {
    Route { name, py }
}

/// The routes: signals (every call that can carry one to pid 1, a forged sender included), its
/// scheduling (nice, policy, affinity, I/O priority, by pid, process group and user), its limits,
/// and its `/proc/1` files.
pub const ROUTES: &[Route] = &[
    route("kill_sigterm", "ret = os.kill(1, signal.SIGTERM)"),
    route("kill_sighup", "ret = os.kill(1, signal.SIGHUP)"),
    // The command's own process group: the docker init's, unless the command has its own. The
    // command gets its own SIGTERM too, so it holds it blocked, and waits (2 s at most) for the
    // SIGCONT an init that starts a stop sends every process; if it comes, it stays until the
    // stop's SIGKILL (the grace is 1 s), so that the run does not end normally.
    route(
        "kill_own_group_sigterm",
        "stop = {signal.SIGTERM, signal.SIGCONT}\n\
         signal.pthread_sigmask(signal.SIG_BLOCK, stop)\n\
         os.kill(0, signal.SIGTERM)\n\
         ret = 'init stopping' if signal.sigtimedwait({signal.SIGCONT}, 2) else None\n\
         signal.sigtimedwait({signal.SIGTERM}, 0)\n\
         signal.pthread_sigmask(signal.SIG_UNBLOCK, stop)\n\
         if ret: time.sleep(30)",
    ),
    route("tkill_sigterm", "ret = sc(SYS_tkill, 1, signal.SIGTERM)"),
    route(
        "tgkill_sigterm",
        "ret = sc(SYS_tgkill, 1, 1, signal.SIGTERM)",
    ),
    // An info claiming to come from outside (pid 0); the kernel allows only negative codes.
    route(
        "rt_sigqueueinfo_forged",
        "ret = sc(SYS_rt_sigqueueinfo, 1, signal.SIGTERM, ctypes.addressof(siginfo(signal.SIGTERM, -1, 0)))",
    ),
    // A descriptor of /proc/1 is a pidfd.
    route(
        "pidfd_send_signal_sigterm",
        "ret = sc(SYS_pidfd_send_signal, proc1(), signal.SIGTERM, 0, 0)",
    ),
    route(
        "pidfd_send_signal_forged",
        "ret = sc(SYS_pidfd_send_signal, proc1(), signal.SIGTERM, ctypes.addressof(siginfo(signal.SIGTERM, -1, 0)), 0)",
    ),
    route(
        "pidfd_send_signal_sigstop",
        "ret = sc(SYS_pidfd_send_signal, proc1(), signal.SIGSTOP, 0, 0)",
    ),
    // SIGIO to an owner set with F_SETOWN (no filter can name it): the F_SETSIG signal, SIGTERM.
    route("sigio_owner_pid_1", "ret = sigio(1)"),
    route("sigio_owner_group_1", "ret = sigio(-1)"),
    route(
        "setpriority_pid_1",
        "ret = os.setpriority(os.PRIO_PROCESS, 1, 19)",
    ),
    route(
        "setpriority_group_1",
        "ret = os.setpriority(os.PRIO_PGRP, 1, 19)",
    ),
    route(
        "setpriority_own_group",
        "ret = os.setpriority(os.PRIO_PGRP, 0, 19)",
    ),
    route(
        "setpriority_user",
        "ret = os.setpriority(os.PRIO_USER, os.getuid(), 19)",
    ),
    route(
        "sched_setscheduler_idle",
        "ret = os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0))",
    ),
    route(
        "sched_setscheduler_batch",
        "ret = os.sched_setscheduler(1, os.SCHED_BATCH, os.sched_param(0))",
    ),
    route(
        "sched_setattr_idle",
        "ret = sc(SYS_sched_setattr, 1, ctypes.addressof(sched_attr(os.SCHED_IDLE, 19)), 0)",
    ),
    route("sched_setaffinity", "ret = os.sched_setaffinity(1, {0})"),
    route(
        "ioprio_set_pid_1",
        "ret = sc(SYS_ioprio_set, IOPRIO_WHO_PROCESS, 1, IOPRIO_IDLE)",
    ),
    route(
        "ioprio_set_group_1",
        "ret = sc(SYS_ioprio_set, IOPRIO_WHO_PGRP, 1, IOPRIO_IDLE)",
    ),
    route(
        "ioprio_set_own_group",
        "ret = sc(SYS_ioprio_set, IOPRIO_WHO_PGRP, 0, IOPRIO_IDLE)",
    ),
    route(
        "ioprio_set_user",
        "ret = sc(SYS_ioprio_set, IOPRIO_WHO_USER, os.getuid(), IOPRIO_IDLE)",
    ),
    route(
        "prlimit_nofile",
        "ret = resource.prlimit(1, resource.RLIMIT_NOFILE, (64, 64))",
    ),
    route(
        "proc_oom_score_adj",
        "ret = put('/proc/1/oom_score_adj', '1000')",
    ),
    route(
        "proc_task_oom_score_adj",
        "ret = put('/proc/1/task/1/oom_score_adj', '1000')",
    ),
    route("proc_oom_adj", "ret = put('/proc/1/oom_adj', '15')"),
    route("proc_autogroup", "ret = put('/proc/1/autogroup', '19')"),
    route(
        "proc_timerslack_ns",
        "ret = put('/proc/1/timerslack_ns', '100000000')",
    ),
];

/// What every route's script starts with: the handshake's helpers and the constants the rows
/// use.
const PRELUDE: &str = r#"import ctypes, errno, fcntl, json, os, resource, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
SYS_tkill, SYS_tgkill, SYS_rt_sigqueueinfo = 200, 234, 129
SYS_ioprio_set, SYS_sched_setattr, SYS_pidfd_send_signal = 251, 314, 424
IOPRIO_WHO_PROCESS, IOPRIO_WHO_PGRP, IOPRIO_WHO_USER = 1, 2, 3
IOPRIO_IDLE = 3 << 13
def sc(nr, *args):
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    return r if r >= 0 else -ctypes.get_errno()
def siginfo(sig, code, pid):
    buf = (ctypes.c_int * 32)()
    buf[0], buf[2], buf[4], buf[5] = sig, code, pid, os.getuid()
    return buf
def sched_attr(policy, nice):
    buf = (ctypes.c_uint32 * 12)()
    buf[0], buf[1], buf[4] = 48, policy, nice & 0xffffffff
    return buf
def proc1():
    return os.open('/proc/1', os.O_RDONLY | os.O_DIRECTORY)
def sigio(owner):
    r, w = os.pipe()
    fcntl.fcntl(r, fcntl.F_SETOWN, owner)
    fcntl.fcntl(r, 10, signal.SIGTERM)  # F_SETSIG
    fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
    os.write(w, b'x')
    time.sleep(0.3)
def put(path, text):
    with open(path, 'w') as f:
        f.write(text)
print('started', flush=True)
sys.stdin.readline()
result = {}
try:
"#;

const EPILOGUE: &str = r#"
    result['ret'] = ret if not isinstance(ret, int) or ret >= 0 else errno.errorcode.get(-ret, ret)
except OSError as e:
    result['errno'] = errno.errorcode.get(e.errno, e.errno)
print(json.dumps(result, default=str), flush=True)
sys.stdin.readline()
print('done', flush=True)
"#;

fn script(route: &Route) -> String {
    let body: String = route.py.lines().map(|l| format!("    {l}\n")).collect();
    format!("{PRELUDE}{body}{EPILOGUE}")
}

/// The init's state as the host sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct InitState {
    /// `stat` field 22: the same process, not a new one with its pid.
    start: String,
    /// `stat` field 19.
    nice: String,
    /// `stat` field 40.
    rt_priority: String,
    /// `stat` field 41.
    policy: String,
    oom_score_adj: String,
    autogroup: String,
    timerslack_ns: String,
    cpus_allowed: String,
    io_priority: i64,
    limits: String,
}

fn read(path: String) -> String {
    std::fs::read_to_string(&path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|e| format!("unreadable: {e}"))
}

impl InitState {
    pub fn of(pid: i32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which ends at the last ')': field 3 is the first.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let field = |n: usize| f.get(n - 3).copied().unwrap_or("?").to_owned();
        let status = read(format!("/proc/{pid}/status"));
        // SAFETY: ioprio_get takes plain integers.
        let io_priority = unsafe { libc::syscall(libc::SYS_ioprio_get, 1, pid) };
        Some(Self {
            start: field(22),
            nice: field(19),
            rt_priority: field(40),
            policy: field(41),
            oom_score_adj: read(format!("/proc/{pid}/oom_score_adj")),
            autogroup: read(format!("/proc/{pid}/autogroup")),
            timerslack_ns: read(format!("/proc/{pid}/timerslack_ns")),
            cpus_allowed: status
                .lines()
                .find(|l| l.starts_with("Cpus_allowed_list:"))
                .unwrap_or("")
                .to_owned(),
            io_priority,
            limits: read(format!("/proc/{pid}/limits")),
        })
    }
}

/// Which backend the init is found with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finder {
    /// A child of the `ralph` process that is pid 1 of its pid namespace.
    Native,
    /// The container owned by the `ralph` process.
    Docker,
}

fn native_init(ralph: u32) -> Option<i32> {
    for e in std::fs::read_dir("/proc").ok()?.filter_map(Result::ok) {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let status = read(format!("/proc/{pid}/status"));
        let ppid = status
            .lines()
            .find_map(|l| l.strip_prefix("PPid:"))
            .map(str::trim);
        let nspid: Vec<&str> = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        if ppid == Some(ralph.to_string().as_str())
            && nspid.len() >= 2
            && nspid.last() == Some(&"1")
        {
            return Some(pid);
        }
    }
    None
}

fn docker_init(ralph: u32) -> Option<i32> {
    let ids = crate::common::docker::docker(&["ps", "-q", "--filter", "label=io.ralph.owner"]);
    let prefix = format!("{ralph}:");
    for id in ids.split_whitespace() {
        let line = crate::common::docker::docker(&[
            "inspect",
            "-f",
            "{{.State.Pid}} {{index .Config.Labels \"io.ralph.owner\"}}",
            id,
        ]);
        let mut it = line.split_whitespace();
        let (Some(pid), Some(owner)) = (it.next(), it.next()) else {
            continue;
        };
        if owner.starts_with(&prefix) {
            return pid.parse().ok().filter(|p| *p > 0);
        }
    }
    None
}

/// A running `ralph sandbox exec`: its stdin, its stdout lines, killed when dropped.
struct Exec {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Exec {
    fn start(argv: &[OsString]) -> Self {
        let mut child = Command::new(ralph())
            .args(argv)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = std::io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// The next stdout line, within `limit`.
    fn line(&mut self, limit: Duration) -> Option<String> {
        let l = self.lines.recv_timeout(limit).ok()?;
        self.seen.push(l.clone());
        Some(l)
    }

    fn send(&mut self, text: &str) {
        if let Some(i) = &mut self.stdin {
            let _ = i.write_all(text.as_bytes()).and_then(|()| i.flush());
        }
    }

    /// The exit status within `limit` (killed after it: `None`).
    fn wait(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s.code().unwrap_or(-1));
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn describe(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        drop(self.stdin.take());
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        format!("  stdout: {:?}\n  stderr: {}", self.seen, stderr.trim_end())
    }
}

impl Drop for Exec {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const STEP: Duration = Duration::from_secs(60);

/// Runs one route in `sb`; `Err` says what went wrong.
pub fn run_route(route: &Route, sb: Sb, finder: Finder) -> Result<(), String> {
    let world = World::new();
    let mut argv: Vec<OsString> = vec!["sandbox".into(), "exec".into()];
    argv.extend(backend_flags());
    argv.extend(sb.flags());
    argv.extend(["--workspace".into(), world.ws.clone().into_os_string()]);
    argv.extend(["--timeout", "90s", "--kill-grace", "1s", "--"].map(OsString::from));
    argv.extend([PYTHON.into(), "-c".into(), script(route).into()]);
    let mut run = Exec::start(&argv);
    let pid = run.child.id();
    let fail = |run: Exec, what: String| {
        Err(format!(
            "[{} | {}] {what}\n{}",
            route.name,
            sb.label(),
            run.describe()
        ))
    };
    if run.line(STEP).as_deref() != Some("started") {
        return fail(run, "the command did not start".into());
    }
    let end = Instant::now() + STEP;
    let init = loop {
        let found = match finder {
            Finder::Native => native_init(pid),
            Finder::Docker => docker_init(pid),
        };
        if let Some(p) = found {
            break p;
        }
        if Instant::now() > end {
            return fail(run, "the sandbox's init was not found on the host".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let Some(before) = InitState::of(init) else {
        return fail(
            run,
            format!("cannot read the init's state (host pid {init})"),
        );
    };
    run.send("go\n");
    let Some(result) = run.line(STEP) else {
        return fail(
            run,
            "the route's result never came (the run was stopped?)".into(),
        );
    };
    let after = InitState::of(init);
    if after.as_ref() != Some(&before) {
        return fail(
            run,
            format!(
                "the init (host pid {init}) changed: the route answered {result}\n  before: {before:?}\n  after:  {after:?}"
            ),
        );
    }
    run.send("done\n");
    if run.line(STEP).as_deref() != Some("done") {
        return fail(
            run,
            format!("the run did not go on after the route ({result})"),
        );
    }
    match run.wait(STEP) {
        Some(0) => Ok(()),
        code => fail(
            run,
            format!("the run ended {code:?}, not 0 (route: {result})"),
        ),
    }
}

/// Runs every route in every variant of `sbs`; fails listing every one that reached the init.
pub fn run_routes(group: &str, sbs: &[Sb], finder: Finder) {
    assert!(Path::new(PYTHON).is_file(), "{PYTHON} is needed");
    let mut failures = Vec::new();
    let mut passed = 0;
    for r in ROUTES {
        for &sb in sbs {
            match run_route(r, sb, finder) {
                Ok(()) => passed += 1,
                Err(e) => failures.push(e),
            }
        }
    }
    eprintln!(
        "{group}: {passed} passed, {} failed (uid {})",
        failures.len(),
        nix::unistd::geteuid()
    );
    assert!(
        failures.is_empty(),
        "{group}: {} route(s) reached the init:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_route_has_a_unique_name() {
    let mut names: Vec<&str> = ROUTES.iter().map(|r| r.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), ROUTES.len());
}
