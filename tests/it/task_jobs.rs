//! Task jobs: one process, once; the exit status is the outcome (SPEC §1, §3).

use crate::common;

use common::*;

#[test]
fn a_task_that_exits_zero_completes() {
    let f = Fixture::new();
    let agent = f.agent("ok.sh", "echo hello > out.txt");
    let out = f.run(&agent).args(["--kind", "task"]).output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["kind"], "task");
    assert_eq!(j["outcome"], "complete");
    assert_eq!(j["exit_code"], 0);
    assert_eq!(j["rounds"], 1);
    assert_eq!(f.read_ws("out.txt"), "hello\n");
}

#[test]
fn a_task_that_fails_exits_4_and_runs_once() {
    let f = Fixture::new();
    let agent = f.agent("bad.sh", "echo x >> runs; exit 3");
    let out = f.run(&agent).args(["--kind", "task"]).output();
    out.expect_code(4);
    let j = out.json();
    assert_eq!(j["outcome"], "failed");
    assert_eq!(j["exit_code"], 3);
    assert_eq!(f.read_ws("runs"), "x\n", "a task is never retried");
}

#[test]
fn a_task_report_is_optional_but_validated_when_present() {
    let f = Fixture::new();
    let agent = f.agent(
        "report.sh",
        "echo '{\"status\":\"complete\"}' > \"$RALPH_REPORT_FILE\"",
    );
    let out = f.run(&agent).args(["--kind", "task"]).output();
    out.expect_code(4);
    assert!(
        out.json()["message"]
            .as_str()
            .unwrap()
            .contains("missing the key")
    );
    // JSON on stdout is not a report for a task.
    let agent = f.agent("stdout.sh", "echo '{\"any\":\"json\"}'");
    f.run(&agent)
        .args(["--kind", "task"])
        .output()
        .expect_code(0);
}

#[test]
fn a_task_verify_decides_after_exit_zero() {
    let f = Fixture::new();
    let agent = f.agent(
        "claim.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("did it")
        ),
    );
    let out = f
        .run(&agent)
        .args(["--kind", "task", "--verify", "false"])
        .output();
    out.expect_code(4);
    let out = f
        .run(&agent)
        .args(["--kind", "task", "--verify", "true"])
        .output();
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
}

#[test]
fn a_task_verify_decides_even_without_a_report() {
    let f = Fixture::new();
    let agent = f.agent("quiet.sh", "echo done > task.txt");
    let out = f
        .run(&agent)
        .args(["--kind", "task", "--verify", "test -f never-there"])
        .output();
    out.expect_code(4);
    let types = f.event_types(&out.job_id());
    assert!(types.contains(&"verify_finished".to_owned()), "{types:?}");
    let out = f
        .run(&agent)
        .args(["--kind", "task", "--verify", "grep -q done task.txt"])
        .output();
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
}

/// Issue 12, item 7: a task job's progress said "round 1/20" and "up to 20 round(s)"; it runs
/// once, and says so.
#[test]
fn a_task_jobs_progress_counts_no_round_budget() {
    let f = Fixture::new();
    let agent = f.agent("ok.sh", "echo hello > out.txt");
    let out = f.run(&agent).args(["--kind", "task"]).output();
    out.expect_code(0);
    assert!(out.stderr.contains("task job, one run"), "{}", out.stderr);
    assert!(out.stderr.contains("the task ended"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("/20") && !out.stderr.contains("round(s)"),
        "{}",
        out.stderr
    );
}
