//! Issue 25: what a hostile agent's text does on the operator's terminal and in a CI log. A
//! scripted agent puts OSC 52 (the clipboard), OSC 8 (a link), OSC 0 (the title), a screen clear,
//! a newline and a forged journal line, a newline and GitHub workflow commands (`::error`,
//! `::add-mask::`, legacy `##[error]`) and a GitLab section marker into its report (summary,
//! blocker, evidence, next steps) and its stdout and stderr. `ralph run` (progress, `--follow`,
//! the result line), `ralph show`, `ralph logs JOB`, `ralph logs JOB --round 1`, `ralph wait`,
//! `ralph submit` and `ralph diff` are then run on a pseudo-terminal and with pipes under
//! `GITHUB_ACTIONS=true`, and the BYTES they print are checked: no escape byte, no line of the
//! agent at column 0 (none starting with `::`, no forged journal line), no `##name[` command,
//! the workflow commands paused in GitHub Actions — and the agent's text still there, escaped.

use crate::common;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::server::Server;
use common::{Fixture, ralph_bin};
use ralph_runner::util::terminal;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);

/// The hostile text: every attack of the issue in one string.
const H: &str = "\u{1b}]52;c;cHduZWQ=\u{7}\u{1b}]8;;https://evil.example/\u{1b}\\click\u{1b}]8;;\u{1b}\\\u{1b}]0;pwned-title\u{7}\u{1b}[2J\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged\n::error title=ralph::pwned\n::add-mask::secret\n\u{1b}[0Ksection_start:123:x\r\u{1b}[0Kheader ##[error]legacy";

/// The OSC 52 sequence as the output must show it.
const OSC52_SHOWN: &str = "\\x1b]52;c;cHduZWQ=\\x07";

/// CI variables the runs outside CI must not inherit (the suite itself may run in CI).
const CI_VARS: [&str; 3] = ["CI", "GITHUB_ACTIONS", "GITLAB_CI"];

/// The hostile report (blocked) and the agent that writes it, prints `out.bin` on stdout,
/// `err.bin` on stderr and writes `evil.txt` into the workspace. Its files go in `dir`.
fn hostile_agent(dir: &Path) -> std::path::PathBuf {
    let report = json!({
        "status": "blocked",
        "summary": format!("sum {H}"),
        "evidence": [format!("ev {H}")],
        "nextSteps": [format!("ns {H}")],
        "blocker": format!("blk {H}"),
    });
    std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
    std::fs::write(
        dir.join("out.bin"),
        format!("out-marker {H}\n ::error::indented\nlast line without newline {H}"),
    )
    .unwrap();
    std::fs::write(dir.join("err.bin"), format!("err-marker {H}\n")).unwrap();
    let agent = dir.join("hostile.sh");
    let d = dir.display();
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncat '{d}/out.bin'\ncat '{d}/err.bin' >&2\ncp '{d}/out.bin' evil.txt\ncp '{d}/report.json' \"$RALPH_REPORT_FILE\"\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    agent
}

/// What one command printed.
struct Printed {
    code: i32,
    /// The terminal's bytes (stdout and stderr together on a pty), or stdout with pipes.
    out: Vec<u8>,
    /// stderr with pipes (empty on a pty).
    err: Vec<u8>,
}

impl Printed {
    fn out_text(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }
    fn err_text(&self) -> String {
        String::from_utf8_lossy(&self.err).into_owned()
    }
}

fn read_all(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        buf
    })
}

