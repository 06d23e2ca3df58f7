//! The docker backend end to end: the API version negotiated with the live engine (down to
//! 1.41) and the container lifecycle through bollard; `ralph run --backend docker` running a
//! real loop to `complete` with verify; the memory limit and the round timeout mapping to the
//! same outcomes as native; no container left after a run, a timeout or a cancel. (A runner
//! killed mid-round: `tests/it/docker_leftovers.rs`.)
//!
//! Needs a Docker engine and the image `ralph-agent-base:latest` (`.ci/setup` provides both);
//! without them these tests skip, saying why, unless `CI` is set (then they fail).

use crate::common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::docker::{IMAGE, containers_with_label, ready, running_containers_with_label};
use common::{Fixture, complete_report};
use ralph_sandbox::docker::client;
use ralph_sandbox::docker::{DockerBackend, labels};
use ralph_sandbox::outcome::EndedBy;
use ralph_sandbox::policy::PolicySet;
use ralph_sandbox::{
    ExecIo, ExecSpec, Mode, Sandbox, SandboxRequest, StderrMode, StdinMode, Termination,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// An [`ExecSpec`] for `argv` in workspace-write, private dirs under `dir`.
fn spec(dir: &Path, argv: &[&str], env: Vec<(String, String)>) -> ExecSpec {
    let ws = dir.join("ws");
    let home = dir.join("home");
    let tmp = dir.join("tmp");
    for d in [&ws, &home, &tmp, &dir.join("control")] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut env = env;
    env.push(("PATH".into(), "/usr/bin:/bin".into()));
    ExecSpec {
        argv: argv.iter().map(|s| (*s).to_owned()).collect(),
        cwd: ws.clone(),
        env,
        stdin: StdinMode::Piped,
        stderr: StderrMode::Separate,
        timeout: Some(Duration::from_secs(60)),
        kill_grace: Duration::from_secs(1),
        sandbox: SandboxRequest {
            image: Some(IMAGE.into()),
            ..SandboxRequest::minimal(Mode::WorkspaceWrite, ws, home, tmp)
        },
        control_dir: dir.join("control"),
        listings: None,
        protected_copies: None,
        layers: None,
    }
}

/// Captures into a shared buffer.
#[derive(Clone, Default)]
struct Buf(Arc<std::sync::Mutex<Vec<u8>>>);

impl ralph_sandbox::capture::OutputSink for Buf {
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<()> {
        self.0.lock().unwrap().extend_from_slice(chunk);
        Ok(())
    }
    fn finish(self: Box<Self>) -> std::io::Result<ralph_sandbox::outcome::CaptureSummary> {
        Ok(ralph_sandbox::outcome::CaptureSummary::default())
    }
}

impl Buf {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// The API version is negotiated with the live engine: never above what the engine speaks, at
/// least 1.41, and exactly 1.41 on Debian 12's engine (which CI installs). Then create, attach
/// (stdin in, stdout and stderr out), start, wait, inspect and remove work through it. A
/// bollard upgrade that stops negotiating, or sends requests an old engine refuses, fails here.
#[test]
fn api_version_is_negotiated_and_the_lifecycle_works() {
    if !ready("api_version_is_negotiated_and_the_lifecycle_works") {
        return;
    }
    let engine_api = common::docker::docker(&["version", "--format", "{{.Server.APIVersion}}"]);
    let engine_api: Vec<usize> = engine_api
        .trim()
        .split('.')
        .map(|p| p.parse().unwrap())
        .collect();
    let engine_api = (engine_api[0], engine_api[1]);
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let label = format!("lifecycle-{}", std::process::id());
    rt().block_on(async {
        let engine = client::connect(&client::socket_path()).await.unwrap();
        assert!(
            engine.api <= engine_api,
            "negotiated {:?}, engine {engine_api:?}",
            engine.api
        );
        assert!(client::supported(engine.api), "{:?}", engine.api);
        if engine_api == (1, 41) {
            assert_eq!(engine.api, (1, 41));
        }
        let backend = DockerBackend::new(Arc::new(PolicySet::embedded().unwrap()));
        let (out, err) = (Buf::default(), Buf::default());
        let s = spec(
            &dir,
            &[
                "/bin/sh",
                "-c",
                "read line; echo \"got $line\"; echo oops >&2; exit 7",
            ],
            vec![("RALPH_JOB_ID".into(), label.clone())],
        );
        let io = ExecIo {
            stdin: Some(b"hello\n".to_vec()),
            stdout: Box::new(out.clone()),
            stderr: Box::new(err.clone()),
        };
        let run = backend.spawn(&s, io).await.unwrap();
        assert_eq!(containers_with_label(labels::JOB, &label).len(), 1);
        let report = run.wait(CancellationToken::new()).await.unwrap();
        assert_eq!(report.outcome.termination, Termination::Exited { code: 7 });
        assert_eq!(report.outcome.ended_by, EndedBy::Exit);
        assert_eq!(out.text(), "got hello\n");
        assert_eq!(err.text(), "oops\n");
    });
    assert!(
        containers_with_label(labels::JOB, &label).is_empty(),
        "the container was not removed"
    );
}

/// Timeout and cancel kill the container (TERM, grace, KILL), report it like native, and leave
/// no container.
#[test]
fn timeout_and_cancel_kill_and_remove_the_container() {
    if !ready("timeout_and_cancel_kill_and_remove_the_container") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let label = format!("kill-{}", std::process::id());
    rt().block_on(async {
        let backend = DockerBackend::new(Arc::new(PolicySet::embedded().unwrap()));
        let mut s = spec(
            &dir,
            &["/bin/sh", "-c", "trap '' TERM; sleep 60"],
            vec![("RALPH_JOB_ID".into(), label.clone())],
        );
        s.timeout = Some(Duration::from_millis(500));
        let io = || ExecIo {
            stdin: None,
            stdout: Box::new(Buf::default()),
            stderr: Box::new(Buf::default()),
        };
        let started = Instant::now();
        let report = backend
            .spawn(&s, io())
            .await
            .unwrap()
            .wait(CancellationToken::new())
            .await
            .unwrap();
        assert_eq!(report.outcome.ended_by, EndedBy::Timeout);
        assert_eq!(
            report.outcome.termination,
            Termination::Signaled { signal: 9 }
        );
        assert!(started.elapsed() < Duration::from_secs(20));
        s.timeout = None;
        let cancel = CancellationToken::new();
        let run = backend.spawn(&s, io()).await.unwrap();
        let c = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            c.cancel();
        });
        let report = run.wait(cancel).await.unwrap();
        assert_eq!(report.outcome.ended_by, EndedBy::Cancel);
    });
    assert!(containers_with_label(labels::JOB, &label).is_empty());
}

