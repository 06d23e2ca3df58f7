//! Start-up reconciliation, before any work is taken (SPEC §8): every running job whose run hold
//! is free (its runner died: [`crate::engine::orphans`]) is closed as `interrupted` — never
//! re-run; resuming is explicit (`ralph resume`); a job a live `ralph run` holds is left alone. Then what a killed instance may have left is reaped:
//! orphaned sandbox helpers, `ralph-*` cgroups, private directories of interrupted rounds,
//! this host's ralph containers whose runner is gone (found by their `io.ralph.*` labels), and
//! the overlays of provisioned workspaces it left mounted.
//!
//! A leftover that still runs is a round stopping with its grace (its helper or its container's
//! init saw the runner die): it is given that grace, counted from now, and only what is still
//! there after it is killed — on a thread of its own, so start-up does not wait for other
//! rounds' clean-up ([`ralph_sandbox::native::leftovers`], [`ralph_sandbox::docker::reap`]).
//! What has ended already is removed at once and counted in the report.

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

/// Reconciles the store in `state_dir` for the runner `me`, as far as `scope` says.
pub fn recover(
    store: &Arc<Store>,
    state_dir: &Path,
    me: &RunnerInfo,
    observers: &[Arc<dyn Observer>],
    scope: super::Recovery,
) -> Result<RecoveryReport, StoreError> {
    if scope == super::Recovery::Jobs {
        let orphans = crate::engine::orphans::close_orphans(store, state_dir, me, observers)?;
        crate::engine::sweep_attempts(store, state_dir);
        return Ok(RecoveryReport {
            interrupted: orphans.interrupted,
            left_to_live_runners: orphans.left_to_live_runners,
            scratch_removed: crate::engine::scratch_sweep::sweep(state_dir).removed.len(),
            ..Default::default()
        });
    }
    let native = end_native_leftovers();
    let mut report = RecoveryReport {
        helpers_killed: native.helpers_killed,
        cgroups_removed: native.cgroups_removed,
        containers_removed: remove_leftover_containers(),
        ..Default::default()
    };
    let idmaps = ralph_sandbox::docker::idmap::reap_leftovers();
    if idmaps > 0 {
        tracing::warn!(
            idmaps_detached = idmaps,
            "recovered: {idmaps} idmapped workspace mount(s) of a runner killed while starting a container detached"
        );
    }
    let orphans = crate::engine::orphans::close_orphans(store, state_dir, me, observers)?;
    report.interrupted = orphans.interrupted;
    report.left_to_live_runners = orphans.left_to_live_runners;
    report.scratch_removed = crate::engine::scratch_sweep::sweep(state_dir).removed.len();
    let attempts = crate::engine::sweep_attempts(store, state_dir);
    if attempts > 0 {
        tracing::warn!(
            attempts,
            "recovered: {attempts} workspace(s) of the attempts of fan-out jobs whose runner died removed"
        );
    }
    // No job of this instance runs yet, and provisioned jobs run only under `ralph serve`.
    report.overlays_unmounted = crate::provision::layered::unmount_stale(
        &crate::provision::workspaces_dir(state_dir),
        |_| false,
    );
    Ok(report)
}

