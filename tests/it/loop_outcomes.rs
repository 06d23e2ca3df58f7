//! Every terminal outcome of a loop job, driven through `ralph run` with scripted agents, with
//! the exit code, the result object and the journal checked for each path.

use crate::common;

use common::*;
use serde_json::Value;

/// An agent that counts its rounds in the workspace and completes at round `k`.
fn counting_agent(f: &Fixture, k: u32) -> std::path::PathBuf {
    f.agent(
        "count.sh",
        &format!(
            r#"n=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count
echo $$ >> pids
for d in "$HOME" "$TMPDIR" /tmp; do [ -e "$d/previous-round" ] && echo "$d" >> leaks; done
touch "$HOME/previous-round" "$TMPDIR/previous-round" /tmp/previous-round
if [ $n -ge {k} ]; then
  printf '%s' '{}' > "$RALPH_REPORT_FILE"
else
  printf '%s' '{}' > "$RALPH_REPORT_FILE"
fi"#,
            complete_report("all done"),
            continue_report("one more step")
        ),
    )
}

#[test]
fn complete_at_round_k_with_verify() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 3);
    let out = f
        .run(&agent)
        .args(["--verify", "test \"$(cat count)\" = 3"])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete");
    assert_eq!(j["reason"], "verified");
    assert_eq!(j["verified"], true);
    assert_eq!(j["rounds"], 3);
    assert_eq!(j["report"]["summary"], "all done");
    assert!(
        out.stderr.contains("complete (verified) after 3 round(s)"),
        "{}",
        out.stderr
    );
    let events = f.event_types(&out.job_id());
    let round = ["round_started", "round_spawned", "round_finished"];
    // `toolchain_granted`: what the runner's toolchains grant the job (SPEC §12), once per run.
    let mut expected = vec!["job_submitted", "job_started", "toolchain_granted"];
    for _ in 0..3 {
        expected.extend(round);
    }
    expected.extend(["verify_started", "verify_finished", "job_finished"]);
    assert_eq!(events, expected);
}

#[test]
fn completion_without_verify_is_only_the_workers_claim() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let out = f.run(&agent).output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["reason"], "reported");
    assert_eq!(j["verified"], Value::Null);
    assert!(
        out.stderr
            .contains("worker reported completion; not verified"),
        "{}",
        out.stderr
    );
}

#[test]
fn each_round_is_a_fresh_process() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 4);
    let out = f.run(&agent).output();
    out.expect_code(0);
    // Inside, each round is the first process of a new pid namespace and finds a fresh, empty
    // HOME, TMPDIR and /tmp: nothing of the previous round's process survives.
    let pids: Vec<String> = f.read_ws("pids").lines().map(str::to_owned).collect();
    assert_eq!(pids.len(), 4);
    assert!(
        pids.iter().all(|p| p == "3"),
        "the agent is an early pid of its own namespace: {pids:?}"
    );
    assert_eq!(
        f.read_ws("leaks"),
        "",
        "private directories carried over between rounds"
    );
    // …and on the host each round was supervised by a different process.
    let mut host_pids: Vec<u64> = f
        .events(&out.job_id())
        .iter()
        .filter(|(t, _)| t == "round_spawned")
        .map(|(_, v)| v["pid"].as_u64().unwrap())
        .collect();
    assert_eq!(host_pids.len(), 4);
    host_pids.sort_unstable();
    host_pids.dedup();
    assert_eq!(host_pids.len(), 4);
}

#[test]
fn blocked() {
    let f = Fixture::new();
    let agent = f.agent(
        "blocked.sh",
        r#"echo '{"status":"blocked","summary":"cannot reach the database","evidence":["connection refused"],"nextSteps":[],"blocker":"no database credentials"}' > "$RALPH_REPORT_FILE""#,
    );
    let out = f.run(&agent).output();
    out.expect_code(1);
    let j = out.json();
    assert_eq!(j["outcome"], "blocked");
    assert_eq!(j["report"]["blocker"], "no database credentials");
    assert_eq!(j["rounds"], 1);
    let events = f.events(&out.job_id());
    let (_, last) = events.last().unwrap();
    assert_eq!(last["type"], "job_finished");
    assert_eq!(last["outcome"], "blocked");
}

