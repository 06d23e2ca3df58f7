//! The set-up step and the runner steps' network end to end (SPEC §3, §12; issue 26): real
//! `ralph run`s on the native backend against the loopback package mirror
//! (`tests/fixtures/package_mirror.py`). A set-up installs from the mirror through the egress
//! proxy and the round uses what it installed; verify reaches the mirror through the proxy too
//! (it had no network at all: `npm ci` in verify failed with `EAI_AGAIN`); a failed set-up ends
//! the job `error`/`setup_failed` with exit 5 before any round, its tail on the console;
//! `--setup-env` reaches the set-up and nothing else; a job killed during its set-up runs it
//! again when resumed; docker refuses the egress namespace it cannot build (exit 69).

use crate::common;

use std::time::Duration;

use common::package_mirror::PackageMirror;
use common::*;
use serde_json::Value;

/// The egress events of a job for one step (`setup`, `verify`; `None`: the rounds').
fn egress_of(f: &Fixture, job: &str, step: Option<&str>) -> Vec<Value> {
    f.events(job)
        .into_iter()
        .filter(|(t, v)| t == "egress" && v["step"].as_str() == step)
        .map(|(_, v)| v)
        .collect()
}

/// Issue 26 items 1 and 2: `--setup` installs a package from the host's loopback mirror into a
/// workspace venv through the egress proxy (`--allow-host 127.0.0.1:PORT`); round 1 imports it;
/// verify downloads from the mirror through the proxy as well (the mirror's log and the journal
/// show both steps' requests) and its git trusts the workspace through the runner's system
/// configuration. `--follow` streams the set-up's output behind `[setup] `.
#[test]
fn a_setup_installs_from_the_mirror_and_verify_reaches_it_through_the_proxy() {
    let f = Fixture::new();
    let mirror = PackageMirror::start(f.root.path());
    let m = format!("http://127.0.0.1:{}", mirror.port());
    let setup = format!(
        "echo set-up-says-hello; /usr/bin/python3 -m venv venv && venv/bin/pip install --disable-pip-version-check --index-url {m}/simple/ ralph-mirror-probe"
    );
    let agent = f.agent(
        "import.sh",
        &format!(
            r#"cd "$RALPH_WORKSPACE"
venv/bin/python -c 'import ralph_mirror_probe as p; print(p.VALUE)' > imported.txt 2>&1
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("imported the package")
        ),
    );
    let verify = format!(
        "venv/bin/pip download --disable-pip-version-check --no-deps -d \"$TMPDIR/dl\" --index-url {m}/simple/ ralph-mirror-probe && ls \"$TMPDIR/dl\" && git config --system --get safe.directory && env | grep -i '^https_proxy=' && test \"$(cat imported.txt)\" = 'from the mirror'"
    );
    let out = f
        .run(&agent)
        .args(["--allow-host", &format!("127.0.0.1:{}", mirror.port())])
        .args(["--setup", &setup, "--verify", &verify, "--follow"])
        .args(["--round-timeout", "10m"])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["reason"], "verified", "{j}");
    assert_eq!(f.read_ws("imported.txt"), "from the mirror\n");
    // The set-up's output was streamed behind its label, and kept.
    assert!(
        out.stderr.lines().any(|l| l == "[setup] set-up-says-hello"),
        "{}",
        out.stderr
    );
    let job = out.job_id();
    let log = f
        .state
        .join("jobs")
        .join(&job)
        .join("rounds/0/setup/output.log");
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("Successfully installed ralph-mirror-probe"),
        "{log}"
    );
    // Both steps reached the host's mirror, through the proxy, which journalled each request.
    let wheel = "/files/ralph_mirror_probe-1.0-py3-none-any.whl";
    let fetched = mirror
        .requests()
        .iter()
        .filter(|r| r.starts_with(&format!("GET {wheel} ")) && r.contains("pip/"))
        .count();
    assert_eq!(fetched, 2, "set-up and verify: {:#?}", mirror.requests());
    for step in ["setup", "verify"] {
        let egress = egress_of(&f, &job, Some(step));
        assert!(!egress.is_empty(), "{step}: {:?}", f.events(&job));
        assert!(
            egress.iter().all(|e| e["allowed"] == true
                && e["host"] == "127.0.0.1"
                && e["port"] == mirror.port()
                && e["attempt"] == 0),
            "{step}: {egress:?}"
        );
    }
    assert!(egress_of(&f, &job, Some("setup"))[0]["round"] == 0);
    // Verify's output: git's system config trusts every tree, the proxy is set.
    let verify_log = std::fs::read_to_string(
        f.state
            .join("jobs")
            .join(&job)
            .join("rounds/1/verify/output.log"),
    )
    .unwrap();
    assert!(verify_log.lines().any(|l| l == "*"), "{verify_log}");
    assert!(
        verify_log.contains("https_proxy=http://127.0.0.2:"),
        "{verify_log}"
    );
    let types = f.event_types(&job);
    let at = |t: &str| types.iter().position(|x| x == t).unwrap();
    assert!(at("setup_started") < at("setup_finished"));
    assert!(at("setup_finished") < at("round_started"), "{types:?}");
}

