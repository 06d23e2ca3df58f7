//! The supervisor: a single-threaded process that sets up what must be done outside the sandbox
//! (user namespace, cgroups, placeholders), starts the sandbox's init in a new pid namespace (or,
//! without one, the command itself as a child subreaper), enforces the timeout, stops the whole
//! tree on cancel or when the runner dies, and measures what the tree used.
//!
//! It runs either as the helper process spawned by the runner (rounds) or in the `ralph` process
//! itself (`ralph sandbox exec`). Either way no other thread exists, so everything between
//! `fork` and `execve` is safe.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::unistd::{ForkResult, Pid, fork, pipe2};

use super::cgroup::RunCgroups;
use super::child::{self, ChildFailure, ExecPlan};
use super::idmap::Idmaps;
use super::init::{self, InitPipes};
use super::protocol::{HelperResult, SetupFailure};
use super::step::StepFailure;
use super::{ns, tree};
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

/// Signals the supervisor handles itself (blocked and read through a signalfd).
const HANDLED: [Signal; 5] = [
    Signal::SIGCHLD,
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at`.
    Stopping {
        kill_at: Instant,
    },
}

/// Runs `spec` under `plan` to the end. `parent_pid`, when set, is watched: if that process
/// dies the tree is stopped (the runner was killed).
///
/// `gateway` is the hand-over of `--network gateway` ([`super::gateway`]), needed when the plan
/// has gateway ports; the supervisor closes its copy once the init holds it.
pub fn supervise(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    parent_pid: Option<i32>,
    gateway: Option<OwnedFd>,
) -> HelperResult {
    match Supervisor::start(spec, plan, parent_pid, gateway) {
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
    status_r: Option<OwnedFd>,
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
    fn start(
        spec: &ExecSpec,
        plan: &SandboxPlan,
        parent_pid: Option<i32>,
        gateway: Option<OwnedFd>,
    ) -> Result<Started, String> {
        let setup_began = Instant::now();
        if !plan.gateway_ports.is_empty() && gateway.is_none() {
            return Ok(Started::Failed(StepFailure::new(
                super::step::restriction::GATEWAY,
                "gateway",
                "no channel to hand the gateway listeners to the runner (an in-process run cannot serve them)",
            )));
        }
        let exec_plan =
            ExecPlan::new(spec, Some(plan)).map_err(|e| format!("invalid command: {e}"))?;
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
        let spare_readers = if parent.is_some() {
            spare_readers()
        } else {
            Vec::new()
        };
        if let Some(map) = plan.user_namespace {
            if let Err(f) = ns::enter_user_namespace(map) {
                return Ok(Started::Failed(f));
            }
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let run_id = format!("{}-{nanos}", std::process::id());
        let mut cleanup = Cleanup::default();
        match RunCgroups::create(
            plan.memory.as_ref(),
            plan.pids.as_ref(),
            plan.cpu.as_ref(),
            &run_id,
        ) {
            Ok(cg) => cleanup.cgroups = cg,
            Err(f) => return Ok(Started::Failed(f)),
        }
        for ph in &plan.placeholders {
            // Never through a symlink: a link planted in its parent fails the run closed.
            match beneath::mkdir(&ph.at, 0o555) {
                Ok(true) if ph.remove_after => cleanup.placeholders.push(ph.at.clone()),
                Ok(_) => {}
                Err(e) => {
                    cleanup.run();
                    return Ok(Started::Failed(StepFailure::new(
                        super::step::restriction::MOUNTS,
                        "mkdirat",
                        format!("failed to create the protected placeholder: {e}"),
                    )));
                }
            }
        }
        // What the protected paths hold, to find and undo any change after the run.
        let snapshot = match Snapshot::take(&plan.protected, &spec.control_dir.join("protected")) {
            Ok(s) => s,
            Err(m) => {
                cleanup.run();
                return Ok(Started::Failed(StepFailure::new(
                    super::step::restriction::MOUNTS,
                    "snapshot",
                    format!("failed to record the protected paths: {m}"),
                )));
            }
        };
        // The mask for secret files: an empty mode-000 file, on tmpfs when there is one (no disk
        // journal), created only when something is masked and removed once the mounts are made.
        let needs_mask = plan
            .mounts
            .iter()
            .any(|m| matches!(m, crate::plan::MountStep::HideFile { .. }));
        let hidden_file = if needs_mask {
            match create_mask(&spec.control_dir, &run_id) {
                Ok(path) => {
                    cleanup.mask = Some(path.clone());
                    Some(path)
                }
                Err(e) => {
                    cleanup.run();
                    return Err(format!("failed to create the mask file for secrets: {e}"));
                }
            }
        } else {
            None
        };
        // The command's own ids (a root runner's round): its run-owned directories handed over,
        // and the user namespaces of the trees it sees idmapped.
        if let Some(ids) = &plan.identity {
            for p in &plan.hand_over {
                if let Err(e) = std::os::unix::fs::chown(p, Some(ids.uid), Some(ids.gid)) {
                    cleanup.run();
                    return Ok(Started::Failed(StepFailure::io(
                        super::step::restriction::PROCESS,
                        "chown",
                        &format!("hand `{}` to uid {}", p.display(), ids.uid),
                        &e,
                    )));
                }
            }
        }
        let idmaps = match Idmaps::create(plan) {
            Ok(m) => m,
            Err(f) => {
                cleanup.run();
                return Ok(Started::Failed(f));
            }
        };
        // What git repositories the writable trees hold before anything of the run exists.
        let git = plan
            .git
            .as_ref()
            .map(|g| (g.clone(), gitguard::inventory(g)));
        if plan.pid_namespace {
            if let Err(f) = ns::enter(CloneFlags::CLONE_NEWPID, "CLONE_NEWPID") {
                cleanup.run();
                return Ok(Started::Failed(f));
            }
        }
        let pipe = || {
            pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create a pipe: {}", e.desc()))
        };
        let (err_r, err_w) = pipe()?;
        let (status_r, status_w) = pipe()?;
        let (go_r, go_w) = pipe()?;
        // The report directory's tmpfs comes back on this (only with an init that mounts it).
        let report_plan = plan.report_dir.clone();
        let (report_r, report_w) = match &report_plan {
            Some(r) if r.tmpfs && plan.pid_namespace => {
                let (a, b) = crate::report_dir::channel().map_err(|e| {
                    format!("failed to create the report directory's hand-over: {e}")
                })?;
                (Some(a), Some(b))
            }
            _ => (None, None),
        };
        let started = Instant::now();
        // SAFETY: this process is single-threaded (the helper never starts a runtime, and
        // `ralph sandbox exec` runs before any thread is created), so the child may run arbitrary
        // code until `execve`.
        let forked = unsafe { fork() }.map_err(|e| format!("failed to fork: {}", e.desc()))?;
        let main = match forked {
            ForkResult::Child => {
                drop((err_r, status_r, go_w, sigfd, report_r));
                if plan.pid_namespace {
                    init::run(
                        spec,
                        plan,
                        &exec_plan,
                        hidden_file.as_deref(),
                        &idmaps,
                        InitPipes {
                            err_w,
                            status_w,
                            go_r,
                            gateway,
                            report: report_w,
                        },
                    )
                }
                drop((status_w, go_r, gateway, report_w));
                child::exec(spec, Some(plan), &exec_plan, &err_w)
            }
            ForkResult::Parent { child } => child,
        };
        // The init holds the gateway hand-over now: only its copy may stay open, so that the
        // runner sees end-of-file if the init dies before sending.
        drop((err_w, status_w, go_r, gateway, report_w));
        if let Err(f) = cleanup.cgroups.add(main.as_raw()) {
            let _ = kill(main, Signal::SIGKILL);
            let _ = nix::sys::wait::waitpid(main, None);
            cleanup.run();
            return Ok(Started::Failed(f));
        }
        let _ = nix::unistd::write(&go_w, b"g");
        drop(go_w);
        let mut buf = Vec::new();
        let _ = std::fs::File::from(err_r).read_to_end(&mut buf);
        let mut exec_error = None;
        if !buf.is_empty() {
            let failure: ChildFailure = match serde_json::from_slice(&buf) {
                Ok(f) => f,
                Err(e) => {
                    let _ = kill(main, Signal::SIGKILL);
                    let _ = nix::sys::wait::waitpid(main, None);
                    cleanup.run();
                    return Err(format!("unreadable report from the sandbox: {e}"));
                }
            };
            if failure.step == "exec" {
                exec_error = Some(failure.detail);
            } else {
                // Set-up failed: nothing of the command ran.
                let _ = kill(main, Signal::SIGKILL);
                let _ = nix::sys::wait::waitpid(main, None);
                cleanup.run();
                return Ok(Started::Failed(StepFailure {
                    restriction: failure
                        .restriction
                        .unwrap_or_else(|| super::step::restriction::PROCESS.to_owned()),
                    step: failure.step,
                    reason: failure.detail,
                    errno: failure.errno,
                }));
            }
        }
        // The command runs: the init's mounts are made, the mask file's name is no longer needed.
        cleanup.drop_mask();
        let setup = setup_began.elapsed();
        Ok(Started::Running(Box::new(Supervisor {
            main,
            ns_init: plan.pid_namespace,
            started,
            setup,
            deadline: spec.timeout.map(|t| started + t),
            grace: spec.kill_grace,
            sigfd,
            parent,
            status_r: Some(status_r),
            phase: Phase::Running,
            ended_by: EndedBy::Exit,
            main_status: None,
            main_wall: None,
            leftovers_killed: 0,
            exec_error,
            enforcement: base_enforcement(spec, plan),
            cleanup,
            absent: plan.absent.clone(),
            watch: plan.watch.clone(),
            snapshot,
            git,
            control_dir: spec.control_dir.clone(),
            spare_readers,
            report: report_plan.map(|r| (r, report_r)),
        })))
    }

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
        match result {
            Ok(outcome) => HelperResult::Ran { outcome },
            Err(message) => HelperResult::Internal { message },
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
                    .get(1)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty());
            drop(fds);
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
        let usage = sys::rusage_children()
            .map_err(|e| format!("failed to read resource usage (getrusage): {e}"))?;
        // In a pid namespace the init reports the command's own status and its leftovers.
        let mut raw = self.main_status.unwrap_or(0);
        if let Some(r) = self.status_r.take() {
            let mut text = String::new();
            let _ = std::fs::File::from(r).read_to_string(&mut text);
            let mut it = text
                .split_whitespace()
                .filter_map(|w| w.parse::<i64>().ok());
            if let (Some(status), Some(left)) = (it.next(), it.next()) {
                raw = i32::try_from(status).unwrap_or(raw);
                self.leftovers_killed = u32::try_from(left).unwrap_or(0);
            }
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

/// An empty file nobody can read (mode 000), to mount over secret files: created exclusively
/// under /dev/shm (or, without tmpfs there, in the control directory).
fn create_mask(fallback_dir: &Path, run_id: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let name = format!("ralph-mask-{run_id}");
    let create = |dir: &Path| -> std::io::Result<PathBuf> {
        let path = dir.join(&name);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o000)
            .open(&path)?;
        f.set_permissions(std::fs::Permissions::from_mode(0o000))?;
        Ok(path)
    };
    create(Path::new("/dev/shm")).or_else(|_| create(fallback_dir))
}

/// Second read ends of this process's stdout and stderr when they are pipes (the runner's),
/// opened through `/proc/self/fd` (non-blocking, close-on-exec). Best effort.
fn spare_readers() -> Vec<OwnedFd> {
    let mut out = Vec::new();
    for fd in [1, 2] {
        let Ok(st) = nix::sys::stat::fstat(fd) else {
            continue;
        };
        if st.st_mode & libc::S_IFMT != libc::S_IFIFO {
            continue;
        }
        if let Ok(raw) = nix::fcntl::open(
            format!("/proc/self/fd/{fd}").as_str(),
            nix::fcntl::OFlag::O_RDONLY
                | nix::fcntl::OFlag::O_NONBLOCK
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            // SAFETY: `open` returned a fresh descriptor that nothing else owns.
            out.push(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
        }
    }
    out
}

/// Reads and drops whatever `fd` (non-blocking) holds now.
fn discard_available(fd: &OwnedFd) {
    let mut buf = [0u8; 8192];
    while matches!(nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(fd), &mut buf), Ok(n) if n > 0)
    {
    }
}