#[test]
fn budget_limited_by_rounds_starts_exactly_max_rounds() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1000);
    let out = f.run(&agent).args(["--max-rounds", "3"]).output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_rounds");
    assert_eq!(j["rounds"], 3);
    assert_eq!(j["max_rounds"], 3);
    assert_eq!(j["report"]["status"], "continue");
    assert_eq!(f.read_ws("count").trim(), "3");
    let events = f.event_types(&out.job_id());
    assert_eq!(events.iter().filter(|t| *t == "round_started").count(), 3);
}

#[test]
fn round_failed_in_round_one_has_no_report() {
    let f = Fixture::new();
    let agent = f.agent("silent.sh", "echo working; echo oops >&2; exit 1");
    let out = f.run(&agent).output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed");
    assert_eq!(j["rounds"], 1);
    assert_eq!(j["report"], Value::Null);
    assert_eq!(j["retries"], 1, "the default is one retry");
    let msg = j["message"].as_str().unwrap();
    assert!(msg.contains("no_report"), "{msg}");
    assert!(
        msg.contains("exit status 1") && msg.contains("oops"),
        "{msg}"
    );
    let events = f.event_types(&out.job_id());
    assert_eq!(
        events,
        [
            "job_submitted",
            "job_started",
            "toolchain_granted",
            "round_started",
            "round_spawned",
            "round_finished",
            "round_retried",
            "round_started",
            "round_spawned",
            "round_finished",
            "job_finished"
        ]
    );
}

#[test]
fn round_failed_in_a_later_round_carries_the_last_valid_report() {
    let f = Fixture::new();
    let agent = f.agent(
        "fails_later.sh",
        &format!(
            r#"if [ "$RALPH_ROUND" = 1 ]; then echo '{}'; else exit 2; fi"#,
            continue_report("round one work")
        ),
    );
    let out = f.run(&agent).output();
    out.expect_code(3);
    let j = out.json();
    assert_eq!(j["outcome"], "round-failed");
    assert_eq!(j["rounds"], 2);
    assert_eq!(j["report"]["summary"], "round one work");
}

#[test]
fn a_retry_recovers_a_failed_attempt_and_is_counted() {
    let f = Fixture::new();
    let agent = f.agent(
        "flaky.sh",
        &format!(
            r#"if [ "$RALPH_ATTEMPT" = 1 ]; then echo 'not json' > "$RALPH_REPORT_FILE"; exit 0; fi
grep -q 'previous attempt of this round failed' "$RALPH_PROMPT_FILE" && touch saw_retry_note
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("second try")
        ),
    );
    let out = f
        .run(&agent)
        .args(["--round-retries", "2", "--retry-backoff", "100ms"])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["retries"], 1);
    assert_eq!(j["rounds"], 1);
    assert!(
        f.ws.join("saw_retry_note").exists(),
        "the retry's prompt must say why the attempt failed"
    );
    let events = f.events(&out.job_id());
    let retried = events.iter().find(|(t, _)| t == "round_retried").unwrap();
    assert_eq!(retried.1["reason"], "invalid_report");
    assert_eq!(retried.1["backoff_ms"], 100);
}

#[test]
fn a_failed_verify_note_reaches_the_next_round() {
    let f = Fixture::new();
    // The agent claims completion; only once its prompt carries the runner's verify note does
    // it actually fix things. (The sentinel is computed by the verify command, so it appears in
    // its output but not in its command line, which the prompt also quotes.)
    let agent = f.agent(
        "claims.sh",
        &format!(
            r#"prompt=$(cat)
case "$prompt" in *VERIFY-42-SENTINEL*) touch fixed ;; esac
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("claimed done")
        ),
    );
    let out = f
        .run(&agent)
        .args([
            "--verify",
            "test -f fixed || { echo VERIFY-$((40+2))-SENTINEL; exit 7; }",
        ])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["rounds"], 2);
    assert_eq!(j["verified"], true);
    let events = f.events(&out.job_id());
    let verifies: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "verify_finished")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(verifies.len(), 2);
    assert_eq!(verifies[0]["passed"], false);
    assert_eq!(verifies[0]["exit"]["code"], 7);
    assert!(
        verifies[0]["output_tail"]
            .as_str()
            .unwrap()
            .contains("VERIFY-42-SENTINEL")
    );
    assert_eq!(verifies[1]["passed"], true);
    let dir = j["artifacts"].as_str().unwrap();
    let prompt2 = std::fs::read_to_string(format!("{dir}/rounds/2/1/in/prompt.md")).unwrap();
    assert!(prompt2.contains("verify command failed"), "{prompt2}");
    assert!(prompt2.contains("exit status 7"), "{prompt2}");
    assert!(prompt2.contains("test -f fixed"), "{prompt2}");
}

