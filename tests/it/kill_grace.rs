//! The kill grace reaches every process of a round, on both backends: an agent behind a shell
//! wrapper that traps SIGTERM to clean up gets its `--kill-grace` on cancel and on round timeout
//! (docker; native in `tests/it/process_tree.rs`), and when the runner is killed outright (both),
//! after which nothing of the round is left running (issue 17, parts 2 and 5b) — also when
//! another ralph on the host (a `ralph serve` starting, which reaps what dead runners left)
//! finds the round in the middle of that grace (issue 27).
//!
//! The docker cases need a Docker engine and the image `ralph-agent-base:latest`.

use crate::common;

use std::time::{Duration, Instant};

use common::docker::{ready, running_containers_with_label};
use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use ralph_sandbox::docker::labels;

/// An agent that cleans up for 2 s on SIGTERM, started behind a shell that stays its parent
/// (a compound command cannot be exec'd). `marker` is in every command line of the round.
fn trapping_agent(f: &Fixture, marker: &str) -> String {
    let agent = f.agent(
        &format!("grace-{marker}.sh"),
        "echo \"$RALPH_JOB_ID\" > job\n\
         trap 'sleep 2; echo cleaned > cleaned; exit 0' TERM\n\
         touch started\n\
         while :; do sleep 0.1; done",
    );
    format!("{}; true", agent.display())
}

fn start(f: &Fixture, marker: &str, backend: &str, extra: &[&str]) -> std::process::Child {
    f.run_cmd(&trapping_agent(f, marker))
        .args(["--kill-grace", "5s", "--backend", backend])
        .args(extra)
        .spawn()
}

fn assert_cleaned(f: &Fixture, out: &std::process::Output) {
    assert!(
        f.ws.join("cleaned").exists(),
        "the agent's clean-up was cut short; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn docker_a_cancelled_agent_behind_a_shell_wrapper_gets_its_grace() {
    if !ready("docker_a_cancelled_agent_behind_a_shell_wrapper_gets_its_grace") {
        return;
    }
    let f = Fixture::new();
    let child = start(&f, "71301", "docker", &[]);
    wait_for_file(&f.ws.join("started"), Duration::from_secs(120));
    let asked = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_cleaned(&f, &out);
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "{:?}",
        asked.elapsed()
    );
    assert_gone_everywhere(&f, "71301");
}

