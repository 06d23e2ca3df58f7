//! Planning rules against a fake host filesystem ([`crate::plan::fake::FakeFs`]): nothing here
//! reads the real one.

use std::path::{Path, PathBuf};

use super::*;
use crate::beneath::TreePath;
use crate::host::{CgroupSite, LandlockSupport};
use crate::outcome::Restriction;
use crate::plan::fake::FakeFs;
use crate::policy::PolicySet;
use crate::protect::ProtectedSet;

fn host(euid: u32) -> Host {
    let site = || {
        Ok(CgroupSite {
            version: 2,
            dir: PathBuf::from("/sys/fs/cgroup/ralph"),
        })
    };
    Host {
        euid,
        egid: euid,
        landlock: LandlockSupport::Available { abi: 7 },
        seccomp: Ok(()),
        user_namespaces: Ok(()),
        memory: site(),
        pids: site(),
        cpu: site(),
        nofile_hard: 1 << 20,
        fsize_hard: u64::MAX,
        size: crate::policy::host_share::HostSize {
            memory: Some(16 << 30),
            cpus: 8,
        },
    }
}

fn req(mode: Mode) -> SandboxRequest {
    SandboxRequest::minimal(
        mode,
        PathBuf::from("/ws"),
        PathBuf::from("/state/home"),
        PathBuf::from("/state/tmp"),
    )
}

/// The mode's policy with `/usr`, `/bin` and `/opt` as its readable trees, `/usr/secret` and
/// `/etc/shadow` hidden, `/dev/null` its only device.
fn policy(mode: Mode) -> Policy {
    let mut p = PolicySet::embedded().unwrap().get(mode).unwrap().clone();
    if !p.filesystem.unrestricted {
        p.filesystem.read = ["/usr", "/bin", "/opt"].map(PathBuf::from).to_vec();
        p.filesystem.hidden = ["/usr/secret", "/usr/keys", "/etc/shadow", "/usr/gone"]
            .map(PathBuf::from)
            .to_vec();
        p.filesystem.devices = ["/dev/null", "/dev/kvm"].map(PathBuf::from).to_vec();
        p.filesystem.scan_sockets = vec![PathBuf::from("/usr")];
    }
    p
}

/// A host with a user-owned workspace, `/usr` (with a secret file and a key directory), `/bin`
/// a symlink into it, no `/opt`.
fn fake() -> FakeFs {
    FakeFs::default()
        .dir("/ws", (1000, 1000))
        .dir("/usr", (0, 0))
        .file("/usr/secret")
        .dir("/usr/keys", (0, 0))
        .symlink("/bin", "usr/bin")
        .dir("/usr/bin", (0, 0))
        .file("/etc/shadow")
        .file("/dev/null")
}

fn plan_on(fs: &FakeFs, r: &SandboxRequest, h: &Host) -> Result<SandboxPlan, SandboxError> {
    resolve_with(fs, &policy(r.mode), r, h)
}

