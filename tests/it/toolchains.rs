//! SPEC §12 "Toolchains", issue 26 item 3, end to end with the real toolchains of this host:
//! rustup (`~/.cargo/bin`, `~/.rustup`) and pyenv (`~/.pyenv`, with a virtualenv made from its
//! Python and `pytest` installed into it from PyPI once per target directory). With
//! `--toolchain auto` (the default) the round and verify run the runner's own interpreter and
//! cargo, cargo writes only into the round's private `CARGO_HOME`, no credentials file is
//! readable and no granted tree is writable; with `--toolchain none` the pre-round check refuses
//! before round 1 and each fix it suggests is applied and then works.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::{Fixture, Output, Ralph, complete_report};

/// The runner's HOME.
fn home() -> PathBuf {
    PathBuf::from(std::env::var("HOME").expect("HOME"))
}

/// pyenv's root and the Python its global version names (this host: CPython 3.11.7).
fn pyenv_python() -> (PathBuf, PathBuf) {
    let root = std::env::var("PYENV_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home().join(".pyenv"));
    let version = std::fs::read_to_string(root.join("version"))
        .unwrap_or_else(|e| panic!("pyenv's global version at {}: {e}", root.display()));
    let version = version.lines().next().unwrap().trim().to_owned();
    let python = root.join("versions").join(&version).join("bin/python3");
    assert!(python.is_file(), "no pyenv python at {}", python.display());
    (root, python)
}

/// A virtualenv made from pyenv's Python with pytest in it, built once (under a lock) in the
/// target directory: `pip install pytest` from PyPI.
fn venv() -> &'static Path {
    static VENV: OnceLock<PathBuf> = OnceLock::new();
    VENV.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("toolchain-venv-pytest");
        let ready = dir.join(".ralph-ready");
        let lock = std::fs::File::create(dir.with_extension("lock")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor this function owns for its whole scope.
        let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(locked, 0);
        if !ready.exists() {
            let _ = std::fs::remove_dir_all(&dir);
            let (_, python) = pyenv_python();
            let ok = Command::new(&python)
                .args(["-m", "venv"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(ok.success(), "python -m venv");
            let ok = Command::new(dir.join("bin/python"))
                .args([
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "pytest",
                ])
                .status()
                .unwrap();
            assert!(ok.success(), "pip install pytest (from PyPI)");
            std::fs::write(&ready, "").unwrap();
        }
        dir
    })
}

/// The runner's PATH with `first` in front.
fn path_with(first: &[&Path]) -> String {
    let mut v: Vec<String> = first.iter().map(|p| p.display().to_string()).collect();
    v.push(std::env::var("PATH").unwrap());
    v.join(":")
}

/// The flags a pre-round message says to add (`...: add --read X --toolchain auto`).
fn suggested_fix(message: &str) -> Vec<String> {
    let (_, fix) = message
        .rsplit_once(": add ")
        .unwrap_or_else(|| panic!("no fix in: {message}"));
    fix.split_whitespace().map(str::to_owned).collect()
}

/// The journal's `toolchain_granted` event of a job.
fn granted(f: &Fixture, out: &Output) -> serde_json::Value {
    f.events(&out.job_id())
        .into_iter()
        .find(|(t, _)| t == "toolchain_granted")
        .map(|(_, e)| e)
        .expect("a toolchain_granted event")
}

fn done_agent(f: &Fixture) -> PathBuf {
    f.agent(
        "done.sh",
        &format!(
            "printf '%s' '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    )
}

/// What `python3` on `path` says it is: executable, prefix, base prefix.
fn interpreter_on(path: &str) -> String {
    let out = Command::new("python3")
        .env("PATH", path)
        .args([
            "-c",
            "import sys; print(sys.executable); print(sys.prefix); print(sys.base_prefix)",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

const PROBE_TEST: &str = "import sys\n\nimport pytest\n\n\ndef test_same_interpreter():\n    with open(\"seen.txt\", \"w\") as f:\n        f.write(sys.executable + \"\\n\" + sys.prefix + \"\\n\" + sys.base_prefix + \"\\n\")\n";

/// Issue 26: `python3 -m pytest` passed the pre-round check and failed inside with "No module
/// named pytest" (python3 was silently /usr/bin/python3). With the venv active on the runner,
/// the round's verify runs the venv's interpreter (the same `sys.executable`, `sys.prefix` and
/// base prefix as on the host) and the job is verified; the grant is journalled. With
/// `--toolchain none` the job is refused before round 1, naming the swap and the fix; the fix
/// applied, it is verified again.
#[test]
fn pytest_from_a_venv_verifies_with_the_runners_own_interpreter() {
    let venv = venv();
    let f = Fixture::new();
    std::fs::write(f.ws.join("test_probe.py"), PROBE_TEST).unwrap();
    let path = path_with(&[&venv.join("bin")]);
    let host = interpreter_on(&path);
    assert!(host.starts_with(&venv.display().to_string()), "{host}");
    let agent = done_agent(&f);
    let verify = "python3 -m pytest -q -p no:cacheprovider";
    let run = |extra: &[String]| {
        f.run(&agent)
            .args(["--verify", verify])
            .args(extra)
            .env("PATH", &path)
            .env("VIRTUAL_ENV", &venv.display().to_string())
            .output()
    };
    let out = run(&[]);
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
    let seen = std::fs::read_to_string(f.ws.join("seen.txt")).unwrap();
    assert_eq!(seen, host, "the round's interpreter is the runner's");
    let g = granted(&f, &out);
    let read: Vec<&str> = g["read"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let base = host.lines().nth(2).unwrap();
    for want in [venv.to_str().unwrap(), base] {
        assert!(read.iter().any(|r| want.starts_with(r)), "{want} in {g}");
    }
    assert_eq!(g["variables"]["VIRTUAL_ENV"], venv.display().to_string());

    // Toolchains off: refused before round 1, the swap named, and the fix works.
    std::fs::remove_file(f.ws.join("seen.txt")).unwrap();
    let out = run(&["--toolchain".into(), "none".into()]);
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["rounds"], 0);
    let msg = j["message"].as_str().unwrap();
    assert!(
        msg.contains("inside, the shell would run") && msg.contains("a different program"),
        "{msg}"
    );
    let fix = suggested_fix(msg);
    assert_eq!(fix, ["--toolchain", "auto"], "{msg}");
    let mut again = vec!["--toolchain".to_owned(), "none".to_owned()];
    again.extend(fix);
    let out = run(&again);
    out.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("seen.txt")).unwrap(),
        host
    );
}

/// A runner-like cargo home of its own (so the check of "unchanged" is not disturbed by other
/// builds on this host): `bin/` with links to the real rustup, a canary `credentials.toml` and
/// `config.toml`, and a runner HOME with a canary `~/.npmrc`.
struct CargoWorld {
    _dir: tempfile::TempDir,
    home: PathBuf,
    cargo_home: PathBuf,
}

impl CargoWorld {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        let cargo_home = root.join("cargo-home");
        std::fs::create_dir_all(cargo_home.join("bin")).unwrap();
        std::fs::create_dir_all(cargo_home.join("registry")).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        let rustup = which("rustup");
        for name in ["rustup", "cargo", "rustc"] {
            std::os::unix::fs::symlink(&rustup, cargo_home.join("bin").join(name)).unwrap();
        }
        for f in ["credentials.toml", "config.toml"] {
            std::fs::write(
                cargo_home.join(f),
                "[registry]\ntoken = \"canary-cargo-token\"\n",
            )
            .unwrap();
        }
        std::fs::write(
            home.join(".npmrc"),
            "//registry.npmjs.org/:_authToken=canary-npm-token\n",
        )
        .unwrap();
        CargoWorld {
            _dir: dir,
            home,
            cargo_home,
        }
    }

    fn path(&self) -> String {
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            self.cargo_home.join("bin").display()
        )
    }

    /// `ralph run` with this world's PATH, HOME, CARGO_HOME and the host's RUSTUP_HOME.
    fn run(&self, r: Ralph) -> Ralph {
        let rustup_home = std::env::var("RUSTUP_HOME")
            .unwrap_or_else(|_| home().join(".rustup").display().to_string());
        r.env("PATH", &self.path())
            .env("HOME", &self.home.display().to_string())
            .env("CARGO_HOME", &self.cargo_home.display().to_string())
            .env("RUSTUP_HOME", &rustup_home)
    }

    /// Every entry of the cargo home: path, size, modification time.
    fn listing(&self) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
        let mut out = Vec::new();
        let mut stack = vec![self.cargo_home.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let m = std::fs::symlink_metadata(e.path()).unwrap();
                if m.is_dir() {
                    stack.push(e.path());
                }
                out.push((e.path(), m.len(), m.modified().unwrap()));
            }
        }
        out.sort();
        out
    }
}