fn docker_run(f: &Fixture, agent: &Path) -> common::Ralph {
    f.run(agent).args([
        "--backend",
        "docker",
        "--image",
        IMAGE,
        "--round-retries",
        "0",
    ])
}

/// A real loop in containers: round 1 continues, round 2 writes the file and claims completion,
/// the runner's verify (in a container too) passes: `complete`, verified, and no container left.
#[test]
fn ralph_run_in_docker_completes_with_verify() {
    if !ready("ralph_run_in_docker_completes_with_verify") {
        return;
    }
    let f = Fixture::new();
    let agent = f.agent(
        "agent.sh",
        &format!(
            r#"case "$RALPH_ROUND" in
1) echo '{}' > "$RALPH_REPORT_FILE" ;;
*) test -f "$RALPH_HANDOFF_FILE" || exit 9
   echo done > done.txt
   echo '{}' > "$RALPH_REPORT_FILE" ;;
esac"#,
            common::continue_report("started"),
            complete_report("wrote done.txt")
        ),
    );
    let out = docker_run(&f, &agent)
        .args(["--max-rounds", "3", "--verify", "test -f done.txt"])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["rounds"], 2, "{j}");
    assert_eq!(f.read_ws("done.txt"), "done\n");
    let job = out.job_id();
    // The round's account, as natively: the enforcement report names the docker backend.
    let result = f
        .state
        .join("jobs")
        .join(&job)
        .join("rounds/2/1/sandbox-result.json");
    let result: Value = serde_json::from_slice(&std::fs::read(&result).unwrap()).unwrap();
    assert_eq!(
        result["outcome"]["enforcement"]["backend"], "docker",
        "{result}"
    );
    assert!(containers_with_label(labels::JOB, &job).is_empty());
}