fn refusal(r: Result<SandboxPlan, SandboxError>) -> (String, String) {
    match r {
        Err(SandboxError::InvalidRequest { field, message }) => (field, message),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

#[test]
fn the_policys_trees_are_bound_recreated_or_skipped() {
    let p = plan_on(&fake(), &req(Mode::ReadOnly), &host(1000)).unwrap();
    let root = p.root.unwrap();
    let bound: Vec<&Path> = root.binds.iter().map(|b| b.path.as_path()).collect();
    assert_eq!(bound, [Path::new("/usr"), Path::new("/ws")]);
    assert_eq!(
        root.symlinks,
        [(PathBuf::from("/bin"), PathBuf::from("usr/bin"))]
    );
    assert_eq!(
        root.devices,
        [PathBuf::from("/dev/null")],
        "/dev/kvm is absent"
    );
    let line = p
        .enforcement
        .restrictions
        .iter()
        .find(|e| e.restriction == Restriction::Filesystem)
        .unwrap();
    assert!(
        line.detail.ends_with("(absent on this host: /opt)"),
        "{}",
        line.detail
    );
}

#[test]
fn the_jobs_paths_are_checked_on_the_host() {
    let fs = fake()
        .file("/data/file")
        .dir("/data/dir", (1000, 1000))
        .socket("/run/agent.sock");
    let mut r = req(Mode::WorkspaceWrite);
    r.read = vec![PathBuf::from("/data/missing")];
    assert_eq!(
        refusal(plan_on(&fs, &r, &host(1000))),
        ("read".into(), "`/data/missing` does not exist".into())
    );
    let mut r = req(Mode::WorkspaceWrite);
    r.write = vec![PathBuf::from("/data/file")];
    assert_eq!(
        refusal(plan_on(&fs, &r, &host(1000))),
        ("write".into(), "`/data/file` is not a directory".into())
    );
    let mut r = req(Mode::WorkspaceWrite);
    r.sockets = vec![PathBuf::from("/data/file")];
    assert_eq!(
        refusal(plan_on(&fs, &r, &host(1000))),
        ("socket".into(), "`/data/file` is not a unix socket".into())
    );
    // All fine: bound (the socket read-only, where no tree shows it already).
    let mut r = req(Mode::WorkspaceWrite);
    r.read = vec![PathBuf::from("/data/file")];
    r.write = vec![PathBuf::from("/data/dir")];
    r.sockets = vec![PathBuf::from("/run/agent.sock")];
    let p = plan_on(&fs, &r, &host(1000)).unwrap();
    let root = p.root.unwrap();
    let write_of = |p: &str| {
        root.binds
            .iter()
            .find(|b| b.path == Path::new(p))
            .map(|b| b.write)
    };
    assert_eq!(write_of("/data/file"), Some(false));
    assert_eq!(write_of("/data/dir"), Some(true));
    assert_eq!(write_of("/run/agent.sock"), Some(false));
}

#[test]
fn the_runners_state_may_not_be_in_a_bound_tree() {
    let mut r = req(Mode::ReadOnly);
    r.forbidden = vec![PathBuf::from("/usr/lib/ralph")];
    assert_eq!(refusal(plan_on(&fake(), &r, &host(1000))).0, "state-dir");
    // A policy tree this host does not have shows nothing.
    r.forbidden = vec![PathBuf::from("/opt/ralph")];
    assert!(plan_on(&fake(), &r, &host(1000)).is_ok());
}

#[test]
fn a_root_runners_round_runs_as_the_owner_or_the_agent_with_idmapped_trees() {
    // The workspace's owner, when that is not root: nothing idmapped, the private dirs handed
    // over.
    let p = plan_on(&fake(), &req(Mode::WorkspaceWrite), &host(0)).unwrap();
    let id = p.identity.as_ref().unwrap();
    assert_eq!((id.uid, id.gid), (1000, 1000));
    assert!(
        p.root
            .as_ref()
            .unwrap()
            .binds
            .iter()
            .all(|b| b.idmap.is_none())
    );
    assert_eq!(
        p.hand_over,
        [PathBuf::from("/state/home"), PathBuf::from("/state/tmp")]
    );
    assert_eq!(p.root.unwrap().scratch_owner, (1000, 1000));
    // A root-owned workspace: the agent user, the workspace idmapped from root's ids; a
    // `--write` tree the agent owns stays as it is.
    let fs = fake().dir("/ws", (0, 0)).dir("/w", (2000, 2000));
    let mut r = req(Mode::WorkspaceWrite);
    r.write = vec![PathBuf::from("/w")];
    let p = plan_on(&fs, &r, &host(0)).unwrap();
    assert_eq!(p.identity.as_ref().unwrap().name, "fake-agent");
    let map = |path: &str| {
        p.root
            .as_ref()
            .unwrap()
            .binds
            .iter()
            .find(|b| b.path == Path::new(path))
            .unwrap()
            .idmap
    };
    assert_eq!(
        map("/ws"),
        Some(crate::plan::OwnerMap {
            disk_uid: 0,
            disk_gid: 0,
            uid: 2000,
            gid: 2000
        })
    );
    assert_eq!(map("/w"), None);
    // A non-root runner is itself, in its user namespace.
    let p = plan_on(&fs, &r, &host(1000)).unwrap();
    assert!(p.identity.is_none() && p.hand_over.is_empty());
    assert!(p.user_namespace.is_some());
}

#[test]
fn secrets_are_masked_where_they_are_visible() {
    let p = plan_on(&fake(), &req(Mode::ReadOnly), &host(1000)).unwrap();
    assert_eq!(
        p.mounts,
        [
            MountStep::HideFile {
                path: PathBuf::from("/usr/secret")
            },
            MountStep::HideDir {
                path: PathBuf::from("/usr/keys")
            },
        ],
        "/etc is not bound, /usr/gone does not exist"
    );
}

#[test]
fn sockets_in_visible_trees_are_masked_unless_granted() {
    let fs = fake()
        .socket("/ws/.git/fsmonitor.ipc")
        .socket("/usr/run/varlink")
        .socket("/ws/granted.sock")
        .socket("/elsewhere/x.sock");
    let hidden = |p: &SandboxPlan| -> Vec<PathBuf> {
        p.mounts
            .iter()
            .filter_map(|m| match m {
                MountStep::HideFile { path } => Some(path.clone()),
                _ => None,
            })
            .collect()
    };
    // A read-only workspace is scanned by the plan.
    let mut r = req(Mode::ReadOnly);
    r.sockets = vec![PathBuf::from("/ws/granted.sock")];
    let p = plan_on(&fs, &r, &host(1000)).unwrap();
    assert_eq!(
        hidden(&p),
        [
            Path::new("/usr/secret"),
            Path::new("/usr/run/varlink"),
            Path::new("/ws/.git/fsmonitor.ipc")
        ],
        "the secret, then the sockets; /elsewhere is not visible"
    );
    assert_eq!(p.socket_walk, None);
    // A writable one is left to the git check's walk in the helper (one walk of the tree for
    // both): the plan masks the rest and says what it left.
    let mut r = req(Mode::WorkspaceWrite);
    r.sockets = vec![PathBuf::from("/ws/granted.sock")];
    let p = plan_on(&fs, &r, &host(1000)).unwrap();
    assert_eq!(
        hidden(&p),
        [Path::new("/usr/secret"), Path::new("/usr/run/varlink")]
    );
    let walk = p
        .socket_walk
        .clone()
        .expect("the writable trees' sockets are left to the walk");
    assert_eq!(walk.granted, [PathBuf::from("/ws/granted.sock")]);
    assert_eq!(walk.masked, 1);
    assert!(walk.incomplete.is_empty());
    // The granted socket is in the workspace: no bind of its own.
    assert!(
        !p.root
            .unwrap()
            .binds
            .iter()
            .any(|b| b.path == Path::new("/ws/granted.sock"))
    );
}

#[test]
fn protected_paths_pin_their_parents_before_they_are_bound_read_only() {
    let mut fs = fake();
    fs.protected = Some(|r| {
        let at = |rel: &str| TreePath::new(&r.workspace, Path::new(rel)).unwrap();
        Ok(ProtectedSet {
            anchors: vec![at(".git")],
            protected: vec![at(".git/hooks")],
            absent: vec![at(".git/commondir")],
            placeholders: Vec::new(),
            watch: vec![at(".git/hooks"), at(".git/commondir")],
        })
    });
    let p = plan_on(&fs, &req(Mode::WorkspaceWrite), &host(1000)).unwrap();
    assert!(matches!(
        &p.mounts[..2],
        [MountStep::Anchor { at: a }, MountStep::ProtectReadOnly { at: b }]
            if a.full() == Path::new("/ws/.git") && b.full() == Path::new("/ws/.git/hooks")
    ));
    assert_eq!(p.absent.len(), 1);
    assert_eq!(p.watch.len(), 2);
    assert_eq!(p.git.unwrap().protected, [PathBuf::from("/ws/.git/hooks")]);
    // A read-only workspace has nothing to protect, whatever the host says.
    let p = plan_on(&fs, &req(Mode::ReadOnly), &host(1000)).unwrap();
    assert!(p.protected.is_empty() && p.git.is_none());
}

#[test]
fn full_access_masks_and_binds_only_the_kernel_paths_this_host_has() {
    let fs = FakeFs::default()
        .file("/proc/kcore")
        .dir("/proc/acpi", (0, 0))
        .dir("/proc/sys", (0, 0));
    let p = plan_on(&fs, &req(Mode::FullAccess), &host(1000)).unwrap();
    assert_eq!(
        p.mounts,
        [
            MountStep::Proc,
            MountStep::BindReadOnly {
                path: PathBuf::from("/proc/sys")
            },
            MountStep::HideDir {
                path: PathBuf::from("/proc/acpi")
            },
            MountStep::HideFile {
                path: PathBuf::from("/proc/kcore")
            },
            MountStep::ReadOnly {
                path: PathBuf::from("/sys")
            },
        ]
    );
}

#[test]
fn the_jobs_open_files_limit_wins_over_the_policys_and_is_capped_at_the_hosts() {
    let detail = |p: &SandboxPlan| {
        p.enforcement
            .restrictions
            .iter()
            .find(|r| r.restriction == Restriction::OpenFiles)
            .map(|r| r.detail.clone())
    };
    let mut r = req(Mode::WorkspaceWrite);
    let p = plan_on(&fake(), &r, &host(1000)).unwrap();
    assert_eq!(p.open_files, Some(65536), "the policy's default");
    assert_eq!(
        detail(&p).as_deref(),
        Some("RLIMIT_NOFILE 65536 (policy default)")
    );
    r.limits.open_files = Some(100);
    let p = plan_on(&fake(), &r, &host(1000)).unwrap();
    assert_eq!(p.open_files, Some(100));
    assert_eq!(detail(&p).as_deref(), Some("RLIMIT_NOFILE 100"));
    // Never above what the runner itself may have.
    r.limits.open_files = Some(1 << 30);
    let p = plan_on(&fake(), &r, &host(1000)).unwrap();
    assert_eq!(p.open_files, Some(1 << 20));
}
