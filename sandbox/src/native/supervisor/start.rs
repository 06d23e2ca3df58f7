//! The supervisor's start: what it watches (signals, the runner), what it sets up outside the
//! sandbox (user namespace, cgroups, placeholders, the mask file, idmaps, the pid namespace),
//! the fork of the init (or the command), what it records while the init builds the view (the
//! writable trees' walk, whose sockets it hands the init to mask: [`late_masks`]; the snapshot
//! of the protected paths), and the wait for the sandbox's set-up to end in the command's
//! `execve`.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::SignalFd;
use nix::unistd::{ForkResult, Pid, fork, pipe2};

use super::super::cgroup::RunCgroups;
use super::super::child::{self, ChildFailure, ExecPlan};
use super::super::idmap::Idmaps;
use super::super::init::{self, InitPipes};
use super::super::late_masks;
use super::super::spread::Spread;
use super::super::step::{StepFailure, restriction};
use super::super::{handback, hold};
use super::super::{net, ns};
use super::{Cleanup, FromRunner, Phase, Started, Supervisor, base_enforcement};
use crate::beneath;
use crate::gitguard::{self, GitGuard, Inventory};
use crate::outcome::EndedBy;
use crate::outcome::Enforcement;
use crate::plan::SandboxPlan;
use crate::snapshot::Snapshot;
use crate::spec::ExecSpec;
use crate::sys;

/// Why the start failed: the sandbox's set-up (reported as such), or ralph itself.
enum StartError {
    Failed(StepFailure),
    Internal(String),
}

impl From<StepFailure> for StartError {
    fn from(f: StepFailure) -> Self {
        Self::Failed(f)
    }
}

impl From<String> for StartError {
    fn from(message: String) -> Self {
        Self::Internal(message)
    }
}

/// What the supervisor watches from its start.
struct Armed {
    sigfd: SignalFd,
    /// The runner's pidfd.
    parent: Option<OwnedFd>,
    /// See [`Supervisor::spare_readers`].
    spare_readers: Vec<OwnedFd>,
}

/// What the set-up outside the sandbox made for the run (besides [`Cleanup`]), before the fork.
struct Outside {
    /// The mask file for secrets, when something is masked.
    hidden_file: Option<PathBuf>,
    idmaps: Idmaps,
    /// The network namespace made ahead ([`net::Early`]), for the init to enter.
    netns: Option<OwnedFd>,
    /// The CPUs the supervisor may use, when it forks an init and has more than one.
    spread: Option<Spread>,
}

/// What the supervisor recorded of the host while the init built the view: what the run is
/// checked against once it ended.
struct Before {
    snapshot: Snapshot,
    git: Option<(GitGuard, Inventory)>,
    /// The run's enforcement, with the final line on unix sockets.
    enforcement: Enforcement,
}

/// The supervisor's ends of the pipes it shares with the init (or the command).
struct OurEnds {
    err_r: OwnedFd,
    status_r: OwnedFd,
    go_w: OwnedFd,
    report_r: Option<OwnedFd>,
    /// The walk's socket masks, when the init waits for them ([`late_masks`]).
    late_w: Option<OwnedFd>,
}

/// The init's (or the command's) ends.
struct TheirEnds {
    err_w: OwnedFd,
    status_w: OwnedFd,
    go_r: OwnedFd,
    report_w: Option<OwnedFd>,
    late_r: Option<OwnedFd>,
}

impl Supervisor {
    pub(super) fn start(
        spec: &ExecSpec,
        plan: &SandboxPlan,
        parent_pid: Option<i32>,
        from_runner: FromRunner,
    ) -> Result<Started, String> {
        match Self::start_inner(spec, plan, parent_pid, from_runner) {
            Ok(s) => Ok(Started::Running(s)),
            Err(StartError::Failed(f)) => Ok(Started::Failed(f)),
            Err(StartError::Internal(message)) => Err(message),
        }
    }

