//! What this host can enforce, probed with syscalls and kernel files, never by parsing another
//! program's output. Parsers take the file contents as arguments so tests feed them fixtures.
//!
//! For tests, `RALPH_SIMULATE_NO_LANDLOCK=1` makes the probe report a host without Landlock, and
//! `RALPH_SIMULATE_LANDLOCK_ABI=N` caps the ABI at N: both only make ralph refuse more, never less.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// Environment variable that simulates a host without Landlock.
pub const SIMULATE_NO_LANDLOCK: &str = "RALPH_SIMULATE_NO_LANDLOCK";
/// Environment variable that caps the Landlock ABI.
pub const SIMULATE_LANDLOCK_ABI: &str = "RALPH_SIMULATE_LANDLOCK_ABI";

/// Landlock on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum LandlockSupport {
    /// Usable, with this ABI version.
    Available {
        /// The ABI version.
        abi: i32,
    },
    /// Built in but disabled at boot (`EOPNOTSUPP`).
    NotEnabled,
    /// Not built into the kernel (`ENOSYS`).
    NotImplemented,
    /// Switched off by the test environment variable.
    Simulated {
        /// What was simulated.
        reason: String,
    },
}

impl LandlockSupport {
    /// The ABI version, if usable.
    pub fn abi(&self) -> Option<i32> {
        match self {
            LandlockSupport::Available { abi } => Some(*abi),
            LandlockSupport::NotEnabled
            | LandlockSupport::NotImplemented
            | LandlockSupport::Simulated { .. } => None,
        }
    }

    /// Why it is not usable.
    pub fn reason(&self) -> String {
        match self {
            LandlockSupport::Available { abi } => format!("landlock abi {abi}"),
            LandlockSupport::NotEnabled => {
                "the kernel has Landlock but it is not enabled (landlock_create_ruleset: EOPNOTSUPP; add `landlock` to the `lsm=` boot parameter)".into()
            }
            LandlockSupport::NotImplemented => "the kernel has no Landlock (landlock_create_ruleset: ENOSYS; Linux 5.13+ with CONFIG_SECURITY_LANDLOCK is needed)".into(),
            LandlockSupport::Simulated { reason } => reason.clone(),
        }
    }
}

/// The Landlock ABI of the running kernel (`landlock_create_ruleset(NULL, 0, VERSION)`).
pub fn landlock() -> LandlockSupport {
    if std::env::var_os(SIMULATE_NO_LANDLOCK).is_some_and(|v| v == "1") {
        return LandlockSupport::Simulated {
            reason: format!("no Landlock (simulated by {SIMULATE_NO_LANDLOCK}=1)"),
        };
    }
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the syscall only returns
    // the ABI version or an error; it reads no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    let real = if v >= 0 {
        LandlockSupport::Available {
            abi: i32::try_from(v).unwrap_or(i32::MAX),
        }
    } else {
        match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EOPNOTSUPP) => LandlockSupport::NotEnabled,
            _ => LandlockSupport::NotImplemented,
        }
    };
    let cap = std::env::var(SIMULATE_LANDLOCK_ABI)
        .ok()
        .and_then(|s| s.parse::<i32>().ok());
    match (real, cap) {
        (LandlockSupport::Available { abi }, Some(cap)) if cap < abi => {
            if cap <= 0 {
                LandlockSupport::Simulated {
                    reason: format!("no Landlock (simulated by {SIMULATE_LANDLOCK_ABI}={cap})"),
                }
            } else {
                LandlockSupport::Available { abi: cap }
            }
        }
        (real, _) => real,
    }
}

