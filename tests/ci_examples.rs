//! The CI examples in `examples/ci/`: the step they run works end to end on a project with
//! failing tests and writes what a pipeline publishes (result, JUnit, summary, metrics), and the
//! GitHub Actions workflow and GitLab CI job are valid against their schemas.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

#[test]
fn the_ci_step_runs_a_job_and_writes_what_a_pipeline_publishes() {
    let root = root();
    let out = tempfile::tempdir_in("/var/tmp").unwrap();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let step_summary = tmp.path().join("step-summary.md");
    std::fs::write(&step_summary, "# earlier step\n").unwrap();
    let run = Command::new(root.join("examples/ci/run-ralph-job.sh"))
        .current_dir(&root)
        .env("RALPH", common::ralph_bin())
        .env("OUT_DIR", out.path())
        .env("TMPDIR", tmp.path())
        .env("GITHUB_STEP_SUMMARY", &step_summary)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("result.json")).unwrap()).unwrap();
    assert_eq!(result["outcome"], "complete", "{result}");
    let rounds = result["rounds"].as_u64().unwrap();
    assert!(rounds >= 3, "{result}");
    // The JUnit report parses and has a testcase per round and one for the verify.
    let check = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, xml.etree.ElementTree as E\n\
             t = E.parse(sys.argv[1]).getroot()\n\
             print(len(t.findall('.//testcase')))",
        )
        .arg(out.path().join("junit.xml"))
        .output()
        .unwrap();
    assert!(check.status.success(), "{check:?}");
    let cases: u64 = String::from_utf8_lossy(&check.stdout)
        .trim()
        .parse()
        .unwrap();
    assert!(
        cases > rounds,
        "{cases} testcases for {rounds} rounds and a verify"
    );
    // The summary is written and appended to the step summary after what was there.
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("complete"), "{summary}");
    let step = std::fs::read_to_string(&step_summary).unwrap();
    assert!(
        step.starts_with("# earlier step\n") && step.ends_with(&summary),
        "{step}"
    );
    // The metrics textfile is valid exposition.
    let prom = std::fs::read(out.path().join("ralph.prom")).unwrap();
    assert!(!prom.is_empty());
    common::promtool::promtool_check(&String::from_utf8(prom).unwrap());
}

/// The schema checker `.ci/setup` installs, or None (outside CI) with the reason printed.
fn check_jsonschema() -> Option<PathBuf> {
    let bin = root().join("target/ci-venv/bin/check-jsonschema");
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "check-jsonschema is missing: .ci/setup installs it into target/ci-venv"
    );
    eprintln!("skipped: {} is missing (run .ci/setup)", bin.display());
    None
}

fn validate(bin: &Path, schema: &str, file: &Path) -> std::process::Output {
    Command::new(bin)
        .args(["--builtin-schema", schema])
        .arg(file)
        .output()
        .unwrap()
}

#[test]
fn the_workflow_and_the_gitlab_job_are_valid_and_run_the_step() {
    let Some(bin) = check_jsonschema() else {
        return;
    };
    let root = root();
    let github = root.join("examples/ci/github-actions.yml");
    let gitlab = root.join("examples/ci/gitlab-ci.yml");
    let out = validate(&bin, "vendor.github-workflows", &github);
    assert!(out.status.success(), "{out:?}");
    let out = validate(&bin, "vendor.gitlab-ci", &gitlab);
    assert!(out.status.success(), "{out:?}");
    // The checker is not a rubber stamp: a broken workflow fails.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yml");
    std::fs::write(
        &broken,
        std::fs::read_to_string(&github)
            .unwrap()
            .replace("runs-on:", "runs_on:"),
    )
    .unwrap();
    assert!(
        !validate(&bin, "vendor.github-workflows", &broken)
            .status
            .success()
    );
    // Both run the step this suite runs.
    for f in [&github, &gitlab] {
        let text = std::fs::read_to_string(f).unwrap();
        assert!(
            text.contains("examples/ci/run-ralph-job.sh"),
            "{}",
            f.display()
        );
    }
}
