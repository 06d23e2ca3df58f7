//! Path flags and job keys that run through a symlink a round planted (SPEC §5, "The host
//! boundary"): a first job's agent leaves `WS/cache -> HOST` and `WS/sub -> HOST` (HOST: a host
//! directory it cannot see); a later `--read WS/cache`, `--write WS/cache` or
//! `--workspace WS/sub` must be refused with exit 64 (or HTTP 400) naming the link, before
//! anything is stored or run, through `ralph run` (same store, SQLite or PostgreSQL),
//! `ralph sandbox exec`, a job file given to `ralph submit`, and the HTTP API. Each time the host
//! directory is checked unchanged: the second job's agent, had it run, would have written a
//! marker into it and copied its secret out. And what must keep working does: a `--read` through
//! a link outside every writable tree, a workspace reached through a user's link.

use crate::common;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::server::{Server, job};
use common::test_db::TestDatabase;
use common::{Fixture, Output, Ralph, complete_report, continue_report};
use serde_json::json;

/// What a directory holds: (name, content) of each entry, sorted.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let content = std::fs::read_to_string(e.path()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), content)
        })
        .collect();
    v.sort();
    v
}

/// A host directory no round can see, with a secret in it.
fn host_dir(parent: &Path) -> PathBuf {
    let host = parent.join("host");
    std::fs::create_dir(&host).unwrap();
    std::fs::write(host.join("secret"), "s3cret\n").unwrap();
    host
}

/// The agent of the first job: plants the two links in its workspace and completes.
fn planting_agent(host: &Path) -> String {
    format!(
        "ln -s '{h}' cache && ln -s '{h}' sub && echo '{r}' > \"$RALPH_REPORT_FILE\"",
        h = host.display(),
        r = complete_report("planted")
    )
}

/// The agent of the second job: had it been granted the host directory, it would leave a marker
/// there (through `cache` or as its workspace) and copy the secret out.
fn greedy_agent(planted_ws: &Path) -> String {
    format!(
        "echo pwned > '{ws}/cache/marker' 2>/dev/null; echo pwned > marker 2>/dev/null; \
         cat '{ws}/cache/secret' > leak 2>/dev/null; echo '{r}' > \"$RALPH_REPORT_FILE\"",
        ws = planted_ws.display(),
        r = complete_report("tried")
    )
}

/// `ralph run` in `ws` with the fixture's state dir and agents.
fn run_in(f: &Fixture, ws: &Path, agent_cmd: &str) -> Ralph {
    Ralph::new()
        .args([
            "run",
            "--objective",
            "o",
            "--json",
            "--retry-backoff",
            "10ms",
        ])
        .args(["--kill-grace", "1s", "--mode", "workspace-write"])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&f.agents)
        .arg("--agent-cmd")
        .arg(agent_cmd)
}

/// The refusal's message names the flag, the link, where it points and its tree.
fn assert_refused(out: &Output, flag: &str, link: &Path, host: &Path, tree: &Path) {
    out.expect_code(64);
    let needle = format!(
        "`{}` is a symlink (to `{}`) inside the writable tree `{}`",
        link.display(),
        host.display(),
        tree.display()
    );
    assert!(
        out.stderr.contains(&needle),
        "want {needle:?} in:\n{}",
        out.stderr
    );
    assert!(out.stderr.contains(flag), "want {flag} in:\n{}", out.stderr);
}

fn stored_jobs(f: &Fixture) -> usize {
    let store = ralph_runner::store::Store::open_sqlite(&f.state).unwrap();
    let filter = ralph_runner::store::JobFilter {
        limit: 1000,
        ..Default::default()
    };
    store.list(&filter).unwrap().len()
}

/// A fixture whose workspace a first `ralph run` left with `cache` and `sub` pointing at `host`.
struct Planted {
    f: Fixture,
    host: PathBuf,
    base: PathBuf,
}

impl Planted {
    fn new() -> Self {
        let f = Fixture::new();
        let base = f.root.path().canonicalize().unwrap();
        let host = host_dir(&base);
        let out = run_in(&f, &f.ws, &planting_agent(&host)).output();
        out.expect_code(0);
        for l in ["cache", "sub"] {
            assert_eq!(std::fs::read_link(f.ws.join(l)).unwrap(), host, "{l}");
        }
        Self { f, host, base }
    }