/// Whether seccomp filters can be installed (`prctl(PR_GET_SECCOMP)`, which fails only on a
/// kernel without seccomp).
pub fn seccomp() -> Result<(), String> {
    // SAFETY: PR_GET_SECCOMP takes no pointers and only returns the current mode.
    let rc = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    if rc < 0 {
        return Err(format!(
            "the kernel has no seccomp (prctl PR_GET_SECCOMP: {})",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Whether this (non-root) user can create user namespaces, judged from the sysctls that
/// distributions use to forbid it. `ralph doctor` also tries it for real.
pub fn user_namespaces(read: impl Fn(&str) -> Option<String>) -> Result<(), String> {
    let num = |p: &str| read(p).and_then(|s| s.trim().parse::<i64>().ok());
    if num("/proc/sys/user/max_user_namespaces") == Some(0) {
        return Err(
            "user namespaces are disabled (/proc/sys/user/max_user_namespaces is 0): enable them with `sysctl -w user.max_user_namespaces=15000` (and a file in /etc/sysctl.d/ to keep it), or run ralph as root".into(),
        );
    }
    if num("/proc/sys/kernel/unprivileged_userns_clone") == Some(0) {
        return Err("unprivileged user namespaces are disabled (/proc/sys/kernel/unprivileged_userns_clone is 0): enable them with `sysctl -w kernel.unprivileged_userns_clone=1` (and a file in /etc/sysctl.d/ to keep it), or run ralph as root".into());
    }
    if num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns") == Some(1) {
        return Err("AppArmor restricts unprivileged user namespaces (/proc/sys/kernel/apparmor_restrict_unprivileged_userns is 1); allow them for ralph with an AppArmor profile, or run as root".into());
    }
    Ok(())
}

/// A cgroup mount from `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupMount {
    /// Mount point.
    pub mount_point: PathBuf,
    /// 1 or 2.
    pub version: u8,
    /// v1 controllers of the hierarchy.
    pub controllers: Vec<String>,
}

/// The cgroup mounts in a mountinfo text.
pub fn parse_mountinfo(text: &str) -> Vec<CgroupMount> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        let (Some(mount_point), Some(fstype), Some(opts)) =
            (fields.get(4), right.first(), right.get(2))
        else {
            continue;
        };
        let version = match *fstype {
            "cgroup" => 1,
            "cgroup2" => 2,
            _ => continue,
        };
        let controllers = if version == 1 {
            opts.split(',')
                .filter(|o| !matches!(*o, "rw" | "ro"))
                .map(str::to_owned)
                .collect()
        } else {
            Vec::new()
        };
        out.push(CgroupMount {
            mount_point: PathBuf::from(mount_point.replace("\\040", " ")),
            version,
            controllers,
        });
    }
    out
}

/// `(hierarchy id, controllers, path)` lines of `/proc/self/cgroup`.
pub fn parse_proc_cgroup(text: &str) -> Vec<(u32, Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let id = it.next()?.parse().ok()?;
            let ctrl = it.next()?;
            let path = it.next()?.to_owned();
            let ctrls = if ctrl.is_empty() {
                Vec::new()
            } else {
                ctrl.split(',').map(str::to_owned).collect()
            };
            Some((id, ctrls, path))
        })
        .collect()
}

/// Where this process may create child cgroups for one controller.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CgroupSite {
    /// 1 or 2.
    pub version: u8,
    /// This process's own cgroup directory in that hierarchy (children go below it).
    pub dir: PathBuf,
}