/// The memory limit: the round fails saying so, as natively (`memory_bomb_in_a_round_is_reported`).
#[test]
fn memory_limit_in_docker_is_reported_like_native() {
    if !ready("memory_limit_in_docker_is_reported_like_native") {
        return;
    }
    let f = Fixture::new();
    let agent = f.agent(
        "bomb.sh",
        "exec /usr/bin/python3 -c 'x = bytearray(512 << 20); print(len(x))'",
    );
    let out = docker_run(&f, &agent)
        .args(["--max-rounds", "1", "--memory", "64M"])
        .output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed", "{j}");
    let message = j["message"].as_str().unwrap();
    assert!(message.contains("the memory limit was hit"), "{message}");
    assert!(containers_with_label(labels::JOB, &out.job_id()).is_empty());
}

/// The command's own status: with ralph's init a command that exits 137 exited with status 137,
/// and one killed by SIGKILL was killed by a signal (the container's status folds the two
/// together; the init tells them apart). The engine removed each container (AutoRemove).
#[test]
fn an_exit_of_137_is_an_exit_and_a_sigkill_is_a_signal() {
    if !ready("an_exit_of_137_is_an_exit_and_a_sigkill_is_a_signal") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let label = format!("status-{}", std::process::id());
    rt().block_on(async {
        let backend = DockerBackend::new(Arc::new(PolicySet::embedded().unwrap()))
            .with_init_program(common::ralph_bin());
        for (script, ends) in [
            ("exit 137", Termination::Exited { code: 137 }),
            ("kill -9 $$", Termination::Signaled { signal: 9 }),
            ("exit 3", Termination::Exited { code: 3 }),
        ] {
            let s = spec(
                &dir,
                &["/bin/sh", "-c", script],
                vec![("RALPH_JOB_ID".into(), label.clone())],
            );
            let io = ExecIo {
                stdin: None,
                stdout: Box::new(Buf::default()),
                stderr: Box::new(Buf::default()),
            };
            let report = backend
                .spawn(&s, io)
                .await
                .unwrap()
                .wait(CancellationToken::new())
                .await
                .unwrap();
            assert_eq!(report.outcome.termination, ends, "{script}");
            assert_eq!(report.outcome.ended_by, EndedBy::Exit, "{script}");
            assert!(
                containers_with_label(labels::JOB, &label).is_empty(),
                "{script}: a container is left"
            );
        }
    });
    // A round says what native says of the same agent.
    let messages: Vec<String> = ["native", "docker"]
        .into_iter()
        .map(|backend| {
            let f = Fixture::new();
            let agent = f.agent("ends.sh", "echo bye >&2; exit 137");
            let out = f
                .run(&agent)
                .args(["--backend", backend, "--image", IMAGE, "--max-rounds", "1"])
                .output();
            out.expect_code(3);
            let m = out.json()["message"].as_str().unwrap().to_owned();
            m[m.find("; the agent ended").unwrap_or(0)..].to_owned()
        })
        .collect();
    assert_eq!(messages[0], messages[1]);
    assert!(messages[1].contains("exit status 137"), "{}", messages[1]);
}

