//! Watching a job: `ralph run --follow` prints each round's output while it is written (the
//! agent's escape sequences shown escaped, never sent), the live view's elapsed time ticks, plain output
//! has no escape sequence without a terminal, with `TERM=dumb` or `NO_COLOR`, the artifacts
//! path comes first, and `ralph logs JOB --round K --follow` follows a running round.

use crate::common;

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::server::{Server, job};
use common::{Fixture, complete_report, ralph_bin, wait_until};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(90);

/// Collects what a child writes to one pipe, as it arrives.
#[derive(Clone)]
struct Collected(Arc<Mutex<Vec<u8>>>);

impl Collected {
    fn of(mut pipe: impl Read + Send + 'static) -> Self {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let b = buf.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                b.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        Self(buf)
    }

    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes()).into_owned()
    }
}

/// Waits for the child to exit (at most `LIMIT`); its exit code.
fn wait_exit(child: &mut Child, what: &str, out: &Collected) -> i32 {
    let mut code = None;
    wait_until(what, LIMIT, || {
        code = child.try_wait().unwrap().map(|s| s.code().unwrap_or(-1));
        code.is_some()
    });
    // The reader thread sees the pipe's end shortly after the exit.
    let _ = out;
    std::thread::sleep(Duration::from_millis(200));
    code.unwrap()
}

/// An agent that prints `first` lines, waits (with its own deadline) for `go` in the workspace,
/// then prints `after-go` and completes.
fn gated_agent(f: &Fixture) -> std::path::PathBuf {
    f.agent(
        "gated.sh",
        &format!(
            r#"echo "marker-live-$RALPH_ROUND"
echo "to-stderr-$RALPH_ROUND" >&2
i=0
while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
[ -e go ] || {{ echo "no go file" >&2; exit 3; }}
echo after-go
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("gated done")
        ),
    )
}

fn index_of(hay: &str, needle: &str) -> usize {
    hay.find(needle)
        .unwrap_or_else(|| panic!("`{needle}` is not in:\n{hay}"))
}

#[test]
fn follow_prints_the_round_output_while_the_round_runs() {
    let f = Fixture::new();
    let agent = gated_agent(&f);
    let mut child = f
        .run(&agent)
        .args(["--max-rounds", "3", "--follow"])
        .spawn();
    let err = Collected::of(child.stderr.take().unwrap());
    let out = Collected::of(child.stdout.take().unwrap());
    wait_until("the agent's first line is on ralph's stderr", LIMIT, || {
        err.text().contains("[round 1] marker-live-1\n")
    });
    // The round is still waiting for the go file: the line came live, not at the end.
    assert!(child.try_wait().unwrap().is_none(), "{}", err.text());
    assert!(!err.text().contains("after-go"));
    wait_until("the agent's stderr line is shown", LIMIT, || {
        err.text().contains("[round 1 stderr] to-stderr-1\n")
    });
    std::fs::write(f.ws.join("go"), "").unwrap();
    let code = wait_exit(&mut child, "ralph run exits", &err);
    let stderr = err.text();
    assert_eq!(code, 0, "{stderr}\n{}", out.text());
    // The rest of the round's output comes before the round's summary line.
    let rest = index_of(&stderr, "[round 1] after-go\n");
    let summary = index_of(&stderr, "ralph: round 1/3 complete");
    assert!(rest < summary, "{stderr}");
}

#[test]
fn a_hostile_agent_cannot_write_escape_sequences_to_the_terminal() {
    let f = Fixture::new();
    let report = r#"{"status":"complete","summary":"done \u001b]0;pwned\u0007 \u001b[2J","evidence":["x"],"nextSteps":[],"blocker":""}"#;
    f.data("report.json", report.as_bytes());
    let agent = f.agent(
        "hostile.sh",
        &format!(
            r"printf '\033]0;owned\007title-line\n'
printf '\033[2Jclear-line\n'
printf 'before\rrewritten\n'
printf 'bad \377\376 utf8\n'
printf '\033]0;owned-err\007err-line\033[1A\n' >&2
printf 'no newline at the end \033[31m'
cp {}/report.json $RALPH_REPORT_FILE",
            f.agents.display()
        ),
    );
    let out = f
        .run(&agent)
        .arg("--follow")
        .command()
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for raw in [&b"\x1b"[..], b"\x07", b"\r", b"\xff"] {
        assert!(
            !out.stderr.windows(raw.len()).any(|w| w == raw),
            "raw {raw:?} on stderr:\n{stderr:?}"
        );
    }
    // The text itself is shown, the controls escaped (issue 25: shown, no longer dropped).
    assert!(
        stderr.contains("[round 1] \\x1b]0;owned\\x07title-line\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[round 1] \\x1b[2Jclear-line\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[round 1] before\\rrewritten\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[round 1] bad \u{fffd}\u{fffd} utf8\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[round 1 stderr] \\x1b]0;owned-err\\x07err-line\\x1b[1A\n"),
        "{stderr}"
    );
    assert!(
        stderr.contains("[round 1] no newline at the end \\x1b[31m\n"),
        "{stderr}"
    );
    // The report's summary in the progress line: its sequences shown, not sent.
    assert!(
        stderr.contains("done \\x1b]0;pwned\\x07 \\x1b[2J"),
        "{stderr}"
    );
}

#[test]
fn the_artifacts_path_is_printed_before_round_1_ends() {
    let f = Fixture::new();
    let agent = f.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let out = f.run(&agent).output();
    out.expect_code(0);
    let id = out.job_id();
    let state = f.state.canonicalize().unwrap();
    let path = format!(
        "ralph: artifacts: {}\n",
        state.join("jobs").join(&id).display()
    );
    let first = index_of(&out.stderr, &path);
    let summary = index_of(&out.stderr, "ralph: round 1/");
    assert!(first < summary, "{}", out.stderr);
}