#[test]
fn verify_failing_on_the_last_round_is_budget_limited_and_unverified() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let out = f
        .run(&agent)
        .args(["--max-rounds", "2", "--verify", "exit 1"])
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_rounds");
    assert_eq!(j["verified"], false);
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("verify command failed")
    );
}

#[test]
fn the_token_budget_runs_out() {
    let f = Fixture::new();
    let agent = f.agent(
        "spender.sh",
        &format!(
            r#"echo '{{"model":"m1","input_tokens":400,"cached_input_tokens":100,"output_tokens":200,"reasoning_tokens":50}}' >> "$RALPH_USAGE_FILE"
echo 'garbage line' >> "$RALPH_USAGE_FILE"
echo '{}' > "$RALPH_REPORT_FILE""#,
            continue_report("spent some")
        ),
    );
    let out = f.run(&agent).args(["--max-tokens", "1000"]).output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_tokens");
    assert_eq!(
        j["rounds"], 2,
        "600 tokens after round 1, 1200 after round 2"
    );
    assert_eq!(j["usage"]["input_tokens"], 800);
    assert_eq!(j["usage"]["cached_input_tokens"], 200);
    assert_eq!(j["usage"]["output_tokens"], 400);
    assert_eq!(j["usage"]["reasoning_tokens"], 100);
    let events = f.events(&out.job_id());
    let skipped: Vec<_> = events
        .iter()
        .filter(|(t, _)| t == "usage_skipped")
        .collect();
    assert_eq!(
        skipped.len(),
        2,
        "one malformed line per round, journalled and skipped"
    );
    let finished: Vec<_> = events
        .iter()
        .filter(|(t, _)| t == "round_finished")
        .collect();
    assert_eq!(
        finished[0].1["usage"]["by_model"]["m1"]["input_tokens"],
        400
    );
}

#[test]
fn the_report_of_round_k_arrives_in_round_k_plus_one() {
    let f = Fixture::new();
    let agent = f.agent(
        "handoff.sh",
        &format!(
            r#"if [ "$RALPH_ROUND" = 1 ]; then
  test -e "$RALPH_HANDOFF_FILE" && touch handoff_in_round_1
  echo '{}' > "$RALPH_REPORT_FILE"
else
  cp "$RALPH_HANDOFF_FILE" handoff_seen.json
  grep -c 'HANDOFF-MARK-7' "$RALPH_PROMPT_FILE" > prompt_mentions
  echo '{}' > "$RALPH_REPORT_FILE"
fi"#,
            r#"{"status":"continue","summary":"HANDOFF-MARK-7","evidence":["e1"],"nextSteps":["finish it"],"blocker":""}"#,
            complete_report("finished")
        ),
    );
    let out = f.run(&agent).output();
    out.expect_code(0);
    assert!(
        !f.ws.join("handoff_in_round_1").exists(),
        "no handoff file in round 1"
    );
    let seen: Value = serde_json::from_str(&f.read_ws("handoff_seen.json")).unwrap();
    assert_eq!(seen["summary"], "HANDOFF-MARK-7");
    assert_eq!(seen["nextSteps"][0], "finish it");
    assert_eq!(
        f.read_ws("prompt_mentions").trim(),
        "1",
        "the prompt carries the handoff"
    );
}

#[test]
fn the_report_may_come_from_the_last_json_line_of_stdout() {
    let f = Fixture::new();
    let agent = f.agent(
        "stdout.sh",
        &format!(
            "echo '{{\"event\":\"log\"}}'\necho '{}'\necho 'trailing words'",
            complete_report("via stdout")
        ),
    );
    let out = f.run(&agent).output();
    out.expect_code(0);
    assert_eq!(out.json()["report"]["summary"], "via stdout");
}

#[test]
fn max_rounds_over_the_ceiling_is_refused_with_64_and_no_job() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let out = f.run(&agent).args(["--max-rounds", "257"]).output();
    out.expect_code(64);
    assert!(
        out.stderr.contains("--max-rounds: 257 is outside 1..=256"),
        "{}",
        out.stderr
    );
    // No job result: with --json, only the usage error as JSON (SPEC §6).
    let v: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["error"]["kind"], "usage", "{v}");
    assert!(v.get("job_id").is_none(), "{v}");
    assert!(!f.ws.join("count").exists());
    f.run(&agent)
        .args(["--max-rounds", "0"])
        .output()
        .expect_code(64);
}

