//! Plan resolution against fake hosts: every refusal, and what each mode ends up enforcing.

use std::path::{Path, PathBuf};

use super::*;
use crate::host::{CgroupSite, LandlockSupport};
use crate::outcome::{Level, Restriction};
use crate::policy::PolicySet;
use crate::policy::network::SocketFamily;

fn host() -> Host {
    Host {
        euid: 0,
        egid: 0,
        landlock: LandlockSupport::Available { abi: 7 },
        seccomp: Ok(()),
        user_namespaces: Ok(()),
        memory: Ok(CgroupSite {
            version: 1,
            dir: PathBuf::from("/sys/fs/cgroup/memory"),
        }),
        pids: Ok(CgroupSite {
            version: 1,
            dir: PathBuf::from("/sys/fs/cgroup/pids"),
        }),
        cpu: Ok(CgroupSite {
            version: 1,
            dir: PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"),
        }),
        nofile_hard: 1 << 20,
        fsize_hard: u64::MAX,
        size: crate::policy::host_share::HostSize {
            memory: Some(16 << 30),
            cpus: 8,
        },
    }
}

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    state: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let state = dir.path().join("state");
    for d in [
        &ws,
        &state.join("home"),
        &state.join("tmp"),
        &state.join("out"),
    ] {
        std::fs::create_dir_all(d).unwrap();
    }
    World {
        ws,
        state,
        _dir: dir,
    }
}

fn req(w: &World, mode: Mode) -> SandboxRequest {
    let mut r = SandboxRequest::minimal(
        mode,
        w.ws.clone(),
        w.state.join("home"),
        w.state.join("tmp"),
    );
    r.private.writable = vec![w.state.join("out")];
    r
}

fn plan(r: &SandboxRequest, h: &Host) -> Result<SandboxPlan, SandboxError> {
    let set = PolicySet::embedded().unwrap();
    resolve(set.get(r.mode).unwrap(), r, h)
}

