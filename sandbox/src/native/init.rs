//! The sandbox's init: pid 1 of the run's pid namespace. It finishes the namespace set-up that
//! must happen inside (mount, network, ipc and uts namespaces; mounts, loopback), forks the
//! command, reaps every process, forwards the supervisor's stop request to the whole namespace
//! (a stop signal from inside it is ignored: [`crate::sys::from_outside`]), and reports the
//! command's status.
//! When it exits, the kernel kills whatever is left in the namespace; when the supervisor dies,
//! it stops the namespace like on a stop request (`PR_SET_PDEATHSIG` = SIGHUP: SIGTERM to all,
//! the grace, then SIGKILL) and exits, taking the namespace with it.

use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sched::CloneFlags;

use super::child::{self, ChildFailure, ExecPlan};
use super::idmap::Idmaps;
use super::step::StepFailure;
use super::{gateway, landlock, mounts, net, ns, vfork};
use crate::init_loop;
use crate::plan::SandboxPlan;
use crate::spec::ExecSpec;

/// The pipes the init shares with the supervisor.
#[derive(Debug)]
pub struct InitPipes {
    /// Set-up failures (close-on-exec; EOF once the command runs).
    pub err_w: OwnedFd,
    /// The command's wait status and the count of leftover processes, written once.
    pub status_w: OwnedFd,
    /// One byte from the supervisor once the init is in its cgroups and a held run was released.
    pub go_r: OwnedFd,
    /// `--network gateway` with ports: the hand-over to the runner ([`gateway`]), closed before
    /// the command is forked.
    pub gateway: Option<OwnedFd>,
    /// The report directory's hand-over to the supervisor ([`crate::report_dir`]): its tmpfs
    /// is sent once mounted, and this end closed before the command is forked.
    pub report: Option<OwnedFd>,
    /// The writable trees' socket masks, read before the view becomes the root
    /// ([`super::late_masks`]).
    pub late_masks: Option<OwnedFd>,
}

fn die(err_w: &OwnedFd, f: StepFailure) -> ! {
    let failure = ChildFailure {
        step: f.step,
        errno: f.errno,
        detail: f.reason,
        restriction: Some(f.restriction),
    };
    child::report_and_exit(err_w, &failure, 127)
}

/// Runs as pid 1 of the new pid namespace. Never returns.
pub fn run(
    spec: &ExecSpec,
    plan: &SandboxPlan,
    exec: &ExecPlan,
    hidden_file: Option<&Path>,
    idmaps: &Idmaps,
    netns: Option<&OwnedFd>,
    pipes: InitPipes,
) -> ! {
    let InitPipes {
        err_w,
        status_w,
        go_r,
        gateway: handover,
        report,
        late_masks,
    } = pipes;
    arm_parent_death(&status_w);
    let handovers = Handovers {
        gateway: handover,
        report,
        late_masks,
    };
    build_inside(plan, hidden_file, idmaps, netns, handovers, &err_w);
    // The command's Landlock ruleset, built in the view before the go-ahead: what is left
    // between the go and the command's `execve` is its enforcement.
    let ruleset = prepare_ruleset(plan, &err_w);
    wait_for_go(go_r);
    let sigfd = match init_loop::signalfd() {
        Ok(fd) => fd,
        Err(e) => die(
            &err_w,
            StepFailure::nix(
                super::step::restriction::PROCESS,
                "signalfd",
                "watch signals in the sandbox init",
                e,
            ),
        ),
    };
    // SAFETY: this process is single-threaded (a fork of the single-threaded supervisor), and
    // child::exec ends in execve or _exit. The child keeps the signalfd until its execve
    // (close-on-exec); what it reads of ours (the plans, `err_w`) is not changed while it runs.
    let command = match unsafe {
        vfork::spawn(|| child::exec(spec, Some(plan), exec, ruleset.as_ref(), &err_w))
    } {
        Ok(pid) => nix::unistd::Pid::from_raw(pid),
        Err(e) => die(
            &err_w,
            StepFailure::io(
                super::step::restriction::PROCESS,
                "clone",
                "start the command",
                &e,
            ),
        ),
    };
    drop((err_w, ruleset));
    // Once the supervisor asked for a stop (or died), every process got SIGTERM and its grace;
    // they are waited for, and the supervisor kills this init when the grace is over (the grace
    // runs out in the loop too: the supervisor that would SIGKILL this init may be gone).
    let status = init_loop::wait_for_command(init_loop::Watch {
        command,
        sigfd: &sigfd,
        grace: spec.kill_grace,
        deadline: None,
        alive: &mut None,
    });
    // The command is done: whatever it left behind goes now (counted first where this
    // namespace's /proc is mounted, else as they are reaped).
    let counted = plan.mount_namespace.then(count_processes);
    let rest = init_loop::kill_the_rest(command);
    let leftovers = counted.unwrap_or(rest.reaped);
    // The command's status as the loop saw it: one the final reap found (the grace ran out) is
    // not reported.
    let _ = std::fs::File::from(status_w)
        .write_all(format!("{} {}\n", status.unwrap_or(0), leftovers).as_bytes());
    let _ = sigfd.as_fd();
    // SAFETY: _exit in a forked child.
    unsafe { libc::_exit(0) }
}