#[test]
fn usage_errors_exit_64_and_name_the_flag() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let cases: &[(&[&str], &str)] = &[
        (&["--round-timeout", "soon"], "soon"),
        (&["--handoff-cap", "12Q"], "12Q"),
        (&["--mode", "rw"], "invalid mode `rw`"),
        (&["--env", "NOT_SET_ANYWHERE_42"], "NOT_SET_ANYWHERE_42"),
        (&["--read", "/does/not/exist"], "--read: `/does/not/exist`"),
    ];
    for (args, needle) in cases {
        let out = f.run(&agent).args(*args).output();
        out.expect_code(64);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
    }
    let out = Ralph::new().args(["run", "--agent-cmd", "true"]).output();
    out.expect_code(64);
}

#[test]
fn a_state_dir_inside_the_workspace_is_refused() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let out = f
        .run(&agent)
        .arg("--state-dir")
        .arg(f.ws.join(".state"))
        .output();
    out.expect_code(64);
    assert!(out.stderr.contains("overlap"), "{}", out.stderr);
}

#[test]
fn a_missing_agent_command_ends_the_job_at_once_as_a_configuration_error() {
    let f = Fixture::new();
    let out = Ralph::new()
        .args([
            "run",
            "--objective",
            "x",
            "--json",
            "--round-retries",
            "2",
            "--max-rounds",
            "5",
            "--mode",
            TEST_MODE,
        ])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        // Behind `sh -c`, so no check before round 1 can see it: the shell finds out.
        .args(["--agent-cmd", "sh -c /nonexistent/agent-binary"])
        .output();
    // SPEC §3: an agent command the shell cannot run is a configuration error, at once.
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["outcome"], "error");
    assert_eq!(j["reason"], "configuration");
    assert_eq!(j["rounds"], 1, "no further round");
    assert_eq!(j["retries"], 0, "no retry of what cannot run");
    let msg = j["message"].as_str().unwrap();
    assert!(
        msg.contains("exit 127") && msg.contains("/nonexistent/agent-binary"),
        "{msg}"
    );
    let events = f.events(&out.job_id());
    let finished: Vec<_> = events
        .iter()
        .filter(|(t, _)| t == "round_finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(
        finished[0].1["result"]["reason"], "exec_failed",
        "{:?}",
        finished[0].1
    );
}

#[test]
fn the_token_budget_is_checked_before_every_retry() {
    let f = Fixture::new();
    // Every attempt spends 600 tokens and leaves no report: without the check before a retry
    // the job would spend 4 × 600 against a budget of 500.
    let agent = f.agent(
        "spend-and-fail.sh",
        r#"echo x >> attempts
echo '{"model":"m1","input_tokens":400,"output_tokens":200}' >> "$RALPH_USAGE_FILE"
exit 3"#,
    );
    let out = f
        .run(&agent)
        .args(["--max-tokens", "500", "--round-retries", "3"])
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_tokens");
    assert_eq!(j["usage"]["input_tokens"], 400, "one attempt, no retry");
    assert_eq!(f.read_ws("attempts").lines().count(), 1);
    let types = f.event_types(&out.job_id());
    assert_eq!(types.iter().filter(|t| *t == "round_spawned").count(), 1);
}

#[test]
fn a_preset_round_is_stopped_as_soon_as_its_stream_shows_the_budget_crossed() {
    let f = Fixture::new();
    let bin = f.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A fake `codex` whose first turn reports 5,000 tokens, then keeps working for two minutes.
    let script = r#"#!/bin/sh
cat > /dev/null
echo '{"type":"thread.started","thread_id":"t-1"}'
echo '{"type":"turn.started"}'
echo '{"type":"turn.completed","usage":{"input_tokens":4000,"cached_input_tokens":0,"output_tokens":1000}}'
sleep 120
echo late > still-running
"#;
    let p = bin.join("codex");
    std::fs::write(&p, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Ralph::new()
        .args(["run", "--objective", "spend", "--json", "--agent", "codex"])
        .args([
            "--network",
            "full",
            "--mode",
            TEST_MODE,
            "--kill-grace",
            "1s",
        ])
        .args(["--max-tokens", "1000", "--round-timeout", "10m"])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&bin)
        .env(
            "PATH",
            &format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        )
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited");
    assert_eq!(j["reason"], "max_tokens");
    assert_eq!(j["rounds"], 1);
    assert_eq!(j["usage"]["input_tokens"], 4000);
    assert!(
        !f.ws.join("still-running").exists(),
        "the round was stopped"
    );
    let events = f.events(&out.job_id());
    let finished: Vec<_> = events
        .iter()
        .filter(|(t, _)| t == "round_finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(
        finished[0].1["result"]["kind"], "budget_spent",
        "{:?}",
        finished[0].1
    );
}

