//! The host boundary against planted symlinks (SPEC §5 "The host boundary"): a symlink one run
//! leaves where a protected path (`.git/hooks`, `.git/config`, `.ralph`, a `--protect` path) or
//! one of its parents should be must never become a way into the host for the next run, nor
//! steer what the runner does on the host (placeholders, clean-up, mounts).
//!
//! The cases are data ([`CASES`]): where the link is planted and what the workspace holds
//! around it. Each runs against each target a round would aim at ([`Target`]: a host directory
//! holding a live unix socket, the host's own `/run` with the engine's socket, the runner's state
//! directory), on each backend (native, docker), with the workspace owned by the runner and by
//! an unprivileged user, in two ways:
//! - the link is already there when a run starts (left by an earlier run): the run is refused
//!   (exit 64, naming the link), nothing is mounted, created or removed through it;
//! - a run plants it: it is removed after that run (reported), and a second run that tries to
//!   use it reaches nothing.
//!
//! Every check is on the host: the target's contents unchanged, no connection accepted on the
//! socket, no link left. `ralph_run_*` do the same across two rounds of one job.
//!
//! Run as root (`cargo test`) and, for the native backend, again as the unprivileged `ralph-ci`
//! (`.ci/run` runs this binary's `native` tests as that user).

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use common::Ralph;

/// The probe (`tests/probe/main.rs`), run inside the sandbox.
fn probe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph-probe"))
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Native,
    Docker,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Native => "native",
            Backend::Docker => "docker",
        }
    }
}

/// Who owns the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// The user running the tests.
    Runner,
    /// The unprivileged `ralph-ci` user (root runs only).
    Unprivileged,
}

/// What a planted link points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A host directory the sandbox never sees, with a live unix socket (`docker.sock`), a
    /// `commondir/` directory and a file.
    HostDir,
    /// The host's `/run`, where the engine's socket lives.
    Run,
    /// The runner's own state directory (journal, artifacts).
    StateDir,
}

/// One place a round can plant a link.
struct Case {
    name: &'static str,
    /// The link, relative to the workspace.
    link: &'static str,
    /// Directories made in the workspace first.
    dirs: &'static [&'static str],
    /// `--protect` paths of the runs.
    protect: &'static [&'static str],
}

const CASES: &[Case] = &[
    // The issue's case: no repository, `.git` -> somewhere.
    Case {
        name: "git_dir",
        link: ".git",
        dirs: &[],
        protect: &[],
    },
    Case {
        name: "git_hooks",
        link: ".git/hooks",
        dirs: &[".git"],
        protect: &[],
    },
    Case {
        name: "git_config",
        link: ".git/config",
        dirs: &[".git"],
        protect: &[],
    },
    Case {
        name: "ralph_dir",
        link: ".ralph",
        dirs: &[],
        protect: &[],
    },
    // A `--protect`ed path below a link.
    Case {
        name: "protect_parent",
        link: "tests",
        dirs: &[],
        protect: &["tests/unit"],
    },
    // A `--protect`ed path that is the link.
    Case {
        name: "protect_itself",
        link: "spec",
        dirs: &[],
        protect: &["spec"],
    },
];

/// A throw-away world: `ws/` (the workspace), `host/` (a directory the sandbox never sees),
/// `state/` (a state directory).
struct World {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    host: PathBuf,
    state: PathBuf,
    /// Listening on `host/docker.sock`.
    listener: UnixListener,
}

impl World {
    fn new(owner: Owner) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-hb-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, host, state) = (root.join("ws"), root.join("host"), root.join("state"));
        for d in [&ws, &host, &state, &host.join("commondir")] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(host.join("keep"), "host\n").unwrap();
        std::fs::write(host.join("commondir/keep"), "host\n").unwrap();
        std::fs::write(state.join("journal"), "runner state\n").unwrap();
        let listener = UnixListener::bind(host.join("docker.sock")).unwrap();
        listener.set_nonblocking(true).unwrap();
        // The root directory is traversable by the workspace's owner (a container user).
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        if owner == Owner::Unprivileged {
            let (uid, gid) = unprivileged().unwrap();
            std::os::unix::fs::chown(&ws, Some(uid), Some(gid)).unwrap();
        }
        Self {
            _dir: dir,
            ws,
            host,
            state,
            listener,
        }
    }

    fn target(&self, t: Target) -> PathBuf {
        match t {
            Target::HostDir => self.host.clone(),
            Target::Run => PathBuf::from("/run"),
            Target::StateDir => self.state.clone(),
        }
    }

    fn setup(&self, case: &Case) {
        for d in case.dirs {
            std::fs::create_dir_all(self.ws.join(d)).unwrap();
            chown_like_ws(&self.ws, &self.ws.join(d));
        }
    }
}

