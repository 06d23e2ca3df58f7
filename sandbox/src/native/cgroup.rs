//! The run's own cgroups: created by the supervisor before the sandbox init starts, limits
//! written, joined (by the init itself on v1: [`RunCgroups::join`]), OOM kills read back, and the
//! directories removed at the end. Named after their maker ([`super::cgroup_owner`]) so a
//! service can reap the leftovers of a dead runner, and only those.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::step::{StepFailure, restriction};
use crate::plan::CgroupLimit;

/// Prefix of every cgroup ralph creates.
pub const PREFIX: &str = "ralph-";

/// The cgroups of one run.
#[derive(Debug, Default)]
pub struct RunCgroups {
    /// Each directory with its hierarchy's version (1 or 2).
    dirs: Vec<(PathBuf, u8)>,
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
    fn dir(&mut self, limit: &CgroupLimit, name: &str) -> Result<PathBuf, StepFailure> {
        let dir = limit.parent.join(name);
        if !self.dirs.iter().any(|(d, _)| *d == dir) {
            std::fs::create_dir(&dir).map_err(|e| {
                StepFailure::io(
                    restriction::CGROUPS,
                    "mkdir",
                    &format!("create the cgroup `{}`", dir.display()),
                    &e,
                )
            })?;
            self.dirs.push((dir.clone(), limit.version));
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
        let name = super::cgroup_owner::CgroupOwner::current().map_or_else(
            // Without its maker's identity a cgroup is never reaped by someone else.
            || format!("{PREFIX}{run_id}"),
            |o| o.cgroup_name(run_id),
        );
        let result = (|| {
            if let Some(m) = memory {
                let dir = cg.dir(m, &name)?;
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
                let dir = cg.dir(p, &name)?;
                write(&dir.join("pids.max"), &p.value.to_string())?;
            }
            if let Some(c) = cpu {
                let dir = cg.dir(c, &name)?;
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

    /// Moves the calling process, which must be single-threaded (the sandbox's init, or the
    /// command before its `execve`, right after the fork), into the run's cgroups on v1
    /// hierarchies: the thread moves itself through `tasks` with `0`, and the kernel then takes
    /// no global lock. Moving a process by its pid through `cgroup.procs` write-locks
    /// `cgroup_threadgroup_rwsem`, which waits for a whole RCU grace period whenever no such
    /// write happened during the last one: 15-20 ms on the 2-core test machine, paid by nearly
    /// every round of a real job (an agent's round starts seconds after the last).
    pub fn join(&self) -> Result<(), StepFailure> {
        for (d, _) in self.dirs.iter().filter(|(_, v)| *v == 1) {
            write(&d.join("tasks"), "0")?;
        }
        Ok(())
    }

    /// The run's cgroup on the v2 hierarchy, if it has one (one hierarchy: at most one
    /// directory), opened for `clone3(CLONE_INTO_CGROUP)` ([`crate::sys::fork_into_cgroup`]):
    /// the init is then born in it. `None` when there is none or it cannot be opened (then
    /// [`RunCgroups::add`] moves the init and reports what fails).
    pub fn v2_for_clone(&self) -> Option<std::os::fd::OwnedFd> {
        let (dir, _) = self.dirs.iter().find(|(_, v)| *v != 1)?;
        let fd = nix::fcntl::open(
            dir.as_path(),
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()?;
        // SAFETY: `open` returned a fresh descriptor that nothing else owns.
        Some(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    /// Moves `pid` into the run's cgroups on a v2 hierarchy (`cgroup.procs`: v2 has no move of
    /// one thread across cgroups), when it was not born there. The supervisor does it while the
    /// init sets the sandbox up.
    pub fn add(&self, pid: i32) -> Result<(), StepFailure> {
        for (d, _) in self.dirs.iter().filter(|(_, v)| *v != 1) {
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
        for (d, _) in self.dirs.drain(..) {
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
    use std::os::fd::AsRawFd;

    /// A v1 hierarchy is joined by the thread itself (`tasks`, `0`), a v2 one by pid
    /// (`cgroup.procs`), each only where it belongs.
    #[test]
    fn v1_is_joined_by_the_thread_itself_and_v2_by_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let (v1, v2) = (tmp.path().join("v1"), tmp.path().join("v2"));
        std::fs::create_dir(&v1).unwrap();
        std::fs::create_dir(&v2).unwrap();
        let cg = RunCgroups {
            dirs: vec![(v1.clone(), 1), (v2.clone(), 2)],
            memory: None,
        };
        cg.join().unwrap();
        assert_eq!(std::fs::read_to_string(v1.join("tasks")).unwrap(), "0");
        assert!(!v2.join("tasks").exists() && !v2.join("cgroup.procs").exists());
        cg.add(4242).unwrap();
        assert_eq!(
            std::fs::read_to_string(v2.join("cgroup.procs")).unwrap(),
            "4242"
        );
        assert!(!v1.join("cgroup.procs").exists());
    }

    /// Removes the test's cgroups however the test ends (a failed assertion included).
    struct Removed(RunCgroups);

    impl Drop for Removed {
        fn drop(&mut self) {
            self.0.remove();
        }
    }

    /// The cgroup v2 hierarchy this test process is in: (mount point, its own cgroup there).
    fn own_v2_cgroup() -> Option<PathBuf> {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let mounts = crate::host::parse_mountinfo(&read("/proc/self/mountinfo")?);
        let own = crate::host::parse_proc_cgroup(&read("/proc/self/cgroup")?);
        let mount = mounts.iter().find(|m| m.version == 2)?;
        let (_, _, path) = own.iter().find(|(id, c, _)| *id == 0 && c.is_empty())?;
        Some(mount.mount_point.join(path.trim_start_matches('/')))
    }

    /// A run's v2 cgroup is where the forked init is born (`clone3(CLONE_INTO_CGROUP)`): the
    /// child's first look at `/proc/self/cgroup` shows it there, and the parent stayed.
    #[test]
    fn the_init_is_born_in_the_v2_cgroup() {
        let Some(own) = own_v2_cgroup()
            .filter(|d| nix::unistd::access(d.as_path(), nix::unistd::AccessFlags::W_OK).is_ok())
        else {
            eprintln!("skipped: needs a writable cgroup v2 hierarchy (root)");
            return;
        };
        let dir = own.join(format!("{PREFIX}born-test-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        let mut cg = Removed(RunCgroups {
            dirs: vec![(dir.clone(), 2)],
            memory: None,
        });
        let fd = cg.0.v2_for_clone().expect("the v2 cgroup opens");
        let (r, w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child (of this multi-threaded test process: no allocation, no lock) only
        // copies a /proc file into a pipe with raw syscalls before _exit.
        let pid = unsafe { crate::sys::fork_into_cgroup(&fd) }.unwrap();
        if pid == 0 {
            let mut buf = [0u8; 4096];
            // SAFETY: raw open/read/write/_exit on a stack buffer and descriptors we own.
            unsafe {
                let f = libc::open(c"/proc/self/cgroup".as_ptr(), libc::O_RDONLY);
                let n = libc::read(f, buf.as_mut_ptr().cast(), buf.len());
                if n > 0 {
                    libc::write(w.as_raw_fd(), buf.as_ptr().cast(), n as usize);
                }
                libc::_exit(0)
            }
        }
        drop(w);
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut text).unwrap();
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None).unwrap();
        let name = dir.file_name().unwrap().to_str().unwrap();
        let born = |t: &str| {
            t.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&format!("/{name}")))
        };
        assert!(born(&text), "child not born in {}: {text}", dir.display());
        assert!(!born(
            &std::fs::read_to_string("/proc/self/cgroup").unwrap()
        ));
        assert!(
            matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)),
            "{status:?}"
        );
        drop(fd);
        cg.0.remove();
        assert!(!dir.exists(), "cgroup left: {}", dir.display());
    }

    /// On the host's v1 `memory` and `pids` hierarchies, a forked child that joins is in both
    /// run cgroups (and its parent in neither); the cgroups are removed after.
    #[test]
    fn a_forked_child_joins_the_v1_cgroups_itself() {
        let sites: Vec<CgroupLimit> = ["memory", "pids"]
            .iter()
            .map(|c| Path::new("/sys/fs/cgroup").join(c))
            .filter(|p| p.join("tasks").exists() && p.join("cgroup.procs").exists())
            .map(|parent| CgroupLimit {
                version: 1,
                parent,
                value: 1 << 30,
            })
            .collect();
        let writable = sites.first().is_some_and(|s| {
            nix::unistd::access(&s.parent, nix::unistd::AccessFlags::W_OK).is_ok()
        });
        if sites.len() != 2 || !writable {
            eprintln!("skipped: needs writable cgroup v1 `memory` and `pids` hierarchies (root)");
            return;
        }
        let pids = CgroupLimit {
            value: 64,
            ..sites[1].clone()
        };
        let mut cg =
            Removed(RunCgroups::create(Some(&sites[0]), Some(&pids), None, "join-test").unwrap());
        let (r, w) = nix::unistd::pipe().unwrap();
        // SAFETY: the child only joins, reads a /proc file and writes to a pipe before _exit.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let text = match cg.0.join() {
                    Ok(()) => std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default(),
                    Err(e) => format!("join failed: {e:?}"),
                };
                let _ = nix::unistd::write(&w, text.as_bytes());
                // SAFETY: ends the forked child without running the test harness's handlers.
                unsafe { libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop(w);
                let mut text = String::new();
                std::io::Read::read_to_string(&mut std::fs::File::from(r), &mut text).unwrap();
                nix::sys::wait::waitpid(child, None).unwrap();
                let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
                for (d, _) in &cg.0.dirs {
                    let name = d.file_name().unwrap().to_str().unwrap();
                    let line = |t: &str, ctrl: &str| {
                        t.lines()
                            .any(|l| l.split(':').nth(1) == Some(ctrl) && l.ends_with(name))
                    };
                    let ctrl = d.parent().unwrap().file_name().unwrap().to_str().unwrap();
                    assert!(line(&text, ctrl), "child not in {}: {text}", d.display());
                    assert!(!line(&mine, ctrl), "the parent moved too: {mine}");
                }
                let dirs: Vec<PathBuf> = cg.0.dirs.iter().map(|(d, _)| d.clone()).collect();
                cg.0.remove();
                assert!(dirs.iter().all(|d| !d.exists()), "cgroups left: {dirs:?}");
            }
        }
    }

    #[test]
    fn cpu_shares_become_cfs_quotas() {
        assert_eq!(cfs_quota(500), (50_000, 100_000));
        assert_eq!(cfs_quota(1500), (150_000, 100_000));
        assert_eq!(cfs_quota(1), (1000, 100_000));
    }
}
