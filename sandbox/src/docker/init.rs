//! The container's init: pid 1 of a docker round (`ralph __container-init`, the runner's own
//! static executable mounted read-only at [`INIT_PATH`]). It forks the command, reaps every
//! process, and on a stop — the engine's SIGTERM (cancel, timeout), the runner's death (EOF on
//! the liveness FIFO at [`ALIVE_PATH`]) or its own backstop deadline — sends SIGTERM to every
//! process of the container and waits for all of them, up to the grace, before SIGKILL. Outside
//! a stop it ends when the command does, killing what is left. It exits like tini: the
//! command's code, or 128 + n when signal n killed it.
//!
//! Nothing the command does reaches it: it acts only on signals sent from outside the container
//! ([`crate::sys::from_outside`]; the command's `kill(0)`, a pidfd of `/proc/1` or SIGIO are
//! read and ignored), the command runs in a session of its own, `/proc/1` is read-only in the
//! container, and the seccomp profile refuses what names pid 1 (`crate::policy::guards`).
//!
//! It reports to the runner on the status socket at [`super::init_status::STATUS_PATH`]
//! (connected before the command exists, so the command cannot forge it): an `execve` that
//! failed (the command's program missing or not executable; the init then exits 127 or 126, but
//! the runner decides from the report, never from the status, which the command could choose),
//! and at the end the CPU time and peak memory of every process it reaped, how the command
//! ended (its exit code, or the signal that killed it: the container's status cannot tell an
//! exit of 137 from SIGKILL) and the memory cgroup's OOM-kill count (the engine removes the
//! container when it stops, so its state is not there to inspect). With a report
//! directory (`--report-dir`, a tmpfs the engine mounted) it sends that directory's descriptor
//! first, on the same connection, so the runner copies its report files out once the container
//! is gone ([`crate::report_dir`]). It cannot connect (or hand the directory over): it runs
//! nothing and exits [`CANNOT_START`] (125).

use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{OFlag, open};
use nix::sys::signal::{SigmaskHow, sigprocmask};
use nix::sys::signalfd::SignalFd;
use nix::sys::stat::Mode;
use nix::unistd::{ForkResult, execvp, fork};

use crate::init_loop;
use crate::sys;

/// The hidden first argument of the `ralph` binary that runs [`init_main`].
pub const INIT_ARG: &str = "__container-init";
/// Where the init program is mounted in the container.
pub const INIT_PATH: &str = "/.ralph-init";
/// Where the runner's liveness FIFO is mounted in the container.
pub const ALIVE_PATH: &str = "/.ralph-alive";
/// The liveness FIFO's name in the run's control directory.
pub const ALIVE_FILE: &str = "container-alive";

/// Exit status when the init itself cannot run the command (like a shell's "cannot execute").
pub const CANNOT_START: i32 = 125;

/// What the init needs from the host: the program to mount and the runner's liveness FIFO.
#[derive(Debug)]
pub struct InitSetup {
    /// The static `ralph` executable, mounted read-only at [`INIT_PATH`].
    pub program: PathBuf,
    /// The FIFO in the control directory, mounted read-only at [`ALIVE_PATH`].
    pub alive: PathBuf,
    /// The runner's end of the FIFO (read-write, close-on-exec): the init sees end-of-file
    /// once every copy of it is closed, i.e. when the runner is gone.
    pub held: OwnedFd,
    /// The status socket, mounted read-only at [`super::init_status::STATUS_PATH`].
    pub status: super::init_status::StatusListener,
    /// `--network gateway`: the hand-over socket, mounted read-only at
    /// [`super::gateway::GATEWAY_PATH`] (taken by the runner once the container started).
    pub gateway: Option<super::gateway::GatewayHandover>,
}

/// A failure to make the liveness FIFO.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A system call on the FIFO failed.
    #[error("failed to {action} the container's liveness FIFO {}: {source}", path.display())]
    Fifo {
        /// What was attempted.
        action: &'static str,
        /// The FIFO.
        path: PathBuf,
        /// The cause.
        source: nix::Error,
    },
    /// The status socket cannot be set up.
    #[error(transparent)]
    Status(#[from] super::init_status::StatusError),
    /// The command line of the init is malformed.
    #[error("failed to parse the container init's arguments: {reason}")]
    Args {
        /// What is wrong.
        reason: String,
    },
}

