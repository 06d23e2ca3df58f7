//! Caches kept across jobs (SPEC §12, issue 26 item 4) end to end, on the native backend, for
//! real code of the three ecosystems — Python/pip, Node/npm, Rust/cargo — whose dependency the
//! set-up installs through the egress proxy from the loopback package mirror
//! (`tests/fixtures/package_mirror.py`), never with `--network full`; Python also on the docker
//! backend (the container's loopback-only namespace, the egress proxy's listener made in it):
//!
//! - job 1: the set-up fills the cache from the mirror (a miss, then `cache_saved`); round 1
//!   claims completion on unfixed code and verify refuses it, its failing tail on the console;
//!   round 2 fixes the code and writes into the cache (so does verify): a verified completion;
//!   the set-up's secret (`--setup-env`) is nowhere in a round's environment or cache;
//! - job 2, a fresh checkout of the same project in another workspace, with no `--allow-host`:
//!   the same set-up runs offline from the cache (a hit; the mirror sees no request), and what
//!   job 1's round and verify wrote into their copies is not there — not in the store either.

use crate::common;

use std::path::{Path, PathBuf};

use common::package_mirror::PackageMirror;
use common::*;
use serde_json::Value;

/// The set-up's secret: passed with `--setup-env`, it must never reach a round.
const SECRET_VAR: &str = "CACHE_TEST_REGISTRY_TOKEN";
const SECRET: &str = "tok-c4c7e-setup-only-never-in-a-round";