#[test]
fn a_verify_command_the_sandbox_cannot_run_ends_the_job_at_once_with_the_fix() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    // Not installed anywhere: exit 127 from the shell, every round alike (behind `sh -c`, so
    // the check before round 1 cannot see it).
    let out = f
        .run(&agent)
        .args([
            "--verify",
            "sh -c 'no-such-tool-ralph --check'",
            "--max-rounds",
            "5",
        ])
        .output();
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["outcome"], "error");
    assert_eq!(j["reason"], "configuration");
    assert_eq!(j["rounds"], 1, "no round spent after the first verify");
    let msg = j["message"].as_str().unwrap();
    assert!(
        msg.contains("exit 127") && msg.contains("no-such-tool-ralph"),
        "{msg}"
    );

    // Installed on the runner, but where the sandbox does not look: the fix is named.
    let tools = f.root.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let tool = tools.join("mycheck");
    std::fs::write(&tool, "#!/bin/sh\nexit 0\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tools = tools.canonicalize().unwrap();
    let out = f
        .run(&agent)
        .args(["--verify", "mycheck", "--max-rounds", "5"])
        .env(
            "PATH",
            &format!("{}:/usr/local/bin:/usr/bin:/bin", tools.display()),
        )
        .output();
    out.expect_code(64);
    let msg = out.json()["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains(&format!("--read {}", tools.display())),
        "{msg}"
    );
}

/// Issue 12, item 1: a program the sandbox cannot see costs no round. The agent's and the verify
/// command's first program is checked before round 1 against what the sandbox will show: exit
/// 64, nothing run, and the message names the `--read` that fixes it (or says the program is
/// missing). With the fix given, the same job runs.
#[test]
fn a_program_the_sandbox_cannot_see_is_refused_before_round_1_with_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let hidden = f.root.path().join("hidden-tools");
    std::fs::create_dir_all(&hidden).unwrap();
    let hidden = hidden.canonicalize().unwrap();
    let marker = f.ws.join("agent-ran");
    let agent = hidden.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ntouch '{}'\nprintf '%s' '{}' > \"$RALPH_REPORT_FILE\"\n",
            marker.display(),
            complete_report("done")
        ),
    )
    .unwrap();
    let check = hidden.join("mycheck");
    std::fs::write(&check, "#!/bin/sh\nexit 0\n").unwrap();
    for p in [&agent, &check] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let visible_agent = counting_agent(&f, 1);
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", hidden.display());
    let fix = format!("--read {}", hidden.display());
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec!["--agent-cmd".into(), agent.display().to_string()],
            fix.clone(),
        ),
        (
            vec![
                "--agent-cmd".into(),
                format!("MODE=fast exec {} --x", agent.display()),
            ],
            fix.clone(),
        ),
        (vec!["--agent-cmd".into(), "agent.sh".into()], fix.clone()),
        (
            vec!["--agent-cmd".into(), "no-such-tool-ralph".into()],
            "not on the PATH".into(),
        ),
        (
            vec!["--agent-cmd".into(), "/nonexistent/agent-binary --x".into()],
            "does not exist".into(),
        ),
        (
            vec![
                "--agent-cmd".into(),
                visible_agent.display().to_string(),
                "--verify".into(),
                "mycheck --all".into(),
            ],
            fix.clone(),
        ),
    ];
    for (args, needle) in &cases {
        let out = Ralph::new()
            .args(["run", "--objective", "x", "--json", "--mode", TEST_MODE])
            .arg("--workspace")
            .arg(&f.ws)
            .arg("--state-dir")
            .arg(&f.state)
            .arg("--read")
            .arg(&f.agents)
            .args(args)
            .env("PATH", &path)
            .output();
        out.expect_code(64);
        let j = out.json();
        assert_eq!(j["outcome"], "error", "{args:?}");
        assert_eq!(j["reason"], "configuration", "{args:?}");
        assert_eq!(j["rounds"], 0, "{args:?}: a round was spent");
        let msg = j["message"].as_str().unwrap();
        assert!(msg.contains(needle.as_str()), "{args:?}: {msg}");
        let events = f.events(&out.job_id());
        assert!(
            !events.iter().any(|(t, _)| t == "round_started"),
            "{args:?}: {events:?}"
        );
        assert!(!marker.exists(), "{args:?}: the agent ran");
        assert!(!f.ws.join("count").exists(), "{args:?}: the agent ran");
    }
    // With the fix the message names, the same job runs.
    let out = Ralph::new()
        .args(["run", "--objective", "x", "--json", "--mode", TEST_MODE])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .args(["--read", hidden.to_str().unwrap()])
        .arg("--agent-cmd")
        .arg(&agent)
        .args(["--verify", "mycheck --all"])
        .env("PATH", &path)
        .output();
    out.expect_code(0);
    assert!(marker.exists());
}

