//! Container planning rules against a fake host filesystem ([`crate::plan::fake::FakeFs`]):
//! nothing here reads the real one.

use std::path::{Path, PathBuf};

use super::*;
use crate::outcome::{Level, Restriction};
use crate::plan::fake::FakeFs;
use crate::policy::PolicySet;
use crate::protect::ProtectedSet;

const SIZE: HostSize = HostSize {
    memory: Some(16 << 30),
    cpus: 8,
};

fn req(mode: Mode) -> SandboxRequest {
    let mut r = SandboxRequest::minimal(
        mode,
        PathBuf::from("/ws"),
        PathBuf::from("/state/home"),
        PathBuf::from("/state/tmp"),
    );
    r.private.writable = vec![PathBuf::from("/state/out")];
    r
}

fn fake() -> FakeFs {
    FakeFs::default()
        .dir("/ws", (1000, 1000))
        .dir("/data", (1000, 1000))
        .file("/data/file")
        .symlink("/data/link", "file")
        .dir("/var/run", (0, 0))
        .socket("/var/run/docker.sock")
}

fn plan_on(
    fs: &FakeFs,
    r: &SandboxRequest,
    runner_euid: u32,
) -> Result<ContainerPlan, SandboxError> {
    let policy = PolicySet::embedded().unwrap().get(r.mode).unwrap().clone();
    let sockets = [PathBuf::from("/var/run/docker.sock")];
    let runner = Runner {
        sockets: &sockets,
        euid: runner_euid,
        nofile_hard: 1 << 20,
        size: &SIZE,
    };
    resolve_with(fs, &policy, r, &runner)
}

fn refusal(r: Result<ContainerPlan, SandboxError>) -> (String, String) {
    match r {
        Err(SandboxError::InvalidRequest { field, message }) => (field, message),
        other => panic!("expected InvalidRequest, got {other:?}"),
    }
}

#[test]
fn the_jobs_paths_are_checked_on_the_host_with_the_native_texts() {
    let mut r = req(Mode::WorkspaceWrite);
    r.read = vec![PathBuf::from("/data/missing")];
    assert_eq!(
        refusal(plan_on(&fake(), &r, 1000)),
        ("read".into(), "`/data/missing` does not exist".into())
    );
    let mut r = req(Mode::WorkspaceWrite);
    r.write = vec![PathBuf::from("/data/file")];
    assert_eq!(
        refusal(plan_on(&fake(), &r, 1000)),
        ("write".into(), "`/data/file` is not a directory".into())
    );
    let mut r = req(Mode::WorkspaceWrite);
    r.sockets = vec![PathBuf::from("/data/file")];
    assert_eq!(
        refusal(plan_on(&fake(), &r, 1000)),
        ("socket".into(), "`/data/file` is not a unix socket".into())
    );
}

#[test]
fn no_mount_goes_through_a_symlink_or_shows_the_engine_socket() {
    let mut r = req(Mode::ReadOnly);
    r.read = vec![PathBuf::from("/data/link")];
    let (field, message) = refusal(plan_on(&fake(), &r, 1000));
    assert_eq!(field, "read");
    assert!(
        message.starts_with("`/data/link` resolves through the symlink `/data/link`"),
        "{message}"
    );
    let mut r = req(Mode::ReadOnly);
    r.read = vec![PathBuf::from("/var/run")];
    let (field, message) = refusal(plan_on(&fake(), &r, 1000));
    assert_eq!(field, "read");
    assert!(message.contains("container engine's socket"), "{message}");
    // Granting the engine socket itself is refused the same way.
    let mut r = req(Mode::ReadOnly);
    r.sockets = vec![PathBuf::from("/var/run/docker.sock")];
    assert_eq!(refusal(plan_on(&fake(), &r, 1000)).0, "socket");
}