    fn start_inner(
        spec: &ExecSpec,
        plan: &SandboxPlan,
        parent_pid: Option<i32>,
        from_runner: FromRunner,
    ) -> Result<Box<Supervisor>, StartError> {
        let setup_began = Instant::now();
        let FromRunner {
            gateway,
            hold,
            netns: ahead,
            handback,
        } = from_runner;
        if !plan.gateway_ports.is_empty() && gateway.is_none() {
            return Err(StepFailure::new(
                restriction::GATEWAY,
                "gateway",
                "no channel to hand the gateway listeners to the runner (an in-process run cannot serve them)",
            )
            .into());
        }
        let exec_plan =
            ExecPlan::new(spec, Some(plan)).map_err(|e| format!("invalid command: {e}"))?;
        let Armed {
            sigfd,
            parent,
            spare_readers,
        } = arm(parent_pid)?;
        let wants_net = plan.pid_namespace && plan.net_namespace;
        // One made ahead (by a standby, as root: in the initial user namespace) serves only a
        // plan without a user namespace of its own; any other is dropped (its thread joined:
        // the user namespace below needs a single-threaded process).
        let ahead = ahead.filter(|_| wants_net && plan.user_namespace.is_none());
        if let Some(map) = plan.user_namespace {
            ns::enter_user_namespace(map)?;
        }
        // Else the network namespace is made on a thread meanwhile (in the user namespace just
        // entered, which owns it as it would own the init's); joined before the fork.
        let early_net = match ahead {
            Some(made) => Some(made),
            None => wants_net.then(net::Early::start),
        };
        let mut cleanup = Cleanup::default();
        let mut outside = prepare_outside(spec, plan, &mut cleanup)?;
        outside.netns = early_net.and_then(net::Early::wait);
        let (ours, theirs) = pipes(plan)?;
        let started = Instant::now();
        // SAFETY: this process is single-threaded (the helper never starts a runtime,
        // `ralph sandbox exec` runs before any thread is created, and the network namespace's
        // thread was joined above), so the child may run arbitrary code until `execve`.
        let (forked, born_in_v2) = fork_main(&cleanup.cgroups)?;
        let main = match forked {
            ForkResult::Child => {
                drop((ours, sigfd, handback));
                become_main(
                    spec,
                    plan,
                    &exec_plan,
                    &outside,
                    &cleanup.cgroups,
                    theirs,
                    gateway,
                )
            }
            ForkResult::Parent { child } => child,
        };
        // The init works beside the supervisor, which records the host meanwhile: off this CPU
        // until then.
        if let Some(s) = &outside.spread {
            s.push_off_this_cpu(main);
        }
        // The init holds the network namespace now (or died, and it went with it).
        drop(outside.netns.take());
        // The init holds the gateway hand-over now: only its copy may stay open, so that the
        // runner sees end-of-file if the init dies before sending.
        drop((theirs, gateway));
        let OurEnds {
            err_r,
            status_r,
            go_w,
            report_r,
            late_w,
        } = ours;
        // While the init builds the view: the writable trees' walk (its sockets go to the init
        // as soon as it is done) and the snapshot; the command starts only after both.
        let before = record_before(spec, plan, late_w).and_then(|b| {
            // Back to every CPU before the go-ahead: the command inherits the init's set.
            match &outside.spread {
                Some(s) => s.widen(main).map(|()| b),
                None => Ok(b),
            }
        });
        let before = match before {
            Ok(b) => b,
            Err(f) => {
                abandon(main, &mut cleanup);
                return Err(f.into());
            }
        };
        let (exec_error, held) = await_setup(main, err_r, go_w, hold, &mut cleanup, born_in_v2)?;
        // The command runs: the init's mounts are made, the mask file's name is no longer needed.
        cleanup.drop_mask();
        // The set-up's own time: not the wait for the runner's release.
        let setup = setup_began.elapsed().saturating_sub(held);
        // The command runs in the finished view: held from here, sent back at the end.
        let handback = match (handback, plan.pid_namespace && plan.root.is_some()) {
            (Some(chan), true) => handback::hold_view(main).map(|view| (chan, view)),
            _ => None,
        };
        Ok(Box::new(Supervisor {
            main,
            ns_init: plan.pid_namespace,
            started,
            setup,
            deadline: spec.timeout.map(|t| started + t),
            grace: spec.kill_grace,
            sigfd,
            parent,
            status_r: Some(status_r),
            reported: None,
            phase: Phase::Running,
            ended_by: EndedBy::Exit,
            main_status: None,
            main_wall: None,
            leftovers_killed: 0,
            exec_error,
            enforcement: before.enforcement,
            cleanup,
            absent: plan.absent.clone(),
            watch: plan.watch.clone(),
            snapshot: before.snapshot,
            git: before.git,
            control_dir: spec.control_dir.clone(),
            spare_readers,
            report: plan.report_dir.clone().map(|r| (r, report_r)),
            handback,
        }))
    }
}

