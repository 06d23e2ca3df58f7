use std::path::{Path, PathBuf};

use super::*;
use crate::outcome::{Level, Restriction};
use crate::policy::PolicySet;

struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    private: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let ws = root.join("ws");
    let private = root.join("private");
    for d in [&ws, &private, &private.join("home"), &private.join("tmp")] {
        std::fs::create_dir_all(d).unwrap();
    }
    World {
        _dir: dir,
        ws,
        private,
    }
}

fn req(w: &World, mode: Mode) -> SandboxRequest {
    SandboxRequest::minimal(
        mode,
        w.ws.clone(),
        w.private.join("home"),
        w.private.join("tmp"),
    )
}

fn resolve_in(r: &SandboxRequest) -> Result<ContainerPlan, SandboxError> {
    let set = PolicySet::embedded().unwrap();
    resolve(
        set.get(r.mode).unwrap(),
        r,
        &engine_sockets(Path::new("/var/run/docker.sock")),
        1000,
        1 << 20,
        &crate::policy::host_share::HostSize {
            memory: Some(16 << 30),
            cpus: 8,
        },
    )
}

fn mount<'a>(p: &'a ContainerPlan, path: &Path) -> Option<&'a BindMount> {
    p.mounts.iter().find(|m| m.path == path)
}

#[test]
fn modes_mount_the_workspace_as_they_should() {
    let w = world();
    let ro = resolve_in(&req(&w, Mode::ReadOnly)).unwrap();
    assert!(mount(&ro, &w.ws).unwrap().read_only);
    assert_eq!(ro.network, Network::None);
    assert_eq!(ro.image, DEFAULT_IMAGE);
    let ww = resolve_in(&req(&w, Mode::WorkspaceWrite)).unwrap();
    assert!(!mount(&ww, &w.ws).unwrap().read_only);
    // HOME is a size-limited tmpfs of the command's, not a bind of the host directory.
    assert!(mount(&ww, &w.private.join("home")).is_none());
    assert!(ww.scratch.contains(&w.private.join("home")));
    assert_eq!(ww.scratch_size, 1 << 30);
    assert_eq!(ww.network, Network::None);
    assert_eq!(ww.pids, Some(4096));
    let fa = resolve_in(&req(&w, Mode::FullAccess)).unwrap();
    assert!(!mount(&fa, &w.ws).unwrap().read_only);
    assert_eq!(fa.network, Network::Full);
}

#[test]
fn protected_paths_are_read_only_with_their_parents_pinned() {
    let w = world();
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    std::fs::write(w.ws.join(".git/config"), "").unwrap();
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.protect.push(PathBuf::from("tests/unit"));
    let p = resolve_in(&r).unwrap();
    assert!(mount(&p, &w.ws.join(".git/hooks")).unwrap().read_only);
    assert!(mount(&p, &w.ws.join(".git/config")).unwrap().read_only);
    assert!(!mount(&p, &w.ws.join(".git")).unwrap().read_only);
    // Missing: placeholders (`.ralph` stays, the explicit one is removed after the run).
    assert!(mount(&p, &w.ws.join(".ralph")).unwrap().read_only);
    assert!(mount(&p, &w.ws.join("tests")).unwrap().read_only);
    let ph: Vec<_> = p
        .placeholders
        .iter()
        .map(|x| (x.at.full(), x.remove_after))
        .collect();
    assert_eq!(
        ph,
        [(w.ws.join(".ralph"), false), (w.ws.join("tests"), true)]
    );
    assert_eq!(
        p.absent.iter().map(|a| a.full()).collect::<Vec<_>>(),
        [w.ws.join(".git/commondir")]
    );
    // Parents before children.
    let paths: Vec<_> = p.mounts.iter().map(|m| m.path.clone()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted);
}

#[test]
fn the_engine_socket_is_never_mounted() {
    let w = world();
    for (flag, path) in [("read", "/var/run"), ("read", "/run"), ("read", "/")] {
        let mut r = req(&w, Mode::WorkspaceWrite);
        r.read.push(PathBuf::from(path));
        let e = resolve_in(&r).unwrap_err().to_string();
        assert!(
            e.contains(flag) && e.contains("container engine's socket"),
            "{path}: {e}"
        );
    }
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.write.push(PathBuf::from("/run"));
    let e = resolve_in(&r).unwrap_err().to_string();
    assert!(e.contains("invalid sandbox request: write"), "{e}");
}

