//! Shared harness of the end-to-end tests: a temporary workspace and state dir, scripted agents,
//! and a builder that runs the real `ralph` binary.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod agent_clis;
pub mod capture;
pub mod chaos;
pub mod docker;
pub mod fix_project;
pub mod git_server;
pub mod model_api;
pub mod model_server;
pub mod package_mirror;
pub mod pg_cluster;
pub mod procs;
pub mod promtool;
pub mod server;
pub mod small_disk;
#[path = "../../../runner/src/store/test_db.rs"]
pub mod test_db;
pub mod tls_serve;
pub mod webdriver;
pub mod webhook_receiver;

/// A port for a server a test starts (`ralph serve`, PostgreSQL) that is free right now, taken
/// outside the kernel's ephemeral range (`ip_local_port_range`, 32768–60999 by default): a port
/// from `bind(:0)` is one any outgoing connection of another test may take as its local port
/// before the server listens ("Address already in use"). The end-to-end tests are one process
/// (`tests/it`): it hands out each port once per run (a stride through the range, started from
/// its pid), so a server restarted on its port meets no other test's there.
pub fn listen_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000; // up to 31999
    let seed = std::process::id().wrapping_mul(7919);
    for _ in 0..SPAN {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOW + (seed.wrapping_add(n.wrapping_mul(97))) % SPAN).unwrap();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {LOW} and {}", LOW + SPAN)
}

/// The `ralph` binary under test.
pub fn ralph_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph"))
}

/// The sandbox mode most tests run in.
pub const TEST_MODE: &str = "workspace-write";

/// A temporary world for one test.
pub struct Fixture {
    pub root: tempfile::TempDir,
    pub ws: PathBuf,
    pub state: PathBuf,
    pub agents: PathBuf,
}

impl Fixture {
    pub fn new() -> Self {
        let root = tempfile::Builder::new()
            .prefix("ralph-test-")
            .tempdir()
            .unwrap();
        let ws = root.path().join("ws");
        let state = root.path().join("state");
        let agents = root.path().join("agents");
        for d in [&ws, &agents] {
            std::fs::create_dir_all(d).unwrap();
        }
        // Resolve symlinks (e.g. /tmp) so paths compare equal to what ralph records.
        let ws = ws.canonicalize().unwrap();
        let agents = agents.canonicalize().unwrap();
        Self {
            root,
            ws,
            state,
            agents,
        }
    }

    /// Writes an executable `/bin/sh` script and returns its path.
    pub fn agent(&self, name: &str, body: &str) -> PathBuf {
        let p = self.agents.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Writes a data file next to the agents.
    pub fn data(&self, name: &str, content: &[u8]) -> PathBuf {
        let p = self.agents.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    /// `ralph run` with this fixture's workspace and state dir, `--json`, fast retries.
    pub fn run(&self, agent: &Path) -> Ralph {
        self.run_cmd(&agent.display().to_string())
    }

    /// Like [`Fixture::run`] with an inline `--agent-cmd` command line.
    pub fn run_cmd(&self, agent_cmd: &str) -> Ralph {
        self.run_at(&self.ws, &self.state, agent_cmd)
    }

    /// Like [`Fixture::run_cmd`] in the workspace `ws` with the state directory `state`.
    pub fn run_at(&self, ws: &Path, state: &Path, agent_cmd: &str) -> Ralph {
        Ralph::new()
            .args([
                "run",
                "--objective",
                "test objective",
                "--json",
                "--retry-backoff",
                "10ms",
                "--kill-grace",
                "1s",
            ])
            .arg("--workspace")
            .arg(ws)
            .arg("--state-dir")
            .arg(state)
            .arg("--read")
            .arg(&self.agents)
            .args(["--mode", TEST_MODE])
            .arg("--agent-cmd")
            .arg(agent_cmd)
    }

    /// The journal of a job as (type, event JSON) pairs.
    /// The job's events of type `kind`, in order.
    pub fn events_of(&self, job_id: &str, kind: &str) -> Vec<Value> {
        self.events(job_id)
            .into_iter()
            .filter(|(t, _)| t == kind)
            .map(|(_, v)| v)
            .collect()
    }

    pub fn events(&self, job_id: &str) -> Vec<(String, Value)> {
        let store = ralph_runner::store::Store::open_sqlite(&self.state).unwrap();
        store
            .events(job_id)
            .unwrap()
            .into_iter()
            .map(|e| {
                let v = serde_json::to_value(&e).unwrap();
                (v["type"].as_str().unwrap().to_owned(), v)
            })
            .collect()
    }

    /// Just the event types of a job.
    pub fn event_types(&self, job_id: &str) -> Vec<String> {
        self.events(job_id).into_iter().map(|(t, _)| t).collect()
    }

    pub fn read_ws(&self, name: &str) -> String {
        std::fs::read_to_string(self.ws.join(name)).unwrap_or_default()
    }
}

/// A `ralph` invocation.
pub struct Ralph {
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

/// Runs `cmd` (a `ralph` command line, or one that wraps it: `taskset`, a set rlimit) with no
/// input, to its end.
pub fn output_of(mut cmd: Command) -> Output {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What a finished `ralph` printed.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    pub fn job_id(&self) -> String {
        self.json()["job_id"].as_str().unwrap().to_owned()
    }

    /// Asserts the exit code, showing stderr when it differs.
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "unexpected exit code; stderr:\n{}\nstdout:\n{}",
            self.stderr, self.stdout
        );
        self
    }
}

impl Ralph {
    pub fn new() -> Self {
        Self {
            args: Vec::new(),
            env: Vec::new(),
        }
    }

