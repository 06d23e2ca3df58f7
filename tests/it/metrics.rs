//! Metrics end to end (SPEC §7): jobs with known usage lines and a retried round, then the exact
//! counter values in the `--metrics-textfile` of `ralph run` (which keeps counting across
//! runs), in `/metrics` of `ralph serve`, and in the body pushed to a Pushgateway; every
//! exposition passes `promtool check metrics` without findings. Also the agent presets
//! end to end, with stand-in CLIs that print recorded output.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::promtool::promtool_check;
use common::server::{Server, job};
use common::*;
use serde_json::json;

/// Counts its calls in the workspace; every call appends one usage line; call 2 fails without
/// a report (so round 2 is retried); call 4 completes. So: 4 attempts, 3 rounds.
fn metered_body() -> String {
    format!(
        r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
echo '{{"model":"m-a","input_tokens":100,"cached_input_tokens":40,"output_tokens":10,"reasoning_tokens":3}}' >> "$RALPH_USAGE_FILE"
[ $n -eq 2 ] && exit 3
if [ $n -ge 4 ]; then printf '%s' '{}' > "$RALPH_REPORT_FILE"; else printf '%s' '{}' > "$RALPH_REPORT_FILE"; fi"#,
        complete_report("all done"),
        continue_report("one more step")
    )
}

/// The exact sample lines one metered job adds, times `k` jobs.
fn expected_lines(k: u64) -> Vec<String> {
    [
        ("ralph_rounds_total{outcome=\"continue\"}", 2),
        ("ralph_rounds_total{outcome=\"complete\"}", 1),
        ("ralph_rounds_total{outcome=\"failed\"}", 1),
        ("ralph_rounds_total{outcome=\"blocked\"}", 0),
        ("ralph_rounds_total{outcome=\"cancelled\"}", 0),
        ("ralph_round_retries_total{reason=\"no_report\"}", 1),
        ("ralph_round_retries_total{reason=\"invalid_report\"}", 0),
        ("ralph_tokens_total{kind=\"input\",model=\"m-a\"}", 400),
        (
            "ralph_tokens_total{kind=\"cached_input\",model=\"m-a\"}",
            160,
        ),
        ("ralph_tokens_total{kind=\"output\",model=\"m-a\"}", 40),
        ("ralph_tokens_total{kind=\"reasoning\",model=\"m-a\"}", 12),
        ("ralph_jobs_started_total", 1),
        ("ralph_jobs_finished_total{outcome=\"complete\"}", 1),
        ("ralph_jobs_finished_total{outcome=\"round-failed\"}", 0),
        ("ralph_verify_total{result=\"passed\"}", 1),
        ("ralph_verify_total{result=\"failed\"}", 0),
        ("ralph_handoff_bytes_count", 3),
        ("ralph_round_duration_seconds_count{backend=\"native\"}", 4),
        ("ralph_round_duration_seconds_count{backend=\"docker\"}", 0),
        ("ralph_sandbox_setup_seconds_count{backend=\"native\"}", 4),
        (
            "ralph_agent_request_retries_total{reason=\"rate_limit\"}",
            0,
        ),
        (
            "ralph_sandbox_setup_failures_total{backend=\"native\",reason=\"landlock\"}",
            0,
        ),
        ("ralph_jobs{state=\"queued\"}", 0),
        ("ralph_jobs{state=\"running\"}", 0),
    ]
    .iter()
    .map(|(s, n)| format!("{s} {}", n * k))
    .collect()
}

fn assert_lines(text: &str, lines: &[String]) {
    for l in lines {
        assert!(text.lines().any(|x| x == l), "missing `{l}` in:\n{text}");
    }
}

fn metered_run(f: &Fixture, agent: &Path, extra: &[&str]) -> Output {
    let _ = std::fs::remove_file(f.ws.join("count"));
    f.run(agent)
        .args(["--round-retries", "1", "--verify", "true"])
        .args(extra)
        .output()
}

