//! Artifact retention (issue 12, item 8): `ralph prune --older-than DUR` removes the artifacts
//! of jobs that finished more than DUR ago and nothing else (not a running job's, not a
//! symlink's target, not the journal); `ralph show` and `ralph logs --round` then say "pruned";
//! `--dry-run` removes nothing; `retention` in `ralph serve` prunes on its own.

use crate::common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::Duration;

use common::server::{Server, job};
use common::{Output, Ralph, complete_report, wait_for_file, wait_until};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(90);

fn run_in(s: &Server, ws: &Path, agent: &Path) -> Ralph {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "test objective",
            "--json",
            "--kill-grace",
            "1s",
        ])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--read")
        .arg(&s.agents)
        .args(["--mode", "workspace-write", "--max-rounds", "1"])
        .arg("--agent-cmd")
        .arg(agent.display().to_string())
}

fn prune(s: &Server, args: &[&str]) -> Value {
    let out: Output = Ralph::new()
        .arg("prune")
        .args(args)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--json")
        .output();
    out.expect_code(0);
    out.json()
}

fn pruned_ids(r: &Value) -> Vec<String> {
    r["pruned"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn prune_removes_only_finished_artifacts_and_keeps_the_journal() {
    let s = Server::new("");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "precious").unwrap();
    // The round plants links to outside the state directory in its own artifacts.
    let planter = s.agent(
        "plant.sh",
        &format!(
            "out=$(dirname \"$RALPH_REPORT_FILE\")\nln -s {o}/keep \"$out/file-link\"\nln -s {o} \"$out/dir-link\"\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done"),
            o = outside.path().display()
        ),
    );
    let ws1 = s.workspace("w1");
    let done = run_in(&s, &ws1, &planter).output();
    done.expect_code(0);
    let id = done.job_id();
    let job_dir = s.state.join("jobs").join(&id);
    let out_dir = job_dir.join("rounds/1/1/out");
    // The round's links never reach the host: only its report file came back from its
    // bounded report directory (issue 25). Planted here instead, as a round without a mount
    // namespace (full-access on a host without user namespaces) or an older ralph left them.
    assert!(out_dir.join("file-link").symlink_metadata().is_err());
    assert!(out_dir.join("dir-link").symlink_metadata().is_err());
    std::os::unix::fs::symlink(outside.path().join("keep"), out_dir.join("file-link")).unwrap();
    std::os::unix::fs::symlink(outside.path(), out_dir.join("dir-link")).unwrap();

    // A job in progress on the same state directory.
    let gated = s.agent(
        "gated.sh",
        &format!(
            "echo \"$RALPH_JOB_ID\" > \"$RALPH_WORKSPACE/id.tmp\" && mv \"$RALPH_WORKSPACE/id.tmp\" \"$RALPH_WORKSPACE/started\"\ni=0; while [ ! -e \"$RALPH_WORKSPACE/release\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws2 = s.workspace("w2");
    let mut running = run_in(&s, &ws2, &gated).spawn();
    wait_for_file(&ws2.join("started"), LIMIT);
    let running_id = std::fs::read_to_string(ws2.join("started"))
        .unwrap()
        .trim()
        .to_owned();
    let running_dir = s.state.join("jobs").join(&running_id).join("rounds/1/1");

    // Hostile first: a job younger than --older-than stays; a dry run removes nothing.
    assert_eq!(
        pruned_ids(&prune(&s, &["--older-than", "1h"])),
        Vec::<String>::new()
    );
    let dry = prune(&s, &["--older-than", "0s", "--dry-run"]);
    assert_eq!(pruned_ids(&dry), vec![id.clone()], "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert!(dry["files"].as_u64().unwrap() > 0, "{dry}");
    assert!(
        out_dir.join("report.json").exists(),
        "a dry run removed files"
    );

    let r = prune(&s, &["--older-than", "0s"]);
    assert_eq!(pruned_ids(&r), vec![id.clone()], "{r}");
    assert!(r["bytes"].as_u64().unwrap() > 0, "{r}");
    assert!(!job_dir.join("rounds").exists(), "the artifacts remain");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep")).unwrap(),
        "precious",
        "a link's target was touched"
    );
    assert!(
        running_dir.exists(),
        "a running job's artifacts were removed"
    );
    // The journal keeps every event.
    let events = s.events(&id);
    assert!(
        events.iter().any(|e| e["type"] == "job_finished"),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["type"] == "round_finished"),
        "{events:?}"
    );
    // The text form says what it removed; a second prune finds nothing left.
    let again = Ralph::new()
        .args(["prune", "--older-than", "0s", "--state-dir"])
        .arg(&s.state)
        .output();
    again.expect_code(0);
    assert!(
        again.stdout.contains("removed the artifacts of 0 job(s)"),
        "{again:?}"
    );

    // The client says pruned.
    let show = s.ralph(&["show", &id]);
    assert_eq!(show.code, 0, "{show:?}");
    assert!(show.stdout.contains("artifacts: pruned at"), "{show:?}");
    let logs = s.ralph(&["logs", &id, "--round", "1"]);
    assert_eq!(logs.code, 64, "{logs:?}");
    assert!(logs.stderr.contains("were pruned"), "{logs:?}");
    let journal = s.ralph(&["logs", &id]);
    assert_eq!(journal.code, 0, "{journal:?}");
    assert!(!journal.stdout.trim().is_empty(), "{journal:?}");

    std::fs::write(ws2.join("release"), "").unwrap();
    let status = running.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(running_dir.join("out/report.json").exists());
}

#[test]
fn serve_retention_prunes_finished_jobs() {
    let s = Server::new("retention = \"1s\"\n");
    let agent = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let ws = s.workspace("w1");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({"max_rounds": 1}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    let rounds = s.state.join("jobs").join(&id).join("rounds");
    wait_until("retention prunes the job", LIMIT, || !rounds.exists());
    // The marker is written once the files are gone (engine/prune.rs): waited for, not read
    // at once (under load the pass can be between the two).
    wait_until("the job is marked pruned", LIMIT, || {
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        j["artifacts_pruned"]["pruned_at"].is_string()
    });
    wait_until("the prune is logged", LIMIT, || {
        s.log_text()
            .lines()
            .any(|l| l.contains("artifacts pruned (retention)") && l.contains(&id))
    });
    assert!(s.events(&id).iter().any(|e| e["type"] == "job_finished"));
}

/// Plants a chain of `depth` directories `d/d/...` below `at` (made by descriptor: its path is
/// far longer than `PATH_MAX`), with a file every 100 levels and, halfway down, a symlink to
/// `canary`: what a round without a mount namespace, or an older ralph, could leave.
fn deep_tree(at: &Path, depth: usize, canary: &Path) {
    std::fs::create_dir_all(at).unwrap();
    let c = |s: &str| std::ffi::CString::new(s).unwrap();
    let top = std::fs::File::open(at).unwrap();
    // SAFETY: dup of a descriptor we own; the copy is owned below.
    let mut fd = unsafe { OwnedFd::from_raw_fd(libc::dup(top.as_raw_fd())) };
    let (d, f, link) = (c("d"), c("f"), c("link"));
    let target = c(canary.to_str().unwrap());
    for i in 0..depth {
        // SAFETY: a valid descriptor and NUL-terminated names alive for each call; every new
        // descriptor is owned at once.
        unsafe {
            assert_eq!(libc::mkdirat(fd.as_raw_fd(), d.as_ptr(), 0o700), 0);
            let next = libc::openat(
                fd.as_raw_fd(),
                d.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            assert!(next >= 0, "{}", std::io::Error::last_os_error());
            fd = OwnedFd::from_raw_fd(next);
            if i % 100 == 0 {
                let file = libc::openat(
                    fd.as_raw_fd(),
                    f.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o600,
                );
                assert!(file >= 0);
                libc::close(file);
            }
            if i == depth / 2 {
                assert_eq!(
                    libc::symlinkat(target.as_ptr(), fd.as_raw_fd(), link.as_ptr()),
                    0
                );
            }
        }
    }
}

fn canary_dir() -> tempfile::TempDir {
    let c = tempfile::tempdir().unwrap();
    std::fs::create_dir(c.path().join("inside")).unwrap();
    std::fs::write(c.path().join("inside/keep"), "precious").unwrap();
    c
}

fn assert_canary_intact(c: &Path) {
    assert_eq!(
        std::fs::read_to_string(c.join("inside/keep")).unwrap(),
        "precious",
        "a planted link was followed"
    );
}

/// A finished job whose round left a 1,500-level tree in its report directory and a 5,000-level
/// one in its HOME, each holding a link to a canary outside.
fn job_with_deep_trees(s: &Server, canary: &Path) -> (String, std::path::PathBuf) {
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = s.workspace("deep");
    let done = run_in(s, &ws, &agent).output();
    done.expect_code(0);
    let id = done.job_id();
    let attempt = s.state.join("jobs").join(&id).join("rounds/1/1");
    deep_tree(&attempt.join("out/deep"), 1500, canary);
    deep_tree(&attempt.join("home"), 5000, canary);
    (id, attempt)
}

#[test]
fn prune_removes_trees_of_any_depth_with_64_descriptors_and_follows_no_link() {
    let s = Server::new("");
    let canary = canary_dir();
    let (id, attempt) = job_with_deep_trees(&s, canary.path());
    // A small descriptor limit, far below the trees' depth: a walk holding one per level
    // fails ("Too many open files") for ever.
    let mut cmd = Ralph::new()
        .args(["prune", "--older-than", "0s", "--json", "--state-dir"])
        .arg(&s.state)
        .command();
    // SAFETY: setrlimit is async-signal-safe; it runs in the forked child before exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 64,
                rlim_max: 64,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let r = common::output_of(cmd).expect_code(0).json();
    assert_eq!(pruned_ids(&r), vec![id.clone()], "{r}");
    assert_eq!(r["skipped"], json!([]), "{r}");
    // 15 + 50 files, 2 links, the report: all counted.
    assert!(r["files"].as_u64().unwrap() >= 68, "{r}");
    assert!(!attempt.exists(), "the deep trees remain");
    assert!(!s.state.join("jobs").join(&id).join("rounds").exists());
    assert_canary_intact(canary.path());
}

#[test]
fn serve_retention_removes_trees_of_any_depth_and_follows_no_link() {
    let s = Server::new("retention = \"1s\"\n");
    let canary = canary_dir();
    // The service's own descriptors stay below a limit far smaller than the trees' depth.
    let pid = s.child.as_ref().unwrap().id();
    let set = std::process::Command::new("prlimit")
        .args(["--pid", &pid.to_string(), "--nofile=256:256"])
        .status()
        .unwrap();
    assert!(set.success(), "prlimit failed: {set}");
    // The trees are planted while the round runs (retention leaves a running job alone).
    let gated = s.agent(
        "gated.sh",
        &format!(
            "touch \"$RALPH_WORKSPACE/started\"\ni=0; while [ ! -e \"$RALPH_WORKSPACE/release\" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = s.workspace("deep");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &gated, json!({"max_rounds": 1}))] }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for_file(&ws.join("started"), LIMIT);
    let attempt = s.state.join("jobs").join(&id).join("rounds/1/1");
    deep_tree(&attempt.join("out/deep-1500"), 1500, canary.path());
    deep_tree(&attempt.join("out/deep-5000"), 5000, canary.path());
    std::fs::write(ws.join("release"), "").unwrap();
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    let rounds = s.state.join("jobs").join(&id).join("rounds");
    // Pruned: the trees are gone and the job's marker says so (written after the removal).
    wait_until("retention prunes the deep trees", LIMIT, || {
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        j["artifacts_pruned"]["pruned_at"].is_string()
    });
    assert!(!rounds.exists());
    assert!(
        !s.log_text().contains("retention: skipped"),
        "{}",
        s.log_text()
    );
    assert_canary_intact(canary.path());
}