/// Forks the init (or the command): born in the run's v2 cgroup where there is one
/// (`clone3(CLONE_INTO_CGROUP)`, then `true`), else a plain fork, moved by [`await_setup`].
/// Any failure of `clone3` (a kernel before 5.7, a cgroup it refuses) falls back to the plain
/// fork, and the move then reports what is wrong.
fn fork_main(cgroups: &RunCgroups) -> Result<(ForkResult, bool), String> {
    if let Some(dir) = cgroups.v2_for_clone() {
        // SAFETY: this process is single-threaded (see the caller), and the child uses no mutex
        // that records libc's thread id.
        match unsafe { crate::sys::fork_into_cgroup(&dir) } {
            Ok(0) => return Ok((ForkResult::Child, true)),
            Ok(pid) => {
                return Ok((
                    ForkResult::Parent {
                        child: Pid::from_raw(pid),
                    },
                    true,
                ));
            }
            Err(_) => {}
        }
    }
    // SAFETY: as above.
    let forked = unsafe { fork() }.map_err(|e| format!("failed to fork: {}", e.desc()))?;
    Ok((forked, false))
}

/// Becomes a child subreaper, blocks the signals the supervisor handles (read through a
/// signalfd; the init inherits the mask) and watches the runner `parent_pid`, if any.
fn arm(parent_pid: Option<i32>) -> Result<Armed, String> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("failed to become a child subreaper (prctl): {}", e.desc()))?;
    let mask = crate::init_loop::watched_set();
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .map_err(|e| format!("failed to block signals (sigprocmask): {}", e.desc()))?;
    let sigfd = crate::init_loop::signalfd()
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
    Ok(Armed {
        sigfd,
        parent,
        spare_readers,
    })
}

/// The set-up outside the sandbox; on failure, what it made is removed again.
fn prepare_outside(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    cleanup: &mut Cleanup,
) -> Result<Outside, StartError> {
    let outside = build_outside(spec, plan, cleanup);
    if outside.is_err() {
        cleanup.run();
    }
    outside
}

fn build_outside(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    cleanup: &mut Cleanup,
) -> Result<Outside, StartError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let run_id = format!("{}-{nanos}", std::process::id());
    cleanup.cgroups = RunCgroups::create(
        plan.memory.as_ref(),
        plan.pids.as_ref(),
        plan.cpu.as_ref(),
        &run_id,
    )?;
    make_placeholders(plan, cleanup)?;
    // The mask for secret files: an empty mode-000 file, on tmpfs when there is one (no disk
    // journal), created only when something is masked (or the walk may find sockets to mask)
    // and removed once the mounts are made.
    let needs_mask = late_masks::expected(plan)
        || plan
            .mounts
            .iter()
            .any(|m| matches!(m, crate::plan::MountStep::HideFile { .. }));
    let hidden_file = if needs_mask {
        let path = create_mask(&spec.control_dir, &run_id)
            .map_err(|e| format!("failed to create the mask file for secrets: {e}"))?;
        cleanup.mask = Some(path.clone());
        Some(path)
    } else {
        None
    };
    hand_over_dirs(plan)?;
    let idmaps = Idmaps::create(plan)?;
    if plan.pid_namespace {
        ns::enter(CloneFlags::CLONE_NEWPID, "CLONE_NEWPID")?;
    }
    Ok(Outside {
        hidden_file,
        idmaps,
        netns: None,
        spread: if plan.pid_namespace {
            Spread::take()
        } else {
            None
        },
    })
}