    fn fresh_dir(&self, name: &str) -> PathBuf {
        let p = self.base.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

#[test]
fn ralph_run_refuses_paths_through_links_an_earlier_job_planted() {
    let p = Planted::new();
    let (f, host) = (&p.f, &p.host);
    let before = snapshot(host);
    let jobs = stored_jobs(f);
    let ws2 = p.fresh_dir("ws2");
    let agent = greedy_agent(&f.ws);
    let (cache, sub) = (f.ws.join("cache"), f.ws.join("sub"));
    // Another workspace: only the store knows that `ws` is one.
    let cases: Vec<(&Path, Vec<String>, &str, &Path)> = vec![
        (
            &ws2,
            vec!["--read".into(), cache.display().to_string()],
            "--read",
            &cache,
        ),
        (
            &ws2,
            vec!["--write".into(), cache.display().to_string()],
            "--write",
            &cache,
        ),
        (&sub, vec![], "--workspace", &sub),
        // A link in the middle of the path.
        (
            &ws2,
            vec!["--read".into(), sub.join("secret").display().to_string()],
            "--read",
            &sub,
        ),
        // The job's own workspace: caught by the job itself as well.
        (
            &f.ws,
            vec!["--read".into(), cache.display().to_string()],
            "--read",
            &cache,
        ),
    ];
    for (ws, flags, flag, link) in cases {
        let out = run_in(f, ws, &agent).args(&flags).output();
        assert_refused(&out, flag, link, host, &f.ws);
        common::assert_no_result(&out);
        assert_eq!(snapshot(host), before, "{flags:?}");
        assert!(!ws2.join("leak").exists() && !f.ws.join("leak").exists());
    }
    // Refused before anything was stored.
    assert_eq!(stored_jobs(f), jobs);
}

#[test]
fn ralph_run_still_follows_links_outside_writable_trees() {
    let p = Planted::new();
    let f = &p.f;
    // A system-style link (`/var/run -> ../run`) outside every writable tree.
    let sys = p.fresh_dir("sys");
    std::fs::create_dir(sys.join("run")).unwrap();
    std::fs::write(sys.join("run/data"), "from run\n").unwrap();
    symlink("run", sys.join("varrun")).unwrap();
    // A user's link to the workspace the first job used.
    let home = p.fresh_dir("home");
    symlink(&f.ws, home.join("proj")).unwrap();
    let agent = format!(
        "cat '{}' > copied && echo '{}' > \"$RALPH_REPORT_FILE\"",
        sys.join("run/data").display(),
        complete_report("copied")
    );
    let out = run_in(f, &home.join("proj"), &agent)
        .arg("--read")
        .arg(sys.join("varrun"))
        .output();
    out.expect_code(0);
    assert_eq!(f.read_ws("copied"), "from run\n");
    // The job was recorded with the real paths.
    let id = out.job_id();
    let (_, submitted) = f.events(&id).into_iter().next().unwrap();
    assert_eq!(submitted["spec"]["workspace"], json!(f.ws));
    assert_eq!(
        submitted["spec"]["sandbox"]["read"][1],
        json!(sys.join("run"))
    );
}

#[test]
fn a_link_planted_by_a_round_stops_the_next_round_of_the_same_job() {
    let f = Fixture::new();
    let base = f.root.path().canonicalize().unwrap();
    let host = host_dir(&base);
    let before = snapshot(&host);
    std::fs::create_dir_all(f.ws.join("a/data")).unwrap();
    // Round 1 swaps the `--read` directory's parent for one holding a link to the host; round 2
    // would read through it.
    let agent = f.agent(
        "swap.sh",
        &format!(
            "if [ ! -e round1 ]; then touch round1\n\
             if mv a a.old && mkdir a && ln -s '{h}' a/data; then echo '{c}' > \"$RALPH_REPORT_FILE\"\n\
             else echo '{{\"status\":\"blocked\",\"summary\":\"s\",\"evidence\":[],\"nextSteps\":[],\"blocker\":\"swap failed\"}}' > \"$RALPH_REPORT_FILE\"; fi\n\
             else cat a/data/secret > leak; echo pwned > a/data/marker; echo '{d}' > \"$RALPH_REPORT_FILE\"; fi",
            h = host.display(),
            c = continue_report("swapped"),
            d = complete_report("read it")
        ),
    );
    let out = run_in(&f, &f.ws, &agent.display().to_string())
        .arg("--read")
        .arg(f.ws.join("a/data"))
        .args(["--max-rounds", "3"])
        .output();
    out.expect_code(64);
    let result = out.json();
    assert_eq!(result["outcome"], "error", "{result:#}");
    assert_eq!(result["reason"], "configuration", "{result:#}");
    let message = result["message"].as_str().unwrap();
    let link = f.ws.join("a/data");
    assert!(
        message.contains(&format!("`{}` is a symlink", link.display())),
        "{message}"
    );
    assert!(!f.ws.join("leak").exists());
    assert_eq!(snapshot(&host), before);
}

#[test]
fn ralph_run_with_a_postgres_store_knows_its_workspaces_too() {
    let Some(db) = TestDatabase::create("path_flags_postgres") else {
        return;
    };
    let f = Fixture::new();
    let base = f.root.path().canonicalize().unwrap();
    let host = host_dir(&base);
    run_in(&f, &f.ws, &planting_agent(&host))
        .arg("--database-url")
        .arg(&db.url)
        .output()
        .expect_code(0);
    let before = snapshot(&host);
    let ws2 = base.join("ws2");
    std::fs::create_dir(&ws2).unwrap();
    let cache = f.ws.join("cache");
    let out = run_in(&f, &ws2, &greedy_agent(&f.ws))
        .arg("--database-url")
        .arg(&db.url)
        .arg("--write")
        .arg(&cache)
        .output();
    assert_refused(&out, "--write", &cache, &host, &f.ws);
    assert_eq!(snapshot(&host), before);
}

#[test]
fn sandbox_exec_refuses_a_link_in_its_own_workspace_and_follows_others() {
    let p = Planted::new();
    let (f, host) = (&p.f, &p.host);
    let before = snapshot(host);
    let cache = f.ws.join("cache");
    let exec = |flags: &[&str], script: &str| {
        Ralph::new()
            .args(["sandbox", "exec", "--workspace"])
            .arg(&f.ws)
            .args(flags)
            .args(["--", "/bin/sh", "-c", script])
            .output()
    };
    let steal = format!(
        "cat '{c}/secret' > '{w}/leak'; echo pwned > '{c}/marker'",
        c = cache.display(),
        w = f.ws.display()
    );
    let c = cache.display().to_string();
    for (flags, flag) in [
        (["--read", c.as_str()], "--read"),
        (["--write", c.as_str()], "--write"),
    ] {
        let out = exec(&flags, &steal);
        assert_refused(&out, flag, &cache, host, &f.ws);
        assert_eq!(snapshot(host), before);
        assert!(!f.ws.join("leak").exists());
    }
    // Relative to the current directory, the same.
    let out = Ralph::new()
        .args(["sandbox", "exec", "--read", "cache", "--", "/bin/true"])
        .command()
        .current_dir(&f.ws)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("`{}` is a symlink", cache.display())),
        "{stderr}"
    );
    // A link outside the workspace is the user's, and followed.
    let outside = p.fresh_dir("outside");
    std::fs::create_dir(outside.join("real")).unwrap();
    std::fs::write(outside.join("real/f"), "ok\n").unwrap();
    symlink("real", outside.join("link")).unwrap();
    let out = exec(
        &["--read", outside.join("link").to_str().unwrap()],
        &format!("cat '{}'", outside.join("real/f").display()),
    );
    out.expect_code(0);
    assert_eq!(out.stdout, "ok\n");
}