fn which(name: &str) -> PathBuf {
    std::env::var("PATH")
        .unwrap()
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("no {name} on the PATH"))
}

fn tiny_crate(ws: &Path) {
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(
        ws.join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        ws.join("src/main.rs"),
        "fn main() {}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn it_runs() {}\n}\n",
    )
    .unwrap();
}

/// Issue 26: `--read ~/.cargo/bin` gave "rustup could not choose a version of cargo to run".
/// With the defaults, the agent's own `cargo install` and verify's `cargo test --offline` run
/// through rustup's proxies (RUSTUP_HOME granted read-only); cargo's writes land in the round's
/// private `$HOME/.cargo`, the runner's cargo home is unchanged (entry by entry, sizes and
/// times), and neither its `credentials.toml`/`config.toml` nor `~/.npmrc` can be read.
#[test]
fn cargo_runs_through_rustup_and_writes_only_the_rounds_own_cargo_home() {
    let w = CargoWorld::new();
    let f = Fixture::new();
    tiny_crate(&f.ws);
    let before = w.listing();
    let ch = w.cargo_home.display();
    let agent = f.agent(
        "cargo-agent.sh",
        &format!(
            "cargo install --offline --debug --path . > install.log 2>&1; echo \"install $?\" > cargo.txt\n\
             echo \"$CARGO_HOME\" >> cargo.txt; ls \"$CARGO_HOME/bin\" >> cargo.txt\n\
             cat '{ch}/credentials.toml' > leak.txt 2>&1; cat '{ch}/config.toml' >> leak.txt 2>&1\n\
             cat '{h}/.npmrc' >> leak.txt 2>&1; ls -a '{ch}' > ls.txt 2>/dev/null\n\
             printf '%s' '{r}' > \"$RALPH_REPORT_FILE\"",
            h = w.home.display(),
            r = complete_report("installed")
        ),
    );
    let out = w
        .run(f.run(&agent).args(["--verify", "cargo test --offline"]))
        .output();
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
    let cargo = std::fs::read_to_string(f.ws.join("cargo.txt")).unwrap();
    let mut lines = cargo.lines();
    assert_eq!(
        lines.next(),
        Some("install 0"),
        "{}",
        std::fs::read_to_string(f.ws.join("install.log")).unwrap_or_default()
    );
    let round_cargo_home = lines.next().unwrap();
    let artifacts = out.json()["artifacts"].as_str().unwrap().to_owned();
    assert!(
        round_cargo_home.starts_with(&artifacts) && round_cargo_home.ends_with("/.cargo"),
        "CARGO_HOME is the round's private HOME's: {round_cargo_home}"
    );
    assert!(lines.any(|l| l == "probe"), "{cargo}");
    assert!(
        f.ws.join("target/debug").is_dir(),
        "verify built in the workspace"
    );
    assert_eq!(w.listing(), before, "the runner's cargo home is unchanged");
    let leak = std::fs::read_to_string(f.ws.join("leak.txt")).unwrap();
    assert!(!leak.contains("canary"), "{leak}");
    let ls = std::fs::read_to_string(f.ws.join("ls.txt")).unwrap_or_default();
    assert!(
        !ls.contains("credentials"),
        "the cargo home is not listable: {ls}"
    );
    let g = granted(&f, &out);
    assert_eq!(g["variables"]["CARGO_HOME"], "$HOME/.cargo", "{g}");
    assert!(g["variables"]["RUSTUP_HOME"].is_string(), "{g}");
    assert!(
        !g.to_string().contains(&format!("\"{ch}\"")),
        "the cargo home itself is never granted: {g}"
    );
}

