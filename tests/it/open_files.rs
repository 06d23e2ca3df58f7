//! The open-files limit end to end (`--nofile`, job key `nofile`): what a round, and a
//! `ralph sandbox exec` command, sees as `ulimit -n` on both backends, the policy's default
//! when none is asked, and the refusal of a limit too small to work. An rlimit needs no root:
//! these run as any user (docker ones skip only outside CI when there is no engine).

use crate::common;

use common::Fixture;
use common::docker::{IMAGE, ready};
use serde_json::json;

/// `ralph run` of the one-round task `cmd`, with `extra`.
fn task(f: &Fixture, cmd: &str, extra: &[&str]) -> common::Output {
    f.run_cmd(cmd)
        .args([
            "--kind",
            "task",
            "--max-rounds",
            "1",
            "--round-retries",
            "0",
        ])
        .args(extra)
        .output()
}

/// `ralph run` of a task whose command writes its `ulimit -n` to `nofile.txt`, with `extra`.
fn task_limit(f: &Fixture, extra: &[&str]) -> String {
    let out = task(f, "ulimit -n > nofile.txt", extra);
    out.expect_code(0);
    assert_eq!(out.json()["outcome"], "complete", "{}", out.stdout);
    let seen = std::fs::read_to_string(f.ws.join("nofile.txt")).unwrap();
    std::fs::remove_file(f.ws.join("nofile.txt")).unwrap();
    seen.trim().to_owned()
}

/// The policy's default (`policies/workspace-write.toml`: 65536), capped at this host's hard
/// limit as the sandbox caps it.
fn policy_default() -> String {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable rlimit for the call's duration.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    65536u64.min(lim.rlim_max).to_string()
}

fn the_round_sees_what_the_job_asked(backend: &[&str]) {
    let f = Fixture::new();
    assert_eq!(task_limit(&f, backend), policy_default(), "no --nofile");
    assert_eq!(
        task_limit(&f, &[backend, &["--nofile", "100"]].concat()),
        "100"
    );
    // The least one a job may ask for still runs a shell (and, on docker, the init).
    assert_eq!(
        task_limit(&f, &[backend, &["--nofile", "64"]].concat()),
        "64"
    );
    // The round cannot raise its own limit back (soft and hard are both set; no
    // CAP_SYS_RESOURCE inside).
    let out = task(
        &f,
        "if ulimit -n 4096 2>/dev/null; then echo raised; else echo refused; fi > r.txt",
        &[backend, &["--nofile", "100"]].concat(),
    );
    out.expect_code(0);
    let r = std::fs::read_to_string(f.ws.join("r.txt")).unwrap();
    assert_eq!(r.trim(), "refused");
}

#[test]
fn native_a_round_sees_the_jobs_open_files_limit() {
    the_round_sees_what_the_job_asked(&[]);
}

#[test]
fn docker_a_round_sees_the_jobs_open_files_limit() {
    if !ready("docker_a_round_sees_the_jobs_open_files_limit") {
        return;
    }
    the_round_sees_what_the_job_asked(&["--backend", "docker", "--image", IMAGE]);
}

/// A job file's `nofile` through `ralph serve`: the job runs with it, and one too small is
/// refused with its key named before anything is queued.
#[test]
fn a_job_file_key_sets_it_and_a_too_small_one_is_refused() {
    let srv = common::server::Server::new("");
    let ws = srv.workspace("ws");
    let agent = srv.agent("limit", "ulimit -n > nofile.txt");
    let file = srv.root.join("jobs.json");
    let write = |nofile: u64| {
        let job = common::server::job(&ws, &agent, json!({"kind": "task", "nofile": nofile}));
        std::fs::write(&file, json!({ "job": [job] }).to_string()).unwrap();
    };
    write(77);
    let out = srv.ralph(&["submit", "--json", file.to_str().unwrap()]);
    out.expect_code(0);
    let id = out.json()["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = srv.wait_finished(&id, std::time::Duration::from_secs(120));
    assert_eq!(j["outcome"], "complete", "{j}");
    let seen = std::fs::read_to_string(ws.join("nofile.txt")).unwrap();
    assert_eq!(seen.trim(), "77");

    write(10);
    let out = srv.ralph(&["submit", "--json", file.to_str().unwrap()]);
    assert_ne!(out.code, 0, "{}", out.stdout);
    assert!(
        out.stderr.contains("nofile") && out.stderr.contains("at least 64"),
        "{}",
        out.stderr
    );
    let (_, list) = srv.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().map(Vec::len), Some(1), "{list}");
}

#[test]
fn sandbox_exec_applies_it() {
    let f = Fixture::new();
    let out = common::Ralph::new()
        .args(["sandbox", "exec", "--workspace"])
        .arg(&f.ws)
        .args(["--nofile", "128", "--", "sh", "-c", "ulimit -n"])
        .output();
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "128", "{}", out.stderr);
}

#[test]
fn a_limit_too_small_to_work_is_refused_naming_it() {
    let f = Fixture::new();
    for argv in [
        vec!["sandbox", "exec", "--nofile", "63", "--", "true"],
        vec![
            "run",
            "--nofile",
            "10",
            "--kind",
            "task",
            "--agent-cmd",
            "true",
        ],
    ] {
        let out = common::Ralph::new()
            .args(argv.clone())
            .arg("--workspace")
            .arg(&f.ws)
            .output();
        out.expect_code(64);
        assert!(
            out.stderr.contains("--nofile") && out.stderr.contains("64"),
            "{argv:?}: {}",
            out.stderr
        );
    }
    // Nothing ran, nothing was journalled.
    assert!(!f.state.exists());
}