/// SPEC §6 / issue 12, item 7: with `--json`, a usage error is an `{"error":{…}}` object on
/// stdout too (a CI step parsing stdout got nothing), for a bad flag value, an unknown flag and
/// a client command's missing token alike; the human message stays on stderr.
#[test]
fn with_json_a_usage_error_is_a_json_object_on_stdout() {
    let f = Fixture::new();
    let agent = counting_agent(&f, 1);
    let cases: Vec<(Ralph, &str)> = vec![
        (f.run(&agent).args(["--max-rounds", "0"]), "--max-rounds"),
        (f.run(&agent).arg("--no-such-flag"), "--no-such-flag"),
        (
            Ralph::new()
                .args(["jobs", "--json", "--server", "http://127.0.0.1:9"])
                .env("RALPH_TOKEN", "")
                .env("RALPH_TOKEN_FILE", "/nonexistent/token"),
            "token",
        ),
    ];
    for (cmd, needle) in cases {
        let out = cmd.output();
        out.expect_code(64);
        let v: serde_json::Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", out.stdout));
        assert_eq!(v["error"]["kind"], "usage", "{v}");
        assert_eq!(v["error"]["exit_code"], 64, "{v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{needle}: {message}");
        assert!(out.stderr.contains(needle), "{needle}: {}", out.stderr);
    }
}

/// SPEC §3 `--max-stalled-rounds K`, through `ralph run` in the real sandbox: an agent that
/// changes the workspace in rounds 1 and 2 and then only reads it (and rewrites a file with the
/// same bytes, which is no change) ends `budget-limited`/`stalled` after exactly round 2 + K, exit
/// 2, counted in `ralph_jobs_stalled_total`; one that changes a file every round is never
/// stopped.
#[test]
fn a_loop_that_stops_changing_the_workspace_ends_stalled_after_exactly_k_rounds() {
    let f = Fixture::new();
    let agent = f.agent(
        "stall.sh",
        &format!(
            r#"if [ "$RALPH_ROUND" -le 2 ]; then echo "step $RALPH_ROUND" > progress.txt; fi
cat progress.txt > /dev/null
if [ "$RALPH_ROUND" -gt 2 ]; then cp progress.txt progress.tmp && mv progress.tmp progress.txt; fi
printf '%s' '{}' > "$RALPH_REPORT_FILE""#,
            continue_report("still thinking")
        ),
    );
    let prom = f.root.path().join("ralph.prom");
    let out = f
        .run(&agent)
        .args(["--max-stalled-rounds", "3", "--max-rounds", "10"])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(j["outcome"], "budget-limited", "{j}");
    assert_eq!(j["reason"], "stalled", "{j}");
    assert_eq!(j["rounds"], 5, "{j}");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("the last 3 round(s) changed nothing in the workspace"),
        "{j}"
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines().any(|l| l == "ralph_jobs_stalled_total 1"),
        "{text}"
    );
    common::promtool::promtool_check(&text);

    // A file changed every round: never stalled (K = 1).
    let g = Fixture::new();
    let agent = g.agent(
        "busy.sh",
        &format!(
            r#"echo "$RALPH_ROUND" >> log.txt
printf '%s' '{}' > "$RALPH_REPORT_FILE""#,
            continue_report("one more line")
        ),
    );
    let out = g
        .run(&agent)
        .args(["--max-stalled-rounds", "1", "--max-rounds", "4"])
        .output();
    out.expect_code(2);
    let j = out.json();
    assert_eq!(
        (j["reason"].as_str(), j["rounds"].as_u64()),
        (Some("max_rounds"), Some(4)),
        "{j}"
    );
}

