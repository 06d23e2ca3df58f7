//! Resource limits of the sandbox, which need root (writable cgroups): a memory bomb stopped by
//! `--memory` and reported by `ralph run`, a fork bomb contained by `--pids`, the cgroups not
//! escapable from inside, an output flood capped with the runner's memory bounded, a timeout that
//! kills a daemonized grandchild, and no process left behind after a command or a round.
//!
//! Run as any other user, every test here says it is skipped and passes; the limits that work
//! without root (or fail closed) are covered by `tests/it/sandbox_escape.rs`.

use crate::common;

use crate::escape;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Fixture, complete_report, processes_with};
use escape::*;
use serde_json::json;

/// Whether the limits can be tested here; prints why not.
fn can_test(test: &str) -> bool {
    if !is_root() {
        eprintln!("{test}: skipped: needs root (writable cgroups)");
        return false;
    }
    for c in ["memory", "pids"] {
        if !cgroup_writable(c) {
            eprintln!("{test}: skipped: the {c} cgroup is not writable here");
            return false;
        }
    }
    true
}

/// A process marker no other run uses: `sleep` takes it as its duration, so it is a number.
fn marker() -> String {
    format!("97{:05}", std::process::id() % 100_000)
}

/// Waits (at most 10 s: the sandbox has already killed them; the kernel tears down) for the
/// processes with `marker` to be gone.
fn gone(marker: &str) -> Result<(), String> {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if processes_with(marker).is_empty() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "processes with {marker} in their command line survived: {:?}",
        processes_with(marker)
    ))
}

/// Tries to move the command into the parent of its own cgroup (of `controller`) by writing 0
/// to the parent's `cgroup.procs` (saying so on stderr if that worked), then `exec "$0" …` (the
/// probe with the script's arguments).
const CGROUP_ESCAPE: &str = r#"ctrl=$1; shift
p=$(sed -n "s/^[0-9]*:$ctrl:\(.*\)$/\1/p" /proc/self/cgroup)
d=/sys/fs/cgroup/$ctrl
if [ -z "$p" ]; then p=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup); d=/sys/fs/cgroup; fi
echo 0 > "$d$(dirname "$p")/cgroup.procs" 2>/dev/null && echo "moved out of $p" >&2
exec "$0" "$@""#;