/// The sites for `controller` (e.g. "memory", "pids"), from mountinfo and /proc/self/cgroup,
/// preferring v2 when the controller is enabled there.
pub fn cgroup_site(
    controller: &str,
    mounts: &[CgroupMount],
    own: &[(u32, Vec<String>, String)],
    read: &impl Fn(&Path) -> Option<String>,
) -> Result<CgroupSite, String> {
    // cgroup v2: the controller must be enabled for children of our cgroup.
    if let (Some(m), Some((_, _, path))) = (
        mounts.iter().find(|m| m.version == 2),
        own.iter().find(|(id, c, _)| *id == 0 && c.is_empty()),
    ) {
        let dir = m.mount_point.join(path.trim_start_matches('/'));
        let enabled = read(&dir.join("cgroup.subtree_control")).unwrap_or_default();
        if enabled.split_whitespace().any(|c| c == controller) {
            return Ok(CgroupSite { version: 2, dir });
        }
    }
    if let Some(m) = mounts
        .iter()
        .find(|m| m.version == 1 && m.controllers.iter().any(|c| c == controller))
    {
        let path = own
            .iter()
            .find(|(_, c, _)| c.iter().any(|c| c == controller))
            .map(|(_, _, p)| p.clone())
            .ok_or_else(|| format!("this process is in no cgroup v1 `{controller}` hierarchy"))?;
        return Ok(CgroupSite {
            version: 1,
            dir: m.mount_point.join(path.trim_start_matches('/')),
        });
    }
    Err(format!(
        "no cgroup `{controller}` controller is available (none in a v1 hierarchy, and not enabled in this process's v2 cgroup)"
    ))
}

/// Everything the sandbox needs to know about the host.
#[derive(Clone, Debug, Serialize)]
pub struct Host {
    /// Effective uid of the runner.
    pub euid: u32,
    /// Effective gid of the runner.
    pub egid: u32,
    /// Landlock.
    pub landlock: LandlockSupport,
    /// Seccomp, or why not.
    pub seccomp: Result<(), String>,
    /// User namespaces (needed when not root), or why not.
    pub user_namespaces: Result<(), String>,
    /// Where memory limits can be put, or why not.
    pub memory: Result<CgroupSite, String>,
    /// Where process limits can be put, or why not.
    pub pids: Result<CgroupSite, String>,
    /// Where CPU limits can be put (the `cpu` controller), or why not.
    pub cpu: Result<CgroupSite, String>,
    /// The hard `RLIMIT_NOFILE`.
    pub nofile_hard: u64,
    /// The hard `RLIMIT_FSIZE`.
    pub fsize_hard: u64,
    /// Its memory and CPUs, for the policy defaults given as a share of the host.
    pub size: crate::policy::host_share::HostSize,
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Probes the running host.
impl Host {
    /// Every directory a run's cgroups can be made under (the memory, pids and cpu sites; a
    /// site shared by several controllers once): where a dead runner's leftovers are looked for.
    pub fn cgroup_parents(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for site in [&self.memory, &self.pids, &self.cpu].into_iter().flatten() {
            if !out.contains(&site.dir) {
                out.push(site.dir.clone());
            }
        }
        out
    }
}

/// This host, probed once per process, by the native backend's first plan (or ahead:
/// [`probe_ahead`]). Its rlimits are the process's at that moment: a service whose limits an
/// operator changed (`prlimit`) before its first round plans with the new ones.
pub fn probed() -> &'static Host {
    PROBED.get_or_init(probe)
}

/// [`probed`]'s host if it has been probed already (the runner's start-up sweep of a dead
/// runner's cgroups then reads it instead of probing again: issue 30, ~0.3 ms of a `ralph run`,
/// most of it `/proc/self/mountinfo`); `None` leaves the caller to [`probe`] for itself, without
/// fixing the process's probe before its first plan.
pub fn probed_if_ready() -> Option<&'static Host> {
    PROBED.get()
}

static PROBED: std::sync::OnceLock<Host> = std::sync::OnceLock::new();

/// Starts [`probed`] on a thread of its own, so that its first user (the start-up's sweep, a
/// round's plan) finds it done or waits for it; a thread that cannot start leaves it to that
/// user.
pub fn probe_ahead() {
    let _ = std::thread::Builder::new()
        .name("ralph-probe".into())
        .spawn(|| {
            probed();
        });
}