/// A job that sets no `--memory`/`--cpus` gets the policy's defaults (half the host's memory,
/// three quarters of its CPUs) on both backends: said in the enforcement report, and on docker
/// the container's own cgroup carries the limit.
#[test]
fn rounds_get_the_policys_default_memory_and_cpu_limits_on_both_backends() {
    if !ready("rounds_get_the_policys_default_memory_and_cpu_limits_on_both_backends") {
        return;
    }
    let total: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .map(|k| k.trim().parse::<u64>().unwrap() * 1024)
        .unwrap();
    let want = (total / 2) & !((1 << 20) - 1);
    for backend in ["native", "docker"] {
        let f = Fixture::new();
        let agent = f.agent(
            "limits.sh",
            &format!(
                "cat /sys/fs/cgroup/memory/memory.limit_in_bytes > limit.txt 2>/dev/null || :\necho '{}' > \"$RALPH_REPORT_FILE\"",
                complete_report("looked")
            ),
        );
        let out = f
            .run(&agent)
            .args(["--backend", backend, "--image", IMAGE, "--max-rounds", "1"])
            .output();
        out.expect_code(0);
        let result = f
            .state
            .join("jobs")
            .join(out.job_id())
            .join("rounds/1/1/sandbox-result.json");
        let result: Value = serde_json::from_slice(&std::fs::read(&result).unwrap()).unwrap();
        let of = |r: &str| {
            result["outcome"]["enforcement"]["restrictions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["restriction"] == r)
                .cloned()
                .unwrap_or_else(|| panic!("{backend}: no {r} in {result:#}"))
        };
        let memory = of("memory");
        let detail = memory["detail"].as_str().unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!(memory["level"], "full", "{backend}: {memory}");
            assert!(
                detail.contains(&format!("{want} bytes")),
                "{backend}: {detail}"
            );
            assert!(detail.contains("(policy default)"), "{backend}: {detail}");
        } else {
            assert!(detail.contains("policy default"), "{backend}: {detail}");
        }
        let cpu = of("cpu");
        assert!(
            cpu["detail"].as_str().unwrap().contains("(policy default)")
                || cpu["level"] == "partial",
            "{backend}: {cpu}"
        );
        if backend == "docker" {
            assert_eq!(f.read_ws("limit.txt").trim(), want.to_string());
        }
    }
}