fn unavailable_text(r: Result<SandboxPlan, SandboxError>) -> String {
    match r {
        Err(e @ SandboxError::Unavailable { .. }) => e.to_string(),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn workspace_write_as_root() {
    let w = world();
    let p = plan(&req(&w, Mode::WorkspaceWrite), &host()).unwrap();
    assert!(p.user_namespace.is_none(), "root needs no user namespace");
    assert!(p.pid_namespace && p.mount_namespace && p.net_namespace);
    let ll = p.landlock.as_ref().unwrap();
    assert!(ll.write.contains(&w.ws));
    assert!(ll.read.contains(&PathBuf::from("/usr")));
    assert!(ll.deny_tcp && ll.scope);
    assert_eq!(
        p.seccomp.socket_families,
        Some(vec![SocketFamily::Unix]),
        "network none: only AF_UNIX"
    );
    assert_eq!(p.network, Network::None);
    assert!(p.gateway_ports.is_empty() && p.enforcement.network.is_none());
    assert!(p.seccomp.deny.iter().any(|(n, _)| n == "ptrace"));
    assert!(
        p.mounts
            .iter()
            .any(|m| matches!(m, MountStep::HideFile { path } if path == Path::new("/etc/shadow")))
    );
    assert_eq!(
        p.pids.as_ref().map(|c| c.value),
        Some(4096),
        "policy default pids via cgroup"
    );
    assert_eq!(
        p.memory.as_ref().map(|c| c.value),
        Some(8 << 30),
        "policy default memory: half the host's"
    );
    for r in [
        Restriction::Filesystem,
        Restriction::Network,
        Restriction::Syscalls,
        Restriction::Capabilities,
        Restriction::Pids,
    ] {
        assert_eq!(p.enforcement.level_of(r), Some(Level::Full), "{r:?}");
    }
}

#[test]
fn read_only_keeps_the_workspace_read_only_and_refuses_network() {
    let w = world();
    let p = plan(&req(&w, Mode::ReadOnly), &host()).unwrap();
    let ll = p.landlock.unwrap();
    assert!(ll.read.contains(&w.ws) && !ll.write.contains(&w.ws));
    let mut r = req(&w, Mode::ReadOnly);
    r.network = Some(Network::Full);
    assert!(
        matches!(plan(&r, &host()), Err(SandboxError::InvalidRequest { field, .. }) if field == "network")
    );
    let mut r = req(&w, Mode::ReadOnly);
    r.write = vec![w.state.clone()];
    assert!(
        matches!(plan(&r, &host()), Err(SandboxError::InvalidRequest { field, .. }) if field == "write")
    );
}

#[test]
fn full_access_has_no_filesystem_rules_but_keeps_the_rest() {
    let w = world();
    let p = plan(&req(&w, Mode::FullAccess), &host()).unwrap();
    assert!(p.landlock.is_none() && p.root.is_none() && !p.net_namespace);
    assert!(p.pid_namespace && p.drop_capabilities);
    assert!(p.seccomp.deny.iter().any(|(n, _)| n == "bpf"));
    assert!(!p.seccomp.deny.iter().any(|(n, _)| n == "ptrace"));
    let mut r = req(&w, Mode::FullAccess);
    r.protect = vec![PathBuf::from("tests")];
    assert!(
        matches!(plan(&r, &host()), Err(SandboxError::InvalidRequest { field, .. }) if field == "protect")
    );
}

#[test]
fn no_landlock_fails_closed_with_the_reason() {
    let w = world();
    let mut h = host();
    h.landlock = LandlockSupport::NotImplemented;
    let text = unavailable_text(plan(&req(&w, Mode::WorkspaceWrite), &h));
    assert!(
        text.contains("filesystem isolation (landlock)") && text.contains("ENOSYS"),
        "{text}"
    );
    h.landlock = LandlockSupport::Available { abi: 2 };
    let text = unavailable_text(plan(&req(&w, Mode::ReadOnly), &h));
    assert!(
        text.contains("abi 2") && text.contains("truncate"),
        "{text}"
    );
    // full-access does not need Landlock.
    assert!(plan(&req(&w, Mode::FullAccess), &h).is_ok());
}

#[test]
fn old_landlock_abis_are_reported_as_partial() {
    let w = world();
    let mut h = host();
    h.landlock = LandlockSupport::Available { abi: 3 };
    let p = plan(&req(&w, Mode::WorkspaceWrite), &h).unwrap();
    let ll = p.landlock.unwrap();
    assert!(!ll.deny_tcp && !ll.scope);
    assert_eq!(
        p.enforcement.level_of(Restriction::Scoping),
        Some(Level::Partial)
    );
}

#[test]
fn no_seccomp_fails_closed() {
    let w = world();
    let mut h = host();
    h.seccomp = Err("no seccomp here".into());
    assert!(unavailable_text(plan(&req(&w, Mode::FullAccess), &h)).contains("seccomp"));
}

#[test]
fn a_non_root_runner_needs_a_user_namespace() {
    let w = world();
    let mut h = host();
    h.euid = 1000;
    h.egid = 1000;
    h.memory = Err("not writable".into());
    h.pids = Err("not writable".into());
    let p = plan(&req(&w, Mode::WorkspaceWrite), &h).unwrap();
    assert_eq!(
        p.user_namespace,
        Some(IdMap {
            uid: 1000,
            gid: 1000
        })
    );
    assert_eq!(
        p.nproc,
        Some(4096),
        "pids fall back to RLIMIT_NPROC in the private user namespace"
    );
    h.user_namespaces = Err("AppArmor restricts unprivileged user namespaces".into());
    let text = unavailable_text(plan(&req(&w, Mode::WorkspaceWrite), &h));
    assert!(text.contains("AppArmor"), "{text}");
}

#[test]
fn explicit_limits_must_be_enforceable() {
    let w = world();
    let mut h = host();
    h.memory = Err("no cgroup memory controller".into());
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.limits.memory_bytes = Some(64 << 20);
    let text = unavailable_text(plan(&r, &h));
    assert!(
        text.contains("--memory") && text.contains("no cgroup memory controller"),
        "{text}"
    );
    // Root has no RLIMIT_NPROC fallback (uid 0 is exempt from it).
    h.pids = Err("no cgroup pids controller".into());
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.limits.pids = Some(10);
    assert!(unavailable_text(plan(&r, &h)).contains("--pids"));
    // Policy defaults that cannot be enforced are reported, not fatal.
    let p = plan(&req(&w, Mode::WorkspaceWrite), &h).unwrap();
    assert_eq!(
        p.enforcement.level_of(Restriction::Pids),
        Some(Level::Partial)
    );
}

#[test]
fn the_runners_state_may_not_be_visible() {
    let w = world();
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.forbidden = vec![w.state.clone()];
    // The private dirs inside the state dir are fine…
    assert!(plan(&r, &host()).is_ok());
    // …but a readable ancestor of the state dir is not.
    r.read = vec![w.state.parent().unwrap().to_path_buf()];
    assert!(
        matches!(plan(&r, &host()), Err(SandboxError::InvalidRequest { field, .. }) if field == "state-dir")
    );
}

#[test]
fn protected_paths_bind_or_get_a_placeholder() {
    let w = world();
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    std::fs::write(w.ws.join(".git/config"), "").unwrap();
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.protect = vec![PathBuf::from("tests/unit"), PathBuf::from("README.md")];
    std::fs::write(w.ws.join("README.md"), "").unwrap();
    let p = plan(&r, &host()).unwrap();
    let protected: Vec<PathBuf> = p
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::ProtectReadOnly { at } => Some(at.full()),
            _ => None,
        })
        .collect();
    assert!(protected.contains(&w.ws.join(".git/hooks")));
    assert!(protected.contains(&w.ws.join(".git/config")));
    assert!(protected.contains(&w.ws.join("README.md")));
    // `.ralph` (policy) does not exist: its placeholder; `tests/unit` (explicit): `tests`.
    assert_eq!(
        p.placeholders,
        vec![
            Placeholder {
                at: TreePath::new(&w.ws, Path::new(".ralph")).unwrap(),
                remove_after: false
            },
            Placeholder {
                at: TreePath::new(&w.ws, Path::new("tests")).unwrap(),
                remove_after: true
            }
        ]
    );
}

