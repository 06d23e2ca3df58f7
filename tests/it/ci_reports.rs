//! `ralph run --junit FILE --summary FILE` (issue 12, item 4): the JUnit report parses (with
//! Python's `xml.etree`, as CI tools' parsers would) and counts one testcase per round attempt and
//! per verify, failures with their reasons; the Markdown summary has the outcome, a row per
//! attempt and the verify runs. Hostile text from the agent — markup that would close an element
//! or a code fence, control characters — arrives as text and forges nothing.

use crate::common;

use std::process::Command;

use common::{Fixture, continue_report};

const HOSTILE: &str = "</system-out></testcase><testcase name=\"forged\"/>\u{1}]]>";

/// Runs Python on `script` with the JUnit file as argv[1]; its stdout.
fn python(script: &str, file: &std::path::Path) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(file)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "python: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn junit_and_summary_files_tell_each_round_and_verify_and_forge_nothing() {
    let f = Fixture::new();
    let hostile_continue = continue_report("placeholder").replace(
        "\"summary\":\"placeholder\"",
        &format!(
            "\"summary\":{}",
            serde_json::to_string(&HOSTILE.replace('\u{1}', "\\u0001")).unwrap()
        ),
    );
    let final_report = serde_json::json!({
        "status": "complete",
        "summary": "done\n```\n# forged heading | x |",
        "evidence": ["checked"],
        "nextSteps": [],
        "blocker": ""
    })
    .to_string();
    // 1: an invalid report (retried); 2: continue, with hostile text; 3: complete, but the
    // verify fails; 4: complete, verified.
    let agent = f.agent(
        "steps.sh",
        &format!(
            r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
case $n in
  1) printf '%s' '{{"status":"nope"}}' > "$RALPH_REPORT_FILE" ;;
  2) printf '%s' '{hostile}' > "$RALPH_REPORT_FILE" ;;
  3) printf '%s' '{fin}' > "$RALPH_REPORT_FILE" ;;
  *) touch fixed; printf '%s' '{fin}' > "$RALPH_REPORT_FILE" ;;
esac"#,
            hostile = hostile_continue.replace('\'', "'\\''"),
            fin = final_report.replace('\'', "'\\''"),
        ),
    );
    let junit = f.root.path().join("junit.xml");
    let summary = f.root.path().join("summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let out = f
        .run(&agent)
        .args([
            "--verify",
            "test -e fixed || { echo '</failure>]]> not fixed'; exit 1; }",
            "--max-rounds",
            "6",
        ])
        .arg("--junit")
        .arg(&junit)
        .arg("--summary")
        .arg(&summary)
        .output();
    out.expect_code(0);

    let parsed = python(
        r#"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suite = root.find('testsuite')
print(root.tag, suite.get('tests'), suite.get('failures'))
for c in suite.findall('testcase'):
    f = c.find('failure')
    print('CASE', c.get('classname'), '|', c.get('name'), '|', f.get('type') if f is not None else 'ok')
for c in suite.findall('testcase'):
    o = c.find('system-out')
    if o is not None and 'forged' in (o.text or ''):
        print('OUT', repr(o.text))
"#,
        &junit,
    );
    let lines: Vec<&str> = parsed.lines().collect();
    assert_eq!(lines[0], "testsuites 6 2", "{parsed}");
    let cases: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("CASE"))
        .copied()
        .collect();
    assert_eq!(
        cases,
        [
            "CASE ralph.rounds | round 1 | invalid_report",
            "CASE ralph.rounds | round 1 (attempt 2) | ok",
            "CASE ralph.rounds | round 2 | ok",
            "CASE ralph.verify | verify after round 2 | verify_failed",
            "CASE ralph.rounds | round 3 | ok",
            "CASE ralph.verify | verify after round 3 | ok",
        ],
        "{parsed}"
    );
    // The hostile summary is text inside round 1's second attempt, whole (the control character
    // replaced), not markup.
    let out_line = lines.iter().find(|l| l.starts_with("OUT")).expect(&parsed);
    assert!(
        out_line.contains("</system-out></testcase><testcase name=") && out_line.contains("forged"),
        "{out_line}"
    );

    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("earlier step\n"),
        "appended, not replaced: {md}"
    );
    assert!(
        md.contains("## ralph: complete after 3 of 6 round(s)"),
        "{md}"
    );
    let rows = md.lines().filter(|l| l.starts_with("| ")).count();
    assert_eq!(
        rows,
        1 + 4 + 1 + 2,
        "round header + 4 attempts + verify header + 2 verifies: {md}"
    );
    // The command is a code span (shown as it is), its pipes escaped for the table.
    assert!(
        md.contains("| 2 | `test -e fixed \\|\\| "),
        "the command's pipes stay in their cell: {md}"
    );
    // The failed verify's output follows the table, in a block of its own.
    assert!(
        md.contains("The verify after round 2 failed (exit status 1); its output"),
        "{md}"
    );
    // The last report sits in a fence longer than the backtick run inside it: no line of it
    // starts a heading outside the block.
    let fence_start = md
        .find("`````text")
        .or_else(|| md.find("````text"))
        .expect(&md);
    let after = &md[fence_start..];
    let fence: String = after.chars().take_while(|c| *c == '`').collect();
    assert!(fence.len() > 3, "{md}");
    let closing = after[fence.len()..]
        .find(&format!("\n{fence}\n"))
        .expect(&md);
    assert!(after[..closing].contains("# forged heading"), "{md}");
    assert!(
        !md[..fence_start].lines().any(|l| l.starts_with("# forged")),
        "{md}"
    );
}
