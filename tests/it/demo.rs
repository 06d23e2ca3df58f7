//! The README's first command: the demo job runs end to end on a copy of the example project,
//! completes by the runner's own verify, and leaves the checkout untouched. Its variant with
//! the built-in agent against the scripted model server (no LLM) does the same.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

/// Runs `script` of the example with `--json` on a fresh state dir; checks the job completed
/// by the runner's verify in three rounds on a copy (the checkout stays clean) whose tests pass;
/// returns the result object and stderr.
fn run_demo(script: &str) -> (serde_json::Value, String) {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/fix-the-tests");
    let before = std::fs::read(example.join("project/text.sh")).unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(example.join(script))
        .env("RALPH", common::ralph_bin())
        .arg("--json")
        .arg("--state-dir")
        .arg(state.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "complete", "{stderr}");
    assert_eq!(j["reason"], "verified");
    assert_eq!(j["rounds"], 3, "one bug fixed per round: {stderr}");
    assert_eq!(
        std::fs::read(example.join("project/text.sh")).unwrap(),
        before,
        "the checkout stays clean"
    );
    // The workspace copy really was fixed.
    let ws = stderr
        .lines()
        .find_map(|l| l.strip_prefix("demo workspace: "))
        .unwrap();
    let status = Command::new("sh")
        .arg("test.sh")
        .current_dir(ws)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::remove_dir_all(ws).unwrap();
    (j, stderr)
}

#[test]
fn the_demo_fixes_the_tests_and_the_runner_verifies_it() {
    let (j, stderr) = run_demo("run-demo.sh");
    assert!(
        j["report"]["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e == "3 passed, 0 failed")
    );
    assert!(stderr.contains("round 1/6 continue"), "{stderr}");
}

#[test]
fn the_builtin_agent_demo_fixes_the_tests_against_the_scripted_model_server() {
    let (j, stderr) = run_demo("run-builtin-demo.sh");
    assert!(
        stderr.contains("scripted model server (no LLM)"),
        "{stderr}"
    );
    assert!(
        j["usage"]["input_tokens"].as_u64().unwrap() > 0,
        "the gateway counted the tokens: {j}"
    );
}