/// SPEC §13 fan-out through `ralph run --attempts 3` in the real sandbox: attempt 1 fails every
/// round, attempt 2 takes long, attempt 3 succeeds. Attempt 3 wins; the slow one is cancelled
/// with no process left; the workspace gets exactly the winner's changes (a file changed, one
/// removed, one added; nothing of the losers), no copy is left, the attempts are listed with
/// their outcomes, and the job's tokens are the sum of the attempts'.
#[test]
fn attempts_the_first_verified_wins_and_only_its_changes_reach_the_workspace() {
    let f = Fixture::new();
    std::fs::write(f.ws.join("a.txt"), "original\n").unwrap();
    std::fs::write(f.ws.join("b.txt"), "to be removed\n").unwrap();
    std::fs::write(f.ws.join("untouched.txt"), "same\n").unwrap();
    let agent = f.agent(
        "fan.sh",
        &format!(
            r#"echo '{{"model":"m1","input_tokens":70,"output_tokens":30}}' >> "$RALPH_USAGE_FILE"
case "$PWD" in
  *.1) echo lost > loser1.txt; exit 1 ;;
  *.2) echo lost > loser2.txt; exec sleep 3117 ;;
  *.3) echo winner > result.txt; echo changed > a.txt; rm b.txt ;;
  *) echo "not an attempt's copy: $PWD" >&2; exit 3 ;;