/// Creates the liveness FIFO in `control_dir` (replacing a stale one) and opens the runner's
/// end. The FIFO is left mode 0444 so nothing in the container can open it for writing. Binds
/// the status socket (and with `gateway`, the gateway's hand-over socket) for the container's
/// user `uid:gid`.
pub fn prepare(
    program: &Path,
    control_dir: &Path,
    uid: u32,
    gid: u32,
    gateway: bool,
) -> Result<InitSetup, InitError> {
    let alive = control_dir.join(ALIVE_FILE);
    let fail = |action, source| InitError::Fifo {
        action,
        path: alive.clone(),
        source,
    };
    match std::fs::remove_file(&alive) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(fail(
                "remove",
                nix::Error::from_raw(e.raw_os_error().unwrap_or(0)),
            ));
        }
    }
    nix::unistd::mkfifo(&alive, Mode::S_IRUSR | Mode::S_IWUSR).map_err(|e| fail("create", e))?;
    let held = open(
        &alive,
        OFlag::O_RDWR | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map_err(|e| fail("open", e))?;
    // SAFETY: `open` returned a fresh descriptor that nothing else owns.
    let held = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(held) };
    nix::sys::stat::fchmod(
        std::os::fd::AsRawFd::as_raw_fd(&held),
        Mode::S_IRUSR | Mode::S_IRGRP | Mode::S_IROTH,
    )
    .map_err(|e| fail("make read-only", e))?;
    let status = super::init_status::StatusListener::bind(control_dir, uid, gid)?;
    let gateway = if gateway {
        Some(super::gateway::GatewayHandover::bind(
            control_dir,
            uid,
            gid,
        )?)
    } else {
        None
    };
    Ok(InitSetup {
        program: program.to_path_buf(),
        alive,
        held,
        status,
        gateway,
    })
}

/// The container's entrypoint and command: the init, its options, then `argv`.
pub fn command_line(
    grace: Duration,
    timeout: Option<Duration>,
    report_dir: Option<&Path>,
    gateway_ports: &[u16],
    argv: &[String],
) -> Vec<String> {
    let mut out = vec![
        INIT_PATH.to_owned(),
        INIT_ARG.to_owned(),
        "--grace-ms".to_owned(),
        grace.as_millis().to_string(),
        "--alive".to_owned(),
        ALIVE_PATH.to_owned(),
        "--status".to_owned(),
        super::init_status::STATUS_PATH.to_owned(),
    ];
    if let Some(t) = timeout {
        // A backstop: the runner stops the round at its timeout and kills it a grace later.
        out.push("--deadline-ms".to_owned());
        out.push(t.saturating_add(grace).as_millis().to_string());
    }
    if let Some(r) = report_dir {
        out.push("--report-dir".to_owned());
        out.push(r.display().to_string());
    }
    if !gateway_ports.is_empty() {
        out.push("--gateway".to_owned());
        out.push(super::gateway::GATEWAY_PATH.to_owned());
        out.push("--gateway-ports".to_owned());
        out.push(
            gateway_ports
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    out.push("--".to_owned());
    out.extend(argv.iter().cloned());
    out
}

/// The init's parsed options.
#[derive(Debug, PartialEq, Eq)]
pub struct InitArgs {
    /// How long processes have between SIGTERM and SIGKILL in a stop the init starts itself.
    pub grace: Duration,
    /// When (from the init's start) it stops the round itself.
    pub deadline: Option<Duration>,
    /// The liveness FIFO.
    pub alive: Option<PathBuf>,
    /// The runner's status socket.
    pub status: Option<PathBuf>,
    /// The report directory (its tmpfs) to hand over on the status socket.
    pub report_dir: Option<PathBuf>,
    /// The runner's gateway hand-over socket and the ports to listen on (`--network gateway`).
    pub gateway: Option<(PathBuf, Vec<u16>)>,
    /// The command.
    pub argv: Vec<CString>,
}

fn millis(v: Option<OsString>, name: &str) -> Result<Duration, InitError> {
    v.and_then(|s| s.to_str().and_then(|s| s.parse::<u64>().ok()))
        .map(Duration::from_millis)
        .ok_or_else(|| InitError::Args {
            reason: format!("{name} needs a number of milliseconds"),
        })
}

fn ports(v: Option<OsString>) -> Result<Vec<u16>, InitError> {
    let bad = || InitError::Args {
        reason: "--gateway-ports needs a comma-separated list of ports".into(),
    };
    let text = v.and_then(|s| s.into_string().ok()).ok_or_else(bad)?;
    let ports: Vec<u16> = text
        .split(',')
        .map(|p| p.parse::<u16>().ok().filter(|p| *p != 0))
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    if ports.is_empty() || ports.len() > crate::spec::MAX_GATEWAY_PORTS {
        return Err(bad());
    }
    Ok(ports)
}

/// Parses the arguments after [`INIT_ARG`].
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<InitArgs, InitError> {
    let mut it = args.into_iter();
    let mut out = InitArgs {
        grace: Duration::ZERO,
        deadline: None,
        alive: None,
        status: None,
        report_dir: None,
        gateway: None,
        argv: Vec::new(),
    };
    let mut gateway_path: Option<PathBuf> = None;
    let mut gateway_ports: Option<Vec<u16>> = None;
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--grace-ms") => out.grace = millis(it.next(), "--grace-ms")?,
            Some("--deadline-ms") => out.deadline = Some(millis(it.next(), "--deadline-ms")?),
            Some("--alive") => out.alive = it.next().map(PathBuf::from),
            Some("--status") => out.status = it.next().map(PathBuf::from),
            Some("--report-dir") => out.report_dir = it.next().map(PathBuf::from),
            Some("--gateway") => gateway_path = it.next().map(PathBuf::from),
            Some("--gateway-ports") => gateway_ports = Some(ports(it.next())?),
            Some("--") => break,
            _ => {
                return Err(InitError::Args {
                    reason: format!("unknown argument {a:?}"),
                });
            }
        }
    }
    for a in it {
        out.argv
            .push(CString::new(a.as_bytes()).map_err(|_| InitError::Args {
                reason: "the command holds a NUL byte".into(),
            })?);
    }
    if out.argv.is_empty() {
        return Err(InitError::Args {
            reason: "no command after --".into(),
        });
    }
    out.gateway = match (gateway_path, gateway_ports) {
        (Some(path), Some(ports)) => Some((path, ports)),
        (None, None) => None,
        _ => {
            return Err(InitError::Args {
                reason: "--gateway and --gateway-ports go together".into(),
            });
        }
    };
    Ok(out)
}