/// `ralph run --follow` on a pseudo-terminal (util-linux `script`) with `env`; the terminal's output
/// is collected as it is written.
fn run_on_a_tty(f: &Fixture, agent: &std::path::Path, env: &[(&str, &str)]) -> (Child, Collected) {
    let mut cmd_line = format!("'{}'", ralph_bin().display());
    for a in f.run(agent).command().get_args() {
        cmd_line.push_str(&format!(
            " '{}'",
            a.to_str().unwrap().replace('\'', "'\\''")
        ));
    }
    cmd_line.push_str(" --max-rounds 3 --follow");
    let mut c = Command::new("script");
    c.args(["-qfec", &cmd_line, "/dev/null"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_remove("NO_COLOR");
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().expect("script (util-linux) runs");
    let out = Collected::of(child.stdout.take().unwrap());
    let _err = Collected::of(child.stderr.take().unwrap());
    (child, out)
}

/// The distinct values the live line showed for the round's clock (`round 1/3 · 4s · job …`).
fn round_clocks(tty: &str) -> std::collections::BTreeSet<u64> {
    tty.split("round 1/3 · ")
        .skip(1)
        .filter_map(|rest| rest.split_once("s · job ")?.0.parse().ok())
        .collect()
}

#[test]
fn the_live_view_ticks_its_elapsed_time_while_a_round_sleeps() {
    let f = Fixture::new();
    let agent = gated_agent(&f);
    let (mut child, tty) = run_on_a_tty(&f, &agent, &[("TERM", "xterm")]);
    wait_until("the agent's first line is printed", LIMIT, || {
        tty.text().contains("marker-live-1")
    });
    // The round prints nothing more while it waits; the spinner's clock still moves.
    wait_until("the round's clock shows two different times", LIMIT, || {
        round_clocks(&tty.text()).len() >= 2
    });
    assert!(child.try_wait().unwrap().is_none(), "{:?}", tty.text());
    std::fs::write(f.ws.join("go"), "").unwrap();
    assert_eq!(
        wait_exit(&mut child, "ralph run exits", &tty),
        0,
        "{}",
        tty.text()
    );
}

#[test]
fn term_dumb_and_no_color_get_plain_lines_on_a_terminal() {
    for env in [
        &[("TERM", "dumb")][..],
        &[("TERM", "xterm"), ("NO_COLOR", "1")][..],
    ] {
        let f = Fixture::new();
        let agent = f.agent(
            "slow.sh",
            &format!(
                "echo hello\nsleep 1\necho '{}' > \"$RALPH_REPORT_FILE\"",
                complete_report("ok")
            ),
        );
        let (mut child, tty) = run_on_a_tty(&f, &agent, env);
        assert_eq!(
            wait_exit(&mut child, "ralph run exits", &tty),
            0,
            "{}",
            tty.text()
        );
        let bytes = tty.bytes();
        let text = tty.text();
        assert!(
            text.contains("ralph: round 1/3 complete"),
            "{env:?}: {text:?}"
        );
        assert!(
            !bytes.contains(&0x1b),
            "{env:?}: escape on the terminal: {text:?}"
        );
    }
}

#[test]
fn plain_output_without_a_terminal_has_no_escape_sequence() {
    let f = Fixture::new();
    let agent = f.agent(
        "plain.sh",
        &format!(
            "printf 'colour \\033[32mgreen\\033[0m\\n'\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("ok")
        ),
    );
    let out = f
        .run(&agent)
        .arg("--follow")
        .env("TERM", "xterm-256color")
        .command()
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("[round 1] colour \\x1b[32mgreen\\x1b[0m\n"),
        "{text}"
    );
    assert!(!out.stderr.contains(&0x1b), "{text:?}");
}

#[test]
fn logs_round_follow_prints_what_the_running_round_writes_and_exits_when_it_ends() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "gated.sh",
        &format!(
            r#"echo "first-line"
i=0
while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
echo "written-after-go"
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("followed")
        ),
    );
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({"max_rounds": 2}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    // Started at once: the round may not have started yet, and is waited for.
    let mut logs = Command::new(ralph_bin())
        .args(["logs", &id, "--round", "1", "--follow"])
        .env("RALPH_SERVER", s.url())
        .env("RALPH_TOKEN", s.token())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = Collected::of(logs.stdout.take().unwrap());
    let err = Collected::of(logs.stderr.take().unwrap());
    wait_until("the round's first line is followed", LIMIT, || {
        out.text().contains("first-line\n")
    });
    assert!(logs.try_wait().unwrap().is_none(), "{}", err.text());
    std::fs::write(ws.join("go"), "").unwrap();
    let code = wait_exit(&mut logs, "ralph logs --follow exits", &out);
    assert_eq!(code, 0, "{}", err.text());
    // Behind the round's label (issue 25), as `ralph logs --round` prints it.
    assert_eq!(
        out.text(),
        "[round 1] first-line\n[round 1] written-after-go\n"
    );
    assert_eq!(
        s.wait_finished(&id, LIMIT)["outcome"],
        "complete",
        "{}",
        s.log_text()
    );
    // A round the job ended without: a clear error naming it.
    let never = s.ralph(&["logs", &id, "--round", "2", "--follow"]);
    assert_eq!(never.code, 64, "{never:?}");
    assert!(never.stderr.contains("round 2"), "{never:?}");
}