/// SPEC §3: a set-up that fails ends the job `error` with reason `setup_failed`, exit 5, its
/// exit status and output's tail in the message and on the console (escaped, behind the
/// runner's prefix); no round is started. `ralph logs JOB --stream setup` prints its output
/// behind `[setup] `; the metric counts it.
#[test]
fn a_failed_setup_ends_the_job_with_exit_5_before_any_round() {
    let f = Fixture::new();
    let agent = f.agent(
        "never.sh",
        "touch \"$RALPH_WORKSPACE/the-agent-ran\"; exit 0",
    );
    let prom = f.root.path().join("setup.prom");
    let out = f
        .run(&agent)
        .args([
            "--setup",
            "echo 'Collecting pkg'; printf 'ERROR: no such package \\033]0;pwned\\007\\n::error::forged\\n' >&2; exit 3",
        ])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(5);
    let j = out.json();
    assert_eq!(j["outcome"], "error", "{j}");
    assert_eq!(j["reason"], "setup_failed", "{j}");
    assert_eq!(j["rounds"], 0, "{j}");
    let msg = j["message"].as_str().unwrap();
    assert!(msg.contains("failed (exit status 3)"), "{msg}");
    assert!(msg.contains("ERROR: no such package"), "{msg}");
    assert!(!f.ws.join("the-agent-ran").exists(), "the agent never ran");
    let job = out.job_id();
    let types = f.event_types(&job);
    assert!(!types.iter().any(|t| t == "round_started"), "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "setup_finished").count(), 1);
    // The console: the verdict, what follows, the tail behind the prefix, escaped.
    assert!(
        out.stderr.contains("ralph: set-up failed (")
            && out
                .stderr
                .contains("exit status 3; no round is started: the job ends (error, setup_failed)"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .lines()
            .any(|l| l == "ralph: | ERROR: no such package \\x1b]0;pwned\\x07"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.lines().any(|l| l == "ralph: | ::error::forged"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains('\u{1b}'), "{}", out.stderr);
    // Its log, behind its label.
    let logs = Ralph::new()
        .args(["logs", &job, "--stream", "setup", "--state-dir"])
        .arg(&f.state)
        .output();
    logs.expect_code(0);
    assert!(
        logs.stdout.lines().any(|l| l == "[setup] Collecting pkg"),
        "{}",
        logs.stdout
    );
    assert!(
        logs.stdout.lines().any(|l| l == "[setup] ::error::forged"),
        "{}",
        logs.stdout
    );
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.contains("ralph_setup_total{result=\"failed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("ralph_setup_total{result=\"passed\"} 0"),
        "{text}"
    );
    common::promtool::promtool_check(&text);
}

/// SPEC §3 applied to the set-up: a set-up command the shell cannot run (127) is a
/// configuration error, caught before anything runs when its program is not there at all.
#[test]
fn a_setup_whose_program_is_missing_is_refused_before_it_runs() {
    let f = Fixture::new();
    let agent = f.agent("a.sh", "exit 0");
    let out = f
        .run(&agent)
        .args(["--setup", "no-such-installer-7d1e --all"])
        .output();
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["reason"], "configuration", "{j}");
    assert!(
        j["message"]
            .as_str()
            .unwrap()
            .contains("the set-up command `no-such-installer-7d1e --all` runs `no-such-installer-7d1e`, which is not on the PATH"),
        "{j}"
    );
    assert!(
        !f.event_types(&out.job_id())
            .iter()
            .any(|t| t == "setup_started")
    );
}

/// Issue 26: `--setup-env SECRET_TOKEN` reaches the set-up (it authenticates to the mirror with
/// it: the mirror's log shows the header) and nothing else: not the round (its environment and
/// `/proc/self/environ`), not verify, not the journal, the artifacts, the console.
#[test]
fn a_setup_env_secret_reaches_the_setup_and_nowhere_else() {
    const SECRET: &str = "tok-5b9e1c7d-never-in-a-round";
    let f = Fixture::new();
    let mirror = PackageMirror::start(f.root.path());
    let m = format!("http://127.0.0.1:{}", mirror.port());
    let agent = f.agent(
        "dump.sh",
        &format!(
            r#"cd "$RALPH_WORKSPACE"
env > round-env.txt
tr '\0' '\n' < /proc/self/environ > round-environ.txt
cat /proc/1/environ 2>/dev/null | tr '\0' '\n' > round-init-environ.txt
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("dumped the environment")
        ),
    );
    let setup = format!(
        "curl -sS --max-time 30 -H \"Authorization: Bearer $SECRET_TOKEN\" {m}/ping > setup-ping.txt"
    );
    let out = f
        .run(&agent)
        .env("SECRET_TOKEN", SECRET)
        .args(["--allow-host", &format!("127.0.0.1:{}", mirror.port())])
        .args(["--setup", &setup, "--setup-env", "SECRET_TOKEN"])
        .args([
            "--verify",
            "env > verify-env.txt; tr '\\0' '\\n' < /proc/self/environ > verify-environ.txt",
        ])
        .output();
    out.expect_code(0);
    assert_eq!(f.read_ws("setup-ping.txt"), "pong from the mirror\n");
    assert!(
        mirror
            .requests()
            .iter()
            .any(|r| r.starts_with("GET /ping ") && r.ends_with(&format!(" auth=Bearer {SECRET}"))),
        "{:#?}",
        mirror.requests()
    );
    for file in [
        "round-env.txt",
        "round-environ.txt",
        "verify-env.txt",
        "verify-environ.txt",
    ] {
        let text = f.read_ws(file);
        assert!(text.contains("PATH="), "{file}: {text}");
        assert!(!text.contains(SECRET), "{file}: {text}");
        assert!(!text.contains("SECRET_TOKEN"), "{file}: {text}");
    }
    assert!(!f.read_ws("round-init-environ.txt").contains(SECRET));
    // Nowhere in the state dir (journal, artifacts, sandbox results), the workspace, the output.
    assert!(
        files_containing(&f.state, SECRET).is_empty(),
        "{:?}",
        files_containing(&f.state, SECRET)
    );
    assert!(files_containing(&f.ws, SECRET).is_empty());
    assert!(!out.stdout.contains(SECRET) && !out.stderr.contains(SECRET));
}

/// Issue 26: a `ralph run` killed during its set-up leaves a job whose set-up never finished;
/// the next runner closes it `interrupted` ("during the set-up"), and `ralph resume` runs the
/// set-up again before round 1.
#[test]
fn a_job_killed_during_its_setup_runs_it_again_when_resumed() {
    let mut s = common::server::Server::new("");
    let ws = s.workspace("w1");
    s.kill9();
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo round >> \"$RALPH_WORKSPACE/runs\"; echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    // The first set-up hangs (its runner is killed); the second passes.
    let setup = "echo setup >> runs; test -f second || exec sleep 6173";
    let mut child = Ralph::new()
        .args(["run", "--objective", "o", "--json", "--kill-grace", "1s"])
        .args(["--mode", TEST_MODE])
        .arg("--workspace")
        .arg(&ws)
        .arg("--state-dir")
        .arg(&s.state)
        .arg("--read")
        .arg(&s.agents)
        .arg("--agent-cmd")
        .arg(agent.display().to_string())
        .args(["--setup", setup])
        .spawn();
    let runs = ws.join("runs");
    wait_until("the set-up runs", Duration::from_secs(60), || {
        std::fs::read_to_string(&runs).is_ok_and(|t| t == "setup\n")
    });
    let _ = child.kill();
    let _ = child.wait();
    wait_until_gone("sleep 6173", Duration::from_secs(30), "the set-up's tree");
    s.start();
    let store = ralph_runner::store::Store::open_sqlite(&s.state).unwrap();
    let id = store
        .job_ids_in_state(ralph_runner::store::JobState::Finished)
        .unwrap()
        .into_iter()
        .next()
        .expect("the job was closed");
    let j = s.wait_finished(&id, Duration::from_secs(30));
    assert_eq!(j["outcome"], "interrupted", "{j}");
    assert!(
        j["message"].as_str().unwrap().contains("during the set-up"),
        "{j}"
    );
    std::fs::write(ws.join("second"), "").unwrap();
    let out = s.ralph(&["resume", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "setup\nsetup\nround\n"
    );
    let events: Vec<String> = store
        .events(&id)
        .unwrap()
        .iter()
        .map(|e| e.kind.name().to_owned())
        .collect();
    assert_eq!(events.iter().filter(|t| *t == "setup_started").count(), 2);
    assert_eq!(events.iter().filter(|t| *t == "setup_finished").count(), 1);
}

/// Issue 26 (service): a job file's `setup` and `setup_env` honour the service's
/// `allowed_setup_env` (a name only `allowed_env` lists is refused, the rule named); the set-up
/// gets the service's value, the rounds do not. A round that fails, then rewrites the script the
/// set-up ran and plants `.ralph/` files, steers nothing: after `ralph resume` the set-up is not
/// run again and the journalled command is the submitted one.
#[test]
fn a_service_job_setup_honours_allowed_setup_env_and_is_not_rerun_on_resume() {
    const TOKEN: &str = "svc-token-2c0f8a";
    let s = common::server::Server::with_args(
        "[limits]\nallowed_env = [\"OTHER_SECRET\"]\nallowed_setup_env = [\"REGISTRY_TOKEN\"]\n",
        &[],
        &[("REGISTRY_TOKEN", TOKEN), ("OTHER_SECRET", "other-7f")],
    );
    let ws = s.workspace("w1");
    std::fs::write(
        ws.join("setup.sh"),
        "echo setup >> runs; echo installing the deps; printf %s \"$REGISTRY_TOKEN\" | sha256sum > setup-saw.txt\n",
    )
    .unwrap();
    let agent = s.agent(
        "agent.sh",
        &format!(
            r#"cd "$RALPH_WORKSPACE"
echo "round $RALPH_ROUND" >> runs
env > "round-$RALPH_ROUND-env.txt"
if [ "$RALPH_ROUND" = 1 ]; then
  echo 'touch hijacked' > setup.sh
  mkdir -p .ralph 2>/dev/null; echo 'setup = "touch hijacked"' > .ralph/job.toml 2>/dev/null
  exit 1
fi
echo '{}' > "$RALPH_REPORT_FILE""#,
            complete_report("done")
        ),
    );
    let job_file = |setup_env: &str| {
        format!(
            "[[job]]\nobjective = \"o\"\nworkspace = \"{}\"\nagent_cmd = \"{}\"\nread = [\"{}\"]\nmode = \"{TEST_MODE}\"\nround_retries = 0\nsetup = \"sh setup.sh\"\nsetup_env = [\"{setup_env}\"]\nsetup_timeout = \"5m\"\n",
            ws.display(),
            agent.display(),
            s.agents.display()
        )
    };
    // A name the service lets rounds have, but not set-ups: refused, naming the rule.
    let refused = s.root.join("refused.toml");
    std::fs::write(&refused, job_file("OTHER_SECRET")).unwrap();
    let out = s.ralph(&["submit", refused.to_str().unwrap()]);
    assert_eq!(out.code, 64, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("allowed_setup_env") && out.stderr.contains("`OTHER_SECRET`"),
        "{}",
        out.stderr
    );
    let file = s.root.join("job.toml");
    std::fs::write(&file, job_file("REGISTRY_TOKEN")).unwrap();
    let out = s.ralph(&["submit", "--json", file.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let submitted: Value = serde_json::from_str(&out.stdout).unwrap();
    let id = submitted["jobs"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{submitted}"))
        .to_owned();
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["outcome"], "round-failed", "{j}");
    // The set-up's output through the API, behind its label (followed: it has ended).
    for follow in [false, true] {
        let mut args = vec!["logs", id.as_str(), "--stream", "setup"];
        if follow {
            args.push("--follow");
        }
        let out = s.ralph(&args);
        assert_eq!(out.code, 0, "{}", out.stderr);
        assert_eq!(
            out.stdout, "[setup] installing the deps\n",
            "follow {follow}"
        );
    }
    let out = s.ralph(&["resume", &id]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let read = |name: &str| std::fs::read_to_string(ws.join(name)).unwrap_or_default();
    assert_eq!(read("runs"), "setup\nround 1\nround 2\n");
    assert!(!ws.join("hijacked").exists(), "the set-up was steered");
    // The set-up saw the service's token; no round did.
    let digest = std::process::Command::new("sh")
        .args(["-c", &format!("printf %s '{TOKEN}' | sha256sum")])
        .output()
        .unwrap();
    assert_eq!(
        read("setup-saw.txt"),
        String::from_utf8_lossy(&digest.stdout)
    );
    for r in ["round-1-env.txt", "round-2-env.txt"] {
        assert!(read(r).contains("PATH="), "{r}");
        assert!(!read(r).contains(TOKEN), "{r}");
    }
    assert!(files_containing(&s.state, TOKEN).is_empty());
    let store = ralph_runner::store::Store::open_sqlite(&s.state).unwrap();
    let events = store.events(&id).unwrap();
    let view = ralph_runner::store::JobView::project(&events).unwrap();
    assert_eq!(
        view.spec.setup.as_ref().map(|x| x.command.as_str()),
        Some("sh setup.sh")
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.kind.name() == "setup_finished")
            .count(),
        1
    );
}

/// SPEC §5, §12 on docker: a set-up without network runs in a container like a round (what it
/// writes, the round sees); with `--allow-host` it reaches the allowed host (a mirror on the
/// runner's loopback) through the egress proxy, whose listener the container's init made in
/// the container's loopback-only namespace, and nothing else.
#[test]
fn docker_runs_a_setup_with_the_jobs_egress() {
    if !common::docker::ready("docker_runs_a_setup_with_the_jobs_egress") {
        return;
    }
    let f = Fixture::new();
    let agent = f.agent(
        "read.sh",
        &format!(
            "cat \"$RALPH_WORKSPACE/deps.txt\" > \"$RALPH_WORKSPACE/seen.txt\" && echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("read deps")
        ),
    );
    let docker = |f: &Fixture| {
        f.run(&agent).args([
            "--backend",
            "docker",
            "--image",
            common::docker::IMAGE,
            "--round-retries",
            "0",
        ])
    };
    let out = docker(&f)
        .args(["--setup", "echo installed > deps.txt"])
        .output();
    out.expect_code(0);
    assert_eq!(f.read_ws("seen.txt"), "installed\n");
    let job = out.job_id();
    let result: Value = serde_json::from_slice(
        &std::fs::read(
            f.state
                .join("jobs")
                .join(&job)
                .join("rounds/0/setup/sandbox-result.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        result["outcome"]["enforcement"]["backend"], "docker",
        "{result}"
    );
    assert!(
        common::docker::containers_with_label(ralph_sandbox::docker::labels::JOB, &job).is_empty()
    );

    let mirror = PackageMirror::start(f.root.path());
    let fetch = |port: u16, to: &str| {
        format!(
            "/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen(\"http://127.0.0.1:{port}/ping\", timeout=20).read().decode().strip())' > {to} 2>&1 || echo refused >> {to}"
        )
    };
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = closed.local_addr().unwrap().port();
    let setup = format!(
        "{} ; {} ; echo installed > deps.txt",
        fetch(mirror.port(), "mirror.txt"),
        fetch(other, "other.txt")
    );
    let out = docker(&f)
        .args(["--setup", &setup])
        .args(["--allow-host", &format!("127.0.0.1:{}", mirror.port())])
        .output();
    out.expect_code(0);
    assert_eq!(f.read_ws("mirror.txt"), "pong from the mirror\n");
    assert!(
        f.read_ws("other.txt").contains("refused"),
        "{}",
        f.read_ws("other.txt")
    );
    assert_eq!(mirror.requests().len(), 1);
    let egress = f.events_of(&out.job_id(), "egress");
    assert!(
        egress
            .iter()
            .any(|e| e["port"] == mirror.port() && e["allowed"] == true),
        "{egress:?}"
    );
    assert!(
        egress
            .iter()
            .any(|e| e["port"] == other && e["allowed"] == false),
        "{egress:?}"
    );
}