#[test]
fn textfile_has_exact_counts_and_keeps_counting_across_runs() {
    let f = Fixture::new();
    let agent = f.agent("metered.sh", &metered_body());
    let prom = f.root.path().join("textfile").join("ralph.prom");
    std::fs::create_dir_all(prom.parent().unwrap()).unwrap();
    let prom_arg = prom.display().to_string();

    let out = metered_run(&f, &agent, &["--metrics-textfile", &prom_arg]);
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["rounds"], 3);
    assert_eq!(
        j["usage"],
        json!({"input_tokens": 400, "cached_input_tokens": 160, "output_tokens": 40, "reasoning_tokens": 12})
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_lines(&text, &expected_lines(1));
    promtool_check(&text);

    // A second run adds to the same file: counters and histograms keep counting.
    metered_run(&f, &agent, &["--metrics-textfile", &prom_arg]).expect_code(0);
    let text = std::fs::read_to_string(&prom).unwrap();
    let mut twice = expected_lines(2);
    // Gauges are not summed.
    twice.retain(|l| !l.starts_with("ralph_jobs{"));
    assert_lines(&text, &twice);
    // Issue 26: no zero `model="unknown"` series beside the model the usage named.
    assert!(!text.contains("model=\"unknown\""), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("ralph_build_info"))
            .count(),
        1
    );
    promtool_check(&text);
    // Only the .prom file (and the hidden lock) is there: no temporary file left.
    let names: Vec<String> = std::fs::read_dir(prom.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| n == "ralph.prom" || n == ".ralph.prom.lock"),
        "{names:?}"
    );
}

#[test]
fn a_missing_textfile_directory_is_a_usage_error_before_anything_runs() {
    let f = Fixture::new();
    let agent = f.agent("never.sh", "touch ran");
    let out = f
        .run(&agent)
        .args(["--metrics-textfile", "/nonexistent-dir/ralph.prom"])
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("--metrics-textfile"), "{}", out.stderr);
    assert!(!f.ws.join("ran").exists());
}

/// A one-request HTTP server: returns the request line and body it received.
fn one_request_server(status: &'static str) -> (String, std::thread::JoinHandle<(String, String)>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut request_line = String::new();
        r.read_line(&mut request_line).unwrap();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            if h.trim().is_empty() {
                break;
            }
            let lower = h.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let mut s = s;
        write!(
            s,
            "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        (request_line, String::from_utf8(body).unwrap())
    });
    (url, h)
}

#[test]
fn pushgateway_gets_the_exact_counts_in_a_put_to_the_grouped_url() {
    let f = Fixture::new();
    let agent = f.agent("metered.sh", &metered_body());
    let (url, server) = one_request_server("200 OK");
    metered_run(&f, &agent, &["--pushgateway", &url]).expect_code(0);
    let (request_line, body) = server.join().unwrap();
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    assert_eq!(
        request_line.trim(),
        format!("PUT /metrics/job/ralph/instance/{host} HTTP/1.1")
    );
    assert_lines(&body, &expected_lines(1));
    promtool_check(&body);
}

#[test]
fn a_failed_push_is_a_warning_not_a_failed_job() {
    let f = Fixture::new();
    let agent = f.agent("metered.sh", &metered_body());
    // A gateway that refuses the push.
    let (url, server) = one_request_server("500 Internal Server Error");
    let out = metered_run(&f, &agent, &["--pushgateway", &url]);
    out.expect_code(0);
    server.join().unwrap();
    assert!(
        out.stderr.contains("warning: failed to push metrics") && out.stderr.contains("500"),
        "{}",
        out.stderr
    );
    // Nobody listening at all.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = metered_run(
        &f,
        &agent,
        &["--pushgateway", &format!("http://127.0.0.1:{port}")],
    );
    out.expect_code(0);
    assert!(
        out.stderr.contains("warning: failed to push metrics"),
        "{}",
        out.stderr
    );
    // Not a URL: refused before the job.
    let out = metered_run(&f, &agent, &["--pushgateway", "pgw:9091"]);
    out.expect_code(64);
    assert!(out.stderr.contains("--pushgateway"), "{}", out.stderr);
}

