//! Self-check of the host: each capability the native sandbox relies on is tried for real in a
//! throwaway child process (an irreversible restriction never touches the caller), and each mode
//! is resolved against the host the way a job would be.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sched::CloneFlags;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};
use serde::Serialize;

use crate::host::Host;
use crate::mode::Mode;
use crate::policy::PolicySet;
use crate::spec::SandboxRequest;

/// One line of the report.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What was checked.
    pub name: String,
    /// "ok" or the reason it is not.
    pub status: String,
    /// True when usable.
    pub ok: bool,
}

impl Check {
    fn new(name: impl Into<String>, result: Result<String, String>) -> Self {
        match result {
            Ok(detail) => Self {
                name: name.into(),
                status: if detail.is_empty() {
                    "ok".into()
                } else {
                    format!("ok: {detail}")
                },
                ok: true,
            },
            Err(reason) => Self {
                name: name.into(),
                status: reason,
                ok: false,
            },
        }
    }
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Capability checks.
    pub checks: Vec<Check>,
    /// Whether each mode can run on the native backend here.
    pub modes: Vec<Check>,
    /// Where the policies came from.
    pub policies: Vec<(Mode, String)>,
}

impl Report {
    /// True when the default mode (workspace-write) can run natively.
    pub fn default_mode_ok(&self) -> bool {
        self.modes
            .iter()
            .any(|m| m.name == Mode::WorkspaceWrite.as_str() && m.ok)
    }
}

/// Runs `f` in a forked child and reports its verdict. The caller must be single-threaded.
fn in_child(f: impl FnOnce() -> Result<(), String>) -> Result<(), String> {
    let threads = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("Threads:")
                    .and_then(|n| n.trim().parse::<u32>().ok())
            })
        })
        .unwrap_or(1);
    if threads != 1 {
        return Err("cannot probe from a multithreaded process".into());
    }
    let (mut r, mut w) =
        std::os::unix::net::UnixStream::pair().map_err(|e| format!("socketpair: {e}"))?;
    // SAFETY: the process is single-threaded (checked above); the child only runs `f`, writes its
    // verdict and exits with _exit.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Child => {
            drop(r);
            let msg = match f() {
                Ok(()) => String::new(),
                Err(e) => e,
            };
            let _ = w.write_all(msg.as_bytes());
            drop(w);
            // SAFETY: _exit in the forked child.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child } => {
            drop(w);
            let mut msg = String::new();
            let _ = r.read_to_string(&mut msg);
            match waitpid(child, None) {
                Ok(WaitStatus::Exited(_, 0)) if msg.is_empty() => Ok(()),
                Ok(WaitStatus::Exited(_, 0)) => Err(msg),
                Ok(other) => Err(format!("the probe ended abnormally: {other:?}")),
                Err(e) => Err(format!("waitpid: {e}")),
            }
        }
    }
}

fn unshare(flags: CloneFlags, what: &str) -> Result<(), String> {
    nix::sched::unshare(flags).map_err(|e| format!("unshare({what}): {} ({e})", e.desc()))
}

fn user_ns_if_needed(euid: u32) -> Result<(), String> {
    if euid == 0 {
        return Ok(());
    }
    let map = crate::plan::IdMap {
        uid: euid,
        gid: nix::unistd::getegid().as_raw(),
    };
    crate::native::ns::enter_user_namespace(map).map_err(|f| f.reason)
}

/// Probes everything and resolves each mode.
pub fn run(host: &Host, policies: &PolicySet, docker_socket: &Path) -> Report {
    let mut checks = Vec::new();
    landlock_checks(host, &mut checks);
    checks.push(seccomp_check(host));
    namespace_checks(host, &mut checks);
    for (name, site) in [("cgroup memory", &host.memory), ("cgroup pids", &host.pids)] {
        checks.push(Check::new(
            name,
            site.clone()
                .map(|s| format!("v{} at {}", s.version, s.dir.display())),
        ));
    }
    checks.push(Check::new(
        "default limits",
        Ok(default_limits(policies, &host.size)),
    ));
    checks.push(Check::new("docker", docker(docker_socket)));

    let modes = Mode::ALL
        .iter()
        .map(|mode| mode_check(*mode, host, policies))
        .collect();
    Report {
        checks,
        modes,
        policies: policies.sources(),
    }
}

