//! A held start (`Sandbox::spawn_held`, issue 30 item 2): the runner sets a round's sandbox up
//! while it commits the round's start, and the command's `execve` waits for the release it sends
//! once the commit is durable. Checked on the host, for real, in every mode: until the release
//! the sandbox is fully set up (the helper and the init both blocked) and nothing of the command
//! has run; released, it runs; never released (the record failed, the runner moved on), it never
//! runs, the run ends as not started, and the set-up is undone (the `--protect` placeholder
//! removed, no process left). Each case twice: with the helper started for the run, and started
//! ahead of it (`native::standby`: the hold then travels in its order).
//!
//! No root needed: run as root (`cargo test`) and as the unprivileged `ralph-ci` by `.ci/run`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ralph_sandbox::native::NativeBackend;
use ralph_sandbox::outcome::CaptureSummary;
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    ExecIo, ExecSpec, Mode, Sandbox, SandboxError, SandboxRequest, StderrMode, StdinMode,
};
use tokio_util::sync::CancellationToken;

use crate::common::procs::{blocked_in, children};

fn backend() -> NativeBackend {
    NativeBackend::new(env!("CARGO_BIN_EXE_ralph"), PolicySet::embedded().unwrap())
}

/// A backend whose next run's helper is started ahead (`ahead`: its hold's pipe then travels in
/// the standby's order) or for the run.
fn backend_for(spec: &ExecSpec, ahead: bool) -> NativeBackend {
    let b = backend();
    if ahead {
        b.prestart(spec.kill_grace);
    }
    b
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-held-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["ws", "home", "tmp", "control", "out"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Self { _dir: dir, root }
    }

    fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }

    /// A command that leaves `ran` in the workspace, and (in workspace-write) a `--protect` path
    /// that does not exist yet (its placeholder is made by the set-up and removed after the run).
    fn spec(&self, mode: Mode) -> ExecSpec {
        let ws = self.ws();
        ExecSpec {
            argv: vec!["/bin/sh".into(), "-c".into(), "echo ran > ran".into()],
            cwd: ws.clone(),
            env: vec![("PATH".into(), "/usr/bin:/bin".into())],
            stdin: StdinMode::Null,
            stderr: StderrMode::Separate,
            timeout: Some(Duration::from_secs(60)),
            kill_grace: Duration::from_secs(1),
            sandbox: SandboxRequest {
                protect: if mode == Mode::WorkspaceWrite {
                    vec![PathBuf::from("later")]
                } else {
                    Vec::new()
                },
                ..SandboxRequest::minimal(mode, ws, self.root.join("home"), self.root.join("tmp"))
            },
            control_dir: self.root.join("control"),
            listings: None,
            protected_copies: None,
            layers: None,
        }
    }
}

struct Null;

impl ralph_sandbox::capture::OutputSink for Null {
    fn write(&mut self, _chunk: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<CaptureSummary> {
        Ok(CaptureSummary::default())
    }
}

fn io() -> ExecIo {
    ExecIo {
        stdin: None,
        stdout: Box::new(Null),
        stderr: Box::new(Null),
    }
}

/// Waits (with a deadline) until the run's set-up is over and it is held: the helper blocked
/// reading the release, its one child (the init, or the command itself without a pid namespace)
/// blocked reading its go-ahead.
fn wait_until_held(helper: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let kids = children(helper);
        let held = blocked_in(helper) == Some(libc::SYS_read)
            && kids.len() == 1
            && blocked_in(kids[0]) == Some(libc::SYS_read)
            && children(kids[0]).is_empty();
        if held {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the run never got to its hold: helper {helper} in {:?}, children {kids:?}",
            blocked_in(helper)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

const MODES: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess];

#[test]
fn a_held_command_runs_only_once_released() {
    for (mode, ahead) in MODES.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let w = World::new();
        let mut spec = w.spec(mode);
        if mode == Mode::ReadOnly {
            // Read-only cannot write the workspace: the command says it ran on stdout instead.
            spec.argv = vec!["/bin/true".into()];
        }
        rt().block_on(async {
            let b = backend_for(&spec, ahead);
            assert!(b.holds());
            let mut run = b.spawn_held(&spec, io()).await.unwrap();
            let helper = run.pid().unwrap();
            wait_until_held(helper);
            assert!(
                !w.ws().join("ran").exists(),
                "{mode:?} (ahead: {ahead}): the command ran before its release"
            );
            run.release();
            let report = run.wait(CancellationToken::new()).await.unwrap();
            assert_eq!(
                report.outcome.termination,
                ralph_sandbox::outcome::Termination::Exited { code: 0 },
                "{mode:?}: {report:?}"
            );
            if mode != Mode::ReadOnly {
                assert_eq!(
                    std::fs::read_to_string(w.ws().join("ran")).unwrap(),
                    "ran\n",
                    "{mode:?}"
                );
            }
        });
    }
}

#[test]
fn a_held_command_never_released_never_runs_and_its_set_up_is_undone() {
    for (mode, ahead) in MODES.into_iter().flat_map(|m| [(m, false), (m, true)]) {
        let w = World::new();
        let spec = w.spec(mode);
        rt().block_on(async {
            let run = backend_for(&spec, ahead)
                .spawn_held(&spec, io())
                .await
                .unwrap();
            let helper = run.pid().unwrap();
            wait_until_held(helper);
            let init = children(helper)[0];
            if mode == Mode::WorkspaceWrite {
                assert!(
                    w.ws().join("later").is_dir(),
                    "the set-up was done before the hold: the placeholder exists"
                );
            }
            let err = run.wait(CancellationToken::new()).await.unwrap_err();
            match &err {
                SandboxError::Unavailable { reason, .. } => {
                    assert!(reason.contains("did not release"), "{mode:?}: {reason}");
                }
                other => panic!("{mode:?}: not the refusal of a held run: {other:?}"),
            }
            assert!(
                !w.ws().join("ran").exists(),
                "{mode:?} (ahead: {ahead}): an unreleased command ran"
            );
            assert!(
                !w.ws().join("later").exists(),
                "{mode:?}: the placeholder of the set-up was left behind"
            );
            let deadline = Instant::now() + Duration::from_secs(30);
            while pid_alive(init) || pid_alive(helper) {
                assert!(
                    Instant::now() < deadline,
                    "{mode:?} (ahead: {ahead}): the held run's processes were left behind"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        });
    }
}