/// The plan's Landlock ruleset built ahead ([`landlock::prepare`]), or the end of the init
/// with the set-up failure; `None` for a plan without one.
pub(super) fn prepare_ruleset(plan: &SandboxPlan, err_w: &OwnedFd) -> Option<landlock::Prepared> {
    let ll = plan.landlock.as_ref()?;
    match landlock::prepare(ll) {
        Ok(r) => Some(r),
        Err(f) => die(err_w, f),
    }
}

/// Arms `PR_SET_PDEATHSIG`, or ends the init if the supervisor is already gone.
fn arm_parent_death(status_w: &OwnedFd) {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number; the supervisor is single-threaded, so the
    // parent-death signal fires exactly when it dies. SIGHUP is a stop request (with the grace,
    // then SIGKILL to all: [`init_loop`]); before the command exists it is ignored (pid 1,
    // default disposition) and the closed `go` pipe ends the init instead.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGHUP, 0, 0, 0) };
    // A supervisor that died before the signal was armed never sends it: its end of the status
    // pipe is closed by then (a process's descriptors close before its children are told), so
    // the init ends here instead of running a command nobody would stop.
    if supervisor_gone(status_w) {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(1) }
    }
}

/// The channels [`build_inside`] uses and closes.
struct Handovers {
    gateway: Option<OwnedFd>,
    report: Option<OwnedFd>,
    late_masks: Option<OwnedFd>,
}

/// The set-up done inside: the namespaces, the mounts, the report directory's and the
/// gateway's hand-overs, loopback. A failure is reported on `err_w` and ends the init (with
/// every descriptor it still holds open until then).
fn build_inside(
    plan: &SandboxPlan,
    hidden_file: Option<&Path>,
    idmaps: &Idmaps,
    netns: Option<&OwnedFd>,
    handovers: Handovers,
    err_w: &OwnedFd,
) {
    let Handovers {
        gateway: handover,
        report,
        late_masks,
    } = handovers;
    enter_namespaces(plan, netns, err_w);
    if plan.mount_namespace {
        if let Err(f) = mounts::apply(plan, hidden_file, idmaps, late_masks) {
            die(err_w, f);
        }
    } else {
        drop(late_masks);
    }
    // The report directory's tmpfs goes to the supervisor, which copies its report files out
    // once every process of the run is gone.
    if let Err(f) = hand_over_report_dir(plan, report) {
        die(err_w, f);
    }
    // A namespace made ahead has its loopback up already.
    if plan.net_namespace && netns.is_none() {
        if let Err(f) = net::loopback_up() {
            die(err_w, f);
        }
    }
    // The runner's gateway: listeners made here, inside the namespace, sent out, and closed
    // (with the hand-over itself) before anything of the command exists.
    if !plan.gateway_ports.is_empty() {
        if let Err(f) = hand_over_listeners(plan, handover) {
            die(err_w, f);
        }
    } else {
        drop(handover);
    }
}