/// What the run is checked against, recorded after the init was forked (see [`Before`]): the
/// git repositories the writable trees hold before anything of the command exists, whose walk
/// also finds their unix sockets (sent to the init on `late_w`, masked like the plan's own),
/// then what the protected paths hold, to find and undo any change after the run.
fn record_before(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    late_w: Option<OwnedFd>,
) -> Result<Before, StepFailure> {
    let git = plan.git.as_ref().map(|g| {
        (
            g.clone(),
            gitguard::inventory_kept(g, spec.listings.as_deref(), spec.layers.as_ref()),
        )
    });
    let mut enforcement = base_enforcement(spec, plan);
    let socket_masks: Vec<PathBuf> = match (&plan.socket_walk, &git) {
        (Some(w), Some((_, inventory))) => w.finish(inventory, &mut enforcement),
        _ => Vec::new(),
    };
    if let Some(w) = late_w {
        late_masks::send(w, &socket_masks);
    }
    let snapshot = Snapshot::take_kept(
        &plan.protected,
        &spec.control_dir.join("protected"),
        spec.protected_copies.as_deref(),
    )
    .map_err(|m| {
        StepFailure::new(
            restriction::MOUNTS,
            "snapshot",
            format!("failed to record the protected paths: {m}"),
        )
    })?;
    Ok(Before {
        snapshot,
        git,
        enforcement,
    })
}

/// Creates the protected placeholders (never through a symlink: a link planted in its parent
/// fails the run closed); those to remove after the run are recorded in `cleanup`.
fn make_placeholders(plan: &SandboxPlan, cleanup: &mut Cleanup) -> Result<(), StepFailure> {
    for ph in &plan.placeholders {
        match beneath::mkdir(&ph.at, 0o555) {
            Ok(true) if ph.remove_after => cleanup.placeholders.push(ph.at.clone()),
            Ok(_) => {}
            Err(e) => {
                return Err(StepFailure::new(
                    restriction::MOUNTS,
                    "mkdirat",
                    format!("failed to create the protected placeholder: {e}"),
                ));
            }
        }
    }
    Ok(())
}

/// The command's own ids (a root runner's round): its run-owned directories handed over (the
/// user namespaces of the trees it sees idmapped are made by [`Idmaps::create`]).
fn hand_over_dirs(plan: &SandboxPlan) -> Result<(), StepFailure> {
    let Some(ids) = &plan.identity else {
        return Ok(());
    };
    for p in &plan.hand_over {
        std::os::unix::fs::chown(p, Some(ids.uid), Some(ids.gid)).map_err(|e| {
            StepFailure::io(
                restriction::PROCESS,
                "chown",
                &format!("hand `{}` to uid {}", p.display(), ids.uid),
                &e,
            )
        })?;
    }
    Ok(())
}