#[test]
fn default_git_paths_are_skipped_without_a_repository() {
    let w = world();
    let p = plan(&req(&w, Mode::WorkspaceWrite), &host()).unwrap();
    assert!(
        !p.placeholders.iter().any(|x| x.at.rel.starts_with(".git")),
        "`git init` must stay possible"
    );
}

#[test]
fn the_root_holds_only_the_listed_trees() {
    let w = world();
    let p = plan(&req(&w, Mode::WorkspaceWrite), &host()).unwrap();
    let root = p.root.as_ref().unwrap();
    let bound = |path: &Path| root.binds.iter().find(|b| b.path == path).map(|b| b.write);
    assert_eq!(bound(&w.ws), Some(true));
    assert_eq!(bound(Path::new("/etc")), Some(false));
    // HOME and TMPDIR are size-limited tmpfs mounts, not binds of the host directories.
    assert_eq!(bound(&w.state.join("home")), None);
    assert_eq!(root.home, w.state.join("home"));
    assert_eq!(root.scratch_size, 1 << 30);
    assert!(
        p.landlock
            .as_ref()
            .unwrap()
            .write
            .contains(&w.state.join("home"))
    );
    assert_eq!(bound(Path::new("/root")), None);
    assert_eq!(bound(Path::new("/var")), None);
    // Parents come before children.
    let paths: Vec<&PathBuf> = root.binds.iter().map(|b| &b.path).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
    // Merged-/usr hosts: /bin is a symlink in the host, and in the sandbox.
    if std::fs::symlink_metadata("/bin").is_ok_and(|m| m.file_type().is_symlink()) {
        assert!(root.symlinks.iter().any(|(p, _)| p == Path::new("/bin")));
    }
    assert!(root.devices.contains(&PathBuf::from("/dev/null")));
    let ro = plan(&req(&w, Mode::ReadOnly), &host()).unwrap();
    assert_eq!(
        ro.root
            .unwrap()
            .binds
            .iter()
            .find(|b| b.path == w.ws)
            .map(|b| b.write),
        Some(false)
    );
}