/// What this host can enforce, probed now ([`probed`] keeps one per process).
pub fn probe() -> Host {
    let read_str = |p: &str| std::fs::read_to_string(p).ok();
    let read_path = |p: &Path| std::fs::read_to_string(p).ok();
    let mounts = parse_mountinfo(&read_str("/proc/self/mountinfo").unwrap_or_default());
    let own = parse_proc_cgroup(&read_str("/proc/self/cgroup").unwrap_or_default());
    let site = |c: &str| {
        cgroup_site(c, &mounts, &own, &read_path).and_then(|s| {
            if writable(&s.dir) {
                Ok(s)
            } else {
                Err(format!(
                    "the cgroup `{}` ({c}) is not writable by uid {}",
                    s.dir.display(),
                    nix::unistd::geteuid()
                ))
            }
        })
    };
    let euid = nix::unistd::geteuid().as_raw();
    let hard = |r| {
        nix::sys::resource::getrlimit(r)
            .map(|(_, h)| h)
            .unwrap_or(u64::MAX)
    };
    Host {
        euid,
        egid: nix::unistd::getegid().as_raw(),
        landlock: landlock(),
        seccomp: seccomp(),
        user_namespaces: if euid == 0 {
            Ok(())
        } else {
            user_namespaces(read_str)
        },
        memory: site("memory"),
        pids: site("pids"),
        cpu: site("cpu"),
        nofile_hard: hard(nix::sys::resource::Resource::RLIMIT_NOFILE),
        fsize_hard: hard(nix::sys::resource::Resource::RLIMIT_FSIZE),
        size: crate::policy::host_share::HostSize::probe(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 30 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:23 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
27 25 0:24 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
28 25 0:25 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
29 30 8:1 / / rw,relatime - ext4 /dev/vda rw
";

    const PROC_CGROUP: &str = "12:pids:/ci\n11:memory:/ci\n0::/ci\n";

    #[test]
    fn finds_v1_controllers_when_v2_has_none() {
        let mounts = parse_mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 3);
        let own = parse_proc_cgroup(PROC_CGROUP);
        let none = |_: &Path| Some(String::new());
        let mem = cgroup_site("memory", &mounts, &own, &none).unwrap();
        assert_eq!(
            mem,
            CgroupSite {
                version: 1,
                dir: PathBuf::from("/sys/fs/cgroup/memory/ci")
            }
        );
        let pids = cgroup_site("pids", &mounts, &own, &none).unwrap();
        assert_eq!(pids.dir, PathBuf::from("/sys/fs/cgroup/pids/ci"));
        assert!(cgroup_site("cpu", &mounts, &own, &none).is_err());
    }

    #[test]
    fn prefers_v2_when_the_controller_is_delegated() {
        let mounts = parse_mountinfo(MOUNTINFO);
        let own = parse_proc_cgroup(PROC_CGROUP);
        let v2 = |p: &Path| {
            (p == Path::new("/sys/fs/cgroup/unified/ci/cgroup.subtree_control"))
                .then(|| "memory pids\n".to_owned())
        };
        assert_eq!(
            cgroup_site("memory", &mounts, &own, &v2).unwrap().version,
            2
        );
    }

    #[test]
    fn userns_sysctls_are_explained() {
        let deny = |p: &str| {
            (p == "/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
                .then(|| "1\n".to_owned())
        };
        assert!(user_namespaces(deny).unwrap_err().contains("AppArmor"));
        let off = |p: &str| (p == "/proc/sys/user/max_user_namespaces").then(|| "0\n".to_owned());
        let e = user_namespaces(off).unwrap_err();
        assert!(
            e.contains("user.max_user_namespaces") && e.contains("sysctl -w"),
            "names the setting and the fix: {e}"
        );
        let off =
            |p: &str| (p == "/proc/sys/kernel/unprivileged_userns_clone").then(|| "0\n".to_owned());
        let e = user_namespaces(off).unwrap_err();
        assert!(e.contains("kernel.unprivileged_userns_clone=1"), "{e}");
        assert!(user_namespaces(|_| None).is_ok());
    }
}