fn chown_like_ws(ws: &Path, p: &Path) {
    let m = std::fs::metadata(ws).unwrap();
    if is_root() {
        std::os::unix::fs::lchown(p, Some(m.uid()), Some(m.gid())).unwrap();
    }
}

/// The uid and gid of `ralph-ci` (created by `.ci/setup`).
fn unprivileged() -> Option<(u32, u32)> {
    let u = nix::unistd::User::from_name("ralph-ci").ok().flatten()?;
    Some((u.uid.as_raw(), u.gid.as_raw()))
}

/// What a run could have added to a directory through a link (for directories that change on
/// their own: the host's `/run`, a state directory in use).
fn markers(dir: &Path) -> BTreeMap<String, String> {
    ["hooks", "config", "pwned", "commondir", "unit"]
        .iter()
        .map(|name| {
            let there = dir.join(name).symlink_metadata().is_ok();
            ((*name).to_owned(), format!("{there:?}"))
        })
        .collect()
}

/// Everything under a directory the test made (names, kinds and small file contents), or, for
/// the host's `/run`, only what a run could have added to it through a link.
fn snapshot(dir: &Path, t: Target) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if t == Target::Run {
        return markers(dir);
    }
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().display().to_string();
            let m = p.symlink_metadata().unwrap();
            let what = if m.is_dir() {
                walk(base, &p, out);
                format!("dir {:o}", m.mode() & 0o7777)
            } else if m.is_file() {
                format!("file {}", std::fs::read_to_string(&p).unwrap_or_default())
            } else {
                format!("{:?}", m.file_type())
            };
            out.insert(rel, what);
        }
    }
    walk(dir, dir, &mut out);
    out
}

fn no_connection(w: &World) -> Result<(), String> {
    match w.listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Ok(_) => Err("a sandboxed command connected to the host's socket".into()),
        Err(e) => Err(format!("accept: {e}")),
    }
}

/// `ralph sandbox exec` on the world's workspace.
fn exec(backend: Backend, w: &World, case: &Case, script: &str, args: &[&Path]) -> common::Output {
    let mut r = Ralph::new()
        .args(["sandbox", "exec", "--backend", backend.name()])
        .arg("--workspace")
        .arg(&w.ws)
        .arg("--read")
        .arg(probe().parent().unwrap());
    for p in case.protect {
        r = r.arg("--protect").arg(p);
    }
    r = r.args(["--", "/bin/sh", "-c", script]).arg(probe());
    for a in args {
        r = r.arg(a);
    }
    r.output()
}

/// What a second run tries through a link at `$1`: the engine socket (or the host socket), and
/// writes of hooks, config and a marker. It never fails itself; the host is what is checked.
const EXPLOIT: &str = r#"
"$0" unix-connect "$1/docker.sock" >&2
mkdir -p "$1/hooks" "$1/unit" 2>/dev/null
echo pwned > "$1/config" 2>/dev/null
echo pwned > "$1/pwned" 2>/dev/null
exit 0
"#;

/// What a planting run does: `ln -s TARGET LINK`.
const PLANT: &str = r#"ln -s "$1" "$2" 2>&1; exit 0"#;

fn check_host(
    w: &World,
    t: Target,
    before: &BTreeMap<String, String>,
    what: &str,
) -> Result<(), String> {
    let after = snapshot(&w.target(t), t);
    if &after != before {
        return Err(format!(
            "{what}: the host target changed:\n  before {before:?}\n  after  {after:?}"
        ));
    }
    no_connection(w).map_err(|e| format!("{what}: {e}"))
}