/// A server whose limits grant reads under a directory outside its workspace roots (`ext`, a
/// real path; the temporary directory is returned to be kept while the test runs).
fn server_with_a_read_root() -> (tempfile::TempDir, PathBuf, Server) {
    let dir = tempfile::Builder::new()
        .prefix("ralph-ext-")
        .tempdir()
        .unwrap();
    let ext = dir.path().canonicalize().unwrap();
    let s = Server::new(&format!("[limits]\nread_roots = [\"{}\"]\n", ext.display()));
    (dir, ext, s)
}

#[test]
fn the_service_refuses_such_paths_from_job_files_and_the_api() {
    let (_ext, ext, s) = server_with_a_read_root();
    let base = s.dir.path().canonicalize().unwrap();
    let host = host_dir(&base);
    let ws = s.workspace("ws");
    let ws2 = s.workspace("ws2");
    // The first job also writes to a `write` directory outside the workspace roots (under a read
    // root), and plants a link there too: only the store says that directory is writable.
    let wcache = ext.join("wcache");
    std::fs::create_dir(&wcache).unwrap();
    let planter = s.agent(
        "plant.sh",
        &format!(
            "ln -s '{}' '{}' && {}",
            host.display(),
            wcache.join("link").display(),
            planting_agent(&host)
        ),
    );
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({"job": [job(&ws, &planter, json!({ "write": [wcache] }))]}).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.wait_finished(&id, Duration::from_secs(60))["outcome"],
        "complete"
    );
    let before = snapshot(&host);
    let greedy = s.agent("greedy.sh", &greedy_agent(&ws));
    let (cache, sub) = (ws.join("cache"), ws.join("sub"));

    // A job file through `ralph submit`, paths relative to the file.
    let file = s.root.join("jobs.toml");
    for (key, value, flag, link) in [
        ("read", "[\"ws/cache\"]", "job[0].read", &cache),
        ("write", "[\"ws/cache\"]", "job[0].write", &cache),
        ("workspace", "\"ws/sub\"", "job[0].workspace", &sub),
    ] {
        let workspace = if key == "workspace" {
            ""
        } else {
            "workspace = \"ws2\"\n"
        };
        std::fs::write(
            &file,
            format!(
                "[[job]]\nobjective = \"o\"\n{workspace}agent_cmd = \"{}\"\n{key} = {value}\n",
                greedy.display()
            ),
        )
        .unwrap();
        let out = s.ralph(&["submit", file.to_str().unwrap()]);
        assert_refused(&out, flag, link, &host, &ws);
    }

    // The API, each key.
    let post =
        |j: serde_json::Value| s.api("POST", "/v1/jobs", Some(&json!({ "job": [j] }).to_string()));
    let reads = json!([s.agents, cache]);
    for (j, field, link) in [
        (
            job(&ws2, &greedy, json!({ "read": reads })),
            "job[0].read",
            &cache,
        ),
        (
            job(&ws2, &greedy, json!({ "write": [cache] })),
            "job[0].write",
            &cache,
        ),
        (job(&sub, &greedy, json!({})), "job[0].workspace", &sub),
    ] {
        let (code, body) = post(j);
        assert_eq!(code, 400, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!(
                "`{}` is a symlink (to `{}`) inside the writable tree `{}`",
                link.display(),
                host.display(),
                ws.display()
            )),
            "{message}"
        );
    }
    // A link in the first job's `write` directory, known from the store alone.
    let (code, body) = post(job(
        &ws2,
        &greedy,
        json!({ "read": [s.agents, wcache.join("link")] }),
    ));
    assert_eq!(code, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("inside the writable tree `{}`", wcache.display())),
        "{message}"
    );
    // A link under a workspace root that no job has used yet: the root is a writable tree.
    let fresh = s.workspace("fresh");
    symlink(&host, fresh.join("cache")).unwrap();
    let (code, body) = post(job(
        &ws2,
        &greedy,
        json!({ "read": [s.agents, fresh.join("cache")] }),
    ));
    assert_eq!(code, 400, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("inside the writable tree `{}`", s.root.display())),
        "{message}"
    );
    // Nothing was stored, nothing was granted.
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(snapshot(&host), before);
    assert!(!ws2.join("leak").exists());

    // A `read` through a link outside every writable tree still works.
    std::fs::create_dir(ext.join("data")).unwrap();
    std::fs::write(ext.join("data/f"), "ext\n").unwrap();
    symlink("data", ext.join("link")).unwrap();
    let copier = s.agent(
        "copy.sh",
        &format!(
            "cat '{}' > copied && echo '{}' > \"$RALPH_REPORT_FILE\"",
            ext.join("data/f").display(),
            complete_report("copied")
        ),
    );
    let (code, body) = post(job(
        &ws2,
        &copier,
        json!({ "read": [s.agents, ext.join("link")] }),
    ));
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.wait_finished(&id, Duration::from_secs(60))["outcome"],
        "complete"
    );
    assert_eq!(
        std::fs::read_to_string(ws2.join("copied")).unwrap(),
        "ext\n"
    );
}