fn limits() -> Vec<Case> {
    vec![
        // The OOM kill ends the command with SIGKILL: 128 + 9, nothing printed.
        Case::new("memory_bomb", ALL, |_, _| {
            Spec::probe(argv!["alloc", "512"], exit(137))
                .flags(argv!["--memory", "64M"])
                .after(|run| {
                    if run.stdout.is_empty() && run.stderr.is_empty() {
                        Ok(())
                    } else {
                        Err("the probe was not killed before finishing".into())
                    }
                })
        }),
        Case::new("memory_within_limit", ALL, |_, _| {
            Spec::probe(
                argv!["alloc", "16"],
                ok_with(vec![("megabytes", json!(16))]),
            )
            .flags(argv!["--memory", "64M"])
        }),
        Case::new("fork_bomb_cgroup_pids", ALL, |_, _| {
            Spec::probe(
                argv!["fork-bomb", "1000"],
                ok_with(vec![("errno", json!("EAGAIN"))]),
            )
            .flags(argv!["--pids", "64"])
            .after(forked_below(64))
        }),
        // /sys/fs/cgroup is readable (for runtimes sizing themselves) but must not let the
        // command leave its cgroup: root owns `cgroup.procs` and cgroup v1 asks for no
        // capability to move a process, so only a read-only mount stops uid 0 (the filesystem
        // modes bind /sys/fs/cgroup read-only, full-access remounts /sys read-only; the EROFS
        // itself is `sys_cgroup_procs_read_only` in `tests/it/sandbox_escape.rs`). The limit holds.
        Case::new("cgroup_escape_memory", ALL, |_, _| {
            Spec::sh(CGROUP_ESCAPE, argv!["memory", "alloc", "512"], exit(137))
                .flags(argv!["--memory", "64M"])
                .after(stayed_in_cgroup)
        }),
        Case::new("cgroup_escape_pids", ALL, |_, _| {
            Spec::sh(
                CGROUP_ESCAPE,
                argv!["pids", "fork-bomb", "1000"],
                ok_with(vec![("errno", json!("EAGAIN"))]),
            )
            .flags(argv!["--pids", "64"])
            .after(forked_below(64))
            .after(stayed_in_cgroup)
        }),
        // A grandchild that double-forked into its own session still dies with the sandbox.
        Case::new("timeout_kills_daemon", ALL, |_, _| {
            let m = format!("{}1", marker());
            assert!(processes_with(&m).is_empty(), "leftover processes with {m}");
            Spec::sh(
                r#""$0" daemon "$1" && exec sleep 30"#,
                argv![m],
                exit_with(124, &[r#""ok":true"#], &[]),
            )
            .flags(argv!["--timeout", "1s", "--kill-grace", "1s"])
            .after(move |_| gone(&m))
        }),
        // The command exits at once, leaving its daemon: nothing may survive the sandbox.
        Case::new("exit_leaves_no_process", ALL, |_, _| {
            let m = format!("{}2", marker());
            assert!(processes_with(&m).is_empty(), "leftover processes with {m}");
            Spec::sh(r#"exec "$0" daemon "$1""#, argv![m], ok()).after(move |_| gone(&m))
        }),
    ]
}

/// The escape script did not say that it left its cgroup.
fn stayed_in_cgroup(run: &Run) -> Result<(), String> {
    if run.stderr.contains("moved out of") {
        Err(format!(
            "the command left its cgroup: {}",
            run.stderr.trim()
        ))
    } else {
        Ok(())
    }
}

fn forked_below(max: u64) -> impl FnOnce(&Run) -> Result<(), String> {
    move |run| {
        let forked = run
            .json()
            .and_then(|j| j["forked"].as_u64())
            .unwrap_or(u64::MAX);
        if forked < max {
            Ok(())
        } else {
            Err(format!("forked {forked} processes with --pids {max}"))
        }
    }
}

#[test]
fn limits_in_every_mode() {
    if !can_test("limits_in_every_mode") {
        return;
    }
    let (cases, runs) = check_table(&limits());
    eprintln!("{cases} cases, {runs} case runs");
    run_matrix("limits", &limits());
}

/// No case of the limits is a known bug any more (the table has no `#[ignore = "BUG: …"]`
/// tests); this runs without root too.
#[test]
fn no_limit_is_a_known_bug() {
    let bugs: Vec<&str> = limits()
        .iter()
        .filter(|c| c.bug.is_some())
        .map(|c| c.name)
        .collect();
    assert!(bugs.is_empty(), "cases marked BUG without a test: {bugs:?}");
}

/// `ralph run` with `agent_cmd` and the probe's directory readable.
fn run_round(f: &Fixture, agent_cmd: &str) -> common::Ralph {
    f.run_cmd(agent_cmd).arg("--read").arg(bin_dir()).args([
        "--round-retries",
        "0",
        "--max-rounds",
        "1",
    ])
}

#[test]
fn memory_bomb_in_a_round_is_reported() {
    if !can_test("memory_bomb_in_a_round_is_reported") {
        return;
    }
    let f = Fixture::new();
    let out = run_round(&f, &format!("{} alloc 512", probe().display()))
        .args(["--memory", "64M"])
        .output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed", "{j}");
    let message = j["message"].as_str().unwrap();
    assert!(
        message.contains("the memory limit was hit"),
        "the result does not say why: {message}"
    );
    let events = f.events(&out.job_id());
    assert!(
        events
            .iter()
            .any(|(_, e)| e.to_string().contains("the memory limit was hit")),
        "no journal event mentions the memory limit: {events:#?}"
    );
}

/// The agent floods stdout with 300 MB: the round's `stdout.log` is capped at `--output-cap`
/// with the truncation marker, and the runner's own memory stays small (ru_maxrss of `ralph`
/// and what it waited for, from wait4).
///
/// `ralph` is started by a small Python parent that waits for it with `wait4` and writes the
/// usage: a process's ru_maxrss includes the memory of what it was before its `execve` (the
/// kernel keeps the old image's high-water mark), and a child spawned straight from this test
/// process — the one binary of every end-to-end test, hundreds of MiB while other tests run —
/// would carry that process's size, not ralph's.
#[test]
fn output_flood_is_capped_and_the_runner_stays_small() {
    if !can_test("output_flood_is_capped_and_the_runner_stays_small") {
        return;
    }
    let f = Fixture::new();
    let out_path = f.root.path().join("ralph.out");
    let err_path = f.root.path().join("ralph.err");
    let usage_path = f.root.path().join("ralph.usage");
    let flood = 300u64 << 20;
    let ralph = run_round(&f, &format!("{} flood {flood} 2>&1", probe().display()))
        .args(["--output-cap", "1M"])
        .command();
    let mut cmd = std::process::Command::new("python3");
    cmd.args([
        "-c",
        "import os, subprocess, sys\n\
         p = subprocess.Popen(sys.argv[2:])\n\
         _, status, ru = os.wait4(p.pid, 0)\n\
         open(sys.argv[1], 'w').write(f'{status} {ru.ru_maxrss}')\n",
    ])
    .arg(&usage_path)
    .arg(ralph.get_program())
    .args(ralph.get_args());
    for (k, v) in ralph.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let status = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .status()
        .unwrap();
    assert!(status.success(), "the python parent failed: {status}");
    let usage = std::fs::read_to_string(&usage_path).unwrap();
    let (status, max_rss_kib) = usage.split_once(' ').unwrap();
    let status: i32 = status.parse().unwrap();
    let max_rss_kib: i64 = max_rss_kib.parse().unwrap();
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3,
        "ralph ended with status {status:#x} (expected exit 3: no report)\n{stdout}\n{stderr}"
    );
    let j: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let log = PathBuf::from(j["artifacts"].as_str().unwrap()).join("rounds/1/1/stdout.log");
    let bytes = std::fs::read(&log).unwrap();
    let cap = 1usize << 20;
    assert!(
        bytes.len() <= cap,
        "{} is {} bytes, over the cap of {cap}",
        log.display(),
        bytes.len()
    );
    let tail = "[ralph: output truncated at 1048576 bytes; the rest was discarded]\n";
    assert!(
        bytes.ends_with(tail.as_bytes()),
        "{} does not end with the truncation marker: {:?}",
        log.display(),
        String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(200)..])
    );
    eprintln!("ralph peak RSS: {max_rss_kib} KiB for a {flood}-byte flood");
    assert!(
        max_rss_kib < 100 * 1024,
        "ralph's peak RSS was {max_rss_kib} KiB for a {flood}-byte flood"
    );
}

/// A normal round whose agent leaves a daemon behind: the job completes and nothing survives.
#[test]
fn a_round_leaves_no_process_behind() {
    if !can_test("a_round_leaves_no_process_behind") {
        return;
    }
    let f = Fixture::new();
    let m = format!("{}3", marker());
    assert!(processes_with(&m).is_empty(), "leftover processes with {m}");
    let report = complete_report("done");
    let agent = f.agent(
        "daemon.sh",
        &format!(
            "{} daemon {m} > daemon.json\necho '{report}'",
            probe().display()
        ),
    );
    let out = run_round(&f, &agent.display().to_string()).output();
    out.expect_code(0);
    let daemon = f.read_ws("daemon.json");
    assert!(
        daemon.contains(r#""ok":true"#),
        "the daemon did not start: {daemon}"
    );
    gone(&m).unwrap();
    assert!(Path::new(&f.ws).is_dir());
}
