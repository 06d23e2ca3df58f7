//! The service's log (issue 12, item 6): `ralph serve --log-format json` writes one JSON object
//! per line with a timestamp, a level and fields; a job's start and finish, a refused request
//! (401, 403) are events with the job id, the status and the reason, never the token; RUST_LOG
//! sets the levels; the text form starts every line with a timestamp and escapes what a job
//! brings (a newline in a report or a path cannot forge a line).

use crate::common;

use std::time::Duration;

use common::server::{Server, job};
use common::{complete_report, wait_until};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);
const WRONG_TOKEN: &str = "wrong-token-0123456789-abcdef";

/// Every line of the log as JSON (panics on a line that is not).
fn json_lines(s: &Server) -> Vec<Value> {
    s.log_text()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

fn post(s: &Server, jobs: Vec<Value>) -> (u16, Value) {
    s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    )
}

fn submit_one(s: &Server, j: Value) -> String {
    let (code, body) = post(s, vec![j]);
    assert_eq!(code, 201, "{body}");
    body["jobs"][0]["id"].as_str().unwrap().to_owned()
}

#[test]
fn json_log_has_job_start_finish_and_refusals_without_the_token() {
    let s = Server::with_args("", &["--log-format", "json"], &[("RUST_LOG", "info")]);
    // Hostile first: a wrong token, and a submission over a rule.
    let (code, _) = s
        .raw("GET", "/v1/jobs", Some(WRONG_TOKEN), None, None)
        .unwrap();
    assert_eq!(code, 401);
    let agent = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let outside = tempfile::tempdir().unwrap();
    let mut refused = job(outside.path(), &agent, json!({}));
    refused["objective"] = json!("BODY-MARKER objective");
    let (code, body) = post(&s, vec![refused]);
    assert_eq!(code, 403, "{body}");
    wait_until("the refusals are logged", LIMIT, || {
        json_lines(&s)
            .iter()
            .filter(|l| l["message"] == "request refused")
            .count()
            >= 2
    });
    let ws = s.workspace("w1");
    let id = submit_one(&s, job(&ws, &agent, json!({"max_rounds": 2})));
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    wait_until("the finish is logged", LIMIT, || {
        json_lines(&s)
            .iter()
            .any(|l| l["message"] == "job finished" && l["job_id"] == id.as_str())
    });

    let lines = json_lines(&s);
    for l in &lines {
        let at = l["timestamp"]
            .as_str()
            .unwrap_or_else(|| panic!("no timestamp: {l}"));
        assert!(humantime::parse_rfc3339_weak(&at[..19]).is_ok(), "{l}");
        assert!(
            ["INFO", "WARN", "ERROR", "DEBUG", "TRACE"].contains(&l["level"].as_str().unwrap()),
            "{l}"
        );
        assert!(l["message"].is_string(), "{l}");
    }
    let start = lines
        .iter()
        .find(|l| l["message"] == "job started" && l["job_id"] == id.as_str())
        .unwrap_or_else(|| panic!("no start event: {lines:#?}"));
    assert_eq!(start["workspace"], ws.display().to_string(), "{start}");
    assert_eq!(start["backend"], "native", "{start}");
    assert_eq!(start["resumed"], false, "{start}");
    let fin = lines
        .iter()
        .find(|l| l["message"] == "job finished" && l["job_id"] == id.as_str())
        .unwrap();
    assert_eq!(fin["outcome"], "complete", "{fin}");
    assert_eq!(fin["rounds"], 1, "{fin}");
    assert!(fin["duration_ms"].is_u64(), "{fin}");
    let refusals: Vec<&Value> = lines
        .iter()
        .filter(|l| l["message"] == "request refused")
        .collect();
    let unauth = refusals.iter().find(|l| l["status"] == 401).unwrap();
    assert_eq!(unauth["level"], "WARN", "{unauth}");
    assert_eq!(unauth["method"], "GET", "{unauth}");
    assert_eq!(unauth["path"], "/v1/jobs", "{unauth}");
    assert!(
        unauth["peer"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{unauth}"
    );
    assert_eq!(unauth["reason"], "wrong bearer token", "{unauth}");
    let forbidden = refusals.iter().find(|l| l["status"] == 403).unwrap();
    assert_eq!(forbidden["method"], "POST", "{forbidden}");
    assert!(
        forbidden["reason"].as_str().unwrap().contains("workspace"),
        "{forbidden}"
    );
    let text = s.log_text();
    assert!(
        !text.contains(WRONG_TOKEN),
        "the wrong token is logged:\n{text}"
    );
    assert!(!text.contains(&s.token()), "the token is logged:\n{text}");
    assert!(!text.contains("BODY-MARKER"), "the body is logged:\n{text}");
    assert!(lines.iter().any(|l| {
        l["message"]
            .as_str()
            .unwrap()
            .starts_with("listening on http://")
    }));
}

#[test]
fn rust_log_warn_silences_the_info_events() {
    // The form from the configuration file this time (no flag).
    let s = Server::with_args("log_format = \"json\"\n", &[], &[("RUST_LOG", "warn")]);
    let agent = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let ws = s.workspace("w1");
    let id = submit_one(&s, job(&ws, &agent, json!({"max_rounds": 1})));
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    // A warning after the job: once it is in the log, the job's info events would be too.
    let (code, _) = s.raw("GET", "/v1/jobs", None, None, None).unwrap();
    assert_eq!(code, 401);
    wait_until("the refusal is logged", LIMIT, || {
        json_lines(&s)
            .iter()
            .any(|l| l["message"] == "request refused")
    });
    let lines = json_lines(&s);
    assert!(
        lines
            .iter()
            .all(|l| l["level"] == "WARN" || l["level"] == "ERROR"),
        "{lines:#?}"
    );
}

#[test]
fn an_invalid_rust_log_is_a_usage_error() {
    let out = common::Ralph::new()
        .args([
            "serve",
            "--log-format",
            "text",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(tempfile::tempdir().unwrap().path())
        .env("RUST_LOG", "ralph=loud")
        .output();
    assert_eq!(out.code, 64, "{out:?}");
    assert!(out.stderr.contains("RUST_LOG `ralph=loud`"), "{out:?}");
}

#[test]
fn text_lines_start_with_a_timestamp_and_a_newline_cannot_forge_one() {
    let forged = "2026-01-01T00:00:00.000Z ERROR forged";
    let s = Server::with_args("", &[], &[("RUST_LOG", "info")]);
    let blocked = json!({
        "status": "blocked", "summary": "s", "evidence": [], "nextSteps": [],
        "blocker": format!("stuck\n{forged}"),
    });
    let agent = s.agent(
        "blocked.sh",
        &format!("cat > \"$RALPH_REPORT_FILE\" <<'EOF'\n{blocked}\nEOF"),
    );
    let ws = s.workspace(&format!("w\n{forged}"));
    let id = submit_one(&s, job(&ws, &agent, json!({"max_rounds": 1})));
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "blocked");
    wait_until("the finish is logged", LIMIT, || {
        s.log_text().contains(&format!("job_id={id}")) && s.log_text().contains("job finished")
    });
    let text = s.log_text();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let (at, rest) = line.split_once(' ').unwrap();
        assert!(
            humantime::parse_rfc3339(at).is_ok(),
            "no timestamp: {line:?}\n{text}"
        );
        assert!(at.ends_with('Z'), "{line:?}");
        let level = rest.split_whitespace().next().unwrap();
        assert!(["INFO", "WARN", "ERROR"].contains(&level), "{line:?}");
        assert!(!line.starts_with(forged), "a forged line:\n{text}");
    }
    let start = text
        .lines()
        .find(|l| l.contains("job started") && l.contains(&id))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(start.contains(&format!("w\\n{forged}")), "{start}");
    let fin = text
        .lines()
        .find(|l| l.contains("job finished") && l.contains(&id))
        .unwrap();
    assert!(fin.contains("outcome=blocked"), "{fin}");
    assert!(fin.contains(&format!("stuck\\n{forged}")), "{fin}");
}