/// The `ralph __container-init` entry point. Never returns.
pub fn init_main() -> ! {
    let code = match parse(std::env::args_os().skip(2)) {
        Ok(args) => run(&args),
        Err(e) => {
            eprintln!("ralph: {e}");
            CANNOT_START
        }
    };
    std::process::exit(code)
}

/// The exit code for a raw wait status, as a shell reports it.
pub fn exit_code(status: i32) -> i32 {
    if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    }
}

/// A step of the init's own set-up failed: it runs nothing and exits [`CANNOT_START`].
#[derive(Debug, thiserror::Error)]
#[error("the container init failed to {0}")]
struct SetupFailed(String);

/// What the init holds once set up, before the command exists.
struct Ready {
    /// The stop requests and SIGCHLD ([`init_loop::WATCHED`], blocked).
    sigfd: SignalFd,
    /// The runner's liveness FIFO.
    alive: Option<OwnedFd>,
    /// The connection to the runner's status socket.
    report: Option<UnixStream>,
    /// The filter of syscalls newer than ralph's table, installed by the command's process.
    allow_list: seccompiler::BpfProgram,
}

fn run(args: &InitArgs) -> i32 {
    let started = Instant::now();
    let Ready {
        sigfd,
        mut alive,
        mut report,
        allow_list,
    } = match set_up(args) {
        Ok(ready) => ready,
        Err(e) => {
            eprintln!("ralph: {e}");
            return CANNOT_START;
        }
    };
    // SAFETY: the init is single-threaded (the `ralph` binary dispatches here before anything
    // starts a thread), so the child may run anything until it execs.
    let command = match unsafe { fork() } {
        Ok(ForkResult::Child) => exec(&args.argv, &allow_list, report.as_mut()),
        Ok(ForkResult::Parent { child }) => child,
        Err(e) => {
            eprintln!("ralph: the container init failed to fork: {e}");
            return CANNOT_START;
        }
    };
    let status = init_loop::wait_for_command(init_loop::Watch {
        command,
        sigfd: &sigfd,
        grace: args.grace,
        deadline: args.deadline.map(|d| started + d),
        alive: &mut alive,
    });
    // The command is done (or the grace is over): whatever is left goes now.
    let status = init_loop::kill_the_rest(command).command_status.or(status);
    drop(alive);
    if let Some(r) = report {
        send_final_report(r, status);
    }
    status.map_or(128 + libc::SIGKILL, exit_code)
}