#[test]
fn protected_paths_pin_their_parents_and_commondir_stays_absent() {
    let w = world();
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    let p = plan(&req(&w, Mode::WorkspaceWrite), &host()).unwrap();
    let anchor = p
        .mounts
        .iter()
        .position(|m| matches!(m, MountStep::Anchor { at } if at.full() == w.ws.join(".git")))
        .unwrap();
    let protect = p
        .mounts
        .iter()
        .position(
            |m| matches!(m, MountStep::ProtectReadOnly { at } if at.full() == w.ws.join(".git/hooks")),
        )
        .unwrap();
    assert!(
        anchor < protect,
        "the parent is pinned before the protected path is bound"
    );
    assert_eq!(
        p.absent,
        vec![TreePath::new(&w.ws, Path::new(".git/commondir")).unwrap()]
    );
}

#[test]
fn full_access_gets_a_fresh_proc_and_a_read_only_sys() {
    let w = world();
    let p = plan(&req(&w, Mode::FullAccess), &host()).unwrap();
    assert!(p.root.is_none() && p.mount_namespace);
    assert_eq!(p.mounts.first(), Some(&MountStep::Proc));
    assert_eq!(
        p.mounts.last(),
        Some(&MountStep::ReadOnly {
            path: PathBuf::from("/sys")
        })
    );
}

/// SPEC §5: full-access is at least as confined as a default `docker run` — the engine's
/// read-only kernel paths (and the init's /proc/1) bound read-only, its masked paths masked,
/// private ipc and uts namespaces.
#[test]
fn full_access_keeps_what_a_default_docker_run_keeps() {
    let w = world();
    let p = plan(&req(&w, Mode::FullAccess), &host()).unwrap();
    assert!(p.ipc_namespace && p.uts_namespace && p.pid_namespace);
    let ro: Vec<&Path> = p
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::BindReadOnly { path } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    for want in crate::policy::kernel_paths::read_only() {
        assert_eq!(
            ro.contains(&Path::new(want)),
            Path::new(want).exists(),
            "{want}: {ro:?}"
        );
    }
    assert!(ro.contains(&Path::new("/proc/sys")) && ro.contains(&Path::new("/proc/1")));
    let masked: Vec<&Path> = p
        .mounts
        .iter()
        .filter_map(|m| match m {
            MountStep::HideFile { path } | MountStep::HideDir { path } => Some(path.as_path()),
            _ => None,
        })
        .collect();
    for want in crate::policy::kernel_paths::MASKED {
        assert_eq!(
            masked.contains(&Path::new(want)),
            Path::new(want).exists(),
            "{want}: {masked:?}"
        );
    }
    // The masks and binds are made on the fresh /proc, before /sys turns read-only.
    let proc_at = p.mounts.iter().position(|m| *m == MountStep::Proc).unwrap();
    assert_eq!(proc_at, 0);
    // The confined modes too: a private ipc and uts namespace.
    let ww = plan(&req(&w, Mode::WorkspaceWrite), &host()).unwrap();
    assert!(ww.ipc_namespace && ww.uts_namespace);
}