/// Sandbox helpers whose runner is gone (re-parented to init) and `ralph-…` cgroups provably
/// left by a dead runner of this host (their name carries the maker's pid, start time, pid
/// namespace and boot, see `ralph_sandbox::native::cgroup_owner`; any other is left alone).
/// A helper stops its own round when it notices its runner's death, but can itself be stuck:
/// each is given its round's grace from now and killed only if it is still there then (its
/// init then stops the round itself, with the grace, before its cgroup goes). When something
/// still runs this happens in the background, and the report counts nothing of it.
fn end_native_leftovers() -> ralph_sandbox::native::leftovers::Ended {
    // Every hierarchy a round's cgroups can be in: the cpu one was missing here, and a runner
    // killed during a round with a CPU limit left its cgroup there for good.
    let parents = match ralph_sandbox::host::probed_if_ready() {
        Some(host) => host.cgroup_parents(),
        None => ralph_sandbox::host::probe().cgroup_parents(),
    };
    let found = ralph_sandbox::native::leftovers::Leftovers::find(parents);
    if !found.running() {
        return found.end();
    }
    tracing::warn!(
        "rounds of a dead runner are still stopping: they keep their grace, and what outlives it is killed in the background"
    );
    let spawned = std::thread::Builder::new()
        .name("ralph-leftovers".into())
        .spawn(move || {
            let ended = found.end();
            if ended.helpers_killed > 0 || ended.cgroups_removed > 0 {
                tracing::warn!(
                    helpers_killed = ended.helpers_killed,
                    cgroups_removed = ended.cgroups_removed,
                    "recovered in the background: {} orphaned helper(s) killed past their grace, {} leftover cgroup(s) removed",
                    ended.helpers_killed,
                    ended.cgroups_removed
                );
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("failed to start the leftover reaper thread: {e}");
    }
    ralph_sandbox::native::leftovers::Ended::default()
}

/// Containers of this runner host whose owning process is gone. No engine (or an engine that
/// does not answer in time) means nothing to remove. One still running is stopping with its
/// grace: then they are all reaped in the background (the report counts none).
fn remove_leftover_containers() -> u32 {
    let filter = ralph_sandbox::docker::Filter::this_runner();
    let stopping = ralph_sandbox::docker::list_leftovers(&filter)
        .is_ok_and(|l| l.iter().any(ralph_sandbox::docker::Leftover::is_stopping));
    if !stopping {
        return match ralph_sandbox::docker::reap_leftovers(&filter) {
            Ok(reaped) => {
                log_failed_removals(&reaped);
                u32::try_from(reaped.removed.len()).unwrap_or(u32::MAX)
            }
            Err(_) => 0,
        };
    }
    let spawned = std::thread::Builder::new()
        .name("ralph-leftover-containers".into())
        .spawn(move || match ralph_sandbox::docker::reap_leftovers(&filter) {
            Ok(reaped) => {
                log_failed_removals(&reaped);
                if !reaped.removed.is_empty() {
                    tracing::warn!(
                        containers_removed = reaped.removed.len(),
                        "recovered in the background: {} leftover container(s) removed, each after its grace",
                        reaped.removed.len()
                    );
                }
            }
            Err(e) => tracing::warn!("leftover containers could not be reaped: {e}"),
        });
    if let Err(e) = spawned {
        tracing::warn!("failed to start the leftover container reaper thread: {e}");
    }
    0
}

/// One warning per leftover container the engine would not remove (the next start tries again).
fn log_failed_removals(reaped: &ralph_sandbox::docker::Reaped) {
    for (c, e) in &reaped.failed {
        tracing::warn!(
            container = %c.id,
            job_id = %c.job,
            "leftover container {} (job {}, round {}) could not be removed: {e}",
            c.id,
            c.job,
            c.round
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_sandbox::native::cgroup_owner::CgroupOwner;

    /// A dead runner's cgroups are reaped in every hierarchy a round's can be in: memory, pids
    /// and cpu (the cpu one was once forgotten, and its cgroups stayed for good).
    #[test]
    fn a_dead_runners_cgroups_are_reaped_in_every_hierarchy() {
        let host = ralph_sandbox::host::probe();
        let writable = |r: &Result<ralph_sandbox::host::CgroupSite, String>| {
            r.as_ref().is_ok_and(|s| {
                nix::unistd::access(s.dir.as_path(), nix::unistd::AccessFlags::W_OK).is_ok()
            })
        };
        if !(writable(&host.memory) && writable(&host.pids) && writable(&host.cpu)) {
            eprintln!("skipped: needs writable memory, pids and cpu cgroup sites (root)");
            return;
        }
        // Named here, not taken from `cgroup_parents`: that list is what is under test.
        let mut parents: Vec<std::path::PathBuf> = [&host.memory, &host.pids, &host.cpu]
            .into_iter()
            .flatten()
            .map(|s| s.dir.clone())
            .collect();
        parents.dedup();
        let dead = CgroupOwner {
            pid: 999_999_999,
            ..CgroupOwner::current().unwrap()
        }
        .cgroup_name(&format!("recovery-test-{}", std::process::id()));
        for p in &parents {
            std::fs::create_dir(p.join(&dead)).unwrap();
        }
        let ended = end_native_leftovers();
        for p in &parents {
            assert!(!p.join(&dead).exists(), "left: {}", p.join(&dead).display());
        }
        assert!(ended.cgroups_removed as usize >= parents.len(), "{ended:?}");
    }
}