fn get_metrics(s: &Server, token: Option<&str>) -> (u16, String) {
    s.raw("GET", "/metrics", token, None, None).unwrap()
}

#[test]
fn serve_metrics_have_exact_counts_and_pass_promtool() {
    let s = Server::new("max_concurrent_jobs = 2\n");
    let agent = s.agent("metered.sh", &metered_body());
    let jobs: Vec<_> = (0..2)
        .map(|i| {
            job(
                &s.workspace(&format!("ws{i}")),
                &agent,
                json!({"round_retries": 1, "verify": "true", "mode": TEST_MODE}),
            )
        })
        .collect();
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    for j in body["jobs"].as_array().unwrap() {
        let done = s.wait_finished(j["id"].as_str().unwrap(), Duration::from_secs(60));
        assert_eq!(done["outcome"], "complete", "{done}");
    }
    // Unauthenticated by default (`metrics_require_auth = false`).
    let (code, text) = get_metrics(&s, None);
    assert_eq!(code, 200, "{text}");
    assert_lines(&text, &expected_lines(2));
    assert!(text.contains("process_resident_memory_bytes"), "{text}");
    promtool_check(&text);
}

#[test]
fn serve_metrics_can_require_the_token() {
    let s = Server::new("metrics_require_auth = true\n");
    let (code, _) = get_metrics(&s, None);
    assert_eq!(code, 401);
    let (code, text) = get_metrics(&s, Some(&s.token()));
    assert_eq!(code, 200);
    assert!(text.contains("ralph_build_info{version="), "{text}");
}

/// A stand-in for an agent CLI: checks what the preset gives it (argv, stdin prompt, schema
/// file) and prints the recorded output of round `$RALPH_ROUND`.
fn fake_cli(f: &Fixture, name: &str, fixtures: &str, check: &str) -> PathBuf {
    let bin = f.agents.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures/agents")
        .canonicalize()
        .unwrap();
    let copy = f.agents.join("fixtures");
    if !copy.exists() {
        Command::new("cp")
            .arg("-r")
            .arg(&dir)
            .arg(&copy)
            .status()
            .unwrap();
    }
    let script = format!(
        "#!/bin/sh\nprompt=$(cat)\ncase \"$prompt\" in *\"round $RALPH_ROUND of\"*) ;; *) echo 'no prompt on stdin' >&2; exit 9;; esac\n{check}\ncat \"{}/{fixtures}\"\n",
        copy.display()
    );
    let p = bin.join(name);
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn preset_run(f: &Fixture, preset: &str, bin: &Path, prom: &Path) -> Output {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "fix the tests",
            "--json",
            "--agent",
            preset,
        ])
        .args([
            "--network",
            "full",
            "--mode",
            TEST_MODE,
            "--retry-backoff",
            "10ms",
        ])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&f.agents)
        .arg("--metrics-textfile")
        .arg(prom)
        .env(
            "PATH",
            &format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        )
        .output()
}