#[test]
fn a_mount_whose_path_is_not_utf8_is_refused_naming_it_escaped() {
    use std::os::unix::ffi::OsStrExt;
    // Lossy, it would bind `/data/rd\u{FFFD}x` (nothing, or another user's directory); the
    // engine's error would not say which flag or path.
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/data/rd\xffx\n\x1b[31m"));
    let m = BindMount {
        path,
        read_only: true,
        origin: "read",
    };
    let Err(SandboxError::InvalidRequest { field, message }) =
        mounts::check_mount(&fake(), &m, &[], &[])
    else {
        panic!("a non-UTF-8 mount was not refused");
    };
    assert_eq!(field, "read");
    assert!(
        message.starts_with(r#""/data/rd\xFFx\n\u{1b}[31m" is not UTF-8"#),
        "{message}"
    );
    assert!(
        !message.contains('\x1b') && !message.contains('\n'),
        "{message:?}"
    );
}

#[test]
fn a_root_runners_round_on_a_root_owned_workspace_is_the_agents() {
    let fs = fake()
        .dir("/ws", (0, 0))
        .dir("/w-root", (0, 0))
        .dir("/w-user", (1000, 1000));
    let mut r = req(Mode::WorkspaceWrite);
    r.write = vec![PathBuf::from("/w-root"), PathBuf::from("/w-user")];
    let p = plan_on(&fs, &r, 0).unwrap();
    assert_eq!((p.uid, p.gid), (2000, 2000));
    let trees: Vec<(&Path, bool)> = p
        .idmapped
        .iter()
        .map(|(t, m, ro)| {
            assert_eq!((m.disk_uid, m.uid), (0, 2000));
            (t.as_path(), *ro)
        })
        .collect();
    assert_eq!(
        trees,
        [(Path::new("/ws"), false), (Path::new("/w-root"), false)]
    );
    assert_eq!(
        p.chown,
        ["/state/home", "/state/tmp", "/state/out"].map(PathBuf::from)
    );
    // An unprivileged runner cannot: its own uid on the root-owned workspace, said partial.
    let p = plan_on(&fs, &r, 1000).unwrap();
    assert_eq!((p.uid, p.idmapped.len(), p.chown.len()), (0, 0, 0));
    assert_eq!(
        p.enforcement.level_of(Restriction::Identity),
        Some(Level::Partial)
    );
    // The owner's round is the owner's.
    let p = plan_on(&fake(), &req(Mode::ReadOnly), 0).unwrap();
    assert_eq!((p.uid, p.idmapped.len()), (1000, 0));
}

#[test]
fn sockets_in_mounted_trees_are_masked_unless_granted() {
    let fs = fake()
        .socket("/ws/fsmonitor.ipc")
        .socket("/ws/granted.sock")
        .socket("/elsewhere/x.sock");
    let mut r = req(Mode::WorkspaceWrite);
    r.sockets = vec![PathBuf::from("/ws/granted.sock")];
    let p = plan_on(&fs, &r, 1000).unwrap();
    assert!(p.masked.contains(&"/ws/fsmonitor.ipc".to_owned()));
    assert!(!p.masked.iter().any(|m| m.ends_with(".sock")));
    // Shown by the workspace's mount already: no mount of its own.
    assert!(!p.mounts.iter().any(|m| m.origin == "socket"));
}

#[test]
fn a_protected_path_stays_read_only_whatever_else_mounts_it() {
    let mut fs = fake().dir("/ws/.git/hooks", (1000, 1000));
    fs.protected = Some(|r| {
        let at = |rel: &str| crate::beneath::TreePath::new(&r.workspace, Path::new(rel)).unwrap();
        Ok(ProtectedSet {
            anchors: vec![at(".git")],
            protected: vec![at(".git/hooks")],
            absent: Vec::new(),
            placeholders: Vec::new(),
            watch: vec![at(".git/hooks")],
        })
    });
    let mut r = req(Mode::WorkspaceWrite);
    r.write = vec![PathBuf::from("/ws/.git/hooks")];
    let p = plan_on(&fs, &r, 1000).unwrap();
    let of = |path: &str| {
        p.mounts
            .iter()
            .filter(|m| m.path == Path::new(path))
            .map(|m| (m.read_only, m.origin))
            .collect::<Vec<_>>()
    };
    assert_eq!(of("/ws/.git"), [(false, "protected path's parent")]);
    assert_eq!(of("/ws/.git/hooks"), [(true, "write")], "merged, read-only");
    assert_eq!(p.protected.len(), 1);
    assert!(p.git.is_some());
}
