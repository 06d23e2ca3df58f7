//! Who made a run's cgroup, written in its name, and the reaping of the cgroups whose maker is
//! provably dead. The name `ralph-<pid>-<start ticks>-<pid ns>-<boot id>-<run id>` carries the
//! supervisor's pid, its start time (clock ticks after boot), the inode of its pid namespace and
//! the kernel's boot id: a cgroup is reaped only when it was made on this boot, in this pid
//! namespace, by a process that no longer runs. Anything else named `ralph-…` (a runner in
//! another pid namespace, another tool's cgroup, a name this version did not write) is left
//! alone.

use std::path::Path;

use super::cgroup::PREFIX;

/// The maker of a cgroup: a process of one pid namespace on one boot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupOwner {
    /// Its pid (in `pid_ns`).
    pub pid: u32,
    /// Its start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start_ticks: u64,
    /// The inode of its pid namespace (`/proc/PID/ns/pid`).
    pub pid_ns: u64,
    /// The kernel's boot id, hex without dashes.
    pub boot_id: String,
}

fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count from the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn boot_id() -> Option<String> {
    let id: String = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()?
        .trim()
        .chars()
        .filter(|c| *c != '-')
        .collect();
    (id.len() == 32 && id.chars().all(|c| c.is_ascii_hexdigit())).then_some(id)
}

fn own_pid_ns() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

impl CgroupOwner {
    /// This process; `None` when its identity cannot be read (its cgroups then get a name that
    /// is never reaped).
    pub fn current() -> Option<Self> {
        let pid = std::process::id();
        Some(Self {
            pid,
            start_ticks: start_ticks(pid)?,
            pid_ns: own_pid_ns()?,
            boot_id: boot_id()?,
        })
    }

    /// The name of a cgroup this owner makes for `run_id`.
    pub fn cgroup_name(&self, run_id: &str) -> String {
        format!(
            "{PREFIX}{}-{}-{}-{}-{run_id}",
            self.pid, self.start_ticks, self.pid_ns, self.boot_id
        )
    }

    /// The owner written in a cgroup's name; `None` for a name not written by
    /// [`CgroupOwner::cgroup_name`].
    pub fn of_name(name: &str) -> Option<Self> {
        let mut it = name.strip_prefix(PREFIX)?.splitn(5, '-');
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let (pid, ticks, ns, boot, run) =
            (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
        if !(digits(pid) && digits(ticks) && digits(ns))
            || boot.len() != 32
            || !boot.bytes().all(|b| b.is_ascii_hexdigit())
            || run.is_empty()
        {
            return None;
        }
        Some(Self {
            pid: pid.parse().ok()?,
            start_ticks: ticks.parse().ok()?,
            pid_ns: ns.parse().ok()?,
            boot_id: boot.to_owned(),
        })
    }

    /// Whether this owner provably no longer runs: it ran on this boot, in this process's pid
    /// namespace, and its pid is gone or now belongs to a process started at another time.
    /// `false` whenever that cannot be known.
    pub fn is_provably_dead(&self) -> bool {
        let (Some(boot), Some(ns)) = (boot_id(), own_pid_ns()) else {
            return false;
        };
        if self.boot_id != boot || self.pid_ns != ns {
            return false;
        }
        match std::fs::read_to_string(format!("/proc/{}/stat", self.pid)) {
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            Ok(_) => start_ticks(self.pid).is_some_and(|t| t != self.start_ticks),
        }
    }
}

/// The cgroup directories under `parent` whose maker is provably dead.
fn dead_makers(parent: &Path) -> Vec<std::path::PathBuf> {
    let Ok(dir) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(CgroupOwner::of_name)
                .is_some_and(|o| o.is_provably_dead())
                && e.file_type().is_ok_and(|t| t.is_dir())
        })
        .map(|e| e.path())
        .collect()
}

/// Whether a cgroup under `parent` whose maker is provably dead still holds a process.
pub fn populated_leftovers(parent: &Path) -> bool {
    dead_makers(parent)
        .iter()
        .any(|d| !super::leftovers::cgroup_procs(d).is_empty())
}

/// Reaps the cgroups under `parent` whose maker is provably dead: a round's init among their
/// processes (stopping the round since its helper died) is given its grace first
/// ([`super::leftovers::wait_for_round`]), what is left then is killed, the directories
/// removed. Returns how many were removed.
pub fn reap_leftovers(parent: &Path) -> u32 {
    let mut removed = 0;
    for path in dead_makers(parent) {
        for p in super::leftovers::wait_for_round(&path) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        for _ in 0..100 {
            match std::fs::remove_dir(&path) {
                Ok(()) => {
                    removed += 1;
                    break;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroups_of_a_dead_runner_of_this_host_are_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let me = CgroupOwner::current().unwrap();
        // Hostile first: names another tool might use, and owners that live or cannot be judged.
        let not_ours = [
            "ralph-999999999-othertool",
            "ralph-999999999-12345",
            "ralph-x",
            "ralph-1-2-3-nothex-4",
        ];
        let alive = me.cgroup_name("1");
        let other_boot = CgroupOwner {
            pid: 999_999_999,
            boot_id: "0".repeat(32),
            ..me.clone()
        }
        .cgroup_name("2");
        let other_pid_ns = CgroupOwner {
            pid: 999_999_999,
            pid_ns: me.pid_ns + 1,
            ..me.clone()
        }
        .cgroup_name("3");
        // Dead: the pid is gone, or it is now another process (started at another time).
        let gone = CgroupOwner {
            pid: 999_999_999,
            ..me.clone()
        }
        .cgroup_name("4");
        let reused = CgroupOwner {
            start_ticks: me.start_ticks + 1,
            ..me.clone()
        }
        .cgroup_name("5");
        let kept: Vec<String> = not_ours
            .iter()
            .map(|s| (*s).to_owned())
            .chain([alive, other_boot, other_pid_ns])
            .collect();
        for n in kept.iter().chain([&gone, &reused]) {
            std::fs::create_dir(dir.path().join(n)).unwrap();
        }
        assert_eq!(reap_leftovers(dir.path()), 2);
        for n in &kept {
            assert!(dir.path().join(n).exists(), "{n} was removed");
        }
        assert!(!dir.path().join(&gone).exists());
        assert!(!dir.path().join(&reused).exists());
    }

    #[test]
    fn a_name_round_trips() {
        let me = CgroupOwner::current().unwrap();
        let name = me.cgroup_name("123-456");
        assert_eq!(CgroupOwner::of_name(&name), Some(me));
        assert_eq!(CgroupOwner::of_name("ralph-123-456"), None);
    }
}
