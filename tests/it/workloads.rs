//! Issue 28 item 3: real workloads still run under the syscall allow-list
//! (`policies/syscalls-allowed.toml`) — gcc, python3 with `pip install` of a local wheel, node,
//! git and `cargo build` of a tiny crate, each in a workspace-write round (`ralph sandbox
//! exec`), natively and on docker (image `ralph-agent-base:latest`). A tool is skipped only
//! where it is missing: natively when the host lacks it, on docker when the image lacks it (it
//! has python3, pip and git; no gcc, node or cargo), and the test says which.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn ralph() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph"))
}

/// A minimal pure-Python wheel (`ralph_tiny`), built on the host with python3's zipfile.
fn tiny_wheel(dir: &Path) -> PathBuf {
    let wheel = dir.join("ralph_tiny-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
files = {
    "ralph_tiny/__init__.py": "VALUE = 1\n",
    "ralph_tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: ralph-tiny\nVersion: 1.0\n",
    "ralph_tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
rec = "".join(f"{k},,\n" for k in files) + "ralph_tiny-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for k, v in files.items():
        z.writestr(k, v)
    z.writestr("ralph_tiny-1.0.dist-info/RECORD", rec)
"#;
    let ok = Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not build the test wheel");
    wheel
}

/// The workspace: a C file, the wheel, a tiny crate.
fn workspace() -> tempfile::TempDir {
    let ws = tempfile::Builder::new()
        .prefix("ralph-workloads-")
        .tempdir_in("/tmp")
        .unwrap();
    let p = ws.path();
    std::fs::write(
        p.join("hello.c"),
        "#include <stdio.h>\nint main(void) { puts(\"gcc-ok\"); return 0; }\n",
    )
    .unwrap();
    tiny_wheel(p);
    std::fs::create_dir_all(p.join("tiny/src")).unwrap();
    std::fs::write(
        p.join("tiny/Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    )
    .unwrap();
    std::fs::write(
        p.join("tiny/src/main.rs"),
        "fn main() {\n    println!(\"cargo-ok\");\n}\n",
    )
    .unwrap();
    ws
}

/// One workload: its name, the program it needs, and the shell line that must print
/// `<name>-ok`.
const WORKLOADS: &[(&str, &str, &str)] = &[
    (
        "gcc",
        "gcc",
        r#"gcc -O1 -o "$TMPDIR/hello" hello.c && "$TMPDIR/hello""#,
    ),
    (
        "python",
        "python3",
        r#"python3 -c 'import json, sqlite3, ssl, subprocess, threading; subprocess.run(["true"], check=True); print("python-ok")'"#,
    ),
    (
        "pip",
        "python3",
        r#"python3 -m pip install --quiet --no-index --no-deps --no-cache-dir --disable-pip-version-check --target "$TMPDIR/site" ./ralph_tiny-1.0-py3-none-any.whl >&2 && PYTHONPATH="$TMPDIR/site" python3 -c 'import ralph_tiny; assert ralph_tiny.VALUE == 1; print("pip-ok")'"#,
    ),
    (
        "node",
        "node",
        r#"node -e 'const fs = require("fs"); fs.writeFileSync(process.env.TMPDIR + "/n", "x"); require("child_process").execFileSync("true"); console.log("node-ok")'"#,
    ),
    (
        "git",
        "git",
        r#"git init -q "$TMPDIR/g" && cd "$TMPDIR/g" && echo x > f && git add f && git -c user.email=t@e -c user.name=t commit -q -m one && git log --oneline | grep -q one && echo git-ok"#,
    ),
    (
        "cargo",
        "cargo",
        r#"cd tiny && RUSTUP_HOME="${RUSTUP_HOME:-@RUSTUP@}" CARGO_HOME="$HOME/cargo-home" CARGO_TARGET_DIR="$TMPDIR/target" cargo build --offline -q && "$TMPDIR/target/debug/tiny""#,
    ),
];

/// Whether `program` is on the round's PATH (asked inside a round of the same backend).
fn present(r: &Round, ws: &Path, program: &str) -> bool {
    run(r, ws, &format!("command -v {program}"))
        .status
        .success()
}

/// How the rounds of one backend are started.
struct Round<'a> {
    backend: &'a [&'a str],
    extra: Vec<String>,
    path: Option<String>,
}

fn run(r: &Round, ws: &Path, line: &str) -> std::process::Output {
    let mut cmd = Command::new(ralph());
    if let Some(p) = &r.path {
        cmd.env("PATH", p);
    }
    let (backend, extra) = (r.backend, &r.extra);
    cmd.args([
        "sandbox",
        "exec",
        "--mode",
        "workspace-write",
        "--workspace",
    ])
    .arg(ws)
    .args(backend)
    .args(extra)
    .args(["--", "sh", "-c"])
    .arg(format!(
        "cd \"$0\" && {}",
        line.replace("@RUSTUP@", &rustup_home())
    ))
    .arg(ws)
    .output()
    .unwrap()
}

/// The runner's rustup home (the round's HOME is private).
fn rustup_home() -> String {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    std::env::var("RUSTUP_HOME").unwrap_or_else(|_| format!("{home}/.rustup"))
}

/// The grants natively: rustup's trees (read-only), for cargo.
fn native_grants() -> (Vec<String>, String) {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let mut extra = Vec::new();
    let mut path = std::env::var("PATH").unwrap_or_default();
    for d in [".cargo", ".rustup"] {
        let p = Path::new(&home).join(d);
        if p.is_dir() {
            extra.push("--read".to_owned());
            extra.push(p.display().to_string());
        }
    }
    let bin = Path::new(&home).join(".cargo/bin");
    if bin.is_dir() {
        path = format!("{}:{path}", bin.display());
    }
    (extra, path)
}

fn check_all(label: &str, r: &Round) -> Vec<&'static str> {
    let ws = workspace();
    let mut ran = Vec::new();
    for (name, program, line) in WORKLOADS {
        if !present(r, ws.path(), program) {
            eprintln!("{label}: {name} skipped: `{program}` is not on the round's PATH");
            continue;
        }
        let out = run(r, ws.path(), line);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("{name}-ok")),
            "{label}: {name} failed under the allow-list ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        ran.push(*name);
    }
    ran
}

#[test]
fn workloads_run_natively_under_the_allow_list() {
    let (extra, path) = native_grants();
    let r = Round {
        backend: &[],
        extra,
        path: Some(path),
    };
    let ran = check_all("native", &r);
    for must in ["python", "pip", "git"] {
        assert!(ran.contains(&must), "native: {must} did not run ({ran:?})");
    }
    eprintln!("native: ran {ran:?}");
}

#[test]
fn workloads_run_on_docker_under_the_allow_list() {
    if !nix::unistd::geteuid().is_root() || !common::docker::ready("workloads_docker") {
        return;
    }
    let r = Round {
        backend: &["--backend", "docker"],
        extra: Vec::new(),
        path: None,
    };
    let ran = check_all("docker", &r);
    for must in ["python", "pip", "git"] {
        assert!(ran.contains(&must), "docker: {must} did not run ({ran:?})");
    }
    eprintln!("docker: ran {ran:?}");
}