/// The round timeout: the round fails with the timeout message, as natively.
#[test]
fn round_timeout_in_docker_is_reported_like_native() {
    if !ready("round_timeout_in_docker_is_reported_like_native") {
        return;
    }
    let f = Fixture::new();
    let agent = f.agent("sleepy.sh", "sleep 60");
    let started = Instant::now();
    let out = docker_run(&f, &agent)
        .args(["--max-rounds", "1", "--round-timeout", "1s"])
        .output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed", "{j}");
    let message = j["message"].as_str().unwrap();
    assert!(message.contains("the round timeout"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(containers_with_label(labels::JOB, &out.job_id()).is_empty());
}

/// A missing image or engine is a clear `ralph doctor --backend docker` error (exit 69).
#[test]
fn doctor_fails_closed_on_a_missing_image_or_engine() {
    if !ready("doctor_fails_closed_on_a_missing_image_or_engine") {
        return;
    }
    let out = common::Ralph::new()
        .args(["doctor", "--backend", "docker"])
        .output();
    out.expect_code(0);
    assert!(out.stdout.contains("API 1."), "{}", out.stdout);
    let out = common::Ralph::new()
        .args([
            "doctor",
            "--backend",
            "docker",
            "--image",
            "ralph-no-such:0",
        ])
        .output();
    out.expect_code(69);
    assert!(
        out.stdout.contains("images/build-offline.sh"),
        "{}",
        out.stdout
    );
    let started = Instant::now();
    let out = common::Ralph::new()
        .args(["doctor", "--backend", "docker"])
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .output();
    out.expect_code(69);
    assert!(out.stdout.contains("not reachable"), "{}", out.stdout);
    assert!(started.elapsed() < Duration::from_secs(20));
}

/// `ralph sandbox exec --backend docker` with a job label, for the checks below (`flags` may
/// name paths that are not UTF-8).
fn sandbox_exec<F: AsRef<std::ffi::OsStr>>(
    job: &str,
    ws: &Path,
    flags: &[F],
    cmd: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(common::ralph_bin());
    c.args(["sandbox", "exec", "--backend", "docker", "--workspace"])
        .arg(ws)
        .args(flags)
        .args(["--env", "RALPH_JOB_ID", "--"])
        .args(cmd)
        .env("RALPH_JOB_ID", job)
        .stdin(std::process::Stdio::null());
    c
}

/// The CLI's exit codes: 124 on timeout, 130 when cancelled with SIGTERM, 137 (128 + SIGKILL)
/// for the OOM kill, the command's status otherwise; no container left in any case.
#[test]
fn sandbox_exec_exit_codes_and_no_container_left() {
    if !ready("sandbox_exec_exit_codes_and_no_container_left") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let job = format!("exec-{}", std::process::id());
    let started = Instant::now();
    let out = sandbox_exec(
        &job,
        ws.path(),
        &["--timeout", "1s", "--kill-grace", "1s"],
        &["sh", "-c", "trap '' TERM; sleep 60"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(containers_with_label(labels::JOB, &job).is_empty());

    let out = sandbox_exec(
        &job,
        ws.path(),
        &["--memory", "64M"],
        &["python3", "-c", "x = bytearray(512 << 20)"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(137), "{out:?}");
    assert!(containers_with_label(labels::JOB, &job).is_empty());

    let mut child = sandbox_exec(&job, ws.path(), &[] as &[&str], &["sleep", "60"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // The container runs (not only exists) before the runner is signalled.
    while running_containers_with_label(labels::JOB, &job).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no running container"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        containers_with_label(labels::JOB, &job).is_empty(),
        "a cancelled run left its container"
    );
}

/// A `--read` or `--write` directory whose path is not UTF-8 cannot be named to the engine (a
/// mount's paths are strings there; lossy, it named another path and the engine answered `400
/// ... bind source path does not exist`): refused with the usage exit before any container
/// exists, naming the flag and the path with its bytes escaped.
#[test]
fn a_path_that_is_not_utf8_is_refused_by_name_and_no_container_is_made() {
    use std::os::unix::ffi::OsStrExt;
    if !ready("a_path_that_is_not_utf8_is_refused_by_name_and_no_container_is_made") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let odd = other
        .path()
        .join(std::ffi::OsStr::from_bytes(b"rd\xffx\n\x1b[31m"));
    std::fs::create_dir(&odd).unwrap();
    let job = format!("utf8-{}", std::process::id());
    for flag in ["--read", "--write"] {
        let out = sandbox_exec(
            &job,
            ws.path(),
            &[flag.as_ref(), odd.as_os_str()],
            &["true"],
        )
        .output()
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{}: ", &flag[2..]))
                && stderr.contains(r#"rd\xFFx\n\u{1b}[31m" is not UTF-8"#),
            "{flag}: {stderr}"
        );
        assert!(!stderr.contains('\x1b'), "{flag}: {stderr:?}");
        assert!(containers_with_label(labels::JOB, &job).is_empty());
    }
}

/// A run dropped without being waited for (the caller failed between spawn and wait) still
/// removes its container.
#[test]
fn a_dropped_run_removes_its_container() {
    if !ready("a_dropped_run_removes_its_container") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let label = format!("dropped-{}", std::process::id());
    rt().block_on(async {
        let backend = DockerBackend::new(Arc::new(PolicySet::embedded().unwrap()));
        let s = spec(
            &dir,
            &["sleep", "60"],
            vec![("RALPH_JOB_ID".into(), label.clone())],
        );
        let io = ExecIo {
            stdin: None,
            stdout: Box::new(Buf::default()),
            stderr: Box::new(Buf::default()),
        };
        let run = backend.spawn(&s, io).await.unwrap();
        assert_eq!(containers_with_label(labels::JOB, &label).len(), 1);
        drop(run);
    });
    assert!(
        containers_with_label(labels::JOB, &label).is_empty(),
        "the dropped run's container is still there"
    );
}
