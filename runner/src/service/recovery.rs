//! Start-up reconciliation, before any work is taken (SPEC §8): every running job whose run hold
//! is free (its runner died: [`crate::engine::orphans`]) is closed as `interrupted` — never
//! re-run; resuming is explicit (`ralph resume`); a job a live `ralph run` holds is left alone. Then what a killed instance may have left is reaped:
//! orphaned sandbox helpers, `ralph-*` cgroups, private directories of interrupted rounds,
//! this host's ralph containers whose runner is gone (found by their `io.ralph.*` labels), and
//! the overlays of provisioned workspaces it left mounted.

use std::path::Path;
use std::sync::Arc;

use crate::store::{Observer, RunnerInfo, Store, StoreError};

/// What start-up reconciliation did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecoveryReport {
    /// Jobs closed as interrupted.
    pub interrupted: Vec<String>,
    /// Running jobs left alone because their runner holds them (another `ralph run`, host).
    pub left_to_live_runners: Vec<String>,
    /// Orphaned sandbox helpers killed.
    pub helpers_killed: u32,
    /// Leftover cgroups removed.
    pub cgroups_removed: u32,
    /// Leftover containers removed (docker backend).
    pub containers_removed: u32,
    /// Leftover private scratch directories (`home/`, `tmp/`) of killed runs removed.
    pub scratch_removed: usize,
    /// Workspace overlays a killed instance left mounted, unmounted (their layers stay).
    pub overlays_unmounted: usize,
}

/// Reconciles the store in `state_dir` for the runner `me`.
pub fn recover(
    store: &Arc<Store>,
    state_dir: &Path,
    me: &RunnerInfo,
    observers: &[Arc<dyn Observer>],
) -> Result<RecoveryReport, StoreError> {
    let mut report = RecoveryReport {
        helpers_killed: kill_orphaned_helpers(),
        cgroups_removed: remove_leftover_cgroups(),
        containers_removed: remove_leftover_containers(),
        ..Default::default()
    };
    let orphans = crate::engine::orphans::close_orphans(store, state_dir, me, observers)?;
    report.interrupted = orphans.interrupted;
    report.left_to_live_runners = orphans.left_to_live_runners;
    report.scratch_removed = crate::engine::scratch_sweep::sweep(state_dir).removed.len();
    // No job of this instance runs yet, and provisioned jobs run only under `ralph serve`.
    report.overlays_unmounted = crate::provision::layered::unmount_stale(
        &crate::provision::workspaces_dir(state_dir),
        |_| false,
    );
    Ok(report)
}

/// Sandbox helpers whose runner is gone (re-parented to init). They stop their own trees when
/// they notice, but a helper can itself be stuck: kill it (its sandbox init dies with it).
fn kill_orphaned_helpers() -> u32 {
    let mut killed = 0;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let is_helper =
            cmd.split(|b| *b == 0).nth(1) == Some(ralph_sandbox::native::HELPER_ARG.as_bytes());
        if is_helper
            && ralph_sandbox::native::tree::parent_of(pid) == Some(1)
            && nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            )
            .is_ok()
        {
            killed += 1;
        }
    }
    killed
}

/// Containers of this runner host whose owning process is gone. No engine (or an engine that
/// does not answer in time) means nothing to remove.
fn remove_leftover_containers() -> u32 {
    let filter = ralph_sandbox::docker::Filter::this_runner();
    match ralph_sandbox::docker::reap_leftovers(&filter) {
        Ok(gone) => u32::try_from(gone.len()).unwrap_or(u32::MAX),
        Err(_) => 0,
    }
}

/// `ralph-…` cgroups provably left by a dead runner of this host (their name carries the maker's
/// pid, start time, pid namespace and boot, see `ralph_sandbox::native::cgroup_owner`): their
/// processes killed, the directories removed. Any other is left alone.
fn remove_leftover_cgroups() -> u32 {
    let host = ralph_sandbox::host::probe();
    [host.memory.ok(), host.pids.ok()]
        .into_iter()
        .flatten()
        .map(|site| ralph_sandbox::native::cgroup_owner::reap_leftovers(&site.dir))
        .sum()
}