/// Landlock: the kernel's ABI, a ruleset restricting a child, and what it means for unix
/// sockets in visible trees.
fn landlock_checks(host: &Host, checks: &mut Vec<Check>) {
    checks.push(Check::new(
        "landlock",
        host.landlock
            .abi()
            .map(|abi| format!("abi {abi}"))
            .ok_or_else(|| host.landlock.reason()),
    ));
    if host.landlock.abi().is_some() {
        checks.push(Check::new(
            "landlock (restrict_self in a child)",
            in_child(|| {
                use landlock::{ABI, Access, AccessFs, Ruleset, RulesetAttr};
                let st = Ruleset::default()
                    .handle_access(AccessFs::from_all(ABI::V1))
                    .and_then(|r| r.create())
                    .and_then(|r| r.restrict_self())
                    .map_err(|e| e.to_string())?;
                if st.ruleset == landlock::RulesetStatus::NotEnforced {
                    Err("not enforced".into())
                } else {
                    Ok(())
                }
            })
            .map(|()| String::new()),
        ));
    }
    checks.push(Check::new(
        "unix sockets in visible trees",
        Ok(match host.landlock.abi() {
            Some(abi) if abi >= crate::plan::LANDLOCK_ABI_UNIX_SOCKETS => format!(
                "masked before each run unless granted (--socket); landlock abi {abi} governs connecting to sockets created later"
            ),
            Some(abi) => format!(
                "masked before each run unless granted (--socket); landlock abi {abi} does not govern connect: a socket a host process creates in a visible tree after a round starts is reachable until the next run"
            ),
            None => "masked before each run unless granted (--socket); without landlock a socket created after a round starts is reachable".into(),
        }),
    ));
}

/// Seccomp: the allow-list and the guards installed in a child.
fn seccomp_check(host: &Host) -> Check {
    Check::new(
        "seccomp (filter in a child)",
        host.seccomp
            .clone()
            .and_then(|()| {
                in_child(|| {
                    nix::sys::prctl::set_no_new_privs().map_err(|e| e.to_string())?;
                    let allow = crate::policy::allow_list::embedded()?
                        .iter()
                        .map(|(_, nr)| *nr)
                        .collect();
                    let plan = crate::plan::SeccompPlan {
                        allow: Some(allow),
                        deny: vec![("bpf".into(), libc::SYS_bpf)],
                        socket_families: None,
                        restrict_personality: true,
                        deny_namespace_clone: true,
                        guards: crate::policy::guards::Switches {
                            deny_setid: true,
                            deny_tty_injection: true,
                            protect_init: true,
                        },
                    };
                    let progs = crate::native::seccomp::build(&plan).map_err(|e| e.to_string())?;
                    crate::native::seccomp::install(&progs).map_err(|f| f.reason)
                })
            })
            .map(|()| String::new()),
    )
}

/// The namespaces (each made in a child: a user namespace first when not root) and the gateway
/// network.
fn namespace_checks(host: &Host, checks: &mut Vec<Check>) {
    let euid = host.euid;
    let userns = if euid == 0 {
        Ok("not needed as root".to_owned())
    } else {
        host.user_namespaces
            .clone()
            .and_then(|()| in_child(|| user_ns_if_needed(euid)))
            .map(|()| String::new())
    };
    checks.push(Check::new("user namespace", userns));
    for (name, flag) in [
        ("mount namespace", CloneFlags::CLONE_NEWNS),
        ("network namespace", CloneFlags::CLONE_NEWNET),
        ("ipc namespace", CloneFlags::CLONE_NEWIPC),
        ("pid namespace", CloneFlags::CLONE_NEWPID),
    ] {
        let r = in_child(move || {
            user_ns_if_needed(euid)?;
            unshare(flag, name)?;
            if flag == CloneFlags::CLONE_NEWNET {
                crate::native::net::loopback_up().map_err(|f| f.reason)?;
            }
            if flag == CloneFlags::CLONE_NEWPID {
                // The next child must be pid 1 of the new namespace.
                in_child(|| {
                    if std::process::id() == 1 {
                        Ok(())
                    } else {
                        Err("the first child is not pid 1".into())
                    }
                })?;
            }
            Ok(())
        });
        checks.push(Check::new(name, r.map(|()| String::new())));
    }
    checks.push(Check::new("gateway network", gateway_probe(euid)));
}