/// The refusal of the rule that needs no memory: exit 64, the flag, the link, where it points,
/// and the resolved path to pass instead.
fn assert_untrusted(out: &Output, flag: &str, link: &Path, target: &Path) {
    out.expect_code(64);
    let needle = format!(
        "`{}` is a symlink (to `{}`) that a round could have planted",
        link.display(),
        target.display()
    );
    assert!(
        out.stderr.contains(&needle),
        "want {needle:?} in:\n{}",
        out.stderr
    );
    assert!(out.stderr.contains(flag), "want {flag} in:\n{}", out.stderr);
    let hint = format!("give the resolved path `{}`", target.display());
    assert!(
        out.stderr.contains(&hint),
        "want {hint:?} in:\n{}",
        out.stderr
    );
}

/// Issue 25 (B), the red team's path: a first `ralph run` whose agent makes `packages/foo` a link
/// to a host directory (the canary, which it cannot see); then, with no record of that job —
/// `ralph sandbox exec` keeps none, `ralph run --state-dir OTHER` has another store — the link
/// as `--workspace` (or `--read`, `--write`, `--socket` below it) is refused with exit 64, and
/// the canary directory is untouched and nothing was stored. The rule needs no memory: the link
/// is not root's (a confined round never is). A path through one of the host's own system links
/// (root's, in root's directories: `/var/run -> /run`) still works.
#[test]
fn a_planted_link_is_refused_without_the_record_of_the_job_that_planted_it() {
    let f = Fixture::new();
    let base = f.root.path().canonicalize().unwrap();
    let canary = host_dir(&base);
    let plant = format!(
        "mkdir packages && ln -s '{}' packages/foo && echo '{}' > \"$RALPH_REPORT_FILE\"",
        canary.display(),
        complete_report("planted")
    );
    run_in(&f, &f.ws, &plant).output().expect_code(0);
    let link = f.ws.join("packages/foo");
    assert_eq!(std::fs::read_link(&link).unwrap(), canary);
    let before = snapshot(&canary);
    let greedy = "touch x; echo pwned > marker; cat secret > leak";

    // `ralph sandbox exec`: no store at all.
    let out = Ralph::new()
        .args(["sandbox", "exec", "--workspace"])
        .arg(&link)
        .args(["--", "/bin/sh", "-c", greedy])
        .output();
    assert_untrusted(&out, "--workspace", &link, &canary);
    assert_eq!(snapshot(&canary), before);
    // The same from inside the planted tree, relative to the current directory.
    let out = Ralph::new()
        .args(["sandbox", "exec", "--workspace", "packages/foo", "--"])
        .args(["/bin/sh", "-c", greedy])
        .command()
        .current_dir(&f.ws)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(snapshot(&canary), before);
    // The other path flags, from a workspace the link is not in.
    let ws2 = base.join("ws2");
    std::fs::create_dir(&ws2).unwrap();
    for flag in ["--read", "--write", "--socket"] {
        let out = Ralph::new()
            .args(["sandbox", "exec", "--workspace"])
            .arg(&ws2)
            .arg(flag)
            .arg(&link)
            .args(["--", "/bin/sh", "-c", greedy])
            .output();
        assert_untrusted(&out, flag, &link, &canary);
    }
    assert_eq!(snapshot(&canary), before);

    // `ralph run` with another state dir: it never saw the first job.
    let other = base.join("other-state");
    let run_other = |ws: &Path| {
        Ralph::new()
            .args(["run", "--objective", "o", "--json", "--kill-grace", "1s"])
            .arg("--state-dir")
            .arg(&other)
            .arg("--workspace")
            .arg(ws)
            .arg("--agent-cmd")
            .arg(greedy)
            .output()
    };
    let out = run_other(&link);
    assert_untrusted(&out, "--workspace", &link, &canary);
    common::assert_no_result(&out);
    assert_eq!(snapshot(&canary), before);
    assert!(!f.ws.join("x").exists() && !ws2.join("x").exists());
    // Nothing stored in the other store.
    if other.join("ralph.db").exists() || other.is_dir() {
        let store = ralph_runner::store::Store::open_sqlite(&other).unwrap();
        let all = store
            .list(&ralph_runner::store::JobFilter {
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert!(all.is_empty(), "{all:?}");
    }

    // The host's own system link is root's, in root's directories: followed.
    let var_run = Path::new("/var/run");
    if std::fs::symlink_metadata(var_run).is_ok_and(|m| m.file_type().is_symlink()) {
        let out = Ralph::new()
            .args(["sandbox", "exec", "--workspace"])
            .arg(&ws2)
            .args(["--read", "/var/run", "--", "/bin/sh", "-c", "test -d /run"])
            .output();
        out.expect_code(0);
    } else {
        panic!("this host has no /var/run symlink to check the system-link case with");
    }
}

/// A store that cannot say which trees hold a link's directory (here: it lost its table of
/// trees) never lets the link through: `ralph run` refuses the path as the store's fault (exit
/// 70, not the user's 64), before anything is stored or run. The same link is followed when the
/// store can answer ([`ralph_run_still_follows_links_outside_writable_trees`]).
fn refused_when_the_store_cannot_say(f: &Fixture, lose_trees: impl FnOnce(), extra: &[String]) {
    let base = f.root.path().canonicalize().unwrap();
    let host = host_dir(&base);
    let before = snapshot(&host);
    let out_dir = base.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let link = out_dir.join("data");
    symlink(&host, &link).unwrap();
    let agent = greedy_agent(&f.ws);
    lose_trees();
    let out = run_in(f, &f.ws, &agent)
        .args(extra)
        .arg("--read")
        .arg(&link)
        .output();
    out.expect_code(70);
    assert!(
        out.stderr.contains(&format!(
            "`{}` is a symlink, and the state store could not say whether it lies in a tree rounds have written",
            link.display()
        )) && out.stderr.contains("writable_trees"),
        "{}",
        out.stderr
    );
    common::assert_no_result(&out);
    assert_eq!(snapshot(&host), before);
    assert!(!f.ws.join("leak").exists() && !f.ws.join("marker").exists());
}

#[test]
fn a_store_that_cannot_say_where_rounds_wrote_refuses_a_path_through_a_link() {
    let f = Fixture::new();
    let done = format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok"));
    run_in(&f, &f.ws, &done).output().expect_code(0);
    let jobs = stored_jobs(&f);
    refused_when_the_store_cannot_say(
        &f,
        || {
            rusqlite::Connection::open(f.state.join("ralph.db"))
                .unwrap()
                .execute_batch("ALTER TABLE writable_trees RENAME TO writable_trees_lost")
                .unwrap();
        },
        &[],
    );
    assert_eq!(stored_jobs(&f), jobs, "nothing stored");
}

#[test]
fn a_postgres_store_that_cannot_say_where_rounds_wrote_refuses_a_path_through_a_link() {
    let Some(db) = TestDatabase::create("path_flags_trees_lost") else {
        return;
    };
    let f = Fixture::new();
    let url = ["--database-url".to_owned(), db.url.clone()];
    let done = format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok"));
    run_in(&f, &f.ws, &done).args(&url).output().expect_code(0);
    let count = || -> i64 {
        db.client()
            .query_one("SELECT count(*) FROM jobs", &[])
            .unwrap()
            .get(0)
    };
    let jobs = count();
    refused_when_the_store_cannot_say(
        &f,
        || {
            db.client()
                .batch_execute("ALTER TABLE writable_trees RENAME TO writable_trees_lost")
                .unwrap();
        },
        &url,
    );
    assert_eq!(count(), jobs, "nothing stored");
}

#[test]
fn the_service_answers_500_when_its_store_cannot_say_where_rounds_wrote() {
    let (_ext, ext, s) = server_with_a_read_root();
    let base = s.dir.path().canonicalize().unwrap();
    let host = host_dir(&base);
    let before = snapshot(&host);
    let ws = s.workspace("ws");
    let greedy = s.agent("greedy.sh", &greedy_agent(&ws));
    // A link under a read root, outside the workspace roots: only the store could say whether a
    // round wrote there.
    let link = ext.join("data");
    symlink(&host, &link).unwrap();
    rusqlite::Connection::open(s.state.join("ralph.db"))
        .unwrap()
        .execute_batch("ALTER TABLE writable_trees RENAME TO writable_trees_lost")
        .unwrap();
    let reads = json!([s.agents, link]);
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &greedy, json!({ "read": reads }))] }).to_string()),
    );
    assert_eq!(code, 500, "{body}");
    assert_eq!(body["error"]["code"], "internal", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "`{}` is a symlink, and the state store could not say whether it lies in a tree rounds have written",
            link.display()
        )) && message.contains("writable_trees")
            && message.contains("the server's fault"),
        "{message}"
    );
    let (code, listed) = s.api("GET", "/v1/jobs", None);
    assert_eq!(code, 200, "{listed}");
    assert_eq!(listed["jobs"], json!([]), "nothing queued: {listed}");
    assert_eq!(snapshot(&host), before);
}