/// `--toolchain none` is today's behaviour: cargo's proxy is not visible; the pre-round check
/// says so before round 1 and names the fix; applied, the job is verified.
#[test]
fn with_toolchain_none_the_cargo_hint_is_a_fix_that_works() {
    let w = CargoWorld::new();
    let f = Fixture::new();
    tiny_crate(&f.ws);
    let agent = done_agent(&f);
    let run = |extra: &[String]| {
        w.run(
            f.run(&agent)
                .args(["--verify", "cargo test --offline", "--toolchain", "none"])
                .args(extra),
        )
        .output()
    };
    let out = run(&[]);
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["rounds"], 0);
    let msg = j["message"].as_str().unwrap();
    assert!(
        msg.contains("the verify command `cargo test --offline` runs"),
        "{msg}"
    );
    let fix = suggested_fix(msg);
    assert_eq!(fix, ["--toolchain", "auto"], "{msg}");
    let out = run(&fix);
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
}

/// Every fix the pre-round check suggests is applied and the command then runs: a program
/// outside any toolchain (a script in a tools directory) whose interpreter is the venv's Python
/// (it imports pytest), with toolchains on (the hint is the script's `--read`) and off (the
/// hint adds `--toolchain auto` for the interpreter: a `--read` alone would run
/// /usr/bin/python3, without pytest).
#[test]
fn each_suggested_fix_is_applied_and_the_command_then_runs() {
    let venv = venv();
    let f = Fixture::new();
    let tools = f.root.path().join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    let tools = tools.canonicalize().unwrap();
    let check = tools.join("mycheck");
    std::fs::write(
        &check,
        "#!/usr/bin/env python3\nimport sys\nimport pytest\nopen('checked.txt', 'w').write(sys.prefix)\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&check, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = path_with(&[&tools, &venv.join("bin")]);
    let agent = done_agent(&f);
    for (mode, want) in [
        ("auto", vec![format!("--read {}", tools.display())]),
        (
            "none",
            vec![
                format!("--read {}", tools.display()),
                "--toolchain auto".into(),
            ],
        ),
    ] {
        let _ = std::fs::remove_file(f.ws.join("checked.txt"));
        let run = |extra: &[String]| {
            f.run(&agent)
                .args(["--verify", "mycheck --all", "--toolchain", mode])
                .args(extra)
                .env("PATH", &path)
                .output()
        };
        let out = run(&[]);
        out.expect_code(64);
        let msg = out.json()["message"].as_str().unwrap().to_owned();
        let fix = suggested_fix(&msg);
        assert_eq!(fix.join(" "), want.join(" "), "{mode}: {msg}");
        let out = run(&fix);
        out.expect_code(0);
        assert_eq!(out.json()["reason"], "verified", "{mode}");
        assert_eq!(
            std::fs::read_to_string(f.ws.join("checked.txt")).unwrap(),
            venv.display().to_string(),
            "{mode}: the venv's interpreter ran the script"
        );
    }
}

/// Hostile: the agent tries to create files in every granted root (rustup's toolchains, the
/// pyenv version, the venv, `~/.cargo/bin`): each is refused inside, and nothing appears on the
/// host.
#[test]
fn a_round_cannot_write_into_a_granted_toolchain() {
    let venv = venv();
    let (pyenv_root, python) = pyenv_python();
    let version_dir = python.parent().unwrap().parent().unwrap().to_path_buf();
    let rustup_home = std::env::var("RUSTUP_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|_| home().join(".rustup"));
    let canary = format!("ralph-canary-{}", std::process::id());
    let targets: Vec<PathBuf> = vec![
        rustup_home.join("toolchains").join(&canary),
        rustup_home.join(&canary),
        which("cargo").parent().unwrap().join(&canary),
        version_dir.join(&canary),
        version_dir.join("lib").join(&canary),
        pyenv_root.join("shims").join(&canary),
        venv.join(&canary),
        venv.join("bin").join(&canary),
    ];
    let f = Fixture::new();
    let mut body = String::new();
    for t in &targets {
        body.push_str(&format!(
            "if touch '{t}' 2>/dev/null || mkdir '{t}' 2>/dev/null; then echo 'wrote {t}' >> writes.txt; fi\n",
            t = t.display()
        ));
    }
    // It can read them (they are granted), just not write.
    body.push_str(&format!(
        "test -r '{}/settings.toml' && echo readable >> writes.txt\n",
        rustup_home.display()
    ));
    body.push_str(&format!(
        "printf '%s' '{}' > \"$RALPH_REPORT_FILE\"",
        complete_report("tried")
    ));
    let agent = f.agent("hostile.sh", &body);
    let out = f
        .run(&agent)
        .env("PATH", &path_with(&[&venv.join("bin")]))
        .output();
    out.expect_code(0);
    let writes = std::fs::read_to_string(f.ws.join("writes.txt")).unwrap_or_default();
    assert_eq!(
        writes, "readable\n",
        "the round wrote into a granted tree: {writes}"
    );
    for t in &targets {
        assert!(
            std::fs::symlink_metadata(t).is_err(),
            "{} appeared on the host",
            t.display()
        );
    }
}

/// The docker backend: the granted trees are bound read-only at the same paths, and the venv's
/// pytest (a glibc CPython from pyenv) runs in the Debian image as it does natively (shown in
/// full-access, where a root runner's round is the workspace's owner, uid 0). A round that is
/// not uid 0 — the agent user of a confined round on a root-owned workspace, or the owner of an
/// unprivileged user's workspace — cannot reach `/root` (mode 0700 in the image): refused
/// before round 1, naming why (exit 64), never a round that silently runs another Python.
#[test]
fn on_docker_the_venv_is_bound_in_or_the_job_is_refused_naming_why() {
    if !common::docker::ready("on_docker_the_venv_is_bound_in_or_the_job_is_refused_naming_why") {
        return;
    }
    let venv = venv();
    let f = Fixture::new();
    std::fs::write(f.ws.join("test_probe.py"), PROBE_TEST).unwrap();
    let path = path_with(&[&venv.join("bin")]);
    let host = interpreter_on(&path);
    let agent = done_agent(&f);
    let run = |mode: &str| {
        f.run(&agent)
            .args([
                "--backend",
                "docker",
                "--verify",
                "python3 -m pytest -q -p no:cacheprovider",
            ])
            .args(["--mode", mode])
            .env("PATH", &path)
            .output()
    };
    let out = run("full-access");
    out.expect_code(0);
    assert_eq!(out.json()["reason"], "verified");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("seen.txt")).unwrap(),
        host
    );
    // A confined round on the root-owned workspace is the agent user: `/root` is out of reach.
    let out = run("workspace-write");
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["rounds"], 0);
    let msg = j["message"].as_str().unwrap();
    let agent_uid = ralph_sandbox::identity::agent_user(None, Path::new("/etc"))
        .unwrap()
        .uid;
    assert!(
        msg.contains("lie under `/root`")
            && msg.contains(&format!("uid {agent_uid}"))
            && msg.contains("python3"),
        "{msg}"
    );

    // A workspace owned by an unprivileged user: its docker rounds run as that uid.
    let g = Fixture::new();
    std::fs::write(g.ws.join("test_probe.py"), PROBE_TEST).unwrap();
    for p in [&g.ws, &g.ws.join("test_probe.py")] {
        std::os::unix::fs::chown(p, Some(1000), Some(1000)).unwrap();
    }
    let agent = done_agent(&g);
    let out = g
        .run(&agent)
        .args([
            "--backend",
            "docker",
            "--verify",
            "python3 -m pytest -q -p no:cacheprovider",
        ])
        .env("PATH", &path)
        .output();
    out.expect_code(64);
    let j = out.json();
    assert_eq!(j["rounds"], 0);
    let msg = j["message"].as_str().unwrap();
    assert!(
        msg.contains("lie under `/root`") && msg.contains("uid 1000") && msg.contains("python3"),
        "{msg}"
    );
}