#[test]
fn refusals_match_the_native_backend() {
    let w = world();
    let mut r = req(&w, Mode::ReadOnly);
    r.network = Some(Network::Full);
    assert!(
        resolve_in(&r)
            .unwrap_err()
            .to_string()
            .contains("does not allow `--network full`")
    );
    let mut r = req(&w, Mode::ReadOnly);
    r.write.push(w.private.clone());
    assert!(
        resolve_in(&r)
            .unwrap_err()
            .to_string()
            .contains("does not allow extra writable directories")
    );
    let mut r = req(&w, Mode::FullAccess);
    r.protect.push(PathBuf::from("tests"));
    assert!(resolve_in(&r).unwrap_err().to_string().contains("protect"));
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.forbidden.push(w.ws.join("state"));
    assert!(
        resolve_in(&r)
            .unwrap_err()
            .to_string()
            .contains("state-dir")
    );
}

#[test]
fn limits_come_from_the_request_then_the_policy() {
    let w = world();
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.limits.memory_bytes = Some(64 << 20);
    r.limits.pids = Some(64);
    let p = resolve_in(&r).unwrap();
    assert_eq!((p.memory, p.pids), (Some(64 << 20), Some(64)));
    assert_eq!(p.open_files, Some(65536));
    r.limits.memory_bytes = Some(1 << 20);
    assert!(resolve_in(&r).unwrap_err().to_string().contains("6 MiB"));
    // Nothing asked: the policy's shares of the host (16 GiB, 8 CPUs here).
    for mode in Mode::ALL {
        let p = resolve_in(&req(&w, mode)).unwrap();
        assert_eq!(p.memory, Some(8 << 30), "{mode}: half the host's memory");
        assert_eq!(p.cpu_millis, Some(6000), "{mode}: 75% of the host's CPUs");
    }
}

#[test]
fn gateway_is_a_loopback_only_container_with_the_inits_listeners() {
    let w = world();
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
        let mut r = req(&w, mode);
        r.network = Some(Network::Gateway);
        r.gateway_ports = vec![41410, 41411];
        let p = resolve_in(&r).unwrap();
        assert_eq!(p.network, Network::Gateway);
        assert_eq!(p.gateway_ports, vec![41410, 41411]);
        assert_eq!(
            p.enforcement.level_of(Restriction::Network),
            Some(Level::Full),
            "{mode}"
        );
        let detail = p
            .enforcement
            .restrictions
            .iter()
            .find(|i| i.restriction == Restriction::Network)
            .map(|i| i.detail.clone())
            .unwrap();
        assert!(
            detail.contains("network mode none")
                && detail.contains("41410, 41411")
                && detail.contains("AF_UNIX, AF_INET, AF_INET6"),
            "{detail}"
        );
        assert_eq!(
            p.enforcement
                .network
                .as_ref()
                .map(|n| n.gateway_ports.clone()),
            Some(vec![41410, 41411])
        );
    }
    // Ports without the gateway: a usage error naming the field, as on the native backend.
    let mut r = req(&w, Mode::WorkspaceWrite);
    r.gateway_ports = vec![8080];
    assert!(matches!(
        resolve_in(&r),
        Err(SandboxError::InvalidRequest { field, .. }) if field == "gateway_ports"
    ));
}

/// SPEC §5 and issue 25: every mode, full-access included, masks and keeps read-only what a
/// default `docker run` does — the lists replace the engine's, so they must hold its defaults —
/// and `/proc/1` (the init) is read-only, so a uid-0 command cannot write its `oom_score_adj`.
/// (`container::body` passes both lists as they are; the docker matrix checks the container.)
#[test]
fn every_mode_keeps_the_engine_defaults_and_the_init_read_only() {
    let w = world();
    for mode in Mode::ALL {
        let p = resolve_in(&req(&w, mode)).unwrap();
        for want in [
            "/proc/sys",
            "/proc/sysrq-trigger",
            "/proc/irq",
            "/proc/bus",
            "/proc/fs",
            "/proc/1",
        ] {
            assert!(
                p.read_only.iter().any(|r| r == want),
                "{mode}: {want} not read-only"
            );
        }
        for want in [
            "/proc/kcore",
            "/proc/keys",
            "/proc/timer_list",
            "/sys/firmware",
            "/proc/acpi",
        ] {
            assert!(
                p.masked.iter().any(|m| m == want),
                "{mode}: {want} not masked"
            );
        }
    }
}

