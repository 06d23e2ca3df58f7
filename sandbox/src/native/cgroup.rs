//! The run's own cgroups: created by the supervisor before the sandbox init starts, the init
//! moved in, limits written, OOM kills read back, and the directories removed at the end. Named
//! after their maker ([`super::cgroup_owner`]) so a service can reap the leftovers of a dead
//! runner, and only those.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::step::{StepFailure, restriction};
use crate::plan::CgroupLimit;

/// Prefix of every cgroup ralph creates.
pub const PREFIX: &str = "ralph-";

/// The cgroups of one run.
#[derive(Debug, Default)]
pub struct RunCgroups {
    dirs: Vec<PathBuf>,
    memory: Option<(u8, PathBuf)>,
}

fn write(path: &Path, value: &str) -> Result<(), StepFailure> {
    std::fs::write(path, value).map_err(|e| {
        StepFailure::io(
            restriction::CGROUPS,
            "write",
            &format!("write `{value}` to `{}`", path.display()),
            &e,
        )
    })
}

/// The CFS quota and period (microseconds) for `millis` thousandths of a CPU: a period of
/// 100 ms, the quota that share of it (at least the kernel's minimum of 1 ms).
pub fn cfs_quota(millis: u64) -> (u64, u64) {
    const PERIOD_US: u64 = 100_000;
    (millis.saturating_mul(100).max(1000), PERIOD_US)
}

impl RunCgroups {
    fn dir(&mut self, parent: &Path, run_id: &str) -> Result<PathBuf, StepFailure> {
        let name = super::cgroup_owner::CgroupOwner::current().map_or_else(
            // Without its maker's identity a cgroup is never reaped by someone else.
            || format!("{PREFIX}{run_id}"),
            |o| o.cgroup_name(run_id),
        );
        let dir = parent.join(name);
        if !self.dirs.contains(&dir) {
            std::fs::create_dir(&dir).map_err(|e| {
                StepFailure::io(
                    restriction::CGROUPS,
                    "mkdir",
                    &format!("create the cgroup `{}`", dir.display()),
                    &e,
                )
            })?;
            self.dirs.push(dir.clone());
        }
        Ok(dir)
    }

    /// Creates the cgroups for `memory`, `pids` and `cpu` limits (`cpu`: thousandths of a CPU).
    pub fn create(
        memory: Option<&CgroupLimit>,
        pids: Option<&CgroupLimit>,
        cpu: Option<&CgroupLimit>,
        run_id: &str,
    ) -> Result<Self, StepFailure> {
        let mut cg = RunCgroups::default();
        let result = (|| {
            if let Some(m) = memory {
                let dir = cg.dir(&m.parent, run_id)?;
                let v = m.value.to_string();
                if m.version == 1 {
                    write(&dir.join("memory.limit_in_bytes"), &v)?;
                    // With swap accounting, the same bound for memory + swap: no escape into swap.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &v)?;
                    }
                } else {
                    write(&dir.join("memory.max"), &v)?;
                    let swap = dir.join("memory.swap.max");
                    if swap.exists() {
                        write(&swap, "0")?;
                    }
                }
                cg.memory = Some((m.version, dir));
            }
            if let Some(p) = pids {
                let dir = cg.dir(&p.parent, run_id)?;
                write(&dir.join("pids.max"), &p.value.to_string())?;
            }
            if let Some(c) = cpu {
                let dir = cg.dir(&c.parent, run_id)?;
                let (quota, period) = cfs_quota(c.value);
                if c.version == 1 {
                    write(&dir.join("cpu.cfs_period_us"), &period.to_string())?;
                    write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                } else {
                    write(&dir.join("cpu.max"), &format!("{quota} {period}"))?;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(cg),
            Err(e) => {
                cg.remove();
                Err(e)
            }
        }
    }

    /// Moves `pid` into every cgroup of the run.
    pub fn add(&self, pid: i32) -> Result<(), StepFailure> {
        for d in &self.dirs {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// How many processes the kernel's OOM killer ended under the memory limit.
    pub fn oom_kills(&self) -> u64 {
        let Some((version, dir)) = &self.memory else {
            return 0;
        };
        let file = if *version == 1 {
            "memory.oom_control"
        } else {
            "memory.events"
        };
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("oom_kill ")
                        .and_then(|n| n.trim().parse().ok())
                })
            })
            .unwrap_or(0)
    }

    /// Removes the run's cgroups (they must be empty; the tree is dead by now).
    pub fn remove(&mut self) {
        for d in self.dirs.drain(..) {
            for _ in 0..100 {
                match std::fs::remove_dir(&d) {
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    _ => break,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_shares_become_cfs_quotas() {
        assert_eq!(cfs_quota(500), (50_000, 100_000));
        assert_eq!(cfs_quota(1500), (150_000, 100_000));
        assert_eq!(cfs_quota(1), (1000, 100_000));
    }
}
