//! The CPUs a sandboxed command may run on: exactly those its runner may use. The supervisor
//! moves its init off its own CPU while the two set the sandbox up side by side
//! (`sandbox/src/native/spread.rs`) and widens it back before the go-ahead, so the command the
//! init forks inherits the whole set.
//! Runs as any user (as root, and through user namespaces as the unprivileged `ralph-ci`).

use crate::common;

use std::process::Command;

use common::*;

/// The CPUs of `Cpus_allowed_list` in a `/proc/PID/status` text, as a sorted list.
fn allowed(status: &str) -> Vec<usize> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {status:?}"))
        .trim();
    let mut cpus = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

const SHOW: &str = "grep Cpus_allowed_list /proc/self/status";

/// `ralph sandbox exec --mode MODE -- sh -c SHOW`, under `taskset -c PIN` when given.
fn command_cpus(ws: &std::path::Path, mode: &str, pin: Option<&str>) -> Vec<usize> {
    let ralph = Ralph::new()
        .args(["sandbox", "exec", "--mode", mode, "--workspace"])
        .arg(ws)
        .args(["--", "/bin/sh", "-c", SHOW])
        .command();
    let cmd = match pin {
        Some(p) => {
            let mut c = Command::new("taskset");
            c.args(["-c", p])
                .arg(ralph.get_program())
                .args(ralph.get_args());
            c
        }
        None => ralph,
    };
    let out = common::output_of(cmd);
    assert_eq!(out.code, 0, "{mode} {pin:?}: {out:?}");
    allowed(&out.stdout)
}

#[test]
fn the_command_may_run_on_every_cpu_its_runner_may_and_no_other() {
    let ours = allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    let ws = tempfile::tempdir().unwrap();
    for mode in ["workspace-write", "read-only", "full-access"] {
        // Repeated: the narrowing is undone on every start, not on the lucky ones.
        for _ in 0..5 {
            assert_eq!(
                command_cpus(ws.path(), mode, None),
                ours,
                "{mode}: the command's CPUs are not its runner's"
            );
        }
    }
    // A runner pinned to some of them gives its command exactly those.
    let (Some(first), Some(last)) = (ours.first(), ours.last()) else {
        panic!("no CPU allowed: {ours:?}");
    };
    let mut pins = vec![(first.to_string(), vec![*first])];
    if first != last {
        pins.push((format!("{first},{last}"), vec![*first, *last]));
    }
    for (pin, want) in pins {
        assert_eq!(
            command_cpus(ws.path(), "workspace-write", Some(&pin)),
            want,
            "pinned to {pin}"
        );
    }
}

/// A round's agent too: its helper (started ahead, between rounds) is the supervisor.
#[test]
fn a_rounds_agent_may_run_on_every_cpu_its_runner_may() {
    let ours = allowed(&std::fs::read_to_string("/proc/self/status").unwrap());
    let f = Fixture::new();
    let done = f.data("done.json", complete_report("cpus shown").as_bytes());
    let again = f.data("again.json", continue_report("again").as_bytes());
    let cmd = format!(
        "{SHOW} >> cpus.txt; if [ \"$(wc -l < cpus.txt)\" -ge 3 ]; then cp '{}' \"$RALPH_REPORT_FILE\"; else cp '{}' \"$RALPH_REPORT_FILE\"; fi",
        done.display(),
        again.display()
    );
    f.run_cmd(&cmd)
        .args(["--toolchain", "none", "--max-rounds", "5"])
        .output()
        .expect_code(0);
    let lines: Vec<String> = f.read_ws("cpus.txt").lines().map(String::from).collect();
    assert_eq!(lines.len(), 3, "three rounds ran: {lines:?}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(allowed(l), ours, "round {}: {l}", i + 1);
    }
}