#[test]
fn the_report_dir_is_a_bounded_tmpfs_never_a_bind_and_only_the_init_hands_it_over() {
    let w = world();
    let out = w.private.join("out");
    std::fs::create_dir_all(&out).unwrap();
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess] {
        let mut r = req(&w, mode);
        r.private.report = Some(crate::spec::ReportDir {
            path: out.clone(),
            bytes: 1 << 20,
            entries: 64,
            files: vec![crate::spec::ReportFile {
                name: "report.json".into(),
                max_bytes: 1000,
            }],
        });
        let p = resolve_in(&r).unwrap();
        assert!(
            mount(&p, &out).is_none(),
            "{mode}: the host's out/ is mounted"
        );
        assert!(
            !p.chown.contains(&out),
            "{mode}: the host's out/ is handed over"
        );
        let opts = super::super::container::tmpfs(&p);
        let o = &opts[&out.display().to_string()];
        for want in [
            "noexec",
            "nosuid",
            "nodev",
            "size=1048576",
            "nr_inodes=64",
            "mode=0700",
        ] {
            assert!(o.split(',').any(|x| x == want), "{mode}: {o} lacks {want}");
        }
        assert_eq!(
            p.enforcement.level_of(Restriction::ReportDir),
            Some(Level::Full)
        );
        let line = super::super::init::command_line(
            std::time::Duration::from_secs(1),
            None,
            p.report_dir.as_ref().map(|r| r.path.as_path()),
            &[],
            &["true".into()],
        );
        let at = line.iter().position(|a| a == "--report-dir").unwrap();
        assert_eq!(line[at + 1], out.display().to_string());
    }
    let mut bad = req(&w, Mode::WorkspaceWrite);
    bad.private.report = Some(crate::spec::ReportDir {
        path: out.clone(),
        bytes: 1 << 20,
        entries: 64,
        files: vec![crate::spec::ReportFile {
            name: "../escape".into(),
            max_bytes: 1,
        }],
    });
    let e = resolve_in(&bad).unwrap_err().to_string();
    assert!(
        e.contains("report_dir") && e.contains("plain file name"),
        "{e}"
    );
}

/// SPEC §5 (issue 28): a root runner's round on a root-owned workspace runs as the agent user,
/// never uid 0; the workspace and each root-owned `--write` tree are bound idmapped (the owner's
/// ids on disk are the agent's inside), the run's own directories handed to the agent, and the
/// identity line is full. An unprivileged runner's round stays as before (its own uid).
#[test]
fn a_root_runners_root_owned_workspace_is_bound_idmapped_for_the_agent_user() {
    use std::os::unix::fs::MetadataExt;
    let w = world();
    if std::fs::metadata(&w.ws).unwrap().uid() != 0 {
        eprintln!("skipped: the test's workspace is not root's (run as root)");
        return;
    }
    let write = w.private.join("write-tree");
    std::fs::create_dir_all(&write).unwrap();
    let set = PolicySet::embedded().unwrap();
    let size = crate::policy::host_share::HostSize {
        memory: Some(16 << 30),
        cpus: 8,
    };
    let agent = crate::identity::agent_user(None, Path::new("/etc")).unwrap();
    for mode in [Mode::ReadOnly, Mode::WorkspaceWrite] {
        let mut r = req(&w, mode);
        if mode == Mode::WorkspaceWrite {
            r.write = vec![write.clone()];
        }
        let sockets = engine_sockets(Path::new("/var/run/docker.sock"));
        let p = resolve(set.get(mode).unwrap(), &r, &sockets, 0, 1 << 20, &size).unwrap();
        assert_eq!((p.uid, p.gid), (agent.uid, agent.gid), "{mode}");
        assert_ne!(p.uid, 0);
        let map = crate::plan::OwnerMap {
            disk_uid: 0,
            disk_gid: 0,
            uid: agent.uid,
            gid: agent.gid,
        };
        let mut want = vec![(w.ws.clone(), map, mode == Mode::ReadOnly)];
        if mode == Mode::WorkspaceWrite {
            want.push((write.clone(), map, false));
        }
        assert_eq!(p.idmapped, want, "{mode}");
        assert!(p.chown.contains(&w.private.join("home")), "{mode}");
        assert_eq!(
            p.enforcement.level_of(Restriction::Identity),
            Some(Level::Full),
            "{mode}"
        );
        // Full-access: the owner, nothing idmapped.
        let fa = resolve(
            set.get(Mode::FullAccess).unwrap(),
            &req(&w, Mode::FullAccess),
            &sockets,
            0,
            1 << 20,
            &size,
        )
        .unwrap();
        assert_eq!((fa.uid, fa.idmapped.len()), (0, 0));
    }
    // An unprivileged runner cannot idmap: its own uid, reported partial on a root-owned tree.
    let p = resolve_in(&req(&w, Mode::WorkspaceWrite)).unwrap();
    assert!(p.idmapped.is_empty());
    assert_eq!(
        p.enforcement.level_of(Restriction::Identity),
        Some(Level::Partial)
    );
}
