//! Stopping a round stops its whole process tree: on round timeout, on SIGINT/SIGTERM of the
//! runner, and when the runner itself is killed. Markers in the command lines make every
//! process of the round findable afterwards.

use crate::common;

use std::time::Duration;

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// An agent whose tree has a child that ignores SIGTERM, and a grandchild that escaped into its
/// own session (setsid) after its parent exited (double fork).
fn stubborn_tree(f: &Fixture, marker: &str) -> std::path::PathBuf {
    f.agent(
        "tree.sh",
        &format!(
            r#"echo $$ > agent.pid
( trap '' TERM; exec sleep {marker}1 ) &
setsid sh -c '(sleep {marker}2 & echo $! > grandchild.pid) ; exit 0' &
sleep 0.2
touch started
exec sleep {marker}3"#
        ),
    )
}

fn assert_gone(marker: &str) {
    // Everything is killed before ralph exits; allow the kernel a moment to tear down.
    wait_until_gone(
        marker,
        Duration::from_secs(10),
        "processes of the round survived",
    );
}

/// Waits until the whole stubborn tree runs (the `started` file comes before its last process).
fn wait_for_tree(f: &Fixture, marker: &str) {
    wait_for_file(&f.ws.join("started"), Duration::from_secs(30));
    let parts: Vec<String> = (1..=3).map(|i| format!("{marker}{i}")).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    wait_for_processes(&parts, Duration::from_secs(30));
}

#[test]
fn a_round_timeout_kills_the_whole_tree() {
    let f = Fixture::new();
    let marker = "93100";
    let agent = stubborn_tree(&f, marker);
    let out = f
        .run(&agent)
        .args(["--round-timeout", "1s", "--round-retries", "0"])
        .output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed");
    assert!(
        j["message"].as_str().unwrap().contains("timeout"),
        "{}",
        j["message"]
    );
    assert!(
        f.ws.join("grandchild.pid").exists(),
        "the double fork happened"
    );
    assert_gone(marker);
    let events = f.events(&out.job_id());
    let fin = events.iter().find(|(t, _)| t == "round_finished").unwrap();
    assert_eq!(fin.1["result"]["reason"], "timeout");
    assert_eq!(fin.1["ended_by"], "timeout");
}

#[test]
fn sigint_cancels_with_130_and_leaves_no_orphan() {
    let f = Fixture::new();
    let marker = "93200";
    let agent = stubborn_tree(&f, marker);
    let child = f.run(&agent).spawn();
    wait_for_tree(&f, marker);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_gone(marker);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["outcome"], "cancelled");
    let events = f.events(j["job_id"].as_str().unwrap());
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        &types[types.len() - 3..],
        ["cancel_requested", "round_finished", "job_finished"]
    );
    assert_eq!(events[types.len() - 3].1["by"], "SIGINT");
    assert_eq!(events[types.len() - 2].1["result"]["kind"], "cancelled");
}

#[test]
fn sigterm_cancels_too() {
    let f = Fixture::new();
    let marker = "93300";
    let agent = stubborn_tree(&f, marker);
    let child = f.run(&agent).spawn();
    wait_for_tree(&f, marker);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_gone(marker);
}

#[test]
fn killing_the_runner_outright_still_kills_the_round() {
    let f = Fixture::new();
    let marker = "93400";
    let agent = stubborn_tree(&f, marker);
    let mut child = f.run(&agent).spawn();
    wait_for_tree(&f, marker);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // The helper notices through its pidfd that the runner is gone and stops the tree
    // (SIGTERM, then SIGKILL after the grace period of 1s).
    wait_until_gone(
        marker,
        Duration::from_secs(30),
        "round processes outlived the killed runner",
    );
}

#[test]
fn leftovers_of_a_finished_round_are_killed() {
    let f = Fixture::new();
    let marker = "93500";
    let agent = f.agent(
        "daemon.sh",
        &format!(
            r#"setsid sleep {marker}1 &
( trap '' TERM HUP; exec sleep {marker}2 ) &
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("left a daemon behind")
        ),
    );
    f.run(&agent).output().expect_code(0);
    assert_gone(marker);
}

/// A round's result comes only once every process it left behind is dead (the checks after the
/// run need a tree that writes nothing more): when `ralph sandbox exec` returns, nothing of its
/// command runs, not even a detached loop that kept writing into the workspace. Checked at
/// once, without waiting.
#[test]
fn nothing_a_command_left_runs_once_its_result_is_out() {
    let f = Fixture::new();
    let marker = "93700";
    let out = Ralph::new()
        .args(["sandbox", "exec", "--workspace"])
        .arg(&f.ws)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            r#"setsid sh -c 'while :; do echo x >> ticks; sleep 0.{marker}1; done' &
( trap '' TERM HUP; while :; do echo y >> ticks; sleep 0.{marker}2; done ) &
while [ ! -s ticks ]; do sleep 0.01; done"#
        ))
        .output();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let left = processes_with(marker);
    assert!(left.is_empty(), "still running after the result: {left:?}");
}

/// An agent started behind a shell (`--agent-cmd` runs under `sh -c`) that traps SIGTERM to
/// clean up gets its kill grace: the wrapper shell dying at once must not cut the clean-up short.
#[test]
fn a_cancelled_agent_behind_a_shell_wrapper_gets_its_grace_to_clean_up() {
    let f = Fixture::new();
    let agent = f.agent(
        "cleanup.sh",
        "trap 'sleep 2; touch cleaned; exit 0' TERM\ntouch started\nwhile :; do sleep 0.1; done",
    );
    // A compound command: the shell cannot exec the agent and stays its parent.
    let child = f
        .run_cmd(&format!("{}; true", agent.display()))
        .args(["--kill-grace", "30s"])
        .spawn();
    wait_for_file(&f.ws.join("started"), Duration::from_secs(30));
    let asked = std::time::Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        f.ws.join("cleaned").exists(),
        "the agent's clean-up was cut short when its wrapper shell ended"
    );
    // The round ended when its processes did, not at the end of the grace.
    assert!(
        asked.elapsed() < Duration::from_secs(25),
        "{:?}",
        asked.elapsed()
    );
}
