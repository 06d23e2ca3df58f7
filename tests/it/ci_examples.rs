//! The CI examples in `examples/ci/`: the step they run (`run-ralph-job.sh`) works end to end
//! — on the demo, and on a real project nobody here wrote (the `idna` package's source from
//! PyPI, with a bug put in and fixed by a scripted agent) — and writes what a pipeline publishes
//! (result, a patch that applies to the checkout, JUnit, summary, metrics) without leaving its
//! temporary directory behind, also when the pipeline cancels it; the GitHub Actions workflow
//! and GitLab CI job are valid against their schemas.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// The step with a clean environment of its own: `RALPH`, `OUT_DIR`, `TMPDIR` and `vars`.
fn step(out: &Path, tmp: &Path, vars: &[(&str, &str)]) -> Command {
    let mut c = Command::new(root().join("examples/ci/run-ralph-job.sh"));
    c.current_dir(root())
        .env_remove("GITHUB_STEP_SUMMARY")
        .env("RALPH", common::ralph_bin())
        .env("OUT_DIR", out)
        .env("TMPDIR", tmp);
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// The step's temporary directories left in `tmp`.
fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("ralph-ci-"))
        .collect()
}

/// The testcases of a JUnit file as `classname|name|failure type|failure message`.
fn junit_cases(file: &Path) -> Vec<String> {
    let out = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, xml.etree.ElementTree as E\n\
             for c in E.parse(sys.argv[1]).getroot().iter('testcase'):\n\
             \x20   f = c.find('failure')\n\
             \x20   print('|'.join([c.get('classname'), c.get('name'), '' if f is None else f.get('type'), '' if f is None else f.get('message')]))",
        )
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@t"])
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap()
}

fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git(dir, args);
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_ci_step_runs_the_demo_and_writes_what_a_pipeline_publishes() {
    let root = root();
    let out = tempfile::tempdir_in("/var/tmp").unwrap();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let step_summary = tmp.path().join("step-summary.md");
    std::fs::write(&step_summary, "# earlier step\n").unwrap();
    let run = step(out.path(), tmp.path(), &[])
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
    let cases = junit_cases(&out.path().join("junit.xml")).len() as u64;
    assert!(
        cases > rounds,
        "{cases} testcases for {rounds} rounds and a verify"
    );
    // The summary is written and appended to the step summary after what was there.
    let summary = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(summary.contains("complete"), "{summary}");
    assert!(summary.contains("verified by `sh test.sh`"), "{summary}");
    let step = std::fs::read_to_string(&step_summary).unwrap();
    assert!(
        step.starts_with("# earlier step\n") && step.ends_with(&summary),
        "{step}"
    );
    // The metrics textfile is valid exposition.
    let prom = std::fs::read(out.path().join("ralph.prom")).unwrap();
    assert!(!prom.is_empty());
    common::promtool::promtool_check(&String::from_utf8(prom).unwrap());
    // The patch of the fix applies to the demo project as it is in the repository.
    let patch = out.path().join("result.patch");
    let text = std::fs::read_to_string(&patch).unwrap();
    assert!(text.contains("diff --git a/"), "{text}");
    let copy = tempfile::tempdir_in("/var/tmp").unwrap();
    let cp = Command::new("cp")
        .arg("-R")
        .arg(root.join("examples/fix-the-tests/project/."))
        .arg(copy.path())
        .status()
        .unwrap();
    assert!(cp.success());
    let applied = Command::new("git")
        .args(["apply", "--check", "-v"])
        .arg(&patch)
        .current_dir(copy.path())
        .output()
        .unwrap();
    assert!(applied.status.success(), "{applied:?}\n{text}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

/// The pinned source distribution of the `idna` package (a real project with its own test
/// suite, which runs with the standard library alone), fetched once with pip by name and version
/// and checked against its digest.
const IDNA: &str = "idna-3.7.tar.gz";
const IDNA_SHA256: &str = "028ff3aadf0609c1fd278d8ea3089299412a7a8b9bd005dd08b9f8285bcb5cfc";

fn idna_sdist() -> PathBuf {
    let cache = root().join("target/ci-examples");
    let file = cache.join(IDNA);
    if !file.is_file() {
        std::fs::create_dir_all(&cache).unwrap();
        let dl = tempfile::tempdir_in(&cache).unwrap();
        let out = Command::new("/usr/bin/python3")
            .args(["-m", "pip", "download", "--no-deps", "--no-binary", ":all:"])
            .args(["idna==3.7", "-d"])
            .arg(dl.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pip could not fetch idna 3.7 from PyPI: {out:?}"
        );
        std::fs::rename(dl.path().join(IDNA), &file).unwrap();
    }
    let sum = Command::new("sha256sum").arg(&file).output().unwrap();
    let sum = String::from_utf8(sum.stdout).unwrap();
    assert!(sum.starts_with(IDNA_SHA256), "{sum}: not the pinned {IDNA}");
    file
}

/// A checkout of idna 3.7 with an off-by-one bug committed (labels of 63 bytes refused), as a
/// CI job would find it: a git work tree with a `.gitignore`.
fn buggy_idna_checkout(dir: &Path) -> PathBuf {
    let untar = Command::new("tar")
        .arg("xzf")
        .arg(idna_sdist())
        .arg("-C")
        .arg(dir)
        .status()
        .unwrap();
    assert!(untar.success());
    let project = dir.join("idna-3.7");
    std::fs::write(project.join(".gitignore"), "__pycache__/\n*.pyc\n").unwrap();
    git_ok(&project, &["init", "-q", "-b", "main"]);
    git_ok(&project, &["add", "-A"]);
    git_ok(&project, &["commit", "-qm", "idna 3.7"]);
    let core = project.join("idna/core.py");
    let text = std::fs::read_to_string(&core).unwrap();
    assert!(text.contains(FIXED), "the sdist changed: {core:?}");
    std::fs::write(&core, text.replacen(FIXED, BUGGY, 1)).unwrap();
    git_ok(&project, &["commit", "-qam", "label length"]);
    project
}

const FIXED: &str = "    if len(label) > 63:\n";
// Not the same length as the fix: Python trusts a bytecode cache whose source has the same size
// and modification second, and verify runs right after the fix.
const BUGGY: &str = "    if len(label) >= 63:\n";

/// The scripted agent: round 1 claims completion without a fix (the verify fails and its output
/// is what the console and the summary show), round 2 fixes the bug.
const IDNA_AGENT: &str = r#"cd "$RALPH_WORKSPACE"
if [ "$RALPH_ROUND" -ge 2 ]; then
  sed -i 's/    if len(label) >= 63:/    if len(label) > 63:/' idna/core.py
  s="labels of 63 bytes are valid again"
else
  s="looks done"
fi
printf '{"status":"complete","summary":"%s","evidence":["idna/core.py"],"nextSteps":[],"blocker":""}' "$s" > "$RALPH_REPORT_FILE"
"#;

const VERIFY: &str = "/usr/bin/python3 -m unittest discover -s tests -t .";

#[test]
fn the_ci_step_fixes_a_real_project_and_publishes_its_patch() {
    let world = tempfile::tempdir_in("/var/tmp").unwrap();
    let project = buggy_idna_checkout(world.path());
    let agents = world.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    let agent = agents.join("fix-idna.sh");
    std::fs::write(&agent, format!("#!/bin/sh\n{IDNA_AGENT}")).unwrap();
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = world.path().join("out");
    let tmp = world.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let step_summary = world.path().join("step-summary.md");
    let run = step(
        &out,
        &tmp,
        &[
            ("PROJECT", project.to_str().unwrap()),
            (
                "OBJECTIVE",
                "Make the test suite pass; do not edit the tests.",
            ),
            ("AGENT_CMD", agent.to_str().unwrap()),
            ("VERIFY", VERIFY),
            ("PROTECT", "tests pyproject.toml"),
            ("READ", agents.to_str().unwrap()),
            ("MAX_ROUNDS", "3"),
        ],
    )
    .env("GITHUB_STEP_SUMMARY", &step_summary)
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{run:?}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["outcome"], "complete", "{result}");
    assert_eq!(result["verified"], true, "{result}");
    assert_eq!(result["rounds"], 2, "{result}\n{stderr}");

    // The console: round 1's verify failed with its output's tail, each line behind the prefix.
    assert!(
        stderr.contains(
            "ralph: verify failed (" // duration
        ) && stderr.contains("exit status 1; the loop goes on: round 2/3 is told the output"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ralph: | AssertionError: False is not true"),
        "{stderr}"
    );
    assert!(stderr.contains("ralph: | FAILED (failures=1"), "{stderr}");
    assert!(
        stderr.contains("ralph: result.patch: 1 file(s) changed"),
        "{stderr}"
    );

    // The patch: exactly the fix, applying to the checkout (which the step left as it was).
    let patch = out.join("result.patch");
    let text = std::fs::read_to_string(&patch).unwrap();
    assert!(
        text.starts_with("diff --git a/idna/core.py b/idna/core.py\n")
            && text.contains(&format!("-{BUGGY}"))
            && text.contains(&format!("+{FIXED}"))
            && text.matches("diff --git").count() == 1,
        "{text}"
    );
    assert_eq!(git_ok(&project, &["status", "--porcelain"]), "");
    git_ok(&project, &["apply", "--index", patch.to_str().unwrap()]);
    assert!(
        std::fs::read_to_string(project.join("idna/core.py"))
            .unwrap()
            .contains(FIXED)
    );

    // JUnit: both rounds, the failed verify with its verdict and last line, the passed one.
    let cases = junit_cases(&out.join("junit.xml"));
    assert_eq!(cases.len(), 4, "{cases:#?}");
    assert_eq!(cases[0], "ralph.rounds|round 1||");
    assert!(
        cases[1].starts_with(&format!(
            "ralph.verify|verify after round 1|verify_failed|`{VERIFY}` failed: exit status 1: FAILED (failures=1"
        )),
        "{cases:#?}"
    );
    assert_eq!(cases[2], "ralph.rounds|round 2||");
    assert_eq!(cases[3], "ralph.verify|verify after round 2||");

    // The summary: the command as code (no backslashes), the failed verify's output in a block.
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        summary.contains(&format!("verified by `{VERIFY}`\n")),
        "{summary}"
    );
    assert!(!summary.contains("\\`"), "{summary}");
    assert!(
        summary.contains("The verify after round 1 failed (exit status 1)"),
        "{summary}"
    );
    assert!(
        summary.contains("\nAssertionError: False is not true\n"),
        "{summary}"
    );
    assert!(
        std::fs::read_to_string(&step_summary)
            .unwrap()
            .ends_with(&summary)
    );

    // Metrics: valid, no zero series for a model nobody named.
    let prom = std::fs::read_to_string(out.join("ralph.prom")).unwrap();
    common::promtool::promtool_check(&prom);
    assert!(!prom.contains("model=\"unknown\""), "{prom}");
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

#[test]
fn the_ci_step_refuses_a_project_without_an_agent_and_leaves_nothing() {
    let world = tempfile::tempdir_in("/var/tmp").unwrap();
    let tmp = world.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let run = step(
        &world.path().join("out"),
        &tmp,
        &[
            ("PROJECT", world.path().to_str().unwrap()),
            ("OBJECTIVE", "x"),
        ],
    )
    .output()
    .unwrap();
    assert_eq!(run.status.code(), Some(64), "{run:?}");
    assert!(
        String::from_utf8_lossy(&run.stderr).contains("set AGENT"),
        "{run:?}"
    );
    assert_eq!(leftovers(&tmp), Vec::<String>::new());
}

/// A cancelled pipeline signals the step: ralph gets SIGTERM and cancels the job (its round's
/// tree stopped, the result written), and the step removes its temporary directory.
#[test]
fn a_cancelled_step_cancels_the_job_and_leaves_nothing() {
    let world = tempfile::tempdir_in("/var/tmp").unwrap();
    let project = world.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("a.txt"), "a\n").unwrap();
    let tmp = world.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let out = world.path().join("out");
    let marker = "ralph-ci-cancel-marker";
    let mut child = step(
        &out,
        &tmp,
        &[
            ("PROJECT", project.to_str().unwrap()),
            ("OBJECTIVE", "wait"),
            (
                "AGENT_CMD",
                &format!("touch started; sleep 300; echo {marker}"),
            ),
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    common::wait_until("the round started", Duration::from_secs(120), || {
        leftovers(&tmp)
            .iter()
            .any(|d| tmp.join(d).join("workspace/started").exists())
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_ne!(status.code(), Some(0), "{stderr}");
    let result: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["outcome"], "cancelled", "{result}\n{stderr}");
    assert_eq!(leftovers(&tmp), Vec::<String>::new(), "{stderr}");
    assert!(common::processes_with(marker).is_empty(), "{stderr}");
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
    // Both run the step this suite runs, on a real project, and publish the patch.
    for f in [&github, &gitlab] {
        let text = std::fs::read_to_string(f).unwrap();
        for needle in [
            "examples/ci/run-ralph-job.sh",
            "PROJECT:",
            "SETUP:",
            "VERIFY:",
            "result.patch",
        ] {
            assert!(text.contains(needle), "{}: {needle}", f.display());
        }
    }
}