/// Enters the mount, network, ipc and uts namespaces the plan asks for (in one `unshare`; the
/// network namespace made ahead by the supervisor, when there is one, with `setns`).
fn enter_namespaces(plan: &SandboxPlan, netns: Option<&OwnedFd>, err_w: &OwnedFd) {
    if let Some(ns) = netns {
        if let Err(f) = net::enter(ns) {
            die(err_w, f);
        }
    }
    let mut flags = CloneFlags::empty();
    let mut names = Vec::new();
    for (wanted, flag, name) in [
        (plan.mount_namespace, CloneFlags::CLONE_NEWNS, "CLONE_NEWNS"),
        (
            plan.net_namespace && netns.is_none(),
            CloneFlags::CLONE_NEWNET,
            "CLONE_NEWNET",
        ),
        (plan.ipc_namespace, CloneFlags::CLONE_NEWIPC, "CLONE_NEWIPC"),
        (plan.uts_namespace, CloneFlags::CLONE_NEWUTS, "CLONE_NEWUTS"),
    ] {
        if wanted {
            flags |= flag;
            names.push(name);
        }
    }
    if !flags.is_empty() {
        if let Err(f) = ns::enter(flags, &names.join("|")) {
            die(err_w, f);
        }
    }
}

/// The command must start inside the run's cgroups, and a held run only once released: waits
/// until the supervisor has moved this process there (done while the namespaces were being
/// built; cgroup v1 migration waits for an RCU grace period, so the two overlap) and said go.
/// Ends the process if the supervisor is gone.
pub(super) fn wait_for_go(go_r: OwnedFd) {
    let mut go = [0u8; 1];
    if !matches!(std::fs::File::from(go_r).read(&mut go), Ok(1)) {
        // SAFETY: _exit in a forked child.
        unsafe { libc::_exit(1) }
    }
}

/// Whether the read end of `status_w` (the supervisor's) is closed: a write end polls POLLERR
/// once no reader is left.
fn supervisor_gone(status_w: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(status_w.as_fd(), PollFlags::POLLOUT)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds
            .first()
            .and_then(|f| f.revents())
            .is_some_and(|r| r.intersects(PollFlags::POLLERR | PollFlags::POLLHUP))
}

/// Creates one listener per gateway port in this (the run's) network namespace and sends them to
/// the runner on `handover`; both are closed on return.
fn hand_over_listeners(plan: &SandboxPlan, handover: Option<OwnedFd>) -> Result<(), StepFailure> {
    use super::step::restriction::GATEWAY;
    if !plan.net_namespace {
        return Err(StepFailure::new(
            GATEWAY,
            "gateway",
            "gateway listeners need the run's own network namespace",
        ));
    }
    let handover = handover.ok_or_else(|| {
        StepFailure::new(
            GATEWAY,
            "gateway",
            "the runner gave no channel to hand the gateway listeners over",
        )
    })?;
    let listeners = plan
        .gateway_ports
        .iter()
        .map(|p| gateway::listen(*p))
        .collect::<Result<Vec<_>, _>>()?;
    gateway::send(&handover, &plan.gateway_ports, &listeners)
}

/// Sends the report directory's tmpfs (mounted by [`mounts::apply`]) to the supervisor on
/// `chan`; the descriptor and the channel are closed on return.
fn hand_over_report_dir(plan: &SandboxPlan, chan: Option<OwnedFd>) -> Result<(), StepFailure> {
    use super::step::restriction::MOUNTS;
    let Some(r) = plan.report_dir.as_ref().filter(|r| r.tmpfs) else {
        return Ok(());
    };
    let chan = chan.ok_or_else(|| {
        StepFailure::new(
            MOUNTS,
            "report_dir",
            "the supervisor gave no channel to hand the report directory over",
        )
    })?;
    let what = format!("hand the report directory `{}` over", r.dir.path.display());
    let dir = crate::report_dir::open_for_handover(&r.dir.path)
        .map_err(|e| StepFailure::io(MOUNTS, "open", &what, &e))?;
    crate::report_dir::send_fd(chan.as_fd(), dir.as_fd(), crate::report_dir::HANDOVER_TAG)
        .map_err(|e| StepFailure::io(MOUNTS, "sendmsg(SCM_RIGHTS)", &what, &e))
}

/// Processes in this pid namespace other than the init (its own /proc is mounted).
fn count_processes() -> u32 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let n = dir
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .count();
    u32::try_from(n.saturating_sub(1)).unwrap_or(u32::MAX)
}