/// Runs `cmd` to its end (at most `LIMIT`, then killed); its output.
fn finish(mut cmd: Command) -> Printed {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = read_all(child.stdout.take().unwrap());
    let err = read_all(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("{cmd:?} did not end within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Printed {
        code: status.code().unwrap_or(-1),
        out: out.join().unwrap(),
        err: err.join().unwrap(),
    }
}

fn quoted(a: &str) -> String {
    format!("'{}'", a.replace('\'', "'\\''"))
}

/// `ralph ARGS` on a pseudo-terminal (util-linux `script`), `TERM` as given, outside CI: what the
/// terminal received. `script` exits with the command's code.
fn on_a_tty(args: &[&str], env: &[(&str, &str)], term: &str) -> Printed {
    let mut line = quoted(&ralph_bin().display().to_string());
    for a in args {
        line.push(' ');
        line.push_str(&quoted(a));
    }
    let mut c = Command::new("script");
    c.args(["-qfec", &line, "/dev/null"])
        .env("TERM", term)
        .env_remove("NO_COLOR");
    for v in CI_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    finish(c)
}

/// `ralph ARGS` with pipes, as a CI step runs it: `GITHUB_ACTIONS=true CI=true`.
fn in_github_actions(args: &[&str], env: &[(&str, &str)]) -> Printed {
    let mut c = Command::new(ralph_bin());
    c.args(args)
        .env("GITHUB_ACTIONS", "true")
        .env("CI", "true")
        .env_remove("GITLAB_CI");
    for (k, v) in env {
        c.env(k, v);
    }
    finish(c)
}

/// `ralph ARGS` with pipes outside CI.
fn with_pipes(args: &[&str], env: &[(&str, &str)]) -> Printed {
    let mut c = Command::new(ralph_bin());
    c.args(args);
    for v in CI_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    finish(c)
}

/// A runner line that pauses or resumes GitHub's workflow commands.
fn is_pause_line(l: &str) -> bool {
    let token = |t: &str| {
        t.strip_prefix("ralph-")
            .is_some_and(|h| h.len() == 32 && h.chars().all(|c| c.is_ascii_hexdigit()))
    };
    l.strip_prefix("::stop-commands::").is_some_and(token)
        || l.strip_prefix("::")
            .and_then(|r| r.strip_suffix("::"))
            .is_some_and(token)
}

/// The lines of what a terminal or a log received (a pty ends lines with `\r\n`).
fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
        .collect()
}

/// The bytes a terminal or a CI log received are safe: no escape or other control byte (but
/// newline, the pty's `\r` before it, tab), no line of the agent's (`::` at its start, after
/// white space; the forged journal line; a section marker), no `##name[` command anywhere.
fn assert_safe(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    for (i, b) in bytes.iter().enumerate() {
        let ok = match b {
            b'\n' | b'\t' => true,
            b'\r' => bytes.get(i + 1) == Some(&b'\n'),
            b => *b >= 0x20 && *b != 0x7f,
        };
        assert!(ok, "{what}: control byte {b:#04x} at {i}:\n{text}");
    }
    assert!(
        !text.contains('\u{9b}') && !text.contains('\u{85}'),
        "{what}: a C1 control:\n{text}"
    );
    for l in lines(bytes) {
        if is_pause_line(&l) {
            continue;
        }
        assert!(
            !terminal::starts_command(&l),
            "{what}: a line starts a workflow command: {l:?}\n{text}"
        );
        assert!(
            !l.starts_with("2026-01-01T00:00:00.000Z #99"),
            "{what}: the forged journal line starts a line:\n{text}"
        );
        assert!(
            !l.trim_start().starts_with("section_start"),
            "{what}: a section marker starts a line:\n{text}"
        );
        assert!(
            !l.starts_with("ralph: complete"),
            "{what}: a forged result line:\n{text}"
        );
    }
    assert!(
        !terminal::holds_command(&text),
        "{what}: a ##name[ command:\n{text}"
    );
}

/// The agent's text is still shown, escaped, on one line: OSC 52 visible and the forged
/// journal line after a visible `\n`.
fn assert_shown(what: &str, text: &str, marker: &str) {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{what}: `{marker}` is not shown:\n{text}"));
    let line = text[at..].split('\n').next().unwrap_or("");
    assert!(line.contains(OSC52_SHOWN), "{what}: {line:?}");
    assert!(
        line.contains("\\n2026-01-01T00:00:00.000Z #99 finished: complete (verified): forged\\n::error title=ralph::pwned"),
        "{what}: {line:?}"
    );
}