#[test]
fn codex_preset_end_to_end_counts_cumulative_usage_once() {
    let f = Fixture::new();
    let bin = fake_cli(
        &f,
        "codex",
        "codex/resume-round$RALPH_ROUND.jsonl",
        r#"[ "$1 $2 $3" = "exec --json --output-schema" ] || { echo "bad argv: $*" >&2; exit 8; }
grep -q '"nextSteps"' "$4" || { echo "no schema at $4" >&2; exit 7; }"#,
    );
    let prom = f.root.path().join("codex.prom");
    let out = preset_run(&f, "codex", &bin, &prom);
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete");
    assert_eq!(j["rounds"], 3);
    // The CLI's final cumulative total, counted once.
    assert_eq!(
        j["usage"],
        json!({"input_tokens": 80011, "cached_input_tokens": 73344, "output_tokens": 655, "reasoning_tokens": 320})
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_lines(
        &text,
        &[
            "ralph_tokens_total{kind=\"input\",model=\"unknown\"} 80011".into(),
            "ralph_tokens_total{kind=\"output\",model=\"unknown\"} 655".into(),
            "ralph_agent_request_retries_total{reason=\"network\"} 1".into(),
            "ralph_rounds_total{outcome=\"complete\"} 1".into(),
        ],
    );
    promtool_check(&text);
}

#[test]
fn claude_preset_end_to_end_and_is_error_fails_the_round() {
    let f = Fixture::new();
    let bin = fake_cli(
        &f,
        "claude",
        "claude/round$RALPH_ROUND.jsonl",
        r#"[ "$IS_SANDBOX" = 1 ] || { echo "IS_SANDBOX not set" >&2; exit 8; }"#,
    );
    let prom = f.root.path().join("claude.prom");
    let out = preset_run(&f, "claude", &bin, &prom);
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["rounds"], 3);
    // Sonnet (input + cache reads + cache writes) plus Haiku, over the three rounds.
    let sonnet_in: u64 = (1..=3)
        .map(|i| (20 + i) + (81000 + 100 * i) + (9000 + 10 * i))
        .sum();
    let haiku_in: u64 = (1..=3).map(|i| 1500 + i).sum();
    assert_eq!(j["usage"]["input_tokens"], sonnet_in + haiku_in);
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_lines(
        &text,
        &[
            format!(
                "ralph_tokens_total{{kind=\"input\",model=\"claude-haiku-4-5-20251001\"}} {haiku_in}"
            ),
            "ralph_agent_request_retries_total{reason=\"overloaded\"} 1".into(),
            "ralph_agent_request_retries_total{reason=\"rate_limit\"} 1".into(),
        ],
    );
    promtool_check(&text);

    // `is_error: true` with subtype `success`: the round fails (and is retried), never passes.
    let f = Fixture::new();
    let bin = fake_cli(&f, "claude", "claude/error-success-subtype.json", "");
    let prom = f.root.path().join("claude-err.prom");
    let out = preset_run(&f, "claude", &bin, &prom);
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed");
    assert!(
        j["message"].as_str().unwrap().contains("is_error true"),
        "{j}"
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert_lines(
        &text,
        &["ralph_round_retries_total{reason=\"agent_error\"} 1".into()],
    );
}

#[test]
fn presets_refuse_a_job_without_network() {
    let f = Fixture::new();
    // A preset's default is the gateway (SPEC §5); `none` asked for explicitly is refused.
    let out = Ralph::new()
        .args([
            "run",
            "--objective",
            "x",
            "--agent",
            "codex",
            "--network",
            "none",
            "--mode",
            TEST_MODE,
        ])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("--network gateway"), "{}", out.stderr);
}

/// The metric families of a registry, by name. `ralph_tokens_total`'s one label without a
/// known value (`model`) has no pre-initialised series, so a usage is counted first.
fn family_names() -> std::collections::BTreeSet<String> {
    let m = ralph_runner::metrics::Metrics::new(false).unwrap();
    m.record(&ralph_runner::metrics::MetricEvent::Tokens {
        model: "m".into(),
        usage: ralph_runner::usage::UsageTotals {
            input_tokens: 1,
            ..Default::default()
        },
    });
    m.gather().iter().map(|f| f.name().to_owned()).collect()
}

#[test]
fn docs_and_dashboard_name_only_metrics_that_exist_and_docs_name_them_all() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let families = family_names();
    let doc = std::fs::read_to_string(root.join("docs/metrics.md")).unwrap();
    for f in &families {
        assert!(
            doc.contains(&format!("`{f}`")),
            "docs/metrics.md does not describe `{f}`"
        );
    }
    let dash = std::fs::read_to_string(root.join("docs/grafana/ralph-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&dash).unwrap();
    let mut used = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("ralph_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name);
                assert!(
                    families.contains(base),
                    "dashboard panel `{}` uses `{name}`, which ralph does not export",
                    panel["title"]
                );
                used += 1;
            }
        }
    }
    assert!(used >= 15, "{used}");
}