/// One ecosystem's project and commands; `{m}` is the mirror's base URL.
struct Project {
    /// The cache, in the round's HOME.
    cache: &'static str,
    /// The files of a fresh checkout (path, content).
    files: Vec<(&'static str, String)>,
    /// The set-up: offline from the cache first, else from the mirror.
    setup: String,
    /// Verify: the project's own tests.
    verify: String,
    /// The fix round 2 applies (a shell command in the workspace).
    fix: &'static str,
    /// What the failing verify's tail shows.
    failing: &'static str,
    /// An entry the cache holds once the set-up filled it (a `find` name pattern).
    cached: &'static str,
    /// A `--cache-key`, or the default (the lock files').
    key: Option<&'static str>,
}

fn python(m: &str) -> Project {
    let pip = "venv/bin/pip --disable-pip-version-check";
    Project {
        cache: "~/.cache/wheels",
        files: vec![
            ("requirements.txt", "ralph-mirror-probe==1.0\n".into()),
            (
                "app.py",
                "import ralph_mirror_probe\n\n\ndef answer():\n    return 'not yet'\n".into(),
            ),
            (
                "test_app.py",
                "import unittest\n\nimport app\nimport ralph_mirror_probe\n\n\nclass T(unittest.TestCase):\n    def test_answer(self):\n        self.assertEqual(app.answer(), ralph_mirror_probe.VALUE)\n\n\nif __name__ == '__main__':\n    unittest.main()\n".into(),
            ),
        ],
        setup: format!(
            "W=\"$HOME/.cache/wheels\"; /usr/bin/python3 -m venv venv && {{ {pip} install --no-index --find-links \"$W\" -r requirements.txt || {{ {pip} download -d \"$W\" --index-url {m}/simple/ -r requirements.txt && {pip} install --no-index --find-links \"$W\" -r requirements.txt; }}; }}"
        ),
        verify: "touch \"$HOME/.cache/wheels/written-by-verify\"; venv/bin/python -m unittest -v test_app 2>&1".into(),
        fix: "sed -i \"s/return 'not yet'/return ralph_mirror_probe.VALUE/\" app.py",
        failing: "AssertionError: 'not yet' != 'from the mirror'",
        cached: "ralph_mirror_probe-1.0-py3-none-any.whl",
        key: None,
    }
}

/// The Python project for the docker backend's image (`ralph-agent-base`: Debian's python3 and
/// pip, no venv module): the wheels are installed with `pip install --target deps`.
fn python_in_the_image(m: &str) -> Project {
    let pip = "/usr/bin/python3 -m pip --disable-pip-version-check";
    let mut p = python(m);
    p.setup = format!(
        "W=\"$HOME/.cache/wheels\"; {{ {pip} install --no-index --find-links \"$W\" --target deps -r requirements.txt || {{ {pip} download -d \"$W\" --index-url {m}/simple/ -r requirements.txt && {pip} install --no-index --find-links \"$W\" --target deps -r requirements.txt; }}; }}"
    );
    p.verify = "touch \"$HOME/.cache/wheels/written-by-verify\"; PYTHONPATH=deps /usr/bin/python3 -m unittest -v test_app 2>&1".into();
    p
}

fn node(m: &str) -> Project {
    let npm = "/usr/bin/npm --no-audit --no-fund --no-update-notifier";
    Project {
        cache: "~/.npm",
        files: vec![
            (
                "package.json",
                "{\"name\":\"cache-probe\",\"version\":\"1.0.0\",\"private\":true,\"dependencies\":{\"ralph-mirror-probe\":\"1.0.0\"}}\n".into(),
            ),
            (".npmrc", format!("registry={m}/\n")),
            (
                "app.js",
                "const probe = require('ralph-mirror-probe');\nmodule.exports = () => 'not yet';\n"
                    .into(),
            ),
            (
                "test.js",
                "const assert = require('assert');\nassert.strictEqual(require('./app')(), require('ralph-mirror-probe'));\nconsole.log('ok');\n".into(),
            ),
        ],
        setup: format!("{npm} install --offline || {npm} install"),
        verify: "touch \"$HOME/.npm/written-by-verify\"; /usr/bin/node test.js 2>&1".into(),
        fix: "sed -i \"s/() => 'not yet'/() => probe/\" app.js",
        failing: "Expected values to be strictly equal",
        cached: "index-v5",
        key: Some("node-deps-v1"),
    }
}

fn rust(m: &str) -> Project {
    Project {
        cache: "~/.cargo/registry",
        files: vec![
            (
                "Cargo.toml",
                "[package]\nname = \"cache-probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\nralph-mirror-probe = { version = \"1\", registry = \"mirror\" }\n".into(),
            ),
            (
                ".cargo/config.toml",
                format!("[registries.mirror]\nindex = \"sparse+{m}/index/\"\n"),
            ),
            (
                "src/lib.rs",
                "pub fn answer() -> &'static str {\n    \"not yet\"\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn answer_is_the_mirrors() {\n        assert_eq!(super::answer(), ralph_mirror_probe::VALUE);\n    }\n}\n".into(),
            ),
        ],
        setup: "cargo fetch --offline || cargo fetch".into(),
        verify: "touch \"$HOME/.cargo/registry/written-by-verify\"; cargo test --offline 2>&1"
            .into(),
        fix: "sed -i 's/\"not yet\"/ralph_mirror_probe::VALUE/' src/lib.rs",
        failing: "assertion `left == right` failed",
        cached: "ralph-mirror-probe-1.0.0.crate",
        key: None,
    }
}

/// A fresh checkout of `p` at `ws`.
fn checkout(p: &Project, ws: &Path) {
    for (path, text) in &p.files {
        let at = ws.join(path);
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(at, text).unwrap();
    }
}

/// The agent: round 1 claims completion on the unfixed code; round 2 records what the round
/// sees (its environment, its copy of the cache), writes into the cache, fixes the code and
/// reports complete. Each round lists the cache into `cache-round-N.txt`.
fn agent(f: &Fixture, p: &Project) -> PathBuf {
    let dir = p.cache.replacen('~', "$HOME", 1);
    f.agent(
        "cache-agent.sh",
        &format!(
            r#"cd "$RALPH_WORKSPACE"
n="$RALPH_ROUND"
find "{dir}" -name '{cached}' > "cache-round-$n.txt" 2>&1
env > "round-env-$n.txt"
tr '\0' '\n' < /proc/self/environ >> "round-env-$n.txt"
grep -rl "{SECRET}" "$HOME" > "secret-in-home-$n.txt" 2>&1
if [ "$n" = 1 ] && [ ! -e .fixed ]; then
  echo '{claim}' > "$RALPH_REPORT_FILE"
  exit 0
fi
echo poisoned > "{dir}/written-by-round"
for f in $(find "{dir}" -name '{cached}'); do echo poisoned > "$f"; done
{fix}
touch .fixed
echo '{done}' > "$RALPH_REPORT_FILE""#,
            cached = p.cached,
            fix = p.fix,
            claim = complete_report("claimed done without the fix"),
            done = complete_report("fixed the answer"),
        ),
    )
}

/// `ralph run` of the project in `ws` (the fixture's state dir), with the set-up, cache and
/// verify; `allow` is the mirror's `--allow-host`, if any.
fn run(
    f: &Fixture,
    backend: &str,
    ws: &Path,
    p: &Project,
    agent: &Path,
    allow: Option<u16>,
) -> Output {
    let mut r = Ralph::new()
        .args(["run", "--objective", "make the tests pass", "--json"])
        .args(["--backend", backend])
        .args(["--retry-backoff", "10ms", "--kill-grace", "1s"])
        .arg("--workspace")
        .arg(ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&f.agents)
        .args(["--mode", TEST_MODE])
        .arg("--agent-cmd")
        .arg(agent)
        .env(SECRET_VAR, SECRET)
        .args([
            "--setup",
            &format!("test -n \"${SECRET_VAR}\" && {}", p.setup),
        ])
        .args(["--setup-env", SECRET_VAR])
        .args(["--cache", p.cache, "--verify", &p.verify])
        .args([
            "--max-rounds",
            "3",
            "--round-timeout",
            "10m",
            "--setup-timeout",
            "10m",
        ])
        .arg("--follow")
        .arg("--metrics-textfile")
        .arg(f.root.path().join("ralph.prom"));
    if let Some(k) = p.key {
        r = r.args(["--cache-key", k]);
    }
    if let Some(port) = allow {
        r = r.args(["--allow-host", &format!("127.0.0.1:{port}")]);
    }
    r.output()
}

fn events_of(f: &Fixture, job: &str, kind: &str) -> Vec<Value> {
    f.events(job)
        .into_iter()
        .filter(|(t, _)| t == kind)
        .map(|(_, v)| v)
        .collect()
}

fn read(ws: &Path, name: &str) -> String {
    std::fs::read_to_string(ws.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Every entry below `dir` whose name is `name`.
fn found(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_name() == name {
                out.push(e.path());
            }
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

fn scenario(make: fn(&str) -> Project) {
    scenario_on("native", make);
}

fn scenario_on(backend: &str, make: fn(&str) -> Project) {
    let f = Fixture::new();
    let mirror = PackageMirror::start(f.root.path());
    let m = format!("http://127.0.0.1:{}", mirror.port());
    let p = make(&m);
    checkout(&p, &f.ws);
    let agent = agent(&f, &p);

    // Job 1: a miss; the set-up fills the cache through the proxy.
    let out = run(&f, backend, &f.ws, &p, &agent, Some(mirror.port()));
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["reason"], "verified", "{j}");
    assert_eq!(j["rounds"], 2, "{j}");
    let job1 = out.job_id();
    // Round 1's claim was refused by verify, its failing tail on the console.
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("ralph: | ") && l.contains(p.failing)),
        "the failing tail is shown with the verdict: {}",
        out.stderr
    );
    // `--follow` streamed verify's output as it ran, behind its label.
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("[round 1 verify] ") && l.contains(p.failing)),
        "{}",
        out.stderr
    );
    let verdicts: Vec<bool> = events_of(&f, &job1, "verify_finished")
        .iter()
        .map(|v| v["passed"].as_bool().unwrap())
        .collect();
    assert_eq!(verdicts, vec![false, true]);
    let lookup = events_of(&f, &job1, "cache_lookup");
    assert_eq!(lookup.len(), 1, "{lookup:?}");
    assert_eq!(lookup[0]["hit"], false, "{lookup:?}");
    assert_eq!(lookup[0]["path"], p.cache);
    let saved = events_of(&f, &job1, "cache_saved");
    assert_eq!(saved.len(), 1, "{saved:?}");
    assert!(saved[0]["error"].is_null(), "{saved:?}");
    assert!(saved[0]["bytes"].as_u64().unwrap() > 0, "{saved:?}");
    // `ralph show` says where the set-up step is.
    let show = Ralph::new()
        .args(["show", &job1, "--state-dir"])
        .arg(&f.state)
        .output();
    show.expect_code(0);
    assert!(
        show.stdout.lines().any(|l| l == "  set-up: passed"),
        "{}",
        show.stdout
    );
    let fetched = mirror.requests().len();
    assert!(fetched > 0, "the set-up used the mirror");
    // The rounds saw the set-up's cache.
    for n in [1, 2] {
        assert!(
            read(&f.ws, &format!("cache-round-{n}.txt")).contains(p.cached),
            "round {n} sees the cache: {}",
            read(&f.ws, &format!("cache-round-{n}.txt"))
        );
        // The set-up's secret reached no round: not its environment, not its HOME (the cache).
        let env = read(&f.ws, &format!("round-env-{n}.txt"));
        assert!(env.contains("HOME="), "{env}");
        assert!(!env.contains(SECRET) && !env.contains(SECRET_VAR), "{env}");
        assert_eq!(read(&f.ws, &format!("secret-in-home-{n}.txt")), "");
    }
    assert!(files_containing(&f.state, SECRET).is_empty());
    // The store holds the set-up's cache, none of the round's or verify's writes.
    let store = f.state.join("caches");
    let hash = saved[0]["key_hash"].as_str().unwrap();
    assert_eq!(lookup[0]["key_hash"], hash);
    let entry = store.join(hash);
    assert!(
        !found(&entry, p.cached).is_empty(),
        "kept: {}",
        entry.display()
    );
    for name in ["written-by-round", "written-by-verify"] {
        assert!(found(&store, name).is_empty(), "{name} was not kept");
    }
    for c in found(&entry, p.cached).into_iter().filter(|c| c.is_file()) {
        assert_ne!(std::fs::read(&c).unwrap(), b"poisoned\n", "{}", c.display());
    }

    // Job 2: a fresh checkout elsewhere, no --allow-host: a hit, offline, the mirror unasked.
    let ws2 = f.root.path().join("checkout-2");
    std::fs::create_dir_all(&ws2).unwrap();
    let ws2 = ws2.canonicalize().unwrap();
    checkout(&p, &ws2);
    let out = run(&f, backend, &ws2, &p, &agent, None);
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{j}");
    let job2 = out.job_id();
    let lookup = events_of(&f, &job2, "cache_lookup");
    assert_eq!(lookup[0]["hit"], true, "{lookup:?}");
    assert_eq!(
        lookup[0]["key_hash"], hash,
        "the same project, the same key"
    );
    assert_eq!(
        mirror.requests().len(),
        fetched,
        "the mirror saw no request from job 2: {:#?}",
        &mirror.requests()[fetched..]
    );
    assert!(
        events_of(&f, &job2, "egress").is_empty(),
        "nothing left through a proxy"
    );
    // What job 1's round and verify wrote into their copies is not in job 2's.
    let listing = read(&ws2, "cache-round-1.txt");
    assert!(listing.contains(p.cached), "{listing}");
    for name in ["written-by-round", "written-by-verify"] {
        assert!(found(&store, name).is_empty(), "{name} was not kept");
    }
    let setup_log = std::fs::read_to_string(
        f.state
            .join("jobs")
            .join(&job2)
            .join("rounds/0/setup/output.log"),
    )
    .unwrap();
    assert!(!setup_log.contains(&m), "offline: {setup_log}");

    // The metrics of both runs (counters add up in the textfile): a miss, then a hit.
    let prom = std::fs::read_to_string(f.root.path().join("ralph.prom")).unwrap();
    for line in [
        "ralph_cache_lookups_total{result=\"miss\"} 1",
        "ralph_cache_lookups_total{result=\"hit\"} 1",
    ] {
        assert!(prom.lines().any(|l| l == line), "{line}: {prom}");
    }
    let bytes: u64 = prom
        .lines()
        .find_map(|l| l.strip_prefix("ralph_cache_bytes "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes > 0, "{prom}");
    common::promtool::promtool_check(&prom);

    // `ralph prune --caches` removes the host's caches; the next lookup would miss.
    let pruned = Ralph::new()
        .args(["prune", "--caches", "--json", "--state-dir"])
        .arg(&f.state)
        .output();
    pruned.expect_code(0);
    let r: Value = serde_json::from_str(&pruned.stdout).unwrap();
    assert_eq!(r["removed"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(r["removed"][0]["hash"], hash, "{r}");
    assert_eq!(r["kept_bytes"], 0, "{r}");
    assert!(!entry.exists(), "{}", entry.display());
}

/// Python/pip: wheels downloaded by the set-up into `~/.cache/wheels`, installed into the
/// workspace's venv; unittest is verify. Keyed by `requirements.txt` (the default key).
#[test]
fn pip_wheels_cached_by_the_setup_are_reused_offline_by_a_second_job() {
    scenario(python);
}

/// The same on docker (SPEC §5: `--allow-host` through the egress proxy holds there too).
#[test]
fn docker_pip_wheels_cached_by_the_setup_are_reused_offline_by_a_second_job() {
    if common::docker::ready(
        "docker_pip_wheels_cached_by_the_setup_are_reused_offline_by_a_second_job",
    ) {
        scenario_on("docker", python_in_the_image);
    }
}

/// Node/npm: `npm install` fills `~/.npm`; the second job's `npm install --offline` needs
/// nothing else. Keyed by `--cache-key`.
#[test]
fn an_npm_cache_filled_by_the_setup_is_reused_offline_by_a_second_job() {
    scenario(node);
}

/// Rust/cargo: `cargo fetch` from the mirror's sparse registry fills `~/.cargo/registry`
/// (CARGO_HOME is the round's `~/.cargo`); verify is `cargo test --offline`.
#[test]
fn a_cargo_registry_filled_by_the_setup_is_reused_offline_by_a_second_job() {
    scenario(rust);
}

/// The unprivileged path: a runner that is not root (`ralph-ci`, made by `.ci/setup`) has no
/// mount of its own to make, and the same copy works: the set-up's write is kept, a round sees
/// it and can write beside it in its HOME (`~/.cache/other`), and what the round wrote into its
/// copy is not in the store nor in the next job's copy.
#[test]
fn an_unprivileged_runner_keeps_the_setups_cache_and_discards_the_rounds() {
    use std::os::unix::fs::PermissionsExt;
    let Some(user) = nix::unistd::User::from_name("ralph-ci").ok().flatten() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but the user ralph-ci is missing (.ci/setup creates it)"
        );
        eprintln!("caches: no user ralph-ci: the unprivileged runner is not tested");
        return;
    };
    let root = tempfile::Builder::new()
        .prefix("ralph-cache-unpriv-")
        .tempdir()
        .unwrap();
    let root = root.path().canonicalize().unwrap();
    let (home, agents) = (root.join("home"), root.join("agents"));
    for d in [&home, &agents] {
        std::fs::create_dir_all(d).unwrap();
    }
    // The binary under test, where the unprivileged user can run it.
    let exe = root.join("ralph");
    std::fs::copy(ralph_bin(), &exe).unwrap();
    let agent = agents.join("agent.sh");
    std::fs::write(
        &agent,
        format!(
            "#!/bin/sh\ncd \"$RALPH_WORKSPACE\"\nls \"$HOME/.cache/x\" > seen.txt 2>&1\necho poisoned > \"$HOME/.cache/x/from-round\"\nmkdir -p \"$HOME/.cache/other\" && echo ok > \"$HOME/.cache/other/f\" && echo beside-ok >> seen.txt\necho '{}' > \"$RALPH_REPORT_FILE\"\n",
            complete_report("looked at the cache")
        ),
    )
    .unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |ws: &str| {
        let ws = root.join(ws);
        std::fs::create_dir_all(&ws).unwrap();
        for p in [&root, &ws, &home, &agents, &agent] {
            nix::unistd::chown(p, Some(user.uid), Some(user.gid)).unwrap();
        }
        let mut c = std::process::Command::new("setpriv");
        c.args([
            "--reuid",
            &user.uid.to_string(),
            "--regid",
            &user.gid.to_string(),
        ])
        .args(["--clear-groups", "--"])
        .arg(&exe)
        .args(["run", "--objective", "x", "--json", "--mode", TEST_MODE])
        .arg("--workspace")
        .arg(&ws)
        .arg("--state-dir")
        .arg(root.join("state"))
        .arg("--read")
        .arg(&agents)
        .arg("--agent-cmd")
        .arg(&agent)
        .args(["--cache", "~/.cache/x", "--cache-key", "unpriv"])
        .args([
            "--setup",
            "echo from-setup > \"$HOME/.cache/x/kept-$RALPH_JOB_ID\"",
        ])
        .args(["--toolchain", "none"])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &home);
        let out = c.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: Value = serde_json::from_str(&stdout).unwrap();
        (j, std::fs::read_to_string(ws.join("seen.txt")).unwrap())
    };
    let (j1, seen1) = run("ws1");
    let job1 = j1["job_id"].as_str().unwrap().to_owned();
    assert!(seen1.contains(&format!("kept-{job1}")), "{seen1}");
    assert!(seen1.contains("beside-ok"), "{seen1}");
    let (_, seen2) = run("ws2");
    assert!(seen2.contains(&format!("kept-{job1}")), "a hit: {seen2}");
    assert!(!seen2.contains("from-round"), "{seen2}");
    let store = root.join("state/caches");
    assert!(found(&store, "from-round").is_empty());
    assert!(!found(&store, &format!("kept-{job1}")).is_empty());
}
