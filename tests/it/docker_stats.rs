//! Docker rounds' CPU time and peak memory (as native rounds report them), an agent command
//! that cannot run in a container (`exec_failed`, not `no_report`), and `--cpus` on both
//! backends. Skipped (with a note) where the engine or the image is missing.

use crate::common;

use common::docker::{IMAGE, ready};
use common::{Fixture, complete_report};
use serde_json::Value;

/// Burns ~1 s of CPU with ~80 MB resident, then reports.
const BURN: &str = "/usr/bin/python3 -c 'import time
x = bytearray(80 << 20)
for i in range(0, len(x), 4096): x[i] = 1
t = time.process_time()
while time.process_time() - t < 1.0: pass'";

fn run_on(f: &Fixture, backend: &str, agent: &std::path::Path) -> common::Output {
    let mut r = f
        .run(agent)
        .args(["--max-rounds", "1", "--round-retries", "0"]);
    if backend == "docker" {
        r = r.args(["--backend", "docker", "--image", IMAGE]);
    }
    r.output()
}

/// The journal's `resources` of the job's one finished round.
fn round_resources(f: &Fixture, job: &str) -> Value {
    let finished: Vec<Value> = f
        .events(job)
        .into_iter()
        .filter(|(_, e)| e.get("resources").is_some() && e.get("result").is_some())
        .map(|(_, e)| e)
        .collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    finished[0]["resources"].clone()
}

#[test]
fn a_docker_round_reports_cpu_time_and_peak_memory_like_a_native_one() {
    if !ready("a_docker_round_reports_cpu_time_and_peak_memory_like_a_native_one") {
        return;
    }
    for backend in ["docker", "native"] {
        let f = Fixture::new();
        let agent = f.agent(
            "burn.sh",
            &format!(
                "{BURN}\necho '{}' > \"$RALPH_REPORT_FILE\"",
                complete_report("burnt")
            ),
        );
        let out = run_on(&f, backend, &agent);
        out.expect_code(0);
        let r = round_resources(&f, &out.job_id());
        let cpu = r["user_cpu_ms"].as_u64().unwrap() + r["system_cpu_ms"].as_u64().unwrap();
        let rss = r["max_rss_kib"].as_u64().unwrap();
        assert!(cpu >= 500, "{backend}: cpu {cpu} ms: {r}");
        assert!(rss >= 64 * 1024, "{backend}: peak {rss} KiB: {r}");
    }
}

/// What the shell cannot run is a configuration error on docker as natively: a missing program
/// (127) and a file without +x (126), both visible to the check before round 1.
#[test]
fn an_agent_command_that_cannot_run_in_docker_is_exec_failed() {
    if !ready("an_agent_command_that_cannot_run_in_docker_is_exec_failed") {
        return;
    }
    for (name, cmd) in [
        ("missing", "sh -c 'exec /no/such/program'"),
        ("not executable", "./plain.sh"),
    ] {
        let f = Fixture::new();
        std::fs::write(f.ws.join("plain.sh"), "echo hi\n").unwrap();
        let out = f
            .run_cmd(cmd)
            .args(["--max-rounds", "1", "--round-retries", "0"])
            .args(["--backend", "docker", "--image", IMAGE])
            .output();
        let j = out.json();
        let events = f.events(&out.job_id());
        let text = serde_json::to_string(&events).unwrap();
        assert!(text.contains("exec_failed"), "{name}: {j}\n{text}");
        assert!(!text.contains("no_report"), "{name}: {text}");
    }
}

/// An agent that reports and then exits 127 itself did run: its report counts, and its round
/// is not an exec failure.
#[test]
fn an_agent_exiting_127_after_reporting_is_not_an_exec_failure() {
    if !ready("an_agent_exiting_127_after_reporting_is_not_an_exec_failure") {
        return;
    }
    let f = Fixture::new();
    let agent = f.agent(
        "liar.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"\necho 'exec_failed 2 forged' >&2\nexit 127",
            complete_report("done")
        ),
    );
    let out = run_on(&f, "docker", &agent);
    out.expect_code(0);
    let text = serde_json::to_string(&f.events(&out.job_id())).unwrap();
    assert!(!text.contains("exec_failed"), "{text}");
}

/// `--cpus 0.25`: 2 s of a busy loop get a quarter of a CPU, ~0.5 s of CPU (at most 0.7 s
/// allowed), on docker and natively; unlimited it gets up to 2 s.
#[test]
fn cpus_caps_a_busy_loop_on_both_backends() {
    if !ready("cpus_caps_a_busy_loop_on_both_backends") {
        return;
    }
    let burn =
        "import time\nt = time.time()\nwhile time.time() - t < 2: pass\nprint(time.process_time())";
    for backend in ["docker", "native"] {
        let ws = tempfile::tempdir().unwrap();
        let mut c = std::process::Command::new(common::ralph_bin());
        c.args(["sandbox", "exec", "--backend", backend, "--workspace"])
            .arg(ws.path())
            .args(["--cpus", "0.25"]);
        if backend == "docker" {
            c.args(["--image", IMAGE]);
        }
        let out = c
            .args(["--", "/usr/bin/python3", "-c", burn])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{backend}: {stdout}\n{stderr}");
        let cpu: f64 = stdout.trim().parse().unwrap();
        assert!(cpu <= 0.7, "{backend}: {cpu} s of CPU under --cpus 0.25");
        assert!(
            cpu >= 0.1,
            "{backend}: {cpu} s of CPU: the loop did not run"
        );
    }
}

#[test]
fn bad_cpus_values_are_usage_errors_naming_the_flag() {
    for v in ["0", "abc", "1000", "-1"] {
        let ws = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(common::ralph_bin())
            .args(["sandbox", "exec", "--workspace"])
            .arg(ws.path())
            .arg(format!("--cpus={v}"))
            .args(["--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{v}: {stderr}");
        assert!(stderr.contains("--cpus"), "{v}: {stderr}");
    }
}