/// `ralph doctor --workspace DIR` prints what a job there would be granted and the pre-round
/// check of its commands: ok with the defaults, the working fix (exit 64) with toolchains off.
#[test]
fn doctor_shows_the_grant_and_the_check_of_a_workspace() {
    let w = CargoWorld::new();
    let f = Fixture::new();
    let doctor = |extra: &[&str]| {
        w.run(
            Ralph::new()
                .args(["doctor", "--json", "--workspace"])
                .arg(&f.ws)
                .args(["--verify", "cargo test"])
                .args(extra),
        )
        .output()
    };
    let out = doctor(&[]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let t = &v["toolchains"];
    assert_eq!(t["toolchain"], "auto", "{v}");
    assert_eq!(
        t["granted"]["variables"]["CARGO_HOME"], "$HOME/.cargo",
        "{t}"
    );
    let read = t["granted"]["read"].to_string();
    assert!(
        read.contains(&w.cargo_home.join("bin").display().to_string()),
        "{t}"
    );
    assert_eq!(t["commands"][0]["ok"], true, "{t}");
    let out = doctor(&["--toolchain", "none"]);
    out.expect_code(64);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let msg = v["toolchains"]["commands"][0]["message"].as_str().unwrap();
    assert_eq!(suggested_fix(msg), ["--toolchain", "auto"], "{msg}");
    // The text form says the same.
    let out = w
        .run(
            Ralph::new()
                .args(["doctor", "--workspace"])
                .arg(&f.ws)
                .args(["--verify", "cargo test", "--toolchain", "none"]),
        )
        .output();
    out.expect_code(64);
    assert!(
        out.stdout.contains("add --toolchain auto"),
        "{}",
        out.stdout
    );
}