esac
printf '%s' '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("done")
        ),
    );
    let prom = f.root.path().join("ralph.prom");
    let out = f
        .run(&agent)
        .args([
            "--attempts",
            "3",
            "--verify",
            "test -e result.txt",
            "--round-retries",
            "0",
            "--max-rounds",
            "2",
        ])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(
        (j["outcome"].as_str(), j["reason"].as_str()),
        (Some("complete"), Some("verified")),
        "{j}"
    );
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("attempt 3 of 3 won"),
        "{j}"
    );
    // Exactly the winner's changes.
    let read = |p: &str| std::fs::read_to_string(f.ws.join(p)).ok();
    assert_eq!(read("result.txt").as_deref(), Some("winner\n"));
    assert_eq!(read("a.txt").as_deref(), Some("changed\n"));
    assert_eq!(read("b.txt"), None);
    assert_eq!(read("untouched.txt").as_deref(), Some("same\n"));
    assert_eq!(read("loser1.txt"), None);
    assert_eq!(read("loser2.txt"), None);
    // The slow attempt's process is gone.
    let sleeping = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.unwrap().path().join("cmdline")).ok())
        .any(|c| c == b"sleep\x003117\x00");
    assert!(!sleeping, "the cancelled attempt's process is still there");
    // No attempt's workspace left: no mount, no directory.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(f.state.to_str().unwrap()),
        "a mount is left under the state dir:\n{mounts}"
    );
    let copies = f.state.join("attempts");
    let left: Vec<_> = std::fs::read_dir(&copies)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "copies left: {left:?}");
    // The attempts, as `ralph show` lists them.
    let id = j["job_id"].as_str().unwrap();
    let show = Ralph::new()
        .args(["show", id, "--json", "--state-dir"])
        .arg(&f.state)
        .output();
    show.expect_code(0);
    let v = show.json();
    let attempts = v["attempts"].as_array().unwrap();
    let ends: Vec<(u64, &str, bool)> = attempts
        .iter()
        .map(|a| {
            (
                a["index"].as_u64().unwrap(),
                a["outcome"].as_str().unwrap(),
                a["won"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ends,
        vec![
            (1, "round-failed", false),
            (2, "cancelled", false),
            (3, "complete", true)
        ],
        "{v}"
    );
    // A root runner's attempts are overlays on the workspace; any other runner's are copies.
    for a in attempts {
        match a["layout"].as_str() {
            Some("overlay") => assert_eq!(a["files"], 0, "{v}"),
            Some("copy") => assert!(a["files"].as_u64().unwrap() >= 3, "{v}"),
            other => panic!("layout {other:?}: {v}"),
        }
    }
    let sum: u64 = attempts.iter().map(|a| a["tokens"].as_u64().unwrap()).sum();
    assert!(sum >= 200, "{v}");
    assert_eq!(
        j["usage"]["input_tokens"].as_u64().unwrap()
            + j["usage"]["output_tokens"].as_u64().unwrap(),
        sum,
        "{j}"
    );
    let text = Ralph::new()
        .args(["show", id, "--state-dir"])
        .arg(&f.state)
        .output();
    assert!(text.stdout.contains("attempt 3"), "{}", text.stdout);
    assert!(text.stdout.contains("complete (won)"), "{}", text.stdout);
    // Counted: each attempt by its outcome, the job once (not its attempts), and the attempts'
    // rounds and tokens as any round's.
    let metrics = std::fs::read_to_string(&prom).unwrap();
    for line in [
        "ralph_attempts_total{outcome=\"complete\"} 1",
        "ralph_attempts_total{outcome=\"cancelled\"} 1",
        "ralph_attempts_total{outcome=\"round-failed\"} 1",
        "ralph_jobs_finished_total{outcome=\"complete\"} 1",
        "ralph_jobs_finished_total{outcome=\"round-failed\"} 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "{line} not in\n{metrics}"
        );
    }
    let tokens: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("ralph_tokens_total{")
                && (l.contains("kind=\"input\"") || l.contains("kind=\"output\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum();
    assert_eq!(tokens, sum, "{metrics}");
    common::promtool::promtool_check(&metrics);
    // Needs verify.
    let out = f.run(&agent).args(["--attempts", "2"]).output();
    out.expect_code(64);
    assert!(
        out.stderr.contains("attempts") && out.stderr.contains("verify"),
        "{}",
        out.stderr
    );
}

/// Fan-out on a workspace the rounds' user owns (the agent user), run by root: each attempt is
/// an overlay on the workspace (a mount, no copy), the loser's writes stay in its upper layer,
/// the winner's reach the workspace owned as the workspace is, and no mount is left. (A
/// workspace another user owns is seen through an idmapped mount: copied, as the test above.)
#[test]
fn attempts_of_a_root_runner_are_overlays_on_an_unprivileged_workspace() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: overlays need a root runner (this one is not root)");
        return;
    }
    let f = Fixture::new();
    std::fs::set_permissions(f.root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(f.ws.join("a.txt"), "original\n").unwrap();
    std::fs::write(f.ws.join("b.txt"), "to be removed\n").unwrap();
    let agent_user =
        ralph_sandbox::identity::agent_user(None, std::path::Path::new("/etc")).unwrap();
    let (uid, gid) = (agent_user.uid, agent_user.gid);
    for p in [f.ws.clone(), f.ws.join("a.txt"), f.ws.join("b.txt")] {
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    }
    let agent = f.agent(
        "fan.sh",
        &format!(
            r#"case "$PWD" in
  *.1) echo winner > result.txt; echo changed > a.txt; rm b.txt ;;
  *) echo lost > loser.txt; exit 1 ;;
esac
printf '%s' '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("done")
        ),
    );
    let out = f
        .run(&agent)
        .args([
            "--attempts",
            "2",
            "--verify",
            "test -e result.txt",
            "--round-retries",
            "0",
            "--max-rounds",
            "1",
        ])
        .output();
    out.expect_code(0);
    let j = out.json();
    let id = j["job_id"].as_str().unwrap();
    let show = Ralph::new()
        .args(["show", id, "--json", "--state-dir"])
        .arg(&f.state)
        .output();
    let v = show.json();
    let layouts: Vec<&str> = v["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["layout"].as_str().unwrap())
        .collect();
    assert_eq!(layouts, vec!["overlay", "overlay"], "{v}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("result.txt")).unwrap(),
        "winner\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("a.txt")).unwrap(),
        "changed\n"
    );
    assert!(!f.ws.join("b.txt").exists());
    assert!(!f.ws.join("loser.txt").exists());
    let m = std::fs::metadata(f.ws.join("result.txt")).unwrap();
    assert_eq!((m.uid(), m.gid()), (uid, gid));
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(f.state.to_str().unwrap()), "{mounts}");
    let left: Vec<_> = std::fs::read_dir(f.state.join("attempts"))
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "left: {left:?}");
}
