//! The report contract (SPEC §2) enforced end to end: each rejected shape makes the round fail
//! with `invalid_report` and the validation message; the cap is exact.

use crate::common;

use common::*;
use serde_json::json;

fn rejected(f: &Fixture, name: &str, report: &str, needle: &str) {
    rejected_with(f, name, report, needle, &[]);
}

fn rejected_with(f: &Fixture, name: &str, report: &str, needle: &str, extra: &[&str]) {
    let file = f.data(&format!("{name}.json"), report.as_bytes());
    let agent = f.agent(
        &format!("{name}.sh"),
        &format!("cp '{}' \"$RALPH_REPORT_FILE\"", file.display()),
    );
    let out = f
        .run(&agent)
        .args(["--round-retries", "0"])
        .args(extra)
        .output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed", "{name}");
    let msg = j["message"].as_str().unwrap();
    assert!(msg.contains("invalid_report"), "{name}: {msg}");
    assert!(msg.contains(needle), "{name}: expected {needle:?} in {msg}");
    let events = f.events(&out.job_id());
    let fin = events.iter().find(|(t, _)| t == "round_finished").unwrap();
    assert_eq!(fin.1["result"]["kind"], "failed");
    assert_eq!(fin.1["result"]["reason"], "invalid_report");
}

#[test]
fn every_rule_violation_fails_the_round_with_its_message() {
    let f = Fixture::new();
    let cases = [
        (
            "invalid_json",
            r#"{"status":"continue","summary":"#,
            "not valid JSON",
        ),
        ("not_object", r#"["continue"]"#, "must be a JSON object"),
        (
            "missing_key",
            r#"{"status":"continue","summary":"s","evidence":[],"nextSteps":["n"]}"#,
            "missing the key `blocker`",
        ),
        (
            "extra_key",
            r#"{"status":"continue","summary":"s","evidence":[],"nextSteps":["n"],"blocker":"","confidence":1}"#,
            "unknown key `confidence`",
        ),
        (
            "bad_status",
            r#"{"status":"done","summary":"s","evidence":[],"nextSteps":["n"],"blocker":""}"#,
            "found `done`",
        ),
        (
            "empty_summary",
            r#"{"status":"continue","summary":"  ","evidence":[],"nextSteps":["n"],"blocker":""}"#,
            "`summary` must not be empty",
        ),
        (
            "blank_item",
            r#"{"status":"continue","summary":"s","evidence":[" "],"nextSteps":["n"],"blocker":""}"#,
            "`evidence` item 0",
        ),
        (
            "untrimmed_blocker",
            r#"{"status":"blocked","summary":"s","evidence":[],"nextSteps":[],"blocker":"x "}"#,
            "equal its own trim",
        ),
        (
            "continue_no_steps",
            r#"{"status":"continue","summary":"s","evidence":[],"nextSteps":[],"blocker":""}"#,
            "`continue` report needs at least one item in `nextSteps`",
        ),
        (
            "continue_blocker",
            r#"{"status":"continue","summary":"s","evidence":[],"nextSteps":["n"],"blocker":"b"}"#,
            "`continue` report needs an empty `blocker`",
        ),
        (
            "complete_no_evidence",
            r#"{"status":"complete","summary":"s","evidence":[],"nextSteps":[],"blocker":""}"#,
            "`complete` report needs at least one item in `evidence`",
        ),
        (
            "complete_steps",
            r#"{"status":"complete","summary":"s","evidence":["e"],"nextSteps":["n"],"blocker":""}"#,
            "`complete` report must have no `nextSteps`",
        ),
        (
            "complete_blocker",
            r#"{"status":"complete","summary":"s","evidence":["e"],"nextSteps":[],"blocker":"b"}"#,
            "`complete` report needs an empty `blocker`",
        ),
        (
            "blocked_empty",
            r#"{"status":"blocked","summary":"s","evidence":[],"nextSteps":[],"blocker":""}"#,
            "`blocked` report needs a non-empty `blocker`",
        ),
        (
            "duplicate_key",
            r#"{"status":"complete","status":"continue","summary":"s","evidence":["e"],"nextSteps":["n"],"blocker":""}"#,
            "key `status` twice",
        ),
    ];
    for (name, report, needle) in cases {
        rejected(&f, name, report, needle);
    }
}

/// A valid complete report whose compact JSON is exactly `size` bytes.
fn report_of_size(size: usize) -> String {
    let mut v =
        json!({"status":"complete","summary":"","evidence":["e"],"nextSteps":[],"blocker":""});
    let base = v.to_string().len();
    v["summary"] = json!("x".repeat(size - base));
    let s = v.to_string();
    assert_eq!(s.len(), size);
    s
}

#[test]
fn a_report_of_exactly_the_cap_is_accepted() {
    let f = Fixture::new();
    let file = f.data("cap.json", report_of_size(1000).as_bytes());
    let agent = f.agent(
        "cap.sh",
        &format!("cp '{}' \"$RALPH_REPORT_FILE\"", file.display()),
    );
    let out = f.run(&agent).args(["--handoff-cap", "1000"]).output();
    out.expect_code(0);
    let empty_summary =
        report_of_size(1000).len() - out.json()["report"]["summary"].as_str().unwrap().len();
    assert_eq!(
        empty_summary,
        r#"{"status":"complete","summary":"","evidence":["e"],"nextSteps":[],"blocker":""}"#.len()
    );
}

#[test]
fn a_report_one_byte_over_the_cap_is_rejected_not_truncated() {
    let f = Fixture::new();
    rejected_with(
        &f,
        "over",
        &report_of_size(1001),
        "1001 bytes as compact JSON, over the handoff cap of 1000",
        &["--handoff-cap", "1000"],
    );
    // Same through stdout.
    let file = f.data("over_stdout.json", report_of_size(1001).as_bytes());
    let agent = f.agent("over_stdout.sh", &format!("cat '{}'", file.display()));
    let out = f
        .run(&agent)
        .args(["--handoff-cap", "1000", "--round-retries", "0"])
        .output();
    out.expect_code(3);
    assert!(
        out.json()["message"]
            .as_str()
            .unwrap()
            .contains("over the handoff cap of 1000")
    );
}

#[test]
fn a_report_file_that_is_a_symlink_is_refused() {
    let f = Fixture::new();
    let real = f.data("real.json", complete_report("via symlink").as_bytes());
    let agent = f.agent(
        "link.sh",
        &format!("ln -s '{}' \"$RALPH_REPORT_FILE\"", real.display()),
    );
    let out = f.run(&agent).args(["--round-retries", "0"]).output();
    out.expect_code(3);
    assert!(
        out.json()["message"]
            .as_str()
            .unwrap()
            .contains("symlinks are refused")
    );
}

#[test]
fn a_utf8_bom_before_the_report_is_skipped_in_the_file_and_on_stdout() {
    let f = Fixture::new();
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(complete_report("with a BOM").as_bytes());
    let file = f.data("bom.json", &bytes);
    // In the report file.
    let agent = f.agent(
        "bom_file.sh",
        &format!("cp '{}' \"$RALPH_REPORT_FILE\"", file.display()),
    );
    let out = f.run(&agent).args(["--round-retries", "0"]).output();
    out.expect_code(0);
    assert_eq!(out.json()["report"]["summary"], "with a BOM");
    // As the last JSON line of stdout.
    let agent = f.agent(
        "bom_stdout.sh",
        &format!("echo log line; cat '{}'; echo", file.display()),
    );
    let out = f.run(&agent).args(["--round-retries", "0"]).output();
    out.expect_code(0);
    assert_eq!(out.json()["report"]["summary"], "with a BOM");
}