fn invalid_field(r: Result<SandboxPlan, SandboxError>) -> (String, String) {
    match r {
        Err(SandboxError::InvalidRequest { field, message }) => (field, message),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

#[test]
fn gateway_keeps_the_private_namespace_and_allows_ip_sockets() {
    let w = world();
    for mode in Mode::ALL {
        let mut r = req(&w, mode);
        r.network = Some(Network::Gateway);
        r.gateway_ports = vec![8080, 443];
        let p = plan(&r, &host()).unwrap();
        assert!(p.net_namespace && p.pid_namespace, "{mode}");
        assert_eq!(p.network, Network::Gateway);
        assert_eq!(p.gateway_ports, [8080, 443], "{mode}: ports kept in order");
        assert_eq!(
            p.seccomp.socket_families,
            Some(vec![
                SocketFamily::Unix,
                SocketFamily::Inet,
                SocketFamily::Inet6
            ]),
            "{mode}"
        );
        // Landlock does not govern TCP: the namespace is the boundary, and the agent's own
        // loopback servers keep working.
        if let Some(ll) = &p.landlock {
            assert!(!ll.deny_tcp, "{mode}");
        }
        assert_eq!(
            p.enforcement.level_of(Restriction::Network),
            Some(Level::Full),
            "{mode}"
        );
        let line = p
            .enforcement
            .restrictions
            .iter()
            .find(|e| e.restriction == Restriction::Network)
            .unwrap();
        assert!(
            line.detail.starts_with("gateway:") && line.detail.contains("port(s) 8080, 443"),
            "{}",
            line.detail
        );
        assert_eq!(
            p.enforcement.network,
            Some(crate::outcome::NetworkEnforced {
                network: Network::Gateway,
                gateway_ports: vec![8080, 443],
            })
        );
    }
    // No ports: still the private namespace, no listener.
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.network = Some(Network::Gateway);
    let p = plan(&r, &host()).unwrap();
    assert!(p.net_namespace && p.gateway_ports.is_empty());
}

#[test]
fn gateway_ports_are_checked_and_the_field_named() {
    let w = world();
    // Ports without `gateway`: refused whatever the network.
    for (mode, network) in [
        (Mode::WorkspaceWrite, None),
        (Mode::WorkspaceWrite, Some(Network::None)),
        (Mode::WorkspaceWrite, Some(Network::Full)),
        (Mode::ReadOnly, None),
        (Mode::FullAccess, None),
    ] {
        let mut r = req(&w, mode);
        r.network = network;
        r.gateway_ports = vec![8080];
        let (field, message) = invalid_field(plan(&r, &host()));
        assert_eq!(field, "gateway_ports", "{mode} {network:?}");
        assert!(
            message.contains("only allowed with `--network gateway`"),
            "{message}"
        );
    }
    for (ports, says) in [
        (vec![0], "port 0"),
        (vec![8080, 9090, 8080], "port 8080 is listed twice"),
        ((1..=17).collect::<Vec<u16>>(), "at most 16"),
    ] {
        let mut r = req(&w, Mode::WorkspaceWrite);
        r.network = Some(Network::Gateway);
        r.gateway_ports = ports;
        let (field, message) = invalid_field(plan(&r, &host()));
        assert_eq!(field, "gateway_ports");
        assert!(message.contains(says), "{message}");
        assert!(
            SandboxError::invalid(field, message)
                .to_string()
                .contains("gateway_ports"),
            "the message names the field"
        );
    }
}

#[test]
fn full_access_needs_namespaces_whatever_the_network() {
    let w = world();
    let mut h = host();
    h.euid = 1000;
    h.egid = 1000;
    h.user_namespaces = Err("user namespaces are disabled".into());
    // full-access needs its namespaces too, with the host's network as with the gateway: it
    // does not run weaker than a default `docker run` (SPEC §5).
    let mut r = req(&w, Mode::FullAccess);
    r.network = Some(Network::Full);
    let text = unavailable_text(plan(&r, &h));
    assert!(text.contains("namespace"), "{text}");
    r.network = Some(Network::Gateway);
    r.gateway_ports = vec![8080];
    let text = unavailable_text(plan(&r, &h));
    assert!(text.contains("namespace"), "{text}");
    // As non-root with user namespaces: a user namespace, then the private network one.
    h.user_namespaces = Ok(());
    let p = plan(&r, &h).unwrap();
    assert!(p.user_namespace.is_some() && p.net_namespace);
}

fn with_report_dir(w: &World, mode: Mode) -> SandboxRequest {
    let mut r = req(w, mode);
    r.private.writable.clear();
    r.private.report = Some(crate::spec::ReportDir {
        path: w.state.join("out"),
        bytes: 1 << 20,
        entries: 64,
        files: vec![crate::spec::ReportFile {
            name: "report.json".into(),
            max_bytes: 1000,
        }],
    });
    r
}

#[test]
fn the_report_dir_is_a_bounded_tmpfs_in_every_mode_never_a_bind() {
    let w = world();
    let out = w.state.join("out");
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess] {
        let p = plan(&with_report_dir(&w, mode), &host()).unwrap();
        let rd = p.report_dir.as_ref().unwrap();
        assert!(rd.tmpfs && p.mount_namespace, "{mode}");
        if let Some(root) = &p.root {
            assert!(
                !root.binds.iter().any(|b| b.path == out),
                "{mode}: the host's out/ is bound"
            );
        }
        if let Some(ll) = &p.landlock {
            assert!(
                ll.write.contains(&out),
                "{mode}: landlock does not allow it"
            );
        }
        assert!(
            !p.hand_over.contains(&out),
            "{mode}: the host's out/ is handed over"
        );
        assert_eq!(
            p.enforcement.level_of(Restriction::ReportDir),
            Some(Level::Full),
            "{mode}"
        );
    }
    // Without namespaces no mode runs at all (full-access included, SPEC §5: at least as
    // confined as a default docker run), so the report dir is never the host directory.
    let mut h = host();
    h.euid = 1000;
    h.egid = 1000;
    h.user_namespaces = Err("disabled".into());
    let mut r = with_report_dir(&w, Mode::FullAccess);
    r.network = Some(Network::Full);
    assert!(matches!(
        plan(&r, &h),
        Err(SandboxError::Unavailable { .. })
    ));
    // A request that could name a path outside it is refused, naming the field.
    let mut bad = with_report_dir(&w, Mode::WorkspaceWrite);
    if let Some(d) = bad.private.report.as_mut() {
        d.files[0].name = "a/b".into();
    }
    let e = plan(&bad, &host()).unwrap_err().to_string();
    assert!(e.contains("report_dir"), "{e}");
}

#[test]
fn a_preflight_plans_as_the_run_does_but_for_the_socket_scan() {
    use crate::plan::probe::{HostFs, PreflightFs};
    let w = world();
    let shared = w._dir.path().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(shared.join("agent.sock")).unwrap();
    let set = PolicySet::embedded().unwrap();
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.read = vec![shared.clone()];
    let policy = set.get(r.mode).unwrap();
    let run = resolve_with(&HostFs, policy, &r, &host()).unwrap();
    let preflight = resolve_with(&PreflightFs, policy, &r, &host()).unwrap();
    let socket_mask = MountStep::HideFile {
        path: shared.join("agent.sock"),
    };
    assert!(run.mounts.contains(&socket_mask), "{:?}", run.mounts);
    assert!(!preflight.mounts.contains(&socket_mask));
    // Everything else is the same plan: only the scan's masks and its line differ.
    let mut without = run.clone();
    without.mounts.retain(|m| m != &socket_mask);
    let sockets_line = |p: &SandboxPlan| {
        p.enforcement
            .restrictions
            .iter()
            .filter(|x| x.restriction != Restriction::UnixSockets)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(sockets_line(&without), sockets_line(&preflight));
    without.enforcement = preflight.enforcement.clone();
    let masked = |p: &SandboxPlan| p.socket_walk.as_ref().map(|w| w.masked);
    assert_eq!((masked(&run), masked(&preflight)), (Some(1), Some(0)));
    without.socket_walk = preflight.socket_walk.clone();
    assert_eq!(without, preflight);
    // And it refuses what the run refuses, naming the same field.
    let mut bad = r.clone();
    bad.write = vec![PathBuf::from("relative/path")];
    let (a, b) = (
        resolve_with(&HostFs, policy, &bad, &host()).unwrap_err(),
        resolve_with(&PreflightFs, policy, &bad, &host()).unwrap_err(),
    );
    assert_eq!(a.to_string(), b.to_string());
}