/// The pipes between the supervisor and the init (or the command): set-up failures, the
/// command's status, the go-ahead, and the report directory's tmpfs (only with an init that
/// mounts it).
fn pipes(plan: &SandboxPlan) -> Result<(OurEnds, TheirEnds), String> {
    let pipe =
        || pipe2(OFlag::O_CLOEXEC).map_err(|e| format!("failed to create a pipe: {}", e.desc()));
    let (err_r, err_w) = pipe()?;
    let (status_r, status_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let (late_r, late_w) = if late_masks::expected(plan) {
        let (r, w) = pipe()?;
        (Some(r), Some(w))
    } else {
        (None, None)
    };
    let (report_r, report_w) = match &plan.report_dir {
        Some(r) if r.tmpfs && plan.pid_namespace => {
            let (a, b) = crate::report_dir::channel()
                .map_err(|e| format!("failed to create the report directory's hand-over: {e}"))?;
            (Some(a), Some(b))
        }
        _ => (None, None),
    };
    Ok((
        OurEnds {
            err_r,
            status_r,
            go_w,
            report_r,
            late_w,
        },
        TheirEnds {
            err_w,
            status_w,
            go_r,
            report_w,
            late_r,
        },
    ))
}

/// In the forked child: the init of the new pid namespace, or (without one) the command. It
/// first moves itself into the run's v1 cgroups ([`RunCgroups::join`]), before anything of the
/// sandbox is made and before it reads the go-ahead (the supervisor moves it into v2 ones before
/// it writes that): whatever it forks later is in them.
fn become_main(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    exec_plan: &ExecPlan,
    outside: &Outside,
    cgroups: &RunCgroups,
    theirs: TheirEnds,
    gateway: Option<OwnedFd>,
) -> ! {
    let TheirEnds {
        err_w,
        status_w,
        go_r,
        report_w,
        late_r,
    } = theirs;
    if let Err(f) = cgroups.join() {
        child::die(&err_w, f)
    }
    if plan.pid_namespace {
        init::run(
            spec,
            plan,
            exec_plan,
            outside.hidden_file.as_deref(),
            &outside.idmaps,
            outside.netns.as_ref(),
            InitPipes {
                err_w,
                status_w,
                go_r,
                gateway,
                report: report_w,
                late_masks: late_r,
            },
        )
    }
    drop((status_w, gateway, report_w, late_r));
    // Without an init the command itself waits for the go-ahead: it is in the run's cgroups,
    // and a held run was released, before anything of it runs.
    let ruleset = init::prepare_ruleset(plan, &err_w);
    init::wait_for_go(go_r);
    child::exec(spec, Some(plan), exec_plan, ruleset.as_ref(), &err_w)
}

/// Moves `main` into the run's v2 cgroup unless it was born there (it joined the v1 ones
/// itself), waits for the runner's release of a held run
/// ([`hold`]), lets `main` go on, and waits for its set-up to end: `None` once the command
/// runs, the `execve` failure when that is what ended it; with the time spent waiting for the
/// release. A failed set-up, or a held run never released, kills `main` and removes what
/// `cleanup` holds: nothing of the command ran.
fn await_setup(
    main: Pid,
    err_r: OwnedFd,
    go_w: OwnedFd,
    hold: Option<OwnedFd>,
    cleanup: &mut Cleanup,
    born_in_v2: bool,
) -> Result<(Option<String>, Duration), StartError> {
    let abandon = |cleanup: &mut Cleanup| abandon(main, cleanup);
    let moved = if born_in_v2 {
        Ok(())
    } else {
        cleanup.cgroups.add(main.as_raw())
    };
    if let Err(f) = moved {
        abandon(cleanup);
        return Err(f.into());
    }
    let waited = Instant::now();
    if let Some(r) = hold {
        if !hold::await_release(r) {
            abandon(cleanup);
            return Err(StepFailure::new(
                restriction::PROCESS,
                "release",
                "the runner did not release the command (its start was not journalled, or the runner is gone); nothing of it ran",
            )
            .into());
        }
    }
    let held = waited.elapsed();
    let _ = nix::unistd::write(&go_w, b"g");
    drop(go_w);
    let mut buf = Vec::new();
    let _ = std::fs::File::from(err_r).read_to_end(&mut buf);
    if buf.is_empty() {
        return Ok((None, held));
    }
    let failure: ChildFailure = match serde_json::from_slice(&buf) {
        Ok(f) => f,
        Err(e) => {
            abandon(cleanup);
            return Err(format!("unreadable report from the sandbox: {e}").into());
        }
    };
    if failure.step == "exec" {
        return Ok((Some(failure.detail), held));
    }
    // Set-up failed: nothing of the command ran.
    abandon(cleanup);
    Err(StepFailure {
        restriction: failure
            .restriction
            .unwrap_or_else(|| restriction::PROCESS.to_owned()),
        step: failure.step,
        reason: failure.detail,
        errno: failure.errno,
    }
    .into())
}

/// Kills `main` (nothing of the command ran), reaps it, and removes what `cleanup` holds.
fn abandon(main: Pid, cleanup: &mut Cleanup) {
    let _ = kill(main, Signal::SIGKILL);
    let _ = nix::sys::wait::waitpid(main, None);
    cleanup.run();
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
            OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        ) {
            // SAFETY: `open` returned a fresh descriptor that nothing else owns.
            out.push(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) });
        }
    }
    out
}