/// Everything before the fork: the signals watched, the liveness FIFO opened, the status socket
/// connected (before the command exists: the runner reads this first connection only), the
/// report directory and the gateway's listeners handed over, the init made undumpable and the
/// command's allow-list built.
fn set_up(args: &InitArgs) -> Result<Ready, SetupFailed> {
    let sigfd = watch_signals()?;
    let alive = args.alive.as_deref().map(open_alive).transpose()?;
    let report = args.status.as_deref().map(connect_status).transpose()?;
    // The report directory's tmpfs goes to the runner before the command exists.
    if let Some(dir) = &args.report_dir {
        hand_over_report_dir(dir, report.as_ref())?;
    }
    // The gateway's listeners, made in the container's namespace, go to the runner before the
    // command exists (`super::gateway`).
    if let Some((socket, ports)) = &args.gateway {
        super::gateway::hand_over(socket, ports)
            .map_err(|e| SetupFailed(format!("hand the gateway listeners over: {e}")))?;
    }
    let allow_list = harden()?;
    Ok(Ready {
        sigfd,
        alive,
        report,
        allow_list,
    })
}

/// Blocks the watched signals and reads them through a signalfd.
fn watch_signals() -> Result<SignalFd, SetupFailed> {
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&init_loop::watched_set()), None)
        .map_err(|e| SetupFailed(format!("block signals: {e}")))?;
    init_loop::signalfd().map_err(|e| SetupFailed(format!("watch signals (signalfd): {e}")))
}

/// Opens the runner's liveness FIFO (read-only: end-of-file once the runner is gone).
fn open_alive(path: &Path) -> Result<OwnedFd, SetupFailed> {
    let fd = open(
        path,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        SetupFailed(format!(
            "open the runner's liveness FIFO {}: {e}",
            path.display()
        ))
    })?;
    // SAFETY: `open` returned a fresh descriptor that nothing else owns.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// Connects to the runner's status socket.
fn connect_status(path: &Path) -> Result<UnixStream, SetupFailed> {
    UnixStream::connect(path).map_err(|e| {
        SetupFailed(format!(
            "connect to the runner's status socket {}: {e}",
            path.display()
        ))
    })
}

/// Sends the report directory's descriptor on the status socket.
fn hand_over_report_dir(dir: &Path, report: Option<&UnixStream>) -> Result<(), SetupFailed> {
    match report {
        Some(r) => crate::report_dir::open_for_handover(dir).and_then(|fd| {
            crate::report_dir::send_fd(r.as_fd(), fd.as_fd(), crate::report_dir::HANDOVER_TAG)
        }),
        None => Err(std::io::Error::other("no status socket to send it on")),
    }
    .map_err(|e| {
        SetupFailed(format!(
            "hand the report directory {} over: {e}",
            dir.display()
        ))
    })
}

/// Makes the init undumpable and builds the command's allow-list.
fn harden() -> Result<seccompiler::BpfProgram, SetupFailed> {
    // Not dumpable: the command (same user) cannot reach the init's descriptors through
    // /proc/1/fd. The command's own `execve` makes it dumpable again.
    // SAFETY: PR_SET_DUMPABLE takes an integer and touches no memory.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(SetupFailed("make itself undumpable".into()));
    }
    // The allow-list's second layer, installed by the child on top of the engine's profile
    // (built here, before the fork): the profile names the syscalls ralph knows, this program
    // answers ENOSYS to any newer one (docs/sandbox.md).
    crate::native::seccomp::newer_syscalls_program()
        .map_err(|e| SetupFailed(format!("build the syscall allow-list: {e}")))
}