/// A link already in the workspace when a run starts: refused, nothing done through it.
fn preplanted(backend: Backend, owner: Owner, case: &Case, t: Target) -> Result<(), String> {
    let w = World::new(owner);
    w.setup(case);
    let target = w.target(t);
    let before = snapshot(&target, t);
    let link = w.ws.join(case.link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    chown_like_ws(&w.ws, &link);
    let out = exec(backend, &w, case, EXPLOIT, &[&link]);
    if out.code != 64
        || !out
            .stderr
            .contains(&format!("`{}` is a symlink", link.display()))
    {
        return Err(format!(
            "a run on a workspace with `{}` -> {}: want exit 64 naming the link, got {}: {}",
            case.link,
            target.display(),
            out.code,
            out.stderr.trim()
        ));
    }
    check_host(&w, t, &before, "refused run")?;
    // A refused run leaves the user's link as it was.
    if std::fs::read_link(&link).ok() != Some(target) {
        return Err("the refused run changed the link".into());
    }
    Ok(())
}

/// A link planted by one run: removed after it; a second run reaches nothing through it.
fn planted(backend: Backend, owner: Owner, case: &Case, t: Target) -> Result<(), String> {
    let w = World::new(owner);
    w.setup(case);
    let target = w.target(t);
    let before = snapshot(&target, t);
    let link = w.ws.join(case.link);
    let out = exec(backend, &w, case, PLANT, &[&target, &link]);
    if out.code != 0 {
        return Err(format!(
            "the planting run: exit {}: {}",
            out.code,
            out.stderr.trim()
        ));
    }
    if link
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        return Err(format!(
            "the link `{}` planted by a run is still there after it; stderr: {}",
            link.display(),
            out.stderr.trim()
        ));
    }
    let exploit = exec(backend, &w, case, EXPLOIT, &[&link]);
    if exploit.code != 0 {
        return Err(format!(
            "the second run: exit {}: {}",
            exploit.code,
            exploit.stderr.trim()
        ));
    }
    if exploit.stderr.contains(r#""ok":true"#) {
        return Err(format!(
            "the second run connected to `{}/docker.sock`: {}",
            link.display(),
            exploit.stderr.trim()
        ));
    }
    check_host(&w, t, &before, "after two runs")
}

fn owners() -> Vec<Owner> {
    if !is_root() {
        return vec![Owner::Runner];
    }
    match unprivileged() {
        Some(_) => vec![Owner::Runner, Owner::Unprivileged],
        None if std::env::var_os("CI").is_some() => {
            panic!("CI is set but the user ralph-ci is missing (.ci/setup creates it)")
        }
        None => {
            eprintln!("host_boundary: no user ralph-ci: the unprivileged owner is not tested");
            vec![Owner::Runner]
        }
    }
}

