//! No container outlives its round (SPEC §5): a runner killed with SIGKILL mid-round leaves
//! nothing (its init stops, the engine removes the container); a leftover made another way is
//! reported by `ralph doctor` and removed by the next `ralph serve` start-up. Alone in its test
//! binary: the `ralph run` of other tests reaps leftovers when it starts its first container,
//! which would race with the checks here.
//!
//! Needs a Docker engine and the image `ralph-agent-base:latest` (see `tests/it/docker_backend.rs`).

use crate::common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::docker::{containers_with_label, ready, running_containers_with_label};
use ralph_sandbox::docker::labels;
use serde_json::Value;

/// `ralph sandbox exec --backend docker` killed with SIGKILL mid-run: its container's init sees
/// the runner go, stops the command, and the engine removes the container (AutoRemove). Within
/// 10 s nothing of it is left, running or exited, without any other runner starting.
#[test]
fn a_killed_runners_container_is_gone_within_ten_seconds() {
    if !ready("a_killed_runners_container_is_gone_within_ten_seconds") {
        return;
    }
    let ws = tempfile::tempdir().unwrap();
    // The killed command's private HOME and TMPDIR (made under TMPDIR, removed by a command that
    // ends) stay behind after a SIGKILL: under this test's own directory, not the host's /tmp.
    let scratch = tempfile::tempdir().unwrap();
    let job = format!("killed-{}", std::process::id());
    let mut child = std::process::Command::new(common::ralph_bin())
        .args(["sandbox", "exec", "--backend", "docker", "--workspace"])
        .arg(ws.path())
        .args(["--env", "RALPH_JOB_ID", "--", "sleep", "300"])
        .env("RALPH_JOB_ID", &job)
        .env("TMPDIR", scratch.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    // Running, not just created.
    while running_containers_with_label(labels::JOB, &job).is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no running container"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    loop {
        let left = containers_with_label(labels::JOB, &job);
        if left.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the SIGKILLed runner's container is still there after 10 s: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A ralph container whose owner is gone and that the engine did not remove (made here the way
/// an engine restart or an older runner leaves one): `ralph doctor` lists it as a leftover, and
/// the next `ralph serve` start-up removes it.
#[test]
fn a_leftover_container_is_listed_and_the_next_start_removes_it() {
    if !ready("a_leftover_container_is_listed_and_the_next_start_removes_it") {
        return;
    }
    let job = format!("leftover-{}", std::process::id());
    // An owner on this boot that is not running: pid 1's start ticks plus one.
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap();
    let owner = format!("1:999999999:{}", boot.trim());
    let id = common::docker::docker(&[
        "run",
        "-d",
        "--network",
        "none",
        "--label",
        &format!("{}={}", labels::RUNNER, labels::runner_id()),
        "--label",
        &format!("{}={job}", labels::JOB),
        "--label",
        &format!("{}=1", labels::ROUND),
        "--label",
        &format!("{}={owner}", labels::OWNER),
        common::docker::IMAGE,
        "sleep",
        "300",
    ]);
    assert!(!id.trim().is_empty(), "docker run made no container");
    assert_eq!(containers_with_label(labels::JOB, &job).len(), 1);

    let doctor = common::Ralph::new()
        .args(["doctor", "--json", "--backend", "docker"])
        .output();
    let d: Value = serde_json::from_str(&doctor.stdout).unwrap();
    let listed = d["docker"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["job"] == job.as_str())
        .cloned()
        .unwrap_or_else(|| panic!("doctor does not list the leftover: {d:#}"));
    assert_eq!(listed["owner_alive"], false, "{listed}");
    assert_eq!(d["docker"]["engine"]["ok"], true, "{d:#}");
    assert_eq!(d["docker"]["image_status"]["ok"], true, "{d:#}");

    // The idmapped workspace of a runner killed between creating and starting its container: a
    // mount under /run/ralph-idmap in a directory named for a runner that is gone.
    let ticks: u64 = std::fs::read_to_string("/proc/1/stat")
        .unwrap()
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(19)
        .unwrap()
        .parse()
        .unwrap();
    let planted = std::path::Path::new(ralph_sandbox::docker::idmap::IDMAP_DIR).join(format!(
        "1.{}.{}",
        ticks + 1,
        std::process::id()
    ));
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("kept.txt"), "the workspace\n").unwrap();
    std::fs::create_dir_all(planted.join("0")).unwrap();
    nix::mount::mount(
        Some(tree.path()),
        &planted.join("0"),
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .unwrap();
    assert!(planted.join("0/kept.txt").exists());

    // One that still runs (its init stopping it, with its grace) is removed in the background.
    let mut server = common::server::Server::new("");
    let start = Instant::now();
    while !containers_with_label(labels::JOB, &job).is_empty()
        || !server.log_text().contains("leftover container(s) removed")
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the service start-up did not remove the leftover; log:\n{}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The leftover mount was detached at start-up, its directory removed, the tree untouched.
    assert!(
        server.log_text().contains("idmapped workspace mount(s)"),
        "{}",
        server.log_text()
    );
    assert!(!planted.exists(), "{}", planted.display());
    assert_eq!(
        std::fs::read_to_string(tree.path().join("kept.txt")).unwrap(),
        "the workspace\n"
    );
    server.terminate();
}