/// The report at the end, once every process is reaped: their CPU time and the largest resident
/// set among them, how the command ended, in its own words (the container's exit status folds a
/// signal and an exit code of 128 + n together), and whether the memory limit killed anything.
fn send_final_report(mut r: UnixStream, status: Option<i32>) {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } == 0 {
        let _ = r.write_all(super::init_status::usage_line(&usage).as_bytes());
    }
    if let Some(raw) = status {
        let _ = r.write_all(super::init_status::status_line(raw).as_bytes());
    }
    if let Some(n) = super::init_status::oom_kills(Path::new("/sys/fs/cgroup")) {
        let _ = r.write_all(super::init_status::oom_kills_line(n).as_bytes());
    }
}

/// The command, in the forked child: a clean signal state, the filter of newer syscalls, then
/// `execvp`. A
/// failed `execve` is reported on the status socket (nothing of the command ran yet, so it is
/// the init's word).
fn exec(
    argv: &[CString],
    allow_list: &seccompiler::BpfProgram,
    report: Option<&mut UnixStream>,
) -> ! {
    let _ = sys::reset_signals();
    // A session of its own: the init leads process group 1 (and its session), and the command
    // must not share it — `kill(0)`, `setpriority(PRIO_PGRP, 0)` and the like would reach the
    // init, and a process outside the init's session cannot join its group.
    let _ = nix::unistd::setsid();
    // The engine set no_new_privs (`no-new-privileges`), so no capability is needed. Nothing
    // runs without it.
    if let Err(e) = seccompiler::apply_filter(allow_list) {
        eprintln!("ralph: the container init failed to install its syscall filter: {e}");
        // SAFETY: _exit in a forked child, without running the parent's exit handlers.
        unsafe { libc::_exit(CANNOT_START) }
    }
    let code = match argv.first() {
        Some(prog) => {
            let e = execvp(prog, argv).map_or_else(|e| e, |_| nix::Error::UnknownErrno);
            let message = format!(
                "failed to run {}: {} ({e})",
                prog.to_string_lossy(),
                e.desc()
            );
            eprintln!("ralph: {message}");
            if let Some(r) = report {
                let line = super::init_status::exec_failed_line(e as i32, &message);
                let _ = r.write_all(line.as_bytes());
            }
            if e == nix::Error::ENOENT { 127 } else { 126 }
        }
        None => 127,
    };
    // SAFETY: _exit in a forked child, without running the parent's exit handlers.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_round_trips() {
        let line = command_line(
            Duration::from_secs(5),
            Some(Duration::from_secs(60)),
            Some(Path::new("/state/out")),
            &[41410, 41411],
            &["sh".into(), "-c".into(), "-- x".into()],
        );
        assert_eq!(line[0], INIT_PATH);
        assert_eq!(line[1], INIT_ARG);
        let args = parse(line.into_iter().skip(2).map(OsString::from)).unwrap();
        assert_eq!(args.grace, Duration::from_secs(5));
        assert_eq!(args.deadline, Some(Duration::from_secs(65)));
        assert_eq!(args.alive.as_deref(), Some(Path::new(ALIVE_PATH)));
        assert_eq!(
            args.status.as_deref(),
            Some(Path::new(super::super::init_status::STATUS_PATH))
        );
        assert_eq!(args.report_dir.as_deref(), Some(Path::new("/state/out")));
        assert_eq!(
            args.gateway,
            Some((
                PathBuf::from(super::super::gateway::GATEWAY_PATH),
                vec![41410, 41411]
            ))
        );
        assert_eq!(
            args.argv,
            vec![c"sh".to_owned(), c"-c".to_owned(), c"-- x".to_owned()]
        );
    }

    #[test]
    fn malformed_arguments_are_refused() {
        let p = |v: &[&str]| parse(v.iter().map(OsString::from));
        assert!(p(&["--grace-ms", "x", "--", "true"]).is_err());
        assert!(p(&["--grace-ms", "5"]).is_err());
        assert!(p(&["--bogus", "--", "true"]).is_err());
        assert!(p(&["--gateway", "/g", "--", "true"]).is_err());
        assert!(p(&["--gateway-ports", "1", "--", "true"]).is_err());
        assert!(p(&["--gateway", "/g", "--gateway-ports", "0", "--", "true"]).is_err());
        assert!(p(&["--gateway", "/g", "--gateway-ports", "1,x", "--", "true"]).is_err());
    }

    #[test]
    fn statuses_map_like_tini() {
        assert_eq!(exit_code(3 << 8), 3);
        assert_eq!(exit_code(libc::SIGTERM), 143);
        assert_eq!(exit_code(libc::SIGKILL), 137);
    }
}