fn run_all(backend: Backend) {
    let mut failures = Vec::new();
    let mut runs = 0;
    for owner in owners() {
        for case in CASES {
            for t in [Target::HostDir, Target::Run, Target::StateDir] {
                for (how, f) in [
                    ("preplanted", preplanted as fn(_, _, _, _) -> _),
                    ("planted", planted),
                ] {
                    runs += 1;
                    if let Err(e) = f(backend, owner, case, t) {
                        failures.push(format!(
                            "{}/{owner:?}/{}/{t:?}/{how}: {e}",
                            backend.name(),
                            case.name
                        ));
                    }
                }
            }
        }
    }
    eprintln!(
        "host_boundary {}: {runs} case runs, {} failed",
        backend.name(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn native_planted_links_never_reach_the_host() {
    run_all(Backend::Native);
}

#[test]
fn docker_planted_links_never_reach_the_host() {
    if !is_root() || !common::docker::ready("docker_planted_links_never_reach_the_host") {
        return;
    }
    run_all(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// Through `ralph run`: two rounds of one job
// ---------------------------------------------------------------------------------------------

/// Round 1, attempt 1 plants `.git -> $1`; round 2 tries to use it; every attempt reports.
const TWO_ROUNDS: &str = r#"
if [ "$RALPH_ROUND" = 1 ] && [ "$RALPH_ATTEMPT" = 1 ]; then ln -s "$1" "$RALPH_WORKSPACE/.git"; fi
if [ "$RALPH_ROUND" = 2 ]; then
  "$0" unix-connect "$RALPH_WORKSPACE/.git/docker.sock" >&2
  cat "$RALPH_WORKSPACE/.git/journal" >&2 2>/dev/null
  echo pwned > "$RALPH_WORKSPACE/.git/pwned" 2>/dev/null
  mkdir -p "$RALPH_WORKSPACE/.git/hooks" 2>/dev/null
  printf '{"status":"complete","summary":"done","evidence":["round 2 ran"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
else
  printf '{"status":"continue","summary":"round 1","evidence":[],"nextSteps":["round 2"],"blocker":""}' > "$RALPH_REPORT_FILE"
fi
"#;

fn ralph_run_two_rounds(backend: Backend, t: Target) {
    let w = World::new(Owner::Runner);
    let target = w.target(t);
    // The state directory is the run's own: it changes as the job runs.
    let state = w.state.clone();
    let before = markers(&target);
    let cmd = format!(
        "/bin/sh -c '{}' {} {}",
        TWO_ROUNDS.replace('\'', r"'\''"),
        probe().display(),
        target.display()
    );
    let out = Ralph::new()
        .args([
            "run",
            "--objective",
            "o",
            "--json",
            "--retry-backoff",
            "10ms",
        ])
        .args(["--backend", backend.name(), "--max-rounds", "2"])
        .arg("--workspace")
        .arg(&w.ws)
        .arg("--state-dir")
        .arg(&state)
        .arg("--read")
        .arg(probe().parent().unwrap())
        .arg("--agent-cmd")
        .arg(&cmd)
        .output();
    // Round 1's first attempt is failed and retried; round 2 finds nothing to use.
    out.expect_code(0);
    let job = out.job_id();
    let store = ralph_runner::store::Store::open_sqlite(&state).unwrap();
    let events: Vec<serde_json::Value> = store
        .events(&job)
        .unwrap()
        .into_iter()
        .map(|e| serde_json::to_value(&e).unwrap())
        .collect();
    let tampered: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "round_finished" && e["result"]["reason"] == "workspace_tampered")
        .collect();
    assert_eq!(tampered.len(), 1, "{events:#?}");
    let message = tampered[0]["result"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("`{}`", w.ws.join(".git").display()))
            && message.contains("symlink"),
        "{message}"
    );
    assert_eq!(tampered[0]["round"], 1);
    assert!(
        w.ws.join(".git").symlink_metadata().is_err()
            || !w
                .ws
                .join(".git")
                .symlink_metadata()
                .unwrap()
                .file_type()
                .is_symlink(),
        "the link survived"
    );
    assert_eq!(markers(&target), before, "the host target changed");
    no_connection(&w).unwrap();
    if t == Target::HostDir {
        assert_eq!(snapshot(&target, t).len(), 4, "{:?}", snapshot(&target, t));
    }
}

#[test]
fn native_ralph_run_a_planted_git_link_fails_the_round_and_reaches_nothing() {
    for t in [Target::HostDir, Target::Run, Target::StateDir] {
        ralph_run_two_rounds(Backend::Native, t);
    }
}

#[test]
fn docker_ralph_run_a_planted_git_link_fails_the_round_and_reaches_nothing() {
    if !is_root() || !common::docker::ready("docker_ralph_run_planted_git_link") {
        return;
    }
    for t in [Target::HostDir, Target::Run, Target::StateDir] {
        ralph_run_two_rounds(Backend::Docker, t);
    }
}

#[test]
fn a_protect_path_outside_the_workspace_is_refused_and_creates_nothing() {
    let w = World::new(Owner::Runner);
    for p in ["/var/tmp/ralph-hb-never", "../host/new"] {
        let out = Ralph::new()
            .args(["sandbox", "exec", "--protect", p])
            .arg("--workspace")
            .arg(&w.ws)
            .args(["--", "/bin/true"])
            .output();
        assert_eq!(out.code, 64, "{p}: {}", out.stderr);
        assert!(out.stderr.contains("protect"), "{}", out.stderr);
    }
    assert!(!Path::new("/var/tmp/ralph-hb-never").exists());
    assert!(!w.host.join("new").exists());
}

/// A link already in the workspace refuses the job before round 1: exit 64, no round started,
/// the message names the link, nothing created through it.
fn ralph_run_preplanted(backend: Backend) {
    let w = World::new(Owner::Runner);
    let before = snapshot(&w.host, Target::HostDir);
    let link = w.ws.join(".git");
    std::os::unix::fs::symlink(&w.host, &link).unwrap();
    let out = Ralph::new()
        .args(["run", "--objective", "o", "--json"])
        .args(["--backend", backend.name()])
        .arg("--workspace")
        .arg(&w.ws)
        .arg("--state-dir")
        .arg(&w.state)
        .args(["--agent-cmd", "true"])
        .output();
    out.expect_code(64);
    let result = out.json();
    assert_eq!(result["outcome"], "error", "{result:#}");
    assert_eq!(result["reason"], "configuration", "{result:#}");
    assert_eq!(result["rounds"], 0, "{result:#}");
    let message = result["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("`{}` is a symlink", link.display())),
        "{message}"
    );
    assert_eq!(snapshot(&w.host, Target::HostDir), before);
    assert_eq!(std::fs::read_link(&link).unwrap(), w.host);
}

#[test]
fn native_ralph_run_refuses_a_preplanted_link_before_round_1() {
    ralph_run_preplanted(Backend::Native);
}

#[test]
fn docker_ralph_run_refuses_a_preplanted_link_before_round_1() {
    if !is_root() || !common::docker::ready("docker_ralph_run_refuses_a_preplanted_link") {
        return;
    }
    ralph_run_preplanted(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// Protected paths hold in fact: hard links, changes by any route
// ---------------------------------------------------------------------------------------------

/// A hard link made by an earlier run (when `tests` was not protected) would write into a file
/// that is protected now: the run is refused (64) before anything runs, naming the file.
fn hard_link_from_an_earlier_run(backend: Backend) {
    let w = World::new(Owner::Runner);
    std::fs::create_dir(w.ws.join("tests")).unwrap();
    std::fs::write(w.ws.join("tests/test_a.sh"), "exit 1\n").unwrap();
    let case = Case {
        name: "hard_link",
        link: "",
        dirs: &[],
        protect: &[],
    };
    let first = exec(
        backend,
        &w,
        &case,
        r#"ln "$1/tests/test_a.sh" "$1/alias""#,
        &[&w.ws],
    );
    assert_eq!(first.code, 0, "{}", first.stderr);
    let protect = Case {
        protect: &["tests"],
        ..case
    };
    let second = exec(
        backend,
        &w,
        &protect,
        r#"echo 'exit 0' > "$1/alias""#,
        &[&w.ws],
    );
    assert_eq!(second.code, 64, "{}", second.stderr);
    assert!(
        second.stderr.contains("tests/test_a.sh") && second.stderr.contains("hard links"),
        "{}",
        second.stderr
    );
    assert_eq!(
        std::fs::read_to_string(w.ws.join("tests/test_a.sh")).unwrap(),
        "exit 1\n"
    );
}

#[test]
fn native_a_hard_link_from_an_earlier_run_is_refused() {
    hard_link_from_an_earlier_run(Backend::Native);
}

#[test]
fn docker_a_hard_link_from_an_earlier_run_is_refused() {
    if !is_root() || !common::docker::ready("docker_a_hard_link_from_an_earlier_run_is_refused") {
        return;
    }
    hard_link_from_an_earlier_run(Backend::Docker);
}

/// A protected file changed during a run by a route the mounts do not cover (here: a process on
/// the host, the stand-in for any such route) is found after the run, restored, and reported.
fn changed_during_the_run(backend: Backend) {
    let w = World::new(Owner::Runner);
    std::fs::create_dir_all(w.ws.join(".git/hooks")).unwrap();
    std::fs::write(w.ws.join(".git/config"), "[core]\n").unwrap();
    let (started, go) = (w.ws.join("started"), w.ws.join("go"));
    let child = Ralph::new()
        .args(["sandbox", "exec", "--backend", backend.name()])
        .arg("--workspace")
        .arg(&w.ws)
        .args(["--timeout", "60s", "--", "/bin/sh", "-c"])
        .arg(r#"touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&started)
        .arg(&go)
        .spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::fs::write(w.ws.join(".git/config"), "[core]\n\tfsmonitor = evil\n").unwrap();
    std::fs::write(w.ws.join(".git/hooks/post-checkout"), "evil\n").unwrap();
    std::fs::write(&go, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(w.ws.join(".git/config")).unwrap(),
        "[core]\n",
        "not restored; stderr: {stderr}"
    );
    assert!(!w.ws.join(".git/hooks/post-checkout").exists(), "{stderr}");
    assert!(
        stderr.contains(".git/config") && stderr.contains("restored"),
        "{stderr}"
    );
}

#[test]
fn native_a_protected_file_changed_during_the_run_is_restored() {
    changed_during_the_run(Backend::Native);
}

#[test]
fn docker_a_protected_file_changed_during_the_run_is_restored() {
    if !is_root() || !common::docker::ready("docker_a_protected_file_changed_during_the_run") {
        return;
    }
    changed_during_the_run(Backend::Docker);
}