#[test]
fn docker_an_agent_past_its_round_timeout_gets_its_grace() {
    if !ready("docker_an_agent_past_its_round_timeout_gets_its_grace") {
        return;
    }
    let f = Fixture::new();
    let child = start(
        &f,
        "71302",
        "docker",
        &["--round-timeout", "3s", "--max-rounds", "1"],
    );
    let out = child.wait_with_output().unwrap();
    assert!(
        f.ws.join("started").exists(),
        "the agent never started; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_cleaned(&f, &out);
    assert_gone_everywhere(&f, "71302");
}

/// Kills `ralph run` outright once the agent runs; the round must still stop with its grace.
fn runner_killed(backend: &str, marker: &str) {
    let f = Fixture::new();
    let mut child = start(&f, marker, backend, &[]);
    wait_for_file(&f.ws.join("started"), Duration::from_secs(120));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    wait_until(
        "the agent cleaned up after its runner was killed",
        Duration::from_secs(60),
        || f.ws.join("cleaned").exists(),
    );
    assert_gone_everywhere(&f, marker);
}

/// Nothing of the round runs: no process, no running container of its job.
fn assert_gone_everywhere(f: &Fixture, marker: &str) {
    wait_until_gone(
        marker,
        Duration::from_secs(60),
        "round processes outlived the round",
    );
    let job = std::fs::read_to_string(f.ws.join("job")).unwrap_or_default();
    let job = job.trim();
    if !job.is_empty() && common::docker::cli().is_some() {
        wait_until(
            "no container of the round runs",
            Duration::from_secs(60),
            || running_containers_with_label(labels::JOB, job).is_empty(),
        );
    }
}

#[test]
fn docker_killing_the_runner_outright_still_gives_the_grace_and_stops_the_round() {
    if !ready("docker_killing_the_runner_outright_still_gives_the_grace_and_stops_the_round") {
        return;
    }
    runner_killed("docker", "71303");
}

#[test]
fn native_killing_the_runner_outright_still_gives_the_grace_and_stops_the_round() {
    runner_killed("native", "71304");
}

/// Like [`trapping_agent`], but its clean-up (touching `terming` first) lasts until the test
/// writes `go-on` into the workspace: the test decides when the grace is in use.
fn waiting_agent(f: &Fixture, marker: &str) -> String {
    let agent = f.agent(
        &format!("grace-wait-{marker}.sh"),
        "echo \"$RALPH_JOB_ID\" > job\n\
         trap 'touch terming; while [ ! -e go-on ]; do sleep 0.05; done; echo cleaned > cleaned; exit 0' TERM\n\
         touch started\n\
         while :; do sleep 0.1; done",
    );
    format!("{}; true", agent.display())
}

/// Kills `ralph run` outright once the agent runs and, while the round's clean-up runs in its
/// grace, starts a `ralph serve` on this host: its start-up recovery (orphaned helpers,
/// cgroups of dead makers, containers of dead runners) must leave the round its grace. The
/// clean-up goes on only once the service is ready, so a recovery that killed the round
/// before answering is caught every time.
fn reaper_during_the_grace(backend: &str, marker: &str) {
    let f = Fixture::new();
    let mut child = f
        .run_cmd(&waiting_agent(&f, marker))
        .args(["--kill-grace", "60s", "--backend", backend])
        .spawn();
    wait_for_file(&f.ws.join("started"), Duration::from_secs(120));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    wait_for_file(&f.ws.join("terming"), Duration::from_secs(60));
    let mut server = common::server::Server::new("");
    std::fs::write(f.ws.join("go-on"), "").unwrap();
    wait_until(
        "the agent cleaned up after a service started during its grace",
        Duration::from_secs(60),
        || f.ws.join("cleaned").exists(),
    );
    let log = server.log_text();
    server.terminate();
    assert!(
        !log.contains("orphaned helper(s) killed past their grace"),
        "the round outlived its grace: {log}"
    );
    assert_gone_everywhere(&f, marker);
}

#[test]
fn native_a_service_starting_during_the_grace_of_a_killed_runner_leaves_the_round_its_grace() {
    reaper_during_the_grace("native", "71306");
}

#[test]
fn docker_a_service_starting_during_the_grace_of_a_killed_runner_leaves_the_round_its_grace() {
    if !ready(
        "docker_a_service_starting_during_the_grace_of_a_killed_runner_leaves_the_round_its_grace",
    ) {
        return;
    }
    reaper_during_the_grace("docker", "71307");
}

/// Cancels the round (SIGINT to `ralph run`) and, once its clean-up runs, kills the runner
/// outright: the rest of the grace is the round's still (the helper or the container's init
/// keeps the grace that runs; a second stop request does not cut it).
fn runner_killed_during_a_cancel(backend: &str, marker: &str) {
    let f = Fixture::new();
    let mut child = f
        .run_cmd(&waiting_agent(&f, marker))
        .args(["--kill-grace", "60s", "--backend", backend])
        .spawn();
    wait_for_file(&f.ws.join("started"), Duration::from_secs(120));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    wait_for_file(&f.ws.join("terming"), Duration::from_secs(60));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    // A supervisor that killed the round at its runner's death (it polls a pidfd of the runner)
    // would have done so within this window.
    assert_not_cleaned_for(&f, Duration::from_secs(2));
    std::fs::write(f.ws.join("go-on"), "").unwrap();
    wait_until(
        "the agent cleaned up after its runner was killed during a cancel",
        Duration::from_secs(60),
        || f.ws.join("cleaned").exists(),
    );
    assert_gone_everywhere(&f, marker);
}

/// Watches for `limit` that the agent's clean-up is still running (it waits for `go-on`).
fn assert_not_cleaned_for(f: &Fixture, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit {
        assert!(!f.ws.join("cleaned").exists(), "cleaned up before go-on");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn native_a_runner_killed_during_a_cancels_grace_leaves_the_round_the_rest_of_it() {
    runner_killed_during_a_cancel("native", "71308");
}

#[test]
fn docker_a_runner_killed_during_a_cancels_grace_leaves_the_round_the_rest_of_it() {
    if !ready("docker_a_runner_killed_during_a_cancels_grace_leaves_the_round_the_rest_of_it") {
        return;
    }
    runner_killed_during_a_cancel("docker", "71309");
}

/// The pid of a child of `parent` whose command line holds `needle` and that has a child of its
/// own (the round's helper, whose child is the round's init; the runner's standby helper for the
/// next round has none).
fn child_with(parent: u32, needle: &str) -> Option<i32> {
    processes_with(needle).into_iter().find(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        ppid == Some(parent) && !kids.trim().is_empty()
    })
}

#[test]
fn native_killing_the_supervisor_outright_still_gives_the_grace_and_stops_the_round() {
    let f = Fixture::new();
    let marker = "71305";
    let child = start(&f, marker, "native", &[]);
    wait_for_file(&f.ws.join("started"), Duration::from_secs(120));
    let helper = child_with(child.id(), ralph_sandbox::native::HELPER_ARG)
        .expect("the runner's sandbox helper");
    // The supervisor is gone at once: the init (its child, pid 1 of the round) must stop the
    // round itself, with the grace.
    kill(Pid::from_raw(helper), Signal::SIGKILL).unwrap();
    wait_until(
        "the agent cleaned up after its supervisor was killed",
        Duration::from_secs(60),
        || f.ws.join("cleaned").exists(),
    );
    // The runner may go on to another round: it goes, and that round with it.
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = child.wait_with_output();
    assert_gone_everywhere(&f, marker);
}