    pub fn arg(mut self, a: impl Into<OsString>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: Into<OsString>>(mut self, a: I) -> Self {
        self.args.extend(a.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(ralph_bin());
        c.args(&self.args);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    pub fn output(self) -> Output {
        output_of(self.command())
    }

    pub fn spawn(self) -> std::process::Child {
        self.command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }
}

/// Pids of live (non-zombie) processes whose command line contains `marker`.
pub fn processes_with(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !cmd.contains(marker) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("");
        if state != "Z" {
            out.push(pid);
        }
    }
    out
}

/// Waits until `path` exists (or panics after `limit`).
pub fn wait_for_file(path: &Path, limit: Duration) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < limit,
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A valid continue report.
pub fn continue_report(summary: &str) -> String {
    format!(
        r#"{{"status":"continue","summary":"{summary}","evidence":[],"nextSteps":["keep going"],"blocker":""}}"#
    )
}

/// A valid complete report.
/// The journal of job `id` in the SQLite store of `state`, read without changing anything.
pub fn journal(state: &Path, id: &str) -> Vec<Value> {
    let store = ralph_runner::store::Store::open_sqlite_read_only(state).unwrap();
    store
        .events(id)
        .unwrap_or_else(|e| panic!("job {id} in {}: {e}", state.display()))
        .into_iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

pub fn complete_report(summary: &str) -> String {
    format!(
        r#"{{"status":"complete","summary":"{summary}","evidence":["checked"],"nextSteps":[],"blocker":""}}"#
    )
}

/// The directories `ralph sandbox exec` kept the originals of sanitized repositories in, as its
/// stderr names them (`... originals in DIR ...`, DIR inside a `ralph-sanitized-*` directory
/// under the temporary directory): each such `ralph-sanitized-*` directory once.
pub fn kept_originals(stderr: &str) -> Vec<PathBuf> {
    let mut kept = Vec::new();
    for part in stderr.split("originals in ").skip(1) {
        let dir = PathBuf::from(part.split_whitespace().next().unwrap_or_default());
        let Some(parent) = dir.parent() else { continue };
        let named = parent
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("ralph-sanitized-"));
        if named && !kept.iter().any(|k: &PathBuf| k == parent) {
            kept.push(parent.to_owned());
        }
    }
    kept
}

/// Removes what [`kept_originals`] finds, so that a test leaves nothing under the host's /tmp.
pub fn remove_kept_originals(stderr: &str) {
    for k in kept_originals(stderr) {
        let _ = std::fs::remove_dir_all(k);
    }
}

/// Waits (at most `limit`) until `cond` holds, polling; panics naming `what` when it never does.
/// Tests synchronise on real conditions through this, never on a sleep or a single check.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting until {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a live process exists for each of `markers` (substrings of command lines).
pub fn wait_for_processes(markers: &[&str], limit: Duration) {
    wait_until(&format!("processes with {markers:?} run"), limit, || {
        markers.iter().all(|m| !processes_with(m).is_empty())
    });
}

/// Waits until no live process has `marker` in its command line; panics listing the survivors.
pub fn wait_until_gone(marker: &str, limit: Duration, what: &str) {
    let start = Instant::now();
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {left:?} still alive after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A refused command printed no result: with `--json`, stdout holds only the error object (SPEC
/// §6), without a job id; without it, nothing.
pub fn assert_no_result(out: &Output) {
    let text = out.stdout.trim();
    if text.is_empty() {
        return;
    }
    let v: serde_json::Value = serde_json::from_str(text)
        .unwrap_or_else(|e| panic!("stdout is neither empty nor JSON ({e}): {text}"));
    assert!(v["error"]["kind"].is_string(), "not an error object: {v}");
    assert!(
        v.get("job_id").is_none() && v.get("outcome").is_none(),
        "a result: {v}"
    );
}

/// Every regular file under `dir` (symlinks not followed) whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(p);
            } else if meta.is_file()
                && std::fs::read(&p)
                    .is_ok_and(|b| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                hits.push(p);
            }
        }
    }
    hits
}