/// Under GitHub Actions, `stream` (stderr) pauses workflow commands first and resumes them last,
/// with one token; nothing of the agent's comes before or after.
fn assert_paused(what: &str, stream: &[u8]) {
    let ls: Vec<String> = lines(stream)
        .into_iter()
        .filter(|l| !l.is_empty())
        .collect();
    let first = ls.first().map(String::as_str).unwrap_or("");
    let last = ls.last().map(String::as_str).unwrap_or("");
    let token = first
        .strip_prefix("::stop-commands::")
        .unwrap_or_else(|| panic!("{what}: commands not paused first:\n{ls:#?}"));
    assert_eq!(last, format!("::{token}::"), "{what}: {ls:#?}");
    assert!(is_pause_line(first) && is_pause_line(last), "{what}");
}

/// stdout is exactly the command's output: no pause line in it.
fn assert_no_pause(what: &str, stream: &[u8]) {
    assert!(
        !lines(stream).iter().any(|l| is_pause_line(l)),
        "{what}: a pause line on stdout:\n{}",
        String::from_utf8_lossy(stream)
    );
}

fn json_of(what: &str, bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// `ralph run` of the hostile agent in `f`, with `extra` arguments.
fn run_args(f: &Fixture, agent: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = f
        .run(agent)
        .command()
        .get_args()
        .map(|a| a.to_str().unwrap().to_owned())
        .collect();
    args.extend(["--max-rounds", "3", "--follow"].map(str::to_owned));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    args
}

#[test]
fn ralph_run_shows_the_agents_text_escaped_on_a_terminal() {
    let f = Fixture::new();
    let agent = hostile_agent(&f.agents);
    let args = run_args(&f, &agent, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Plain progress (TERM=dumb): every byte is checked.
    let tty = on_a_tty(&args, &[], "dumb");
    let text = tty.out_text();
    assert_eq!(tty.code, 1, "blocked:\n{text}");
    assert_safe("ralph run on a terminal", &tty.out);
    // The result line on stderr holds the blocker, escaped, on one line.
    assert_shown("the result line", &text, "ralph: blocked after 1 round(s)");
    assert_shown(
        "the result line's blocker",
        &text,
        "worker reported blocked: blk ",
    );
    // --follow shows the agent's lines behind the round's label.
    assert!(text.contains("[round 1] out-marker \\x1b]52;c;"), "{text}");
    assert!(
        text.contains("[round 1] ::error title=ralph::pwned"),
        "{text}"
    );
    assert!(text.contains("[round 1]  ::error::indented"), "{text}");
    assert!(text.contains("[round 1 stderr] err-marker "), "{text}");
    // The progress line quotes the summary.
    assert!(text.contains("ralph: round 1/3 blocked ("), "{text}");
    assert!(text.contains("sum \\x1b]52;c;cHduZWQ=\\x07"), "{text}");

    // The live view (TERM=xterm) draws with escapes of its own, never the agent's.
    let live = on_a_tty(&args, &[], "xterm");
    assert_eq!(live.code, 1, "{}", live.out_text());
    for seq in [
        &b"\x1b]"[..],
        b"\x07",
        b"\x1b[2J",
        b"\x1b[0K",
        b"\x1b[H",
        b"\x9b",
    ] {
        assert!(
            !live.out.windows(seq.len()).any(|w| w == seq),
            "the live view sent {seq:?}:\n{:?}",
            live.out_text()
        );
    }
    assert!(live.out_text().contains(OSC52_SHOWN));
}

#[test]
fn ralph_run_in_github_actions_pauses_commands_and_prints_no_agent_line() {
    let f = Fixture::new();
    let agent = hostile_agent(&f.agents);
    let args = run_args(&f, &agent, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ci = in_github_actions(&args, &[]);
    let err = ci.err_text();
    assert_eq!(ci.code, 1, "{err}");
    assert_safe("ralph run's stderr in GitHub Actions", &ci.err);
    assert_paused("ralph run's stderr", &ci.err);
    assert_shown("the result line", &err, "ralph: blocked after 1 round(s)");
    // stdout is the result object, nothing else: the same message, exactly.
    assert_safe("ralph run --json's stdout", &ci.out);
    let result = json_of("ralph run --json", &ci.out);
    assert_eq!(
        result["message"].as_str().unwrap(),
        format!("worker reported blocked: blk {H}")
    );
    assert_eq!(
        result["report"]["summary"].as_str().unwrap(),
        format!("sum {H}")
    );
}

#[test]
fn show_logs_and_wait_show_the_agents_text_escaped_on_a_terminal_and_in_ci() {
    let f = Fixture::new();
    let agent = hostile_agent(&f.agents);
    let args = run_args(&f, &agent, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = with_pipes(&args, &[]);
    assert_eq!(run.code, 1, "{}", run.err_text());
    let id = json_of("ralph run", &run.out)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = f.state.display().to_string();
    let local = |cmd: &[&str]| {
        let mut a = cmd.to_vec();
        a.extend(["--state-dir", &state, &id]);
        a.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>()
    };
    let cases: [(&str, Vec<String>, i32); 5] = [
        ("show", local(&["show"]), 0),
        ("logs", local(&["logs"]), 0),
        ("logs --round 1", local(&["logs", "--round", "1"]), 0),
        (
            "logs --round 1 --stream stderr",
            local(&["logs", "--round", "1", "--stream", "stderr"]),
            0,
        ),
        ("wait", local(&["wait"]), 1),
    ];
    for (what, args, code) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let tty = on_a_tty(&args, &[], "xterm");
        assert_eq!(tty.code, *code, "{what}: {}", tty.out_text());
        assert_safe(&format!("{what} on a terminal"), &tty.out);
        let ci = in_github_actions(&args, &[]);
        assert_eq!(ci.code, *code, "{what}: {}", ci.err_text());
        assert_safe(&format!("{what}'s stdout in GitHub Actions"), &ci.out);
        assert_safe(&format!("{what}'s stderr in GitHub Actions"), &ci.err);
        assert_paused(&format!("{what}'s stderr"), &ci.err);
        assert_no_pause(&format!("{what}'s stdout"), &ci.out);
    }
    let show = on_a_tty(
        &cases[0].1.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        "xterm",
    );
    assert_shown(
        "show's message",
        &show.out_text(),
        "  message: worker reported blocked: blk ",
    );
    assert_shown(
        "show's last report",
        &show.out_text(),
        "  last report: blocked — sum ",
    );
    let logs = on_a_tty(
        &cases[1].1.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        "xterm",
    );
    assert_shown(
        "the journal's round line",
        &logs.out_text(),
        "round 1 attempt 1 (",
    );
    assert_shown(
        "the journal's last line",
        &logs.out_text(),
        "finished: blocked (reported): ",
    );
    let round = on_a_tty(
        &cases[2].1.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        "xterm",
    );
    let text = round.out_text();
    assert!(
        text.contains("[round 1] out-marker \\x1b]52;c;cHduZWQ=\\x07"),
        "{text}"
    );
    assert!(
        text.contains("[round 1] 2026-01-01T00:00:00.000Z #99 finished"),
        "{text}"
    );
    assert!(text.contains("[round 1] ::add-mask::secret"), "{text}");
    assert!(
        text.contains("[round 1] \\x1b[0Ksection_start:123:x\\r\\x1b[0Kheader ##\\x5berror]legacy"),
        "{text}"
    );
    assert!(
        text.contains("[round 1] last line without newline "),
        "{text}"
    );
    let err = on_a_tty(
        &cases[3].1.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        "xterm",
    );
    assert!(
        err.out_text()
            .contains("[round 1 stderr] err-marker \\x1b]52;"),
        "{}",
        err.out_text()
    );
    let wait = on_a_tty(
        &cases[4].1.iter().map(String::as_str).collect::<Vec<_>>(),
        &[],
        "xterm",
    );
    assert_shown("wait's last event", &wait.out_text(), "ralph: ");

    // --json stays the API's value: no pause line in it, the agent's text exact.
    for cmd in [&["show"][..], &["wait"][..]] {
        let mut a = local(cmd);
        a.push("--json".to_owned());
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let ci = in_github_actions(&a, &[]);
        assert_safe(&format!("{cmd:?} --json in GitHub Actions"), &ci.out);
        let j = json_of(&format!("{cmd:?} --json"), &ci.out);
        assert_eq!(j["report"]["summary"].as_str().unwrap(), format!("sum {H}"));
    }
    let mut a = local(&["logs"]);
    a.push("--json".to_owned());
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let ci = in_github_actions(&a, &[]);
    assert_safe("logs --json in GitHub Actions", &ci.out);
    let finished = String::from_utf8_lossy(&ci.out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["type"] == "job_finished")
        .unwrap();
    assert_eq!(
        finished["message"].as_str().unwrap(),
        format!("worker reported blocked: blk {H}")
    );
}

#[test]
fn logs_round_raw_prints_the_captured_bytes() {
    let f = Fixture::new();
    let agent = hostile_agent(&f.agents);
    let args = run_args(&f, &agent, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = with_pipes(&args, &[]);
    let id = json_of("ralph run", &run.out)["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let state = f.state.display().to_string();
    let raw = with_pipes(
        &["logs", "--state-dir", &state, &id, "--round", "1", "--raw"],
        &[],
    );
    assert_eq!(raw.code, 0, "{}", raw.err_text());
    assert_eq!(raw.out, std::fs::read(f.agents.join("out.bin")).unwrap());
    // --raw is for --round only.
    let bad = with_pipes(&["logs", "--state-dir", &state, &id, "--raw"], &[]);
    assert_eq!(bad.code, 64, "{}", bad.err_text());
}

#[test]
fn submit_wait_show_logs_and_diff_against_a_server_show_the_agents_text_escaped() {
    let s = Server::new("");
    let agent = hostile_agent(&s.agents);
    let project = s.dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("README"), "base\n").unwrap();
    for a in [
        &["init", "-q", "-b", "main"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@x",
            "commit",
            "-qm",
            "base",
        ],
    ] {
        assert!(
            Command::new("git")
                .args(a)
                .current_dir(&project)
                .status()
                .unwrap()
                .success()
        );
    }
    let env = [("RALPH_SERVER", s.url()), ("RALPH_TOKEN", s.token())];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let agents = s.agents.display().to_string();
    let project_arg = project.display().to_string();
    let agent_arg = agent.display().to_string();
    let submit_args = [
        "submit",
        "--upload",
        &project_arg,
        "--objective",
        "x",
        "--agent-cmd",
        &agent_arg,
        "--read",
        &agents,
        "--max-rounds",
        "2",
        "--retry-backoff",
        "10ms",
        "--kill-grace",
        "1s",
        "--name",
        "::error::named ##[error]y",
    ];
    // submit echoes the job's id: one line, nothing else on stdout (`id=$(ralph submit …)`
    // works in GitHub Actions too); the pause is on stderr.
    let sub = in_github_actions(&submit_args, &env);
    assert_eq!(sub.code, 0, "{}", sub.err_text());
    assert_safe("submit's stdout", &sub.out);
    assert_safe("submit's stderr", &sub.err);
    assert_paused("submit's stderr", &sub.err);
    let out = sub.out_text();
    let id = out
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("{out:?}"))
        .to_owned();
    assert!(uuid_like(&id), "{out:?}");

    let wait = on_a_tty(&["wait", &id], &env, "xterm");
    assert_eq!(wait.code, 1, "{}", wait.out_text());
    assert_safe("wait on a terminal", &wait.out);
    assert_shown(
        "wait's result",
        &wait.out_text(),
        "finished: blocked (reported): ",
    );
    for args in [
        &["show", &id][..],
        &["logs", &id],
        &["logs", &id, "--round", "1"],
        &["jobs"],
    ] {
        let tty = on_a_tty(args, &env, "xterm");
        assert_eq!(tty.code, 0, "{args:?}: {}", tty.out_text());
        assert_safe(&format!("{args:?} on a terminal"), &tty.out);
        let ci = in_github_actions(args, &env);
        assert_safe(&format!("{args:?} in GitHub Actions"), &ci.out);
        assert_safe(&format!("{args:?}'s stderr in GitHub Actions"), &ci.err);
        assert_paused(&format!("{args:?}'s stderr"), &ci.err);
        assert_no_pause(&format!("{args:?}'s stdout"), &ci.out);
    }
    let show = on_a_tty(&["show", &id], &env, "xterm");
    assert!(
        show.out_text()
            .contains("  name: ::error::named ##\\x5berror]y"),
        "{}",
        show.out_text()
    );

    // The patch: exact to a pipe outside CI and to a file in CI; escaped on a terminal and in a
    // CI log, with a note on stderr.
    let (_, api) = s.api("GET", &format!("/v1/jobs/{id}/patch"), None);
    let exact = with_pipes(&["diff", &id], &env);
    assert_eq!(exact.code, 0, "{}", exact.err_text());
    assert!(
        exact.out.windows(4).any(|w| w == b"\x1b]52"),
        "the patch holds the bytes"
    );
    assert_eq!(
        String::from_utf8_lossy(&exact.out),
        api.as_str().unwrap_or("")
    );
    let file = s.dir.path().join("result.patch");
    let mut c = Command::new(ralph_bin());
    c.args(["diff", &id])
        .env("GITHUB_ACTIONS", "true")
        .env("CI", "true")
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&file).unwrap())
        .stderr(Stdio::null());
    assert!(c.status().unwrap().success());
    assert_eq!(std::fs::read(&file).unwrap(), exact.out);
    let tty = on_a_tty(&["diff", &id], &env, "xterm");
    assert_eq!(tty.code, 0);
    assert_safe("diff on a terminal", &tty.out);
    assert!(
        tty.out_text().contains("+out-marker \\x1b]52;c;"),
        "{}",
        tty.out_text()
    );
    assert!(
        tty.out_text().contains("shown escaped"),
        "{}",
        tty.out_text()
    );
    let ci = in_github_actions(&["diff", &id], &env);
    assert_safe("diff in GitHub Actions", &ci.out);
    assert!(ci.err_text().contains("shown escaped"), "{}", ci.err_text());
    let raw = in_github_actions(&["diff", &id, "--raw"], &env);
    assert_eq!(raw.out, exact.out);
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

#[test]
fn an_error_quoting_a_hostile_path_is_one_escaped_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("obj{H}.md"));
    let file = dir.path().join("jobs.toml");
    std::fs::write(
        &file,
        format!(
            "[[job]]\nobjective_file = {}\nagent_cmd = \"true\"\n",
            serde_json::to_string(&path.display().to_string()).unwrap()
        ),
    )
    .unwrap();
    let env = [("RALPH_SERVER", "http://127.0.0.1:1"), ("RALPH_TOKEN", "x")];
    let ci = in_github_actions(&["submit", file.to_str().unwrap()], &env);
    assert_eq!(ci.code, 64, "{}", ci.err_text());
    assert_safe("submit's error in GitHub Actions", &ci.err);
    assert_paused("submit's stderr", &ci.err);
    let err = ci.err_text();
    let line = err
        .lines()
        .find(|l| l.contains("objective_file"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.starts_with("ralph: job[0].objective_file: "), "{line}");
    assert!(line.contains(OSC52_SHOWN), "{line}");
    let tty = on_a_tty(&["submit", file.to_str().unwrap()], &env, "xterm");
    assert_eq!(tty.code, 64);
    assert_safe("submit's error on a terminal", &tty.out);
}
