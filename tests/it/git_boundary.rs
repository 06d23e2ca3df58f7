//! The git boundary (SPEC §5, "Git:"): a sandboxed run may create repositories anywhere it can
//! write and arm them — `core.fsmonitor`, hooks, `core.hooksPath`, a filter, `diff.external`, an
//! alias, `include.path`, `includeIf`, `core.sshCommand` — so that the user's next plain `git`
//! on the host runs its command. After the run, none of it may be left.
//!
//! Every case is data ([`cases`]): what the workspace holds first, the hostile script the run
//! executes, and where the host's git is then run. Each case runs
//! - once directly on the host, unsandboxed (the *control*): the host's git commands must then
//!   write the marker with every payload the case expects, which proves that the payloads work
//!   and the case can fail;
//! - with `ralph sandbox exec` on each backend (native; docker as root with an engine): the same
//!   host git commands (`git status`, `git add`, `git commit`, `git diff`, `git submodule
//!   status`, the aliases, `git fetch`) must never write the marker, the repositories must still
//!   work, and `ralph sandbox exec` names each repository it made safe on stderr.
//!
//! Then what must keep working (a round that starts a project keeps its commits; commits in the
//! workspace's own repository are not touched) and the same through `ralph run`: the
//! `workspace_sanitized` event, the next round's prompt, the originals in the round's
//! artifacts, the metric.
//!
//! The marker lives outside every tree the runs can see; nothing here waits on time, only on
//! the processes it runs.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::{Fixture, Ralph};
use serde_json::Value;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The host's git.
fn git() -> Option<PathBuf> {
    ["/usr/local/bin/git", "/usr/bin/git"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
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

/// A throw-away world: `ws/` (the workspace), `cache/` (a `--write` directory), `out/` (where
/// the marker goes: no run sees it), `home/` (the host git's empty `HOME`).
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    cache: PathBuf,
    home: PathBuf,
    marker: PathBuf,
}

impl World {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-git-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, cache, out, home) = (
            root.join("ws"),
            root.join("cache"),
            root.join("out"),
            root.join("home"),
        );
        for d in [&ws, &cache, &out, &home] {
            std::fs::create_dir(d).unwrap();
        }
        Self {
            _dir: dir,
            marker: out.join("marker"),
            root,
            ws,
            cache,
            home,
        }
    }

    /// `$C/…` is below the `--write` directory, anything else below the workspace.
    fn path(&self, p: &str) -> PathBuf {
        match p.strip_prefix("$C/") {
            Some(rest) => self.cache.join(rest),
            None if p == "." => self.ws.clone(),
            None => self.ws.join(p),
        }
    }

    /// What the marker says (the tags of the payloads that ran), in order.
    fn fired(&self) -> Vec<String> {
        std::fs::read_to_string(&self.marker)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The host's git in `dir`, as a user would run it: no system or global configuration of its
/// own, an identity for commits. Its status is returned, never asserted here.
fn host_git(w: &World, dir: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(git().unwrap())
        .args([
            "-c",
            "user.name=host",
            "-c",
            "user.email=host@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", &w.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = format!(
        "$ git {} (in {}) -> {}\n{}{}",
        args.join(" "),
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Where the host's git is run after a case, and how.
#[derive(Clone, Copy, Debug)]
enum Host {
    /// A work tree: status, add, commit, diff, the aliases, fetch.
    Worktree(&'static str),
    /// The workspace's own repository with a submodule: status and `git submodule status`.
    Superproject(&'static str),
    /// A bare repository: the aliases, fetch, a branch.
    Bare(&'static str),
}

/// Runs the host's git commands of `h`; returns whether `git status` (or `git log` in a bare
/// repository) worked, and the transcript.
fn run_host(w: &World, h: Host) -> (bool, String) {
    let mut log = String::new();
    let mut run = |dir: &Path, args: &[&str]| {
        let (ok, text) = host_git(w, dir, args);
        log.push_str(&text);
        ok
    };
    let works = match h {
        Host::Worktree(p) => {
            let dir = w.path(p);
            std::fs::write(dir.join("host.txt"), "host\n").unwrap();
            let works = run(&dir, &["status", "--short"]);
            run(&dir, &["add", "-A"]);
            run(&dir, &["commit", "-q", "-m", "host commit"]);
            std::fs::write(dir.join("host.txt"), "host, changed\n").unwrap();
            run(&dir, &["diff"]);
            for alias in ["lg", "inc", "incif"] {
                run(&dir, &[alias]);
            }
            run(&dir, &["fetch", "-q", "origin"]);
            works
        }
        Host::Superproject(p) => {
            let dir = w.path(p);
            let works = run(&dir, &["status", "--short"]);
            run(&dir, &["submodule", "status"]);
            works
        }
        Host::Bare(p) => {
            let dir = w.path(p);
            let works = run(&dir, &["log", "--oneline", "-1"]);
            for alias in ["lg", "inc", "incif"] {
                run(&dir, &[alias]);
            }
            run(&dir, &["fetch", "-q", "origin"]);
            run(&dir, &["branch", "host-branch"]);
            works
        }
    };
    (works, log)
}

/// What every hostile script starts with: `$1` is the marker, `$2` the `--write` directory.
/// `.payload` appends its first argument to the marker (and passes data through when it stands
/// in for a filter); `arm DIR` points every command-carrying setting and hook of the git
/// directory DIR at it; `arm_hookspath DIR` sets `core.hooksPath` to agent-made hooks; `attrs
/// DIR` routes every file of a work tree through the `evil` filter.
const PRELUDE: &str = r#"set -e
M=$1; C=$2; W=$PWD; P=$W/.payload
printf '#!/bin/sh\necho "$1" >> "%s"\ncase "$1" in filter-*) cat ;; esac\nexit 0\n' "$M" > "$P"
chmod 755 "$P"
printf '[alias]\n\tinc = !%s include\n' "$P" > "$W/.evil-include"
printf '[alias]\n\tincif = !%s includeif\n' "$P" > "$W/.evil-includeif"
mkdir -p "$W/.evil-hooks"
printf '#!/bin/sh\n%s hookspath\nexit 0\n' "$P" > "$W/.evil-hooks/pre-commit"
chmod 755 "$W/.evil-hooks/pre-commit"
g() { git -c user.name=agent -c user.email=agent@example.invalid -c init.defaultBranch=main "$@"; }
arm() {
  c() { git --git-dir="$1" config "$2" "$3"; }
  c "$1" core.fsmonitor "$P fsmonitor"
  c "$1" alias.lg "!$P alias"
  c "$1" filter.evil.clean "$P filter-clean"
  c "$1" diff.external "$P diff-external"
  c "$1" core.sshCommand "$P ssh"
  c "$1" remote.origin.url "ssh://example.invalid/x"
  c "$1" include.path "$W/.evil-include"
  c "$1" includeIf.gitdir:/.path "$W/.evil-includeif"
  mkdir -p "$1/hooks"
  for h in pre-commit post-commit reference-transaction; do
    printf '#!/bin/sh\n%s hook-%s\nexit 0\n' "$P" "$h" > "$1/hooks/$h"
    chmod 755 "$1/hooks/$h"
  done
}
arm_hookspath() { git --git-dir="$1" config core.hooksPath "$W/.evil-hooks"; }
attrs() { printf '* filter=evil\n' > "$1/.gitattributes"; }
newrepo() { mkdir -p "$1"; g -C "$1" init -q; echo a > "$1/a.txt"; g -C "$1" add a.txt; g -C "$1" commit -q -m agent; }
"#;

/// What the host's git runs in an armed work tree.
const WORKTREE_TAGS: &[&str] = &[
    "fsmonitor",
    "filter-clean",
    "hook-pre-commit",
    "hook-reference-transaction",
    "hook-post-commit",
    "diff-external",
    "alias",
    "include",
    "includeif",
    "ssh",
];

/// What the host's git runs in an armed bare repository.
const BARE_TAGS: &[&str] = &[
    "alias",
    "include",
    "includeif",
    "ssh",
    "hook-reference-transaction",
];

/// One attack.
struct Case {
    name: &'static str,
    /// What the workspace holds before the run (made on the host).
    setup: fn(&World),
    /// The hostile script (after [`PRELUDE`]).
    script: &'static str,
    /// Whether the run gets `--write cache`.
    write_dir: bool,
    /// Where the host's git runs afterwards.
    host: &'static [Host],
    /// What the control run's host git must fire (at least).
    tags: &'static [&'static str],
    /// The repositories `ralph sandbox exec` must report made safe.
    sanitized: &'static [&'static str],
}

fn nothing(_: &World) {}

/// The workspace holds a repository of the user's with one commit.
fn user_repo(w: &World) {
    host_ok(w, &w.ws, &["init", "-q", "-b", "main"]);
    std::fs::write(w.ws.join("README"), "user\n").unwrap();
    host_ok(w, &w.ws, &["add", "README"]);
    host_ok(w, &w.ws, &["commit", "-q", "-m", "user commit"]);
}

/// The user's repository with a submodule `lib` (from a repository outside the workspace).
fn user_repo_with_submodule(w: &World) {
    let up = w.root.join("upstream");
    std::fs::create_dir(&up).unwrap();
    host_ok(w, &up, &["init", "-q", "-b", "main"]);
    std::fs::write(up.join("lib.txt"), "lib\n").unwrap();
    host_ok(w, &up, &["add", "lib.txt"]);
    host_ok(w, &up, &["commit", "-q", "-m", "lib"]);
    user_repo(w);
    host_ok(
        w,
        &w.ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            up.to_str().unwrap(),
            "lib",
        ],
    );
    host_ok(w, &w.ws, &["commit", "-q", "-m", "submodule"]);
    assert!(w.ws.join(".git/modules/lib/config").is_file());
}

/// The user's repository in `sub/`, nested in the workspace (no repository at the top).
fn user_nested_repo(w: &World) {
    let sub = w.ws.join("sub");
    std::fs::create_dir(&sub).unwrap();
    host_ok(w, &sub, &["init", "-q", "-b", "main"]);
    std::fs::write(sub.join("a.txt"), "user\n").unwrap();
    host_ok(w, &sub, &["add", "a.txt"]);
    host_ok(w, &sub, &["commit", "-q", "-m", "user commit"]);
}

fn host_ok(w: &World, dir: &Path, args: &[&str]) {
    let (ok, text) = host_git(w, dir, args);
    assert!(ok, "{text}");
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "nested_new_repos",
            setup: user_repo,
            script: "newrepo sub; arm sub/.git; attrs sub\nnewrepo sub2; arm_hookspath sub2/.git\n",
            write_dir: false,
            host: &[Host::Worktree("sub"), Host::Worktree("sub2")],
            tags: &[
                "fsmonitor",
                "filter-clean",
                "hook-pre-commit",
                "hook-reference-transaction",
                "hook-post-commit",
                "diff-external",
                "alias",
                "include",
                "includeif",
                "ssh",
                "hookspath",
            ],
            sanitized: &["sub/.git", "sub2/.git"],
        },
        Case {
            name: "new_top_level_repo",
            setup: nothing,
            script: "newrepo .; arm .git; attrs .\n",
            write_dir: false,
            host: &[Host::Worktree(".")],
            tags: WORKTREE_TAGS,
            sanitized: &[".git"],
        },
        Case {
            name: "submodule_of_the_workspace_repo",
            setup: user_repo_with_submodule,
            script: "arm .git/modules/lib; attrs lib\n",
            write_dir: false,
            host: &[Host::Superproject("."), Host::Worktree("lib")],
            tags: WORKTREE_TAGS,
            sanitized: &[".git/modules/lib"],
        },
        Case {
            name: "git_file_to_an_agent_made_gitdir",
            setup: user_repo,
            script: "mkdir proj .store; g -C proj init -q --separate-git-dir \"$W/.store/g\"\n\
                     echo a > proj/a.txt; g -C proj add a.txt; g -C proj commit -q -m agent\n\
                     arm .store/g; attrs proj\n",
            write_dir: false,
            host: &[Host::Worktree("proj")],
            tags: WORKTREE_TAGS,
            sanitized: &[".store/g"],
        },
        Case {
            name: "bare_repo",
            setup: user_repo,
            script: "newrepo p0; mkdir -p srv; g clone -q --bare p0 srv/r.git; rm -rf p0\n\
                     arm srv/r.git\n",
            write_dir: false,
            host: &[Host::Bare("srv/r.git")],
            tags: BARE_TAGS,
            sanitized: &["srv/r.git"],
        },
        Case {
            name: "repo_in_a_write_dir",
            setup: user_repo,
            script: "newrepo \"$C/r\"; arm \"$C/r/.git\"; attrs \"$C/r\"\n",
            write_dir: true,
            host: &[Host::Worktree("$C/r")],
            tags: WORKTREE_TAGS,
            sanitized: &["$C/r/.git"],
        },
        Case {
            name: "existing_nested_repo_replaced",
            setup: user_nested_repo,
            script: "rm -rf sub/.git; newrepo sub; arm sub/.git; attrs sub\n",
            write_dir: false,
            host: &[Host::Worktree("sub")],
            tags: WORKTREE_TAGS,
            sanitized: &["sub/.git"],
        },
    ]
}

fn script(case: &Case) -> String {
    format!("{PRELUDE}{}exit 0\n", case.script)
}

/// The case run directly on the host: the payloads must fire.
fn control(case: &Case) -> Result<(), String> {
    let w = World::new();
    (case.setup)(&w);
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(script(case))
        .arg("sh")
        .arg(&w.marker)
        .arg(&w.cache)
        .current_dir(&w.ws)
        .env("HOME", &w.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(format!(
            "the script failed on the host: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if w.marker.exists() {
        return Err(format!(
            "the script itself wrote the marker: {:?}",
            w.fired()
        ));
    }
    let mut log = String::new();
    for h in case.host {
        log.push_str(&run_host(&w, *h).1);
    }
    let fired: BTreeSet<String> = w.fired().into_iter().collect();
    let missing: Vec<&&str> = case.tags.iter().filter(|t| !fired.contains(**t)).collect();
    if !missing.is_empty() {
        return Err(format!(
            "unsandboxed, the host's git did not run {missing:?} (it ran {fired:?}): the case proves nothing\n{log}"
        ));
    }
    Ok(())
}

fn exec(backend: Backend, w: &World, case: &Case) -> common::Output {
    let mut r = Ralph::new()
        .args(["sandbox", "exec", "--backend", backend.name()])
        .arg("--workspace")
        .arg(&w.ws);
    if case.write_dir {
        r = r.arg("--write").arg(&w.cache);
    }
    let args: Vec<OsString> = vec![
        "/bin/sh".into(),
        "-c".into(),
        script(case).into(),
        "sh".into(),
        w.marker.clone().into(),
        w.cache.clone().into(),
    ];
    r.arg("--").args(args).output()
}

/// Checks that every "originals in DIR" that `ralph sandbox exec` printed holds a manifest, and
/// removes those kept directories (`ralph-sanitized-*` under the temporary directory).
fn check_and_remove_kept_originals(stderr: &str) -> Result<(), String> {
    let kept = common::kept_originals(stderr);
    for part in stderr.split("originals in ").skip(1) {
        let dir = PathBuf::from(part.split_whitespace().next().unwrap_or_default());
        if !dir.join("manifest.json").is_file() {
            return Err(format!(
                "no manifest in the kept originals {}",
                dir.display()
            ));
        }
        if !dir.parent().is_some_and(|p| kept.iter().any(|k| k == p)) {
            return Err(format!(
                "the kept originals {} are not in a ralph-sanitized-* directory",
                dir.display()
            ));
        }
    }
    common::remove_kept_originals(stderr);
    Ok(())
}

/// The case sandboxed: the host's git runs nothing of the run's, and the repositories work.
fn sandboxed(backend: Backend, case: &Case) -> Result<(), String> {
    let w = World::new();
    (case.setup)(&w);
    let out = exec(backend, &w, case);
    if out.code != 0 {
        return Err(format!("exit {}: {}", out.code, out.stderr.trim()));
    }
    // First what matters: the host's git runs nothing of the run's, and still works.
    let mut log = String::new();
    for h in case.host {
        let (works, text) = run_host(&w, *h);
        log.push_str(&text);
        if !works {
            return Err(format!("the repository no longer works:\n{text}"));
        }
    }
    if w.marker.exists() {
        return Err(format!(
            "the host's git ran the run's payloads {:?}\n{log}\nralph's stderr:\n{}",
            w.fired(),
            out.stderr.trim()
        ));
    }
    for s in case.sanitized {
        let want = format!("made safe for the host's git: \"{}\"", w.path(s).display());
        if !out.stderr.contains(&want) {
            return Err(format!(
                "stderr does not say `{want}`:\n{}",
                out.stderr.trim()
            ));
        }
    }
    if out.stderr.contains("forbids") {
        return Err(format!("an unexpected violation: {}", out.stderr.trim()));
    }
    check_and_remove_kept_originals(&out.stderr)?;
    Ok(())
}

fn run_all(backends: &[Backend]) {
    if git().is_none() {
        eprintln!("skipped: git is not installed");
        return;
    }
    let mut failures = Vec::new();
    let mut runs = 0;
    for case in cases() {
        runs += 1;
        if let Err(e) = control(&case) {
            failures.push(format!("{}/control: {e}", case.name));
            continue;
        }
        for b in backends {
            runs += 1;
            if let Err(e) = sandboxed(*b, &case) {
                failures.push(format!("{}/{}: {e}", case.name, b.name()));
            }
        }
    }
    eprintln!("git_boundary: {runs} runs, {} failed", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn native_hostile_repositories_never_run_anything_on_the_host() {
    run_all(&[Backend::Native]);
}

#[test]
fn docker_hostile_repositories_never_run_anything_on_the_host() {
    if !is_root() || !common::docker::ready("docker_hostile_repositories") {
        return;
    }
    run_all(&[Backend::Docker]);
}

// ---------------------------------------------------------------------------------------------
// What must keep working
// ---------------------------------------------------------------------------------------------

/// A round that starts a project: `git init`, `git add`, `git commit`; and a commit in the
/// workspace's own repository.
const LEGIT: &str = r#"set -e
g() { git -c user.name=agent -c user.email=agent@example.invalid -c init.defaultBranch=main "$@"; }
mkdir proj && cd proj && g init -q && echo hello > f.txt && g add f.txt && g commit -q -m "agent commit"
cd .. && echo more >> README && g add README && g commit -q -m "agent top commit"
"#;

fn legit(backend: Backend) {
    if git().is_none() {
        eprintln!("skipped: git is not installed");
        return;
    }
    let w = World::new();
    user_repo(&w);
    // The user's own configuration and hook: theirs, never touched.
    host_ok(&w, &w.ws, &["config", "user.name", "The User"]);
    let hook = w.ws.join(".git/hooks/pre-commit");
    std::fs::write(&hook, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config_before = std::fs::read(w.ws.join(".git/config")).unwrap();
    let out = Ralph::new()
        .args(["sandbox", "exec", "--backend", backend.name()])
        .arg("--workspace")
        .arg(&w.ws)
        .args(["--", "/bin/sh", "-c", LEGIT])
        .output();
    out.expect_code(0);
    // The originals of the new project's repository, kept under the temporary directory.
    check_and_remove_kept_originals(&out.stderr).unwrap();
    // One report: the new project. The workspace's own repository is not sanitized.
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("made safe"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", out.stderr);
    assert!(
        lines[0].contains(&format!("\"{}/proj/.git\" (new", w.ws.display())),
        "{}",
        lines[0]
    );
    // The project keeps its history and works.
    let proj = w.ws.join("proj");
    let (ok, log) = host_git(&w, &proj, &["log", "--format=%s"]);
    assert!(ok && log.contains("agent commit"), "{log}");
    let (ok, status) = host_git(&w, &proj, &["status", "--porcelain"]);
    assert!(ok, "{status}");
    let cfg = std::fs::read_to_string(proj.join(".git/config")).unwrap();
    assert!(cfg.contains("repositoryformatversion = 0"), "{cfg}");
    host_ok(
        &w,
        &proj,
        &["commit", "-q", "--allow-empty", "-m", "host commit"],
    );
    // The workspace's repository: the agent's commit is there, the user's config and hook are
    // byte for byte what they were.
    let (_, top) = host_git(&w, &w.ws, &["log", "--format=%s", "-2"]);
    assert!(
        top.contains("agent top commit") && top.contains("user commit"),
        "{top}"
    );
    assert_eq!(
        std::fs::read(w.ws.join(".git/config")).unwrap(),
        config_before
    );
    assert_eq!(
        std::fs::read_to_string(&hook).unwrap(),
        "#!/bin/sh\nexit 0\n"
    );
}

#[test]
fn native_a_new_project_keeps_its_commits_and_the_workspace_repo_is_untouched() {
    legit(Backend::Native);
}

#[test]
fn docker_a_new_project_keeps_its_commits_and_the_workspace_repo_is_untouched() {
    if !is_root() || !common::docker::ready("docker_a_new_project_keeps_its_commits") {
        return;
    }
    legit(Backend::Docker);
}

// ---------------------------------------------------------------------------------------------
// Through `ralph run`
// ---------------------------------------------------------------------------------------------

/// Round 1 arms a new repository `sub`; round 2 reports complete; the verify command arms
/// another one, `v`.
const TWO_ROUNDS: &str = r#"
cd "$RALPH_WORKSPACE"
if [ "$RALPH_ROUND" = 1 ]; then
  git init -q sub && git -C sub config core.fsmonitor "$PWD/payload fsmonitor"
  printf '#!/bin/sh\necho hook >> "%s"\n' "$1" > sub/.git/hooks/pre-commit
  chmod 755 sub/.git/hooks/pre-commit
  printf '#!/bin/sh\necho "$1" >> "%s"\n' "$1" > payload && chmod 755 payload
  printf '{"status":"continue","summary":"armed","evidence":[],"nextSteps":["go on"],"blocker":""}' > "$RALPH_REPORT_FILE"
else
  printf '{"status":"complete","summary":"done","evidence":["ok"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
fi
"#;

fn ralph_run(backend: Backend) {
    if git().is_none() {
        eprintln!("skipped: git is not installed");
        return;
    }
    let f = Fixture::new();
    let out_dir = f.root.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let marker = out_dir.join("marker");
    let agent = f.agent("agent.sh", TWO_ROUNDS);
    let prom_dir = f.root.path().join("prom");
    std::fs::create_dir(&prom_dir).unwrap();
    let prom = prom_dir.join("ralph.prom");
    let out = f
        .run_cmd(&format!("{} {}", agent.display(), marker.display()))
        .args(["--backend", backend.name(), "--max-rounds", "2"])
        .args([
            "--verify",
            "git init -q v && git -C v config alias.x '!true'",
        ])
        .arg("--metrics-textfile")
        .arg(&prom)
        .output();
    out.expect_code(0);
    let job = out.job_id();
    let events = f.events(&job);
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    // Journalled before the end of the run that left them.
    let pos = |t: &str, n: usize| {
        types
            .iter()
            .enumerate()
            .filter(|(_, x)| **x == t)
            .nth(n)
            .map(|(i, _)| i)
            .unwrap_or_else(|| panic!("no {t} #{n} in {types:?}"))
    };
    let sanitized: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "workspace_sanitized")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(sanitized.len(), 2, "{types:?}");
    assert!(
        pos("workspace_sanitized", 0) < pos("round_finished", 0),
        "{types:?}"
    );
    assert!(
        pos("workspace_sanitized", 1) < pos("verify_finished", 0),
        "{types:?}"
    );
    let round1 = sanitized[0];
    assert_eq!(round1["round"], 1);
    assert_eq!(round1["attempt"], 1);
    assert_eq!(round1["counts"]["new"], 1, "{round1:#}");
    let repo = &round1["repositories"][0];
    assert_eq!(repo["rel"], "sub/.git", "{round1:#}");
    assert_eq!(repo["tree"], f.ws.display().to_string());
    assert_eq!(repo["change"], "new");
    assert_eq!(repo["kind"], "git_dir");
    assert_eq!(repo["replaced"], serde_json::json!(["config", "hooks"]));
    assert!(
        repo["dropped"]
            .as_array()
            .unwrap()
            .contains(&Value::from("core.fsmonitor")),
        "{repo:#}"
    );
    // The copies of the protected files kept between the job's runs went with its end.
    assert!(
        !f.state
            .join("jobs")
            .join(&job)
            .join("protected-copies")
            .exists()
    );
    // The originals are in round 1's artifacts.
    let attempt_dir = f.state.join("jobs").join(&job).join("rounds/1/1");
    let originals = attempt_dir.join("sanitized/1");
    assert_eq!(repo["originals"], originals.display().to_string());
    let kept = std::fs::read_to_string(originals.join("config")).unwrap();
    assert!(kept.contains("fsmonitor"), "{kept}");
    assert!(originals.join("hooks/pre-commit").is_file());
    // The verify run's: no attempt.
    let verify = sanitized[1];
    assert_eq!(verify["round"], 2);
    assert_eq!(verify["attempt"], Value::Null);
    assert_eq!(verify["repositories"][0]["rel"], "v/.git");
    // Round 2 was told.
    let prompt = std::fs::read_to_string(
        f.state
            .join("jobs")
            .join(&job)
            .join("rounds/2/1/in/prompt.md"),
    )
    .unwrap();
    let notes = prompt
        .split("## Runner notes")
        .nth(1)
        .unwrap()
        .split("## Your report")
        .next()
        .unwrap();
    assert!(
        notes.contains("After round 1 (attempt 1)")
            && notes.contains("\"sub/.git\" (new git directory: config, hooks/ replaced; settings dropped: core.fsmonitor)"),
        "{notes}"
    );
    // Progress said it.
    assert!(
        out.stderr
            .contains("git repository made safe for the host's git"),
        "{}",
        out.stderr
    );
    // The metric counts both.
    let text = std::fs::read_to_string(&prom).unwrap();
    assert!(
        text.lines()
            .any(|l| l == "ralph_workspace_sanitized_total{change=\"new\"} 2"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "ralph_workspace_sanitized_total{change=\"replaced\"} 0"),
        "{text}"
    );
    // And the host's git runs nothing of it.
    let w = World {
        _dir: tempfile::tempdir().unwrap(),
        root: f.root.path().to_owned(),
        ws: f.ws.clone(),
        cache: f.root.path().to_owned(),
        home: out_dir.clone(),
        marker: marker.clone(),
    };
    let (works, log) = run_host(&w, Host::Worktree("sub"));
    assert!(works, "{log}");
    assert!(!marker.exists(), "{log}");
}

#[test]
fn native_ralph_run_journals_tells_keeps_and_counts_what_it_made_safe() {
    ralph_run(Backend::Native);
}

#[test]
fn docker_ralph_run_journals_tells_keeps_and_counts_what_it_made_safe() {
    if !is_root() || !common::docker::ready("docker_ralph_run_sanitized") {
        return;
    }
    ralph_run(Backend::Docker);
}

/// Issue 12, item 7: `git commit` in a round failed for lack of an identity (the round's HOME is
/// private and empty: "unable to auto-detect email address"). Rounds get one at git's lowest
/// level (`GIT_CONFIG_SYSTEM`); the runner's `GIT_AUTHOR_*` passed with `--env` and the
/// repository's own `user.*` take precedence, as git ranks them.
#[test]
fn a_round_can_commit_with_the_default_identity_or_the_one_passed_in() {
    for passed in [None, Some("Alice Example")] {
        let f = Fixture::new();
        let report = f.data("r.json", common::complete_report("committed").as_bytes());
        let cmd = format!(
            "git init -q repo && cd repo && git commit --allow-empty -qm 'a round' && git log -1 --format='%ae|%ce' > ../author.txt && git config user.email own@repo.example && git commit --allow-empty -qm again && git log -1 --format='%an|%ae' >> ../author.txt; cp '{}' \"$RALPH_REPORT_FILE\"",
            report.display()
        );
        let mut run = f.run_cmd(&cmd);
        if let Some(name) = passed {
            run = run
                .args(["--env", "GIT_AUTHOR_NAME"])
                .env("GIT_AUTHOR_NAME", name);
        }
        let out = run.output();
        out.expect_code(0);
        let author = std::fs::read_to_string(f.ws.join("author.txt"))
            .unwrap_or_else(|e| panic!("no commit was made ({e}): {}", out.stderr));
        let lines: Vec<&str> = author.lines().collect();
        assert_eq!(
            lines[0], "ralph-agent@localhost|ralph-agent@localhost",
            "{author}"
        );
        let (name, email) = lines[1].split_once('|').unwrap();
        assert_eq!(
            email, "own@repo.example",
            "the repository's own identity wins"
        );
        match passed {
            None => assert_eq!(name, "ralph agent"),
            Some(n) => assert_eq!(name, n, "--env GIT_AUTHOR_NAME wins"),
        }
    }
}

/// What the round runs on the `--read` repository `$1` (another owner's): `git log`, `git
/// status`, discovery of the repository from a subdirectory (what Codex's sandbox tests rely
/// on), then the control: the same `git log` without the round's system configuration, which
/// git must refuse as of dubious ownership.
const READ_REPO: &str = r#"
cd "$RALPH_WORKSPACE"
git -C "$1" log --format=%s > log.txt 2>&1; echo $? > log.rc
git -C "$1" status --porcelain > status.txt 2>&1; echo $? > status.rc
(cd "$1/sub" && git rev-parse --show-toplevel) > top.txt 2>&1; echo $? > top.rc
GIT_CONFIG_SYSTEM=/dev/null git -C "$1" log --format=%s > control.txt 2>&1; echo $? > control.rc
id -u > uid.txt
printf '{"status":"complete","summary":"read","evidence":["git"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
"#;

/// Issue 26: a `--read` git repository owned by another user works inside the round (its
/// system configuration trusts every directory: the round is the boundary), and the host's own
/// git still runs with none of it.
#[test]
fn native_a_read_repository_of_another_owner_works_in_the_round() {
    if git().is_none() || !is_root() {
        eprintln!("skipped: needs git and root (to give the repository to `nobody`)");
        return;
    }
    let f = Fixture::new();
    // World-readable, so any agent user may read it: only the owner differs.
    let shared = f.root.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let repo = shared.join("upstream");
    std::fs::create_dir(&repo).unwrap();
    let sh = |script: &str| {
        let out = Command::new("sh")
            .args(["-c", script])
            .current_dir(&repo)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    sh(
        "git init -q -b main && mkdir sub && echo x > sub/f && git add -A \
        && git -c user.name=u -c user.email=u@u commit -qm 'upstream commit'",
    );
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    sh(&format!(
        "chown -R {}:{} . && chmod -R a+rX . && chmod a+rx {} {}",
        nobody.uid,
        nobody.gid,
        shared.display(),
        f.root.path().display()
    ));
    let agent = f.agent("agent.sh", READ_REPO);
    let out = f
        .run_cmd(&format!("{} {}", agent.display(), repo.display()))
        .arg("--read")
        .arg(&shared)
        .args(["--backend", "native", "--max-rounds", "1"])
        .output();
    out.expect_code(0);
    let uid: u32 = f.read_ws("uid.txt").trim().parse().unwrap();
    assert_ne!(
        uid,
        nobody.uid.as_raw(),
        "the round must not run as the owner"
    );
    // The control: without the round's configuration git refuses the repository.
    assert_eq!(
        f.read_ws("control.rc").trim(),
        "128",
        "{}",
        f.read_ws("control.txt")
    );
    assert!(
        f.read_ws("control.txt").contains("dubious ownership"),
        "{}",
        f.read_ws("control.txt")
    );
    // With it, log, status and discovery work.
    for (rc, text) in [
        ("log.rc", "log.txt"),
        ("status.rc", "status.txt"),
        ("top.rc", "top.txt"),
    ] {
        assert_eq!(f.read_ws(rc).trim(), "0", "{text}: {}", f.read_ws(text));
    }
    assert_eq!(f.read_ws("log.txt").trim(), "upstream commit");
    assert_eq!(f.read_ws("status.txt"), "");
    assert_eq!(f.read_ws("top.txt").trim(), repo.display().to_string());
    // The host's protections are the runner's own: its git reads no system configuration, so
    // the round's (in the job's artifacts) never reaches it; and the repository was only read.
    let job = out.job_id();
    let cfg = f
        .state
        .join("jobs")
        .join(&job)
        .join("rounds/1/1/in/gitconfig");
    let cfg = std::fs::read_to_string(&cfg).unwrap_or_else(|e| panic!("{}: {e}", cfg.display()));
    assert!(cfg.contains("[safe]\n\tdirectory = *\n"), "{cfg}");
    let owner = std::fs::metadata(repo.join(".git/config")).unwrap();
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&owner),
        nobody.uid.as_raw()
    );
}