/// Whether `mode` resolves against this host, and what it enforces only partly.
fn mode_check(mode: Mode, host: &Host, policies: &PolicySet) -> Check {
    let dir = std::env::temp_dir();
    let req = SandboxRequest::minimal(mode, dir.clone(), dir.clone(), dir);
    let r = policies
        .get(mode)
        .map_err(|e| crate::error::SandboxError::invalid("policy", e.to_string()))
        .and_then(|policy| crate::plan::resolve(policy, &req, host))
        .map(|p| {
            let partial: Vec<String> = p
                .enforcement
                .restrictions
                .iter()
                .filter(|e| e.level == crate::outcome::Level::Partial)
                .map(|e| format!("{:?}: {}", e.restriction, e.detail))
                .collect();
            if partial.is_empty() {
                String::new()
            } else {
                format!("partial: {}", partial.join("; "))
            }
        });
    Check::new(mode.as_str(), r.map_err(|e| e.to_string()))
}

/// `--network gateway` on the native backend, tried the way a round does it: in a child (in a
/// user namespace when not root), a new network namespace with loopback up, a TCP listener on
/// the gateway's address (`127.0.0.2`) made there and handed over a socketpair with SCM_RIGHTS, and a connection to it
/// from inside accepted on the handed-over descriptor. Works wherever network namespaces do.
fn gateway_probe(euid: u32) -> Result<String, String> {
    use crate::native::gateway;
    in_child(move || {
        user_ns_if_needed(euid)?;
        unshare(CloneFlags::CLONE_NEWNET, "network namespace")?;
        crate::native::net::loopback_up().map_err(|f| f.reason)?;
        let (runner, helper) = gateway::channel().map_err(|e| format!("socketpair: {e}"))?;
        // A high port: nothing else lives in a fresh namespace.
        let port = 47_913;
        let listener = gateway::listen(port).map_err(|f| f.reason)?;
        gateway::send(&helper, &[port], &[listener]).map_err(|f| f.reason)?;
        let got = gateway::recv(&runner, &[port], Duration::from_secs(5))
            .map_err(|e| format!("receiving the listener: {e}"))?;
        let (_, listener) = got.first().ok_or("no listener received")?;
        let mut c = std::net::TcpStream::connect((crate::spec::GATEWAY_HOST, port))
            .map_err(|e| format!("connect to the handed-over listener: {e}"))?;
        c.write_all(b"g").map_err(|e| e.to_string())?;
        listener.set_nonblocking(false).map_err(|e| e.to_string())?;
        let (mut s, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).map_err(|e| format!("read: {e}"))?;
        Ok(())
    })
    .map(|()| {
        "loopback listeners made in a private network namespace and handed to the runner (native; on docker the container init makes them in the container's loopback-only namespace)".to_owned()
    })
}

/// Pings the Docker Engine on its unix socket and reads its API version.
fn docker(socket: &Path) -> Result<String, String> {
    let mut s = UnixStream::connect(socket)
        .map_err(|e| format!("not reachable: connect `{}`: {e}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"GET /version HTTP/1.0\r\nHost: docker\r\n\r\n")
        .map_err(|e| format!("not reachable: {e}"))?;
    let mut body = String::new();
    s.read_to_string(&mut body)
        .map_err(|e| format!("no answer: {e}"))?;
    let json = body.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("unreadable /version answer: {e}"))?;
    Ok(format!(
        "engine {} (API {})",
        v["Version"].as_str().unwrap_or("?"),
        v["ApiVersion"].as_str().unwrap_or("?")
    ))
}

/// The Docker socket path: `DOCKER_HOST=unix://…` or `/var/run/docker.sock`.
pub fn docker_socket() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// What a round gets when its job sets no `--memory`/`--cpus`, per mode, on this host.
fn default_limits(policies: &PolicySet, size: &crate::policy::host_share::HostSize) -> String {
    let per_mode = Mode::ALL
        .iter()
        .filter_map(|mode| {
            let l = policies.get(*mode).ok()?.limits;
            let memory = match l.memory {
                None => "no memory limit".to_owned(),
                Some(m) => match m.bytes(size) {
                    Some(b) => format!("memory {} ({m})", crate::units::ByteSize(b)),
                    None => format!("memory {m}: the host's memory is unknown, none"),
                },
            };
            let cpus = match l.cpus {
                None => "no cpu limit".to_owned(),
                Some(c) => format!("cpus {} ({c})", crate::policy::Cpus(c.millis(size))),
            };
            Some((mode.as_str(), format!("{memory}, {cpus}")))
        })
        .collect::<Vec<_>>();
    match &per_mode[..] {
        [(_, first), rest @ ..] if rest.iter().all(|(_, l)| l == first) => {
            format!("every mode: {first}")
        }
        _ => per_mode
            .iter()
            .map(|(mode, l)| format!("{mode}: {l}"))
            .collect::<Vec<_>>()
            .join("; "),
    }
}
