//! The machinery of the sandbox escape matrix (`tests/it/sandbox_escape.rs`,
//! `tests/it/sandbox_limits.rs`): sandbox variants, a throw-away world per case run, one
//! `ralph sandbox exec` run with the probe (or any command), the expected result, and a runner
//! that executes a table of cases and reports every mismatch with the full command and output.
//!
//! A case is a name, the sandbox variants it applies to and a function that builds, for one
//! variant, what to run and what must come out (an errno name and the failing step, or an exit
//! code). Each case run gets a fresh [`World`], so cases never see each other's files.
//!
//! Where a target must exist for a refusal to mean anything, the builder checks it on the host
//! first, and, for paths the sandbox can see, [`Spec::visible`] proves from inside the same
//! sandbox that the target is there: "not found" can never pass for "blocked". The one place
//! where ENOENT *is* the expected refusal: a host path the filesystem modes do not bind into
//! their own root does not exist inside, and that invisibility is the block; such a case asserts
//! on the host that the target exists (`invisible` in `tests/it/sandbox_escape.rs`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod init_reach;

use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------------------------

/// The `ralph` binary under test.
pub fn ralph() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph"))
}

/// The probe (`tests/probe/main.rs`).
pub fn probe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph-probe"))
}

/// The directory of both binaries, which the sandbox cannot read unless told (`--read`).
pub fn bin_dir() -> PathBuf {
    probe().parent().unwrap().to_owned()
}

pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The uid the sandboxed command runs as in `sb`, in a world made by the user running the
/// tests: that user's own uid, except under a root runner in the confined modes, where rounds
/// never hold uid 0: the default agent user (`ralph-agent` when it exists, else 65534).
pub fn agent_uid(sb: Sb) -> u32 {
    if !is_root() || !sb.confined() {
        return nix::unistd::geteuid().as_raw();
    }
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&"ralph-agent"))
                .then(|| f.get(2)?.parse().ok())
                .flatten()
        })
        .unwrap_or(65534)
}

/// Builds a `Vec<OsString>` from strings and paths.
macro_rules! argv {
    ($($x:expr),* $(,)?) => {
        vec![$(::std::ffi::OsString::from(::std::convert::AsRef::<::std::ffi::OsStr>::as_ref(&$x))),*]
    };
}

// ---------------------------------------------------------------------------------------------
// Sandbox variants
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    ReadOnly,
    WorkspaceWrite,
    FullAccess,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::FullAccess => "full-access",
        }
    }
}

/// `--network`: the mode's default, or explicit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Net {
    Default,
    None,
    Full,
}

/// One sandbox variant: a mode and its network setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sb {
    pub mode: Mode,
    pub net: Net,
}

pub const RO: Sb = Sb {
    mode: Mode::ReadOnly,
    net: Net::Default,
};
pub const WW: Sb = Sb {
    mode: Mode::WorkspaceWrite,
    net: Net::Default,
};
/// workspace-write with `--network full`.
pub const WW_NET: Sb = Sb {
    mode: Mode::WorkspaceWrite,
    net: Net::Full,
};
pub const FA: Sb = Sb {
    mode: Mode::FullAccess,
    net: Net::Default,
};
/// full-access with `--network none`.
pub const FA_NONET: Sb = Sb {
    mode: Mode::FullAccess,
    net: Net::None,
};

/// The three modes with their default network.
pub const ALL: &[Sb] = &[RO, WW, FA];
/// The modes with a filesystem sandbox (own root, Landlock, the full seccomp list).
pub const CONFINED: &[Sb] = &[RO, WW];
pub const ONLY_RO: &[Sb] = &[RO];
pub const ONLY_WW: &[Sb] = &[WW];
pub const ONLY_FA: &[Sb] = &[FA];
pub const RO_WW: &[Sb] = &[RO, WW];
pub const WW_FA: &[Sb] = &[WW, FA];
/// Every network setting there is.
pub const NETS: &[Sb] = &[RO, WW, WW_NET, FA, FA_NONET];

impl Sb {
    pub fn flags(self) -> Vec<OsString> {
        let mut f = argv!["--mode", self.mode.name()];
        match self.net {
            Net::Default => {}
            Net::None => f.extend(argv!["--network", "none"]),
            Net::Full => f.extend(argv!["--network", "full"]),
        }
        f
    }

    pub fn label(self) -> String {
        match self.net {
            Net::Default => self.mode.name().to_owned(),
            Net::None => format!("{} --network none", self.mode.name()),
            Net::Full => format!("{} --network full", self.mode.name()),
        }
    }

    /// Own root + Landlock + the full seccomp list.
    pub fn confined(self) -> bool {
        self.mode != Mode::FullAccess
    }

    /// Whether the sandbox has the host's network.
    pub fn network(self) -> bool {
        match self.net {
            Net::Full => true,
            Net::None => false,
            Net::Default => self.mode == Mode::FullAccess,
        }
    }

    /// Picks the value for this variant's mode.
    pub fn pick<T>(self, read_only: T, workspace_write: T, full_access: T) -> T {
        match self.mode {
            Mode::ReadOnly => read_only,
            Mode::WorkspaceWrite => workspace_write,
            Mode::FullAccess => full_access,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Expected results
// ---------------------------------------------------------------------------------------------

/// What one run must produce.
#[derive(Clone, Debug)]
pub enum Expect {
    /// `ralph` exits 0 and the probe line says `ok: true`, with these fields equal.
    Ok(Vec<(&'static str, Value)>),
    /// `ralph` exits 0 and the probe line says `ok: false` with exactly this errno and step.
    Err {
        errno: &'static str,
        step: &'static str,
    },
    /// One of these errnos, at this step: only where the result genuinely depends on the host
    /// (the case says why next to it), or for a case marked BUG whose fixed errno depends on
    /// how the bug gets fixed. No case of the matrix needs it at present.
    ErrIn {
        errnos: &'static [&'static str],
        step: &'static str,
    },
    /// `ralph` exits with `code`; its stdout and stderr contain the given texts.
    Exit {
        code: i32,
        stdout: Vec<String>,
        stderr: Vec<String>,
    },
}

pub fn ok() -> Expect {
    Expect::Ok(Vec::new())
}

pub fn ok_with(fields: Vec<(&'static str, Value)>) -> Expect {
    Expect::Ok(fields)
}

pub fn err(errno: &'static str, step: &'static str) -> Expect {
    Expect::Err { errno, step }
}

pub fn exit(code: i32) -> Expect {
    Expect::Exit {
        code,
        stdout: Vec::new(),
        stderr: Vec::new(),
    }
}

pub fn exit_with(code: i32, stdout: &[&str], stderr: &[&str]) -> Expect {
    Expect::Exit {
        code,
        stdout: stdout.iter().map(|s| (*s).to_owned()).collect(),
        stderr: stderr.iter().map(|s| (*s).to_owned()).collect(),
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Ok(fields) if fields.is_empty() => write!(f, "ok"),
            Expect::Ok(fields) => {
                write!(f, "ok with")?;
                for (k, v) in fields {
                    write!(f, " {k}={v}")?;
                }
                Ok(())
            }
            Expect::Err { errno, step } => write!(f, "{errno} at {step}"),
            Expect::ErrIn { errnos, step } => write!(f, "one of {errnos:?} at {step}"),
            Expect::Exit {
                code,
                stdout,
                stderr,
            } => write!(
                f,
                "exit {code}, stdout containing {stdout:?}, stderr containing {stderr:?}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A world per case run
// ---------------------------------------------------------------------------------------------

/// A throw-away directory with a workspace `ws/` and a sibling `out/` outside the workspace
/// holding `out/f` ("outside\n", mode 0644).
#[derive(Debug)]
pub struct World {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub out: PathBuf,
}

impl World {
    /// A world in `/var/tmp`, which is writable by every user and, unlike `/tmp`, is not
    /// replaced by the sandbox's private `/tmp` (see the `tmp_*` cases for a workspace in `/tmp`).
    /// The filesystem modes do not bind `/var`: of the world, only the workspace (and what a
    /// case passes with `--read`/`--write`) exists inside.
    pub fn new() -> Self {
        let base = Path::new("/var/tmp");
        assert!(
            nix::unistd::access(base, nix::unistd::AccessFlags::W_OK).is_ok(),
            "the escape matrix needs a writable /var/tmp"
        );
        Self::in_dir(base)
    }

    /// A world under the host's `/tmp`, where the sandbox binds the workspace (and `--read`
    /// paths) back into its private `/tmp`.
    pub fn in_host_tmp() -> Self {
        Self::in_dir(Path::new("/tmp"))
    }

    fn in_dir(base: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-escape-")
            .tempdir_in(base)
            .unwrap();
        let root = dir.path().canonicalize().unwrap();
        let ws = root.join("ws");
        let out = root.join("out");
        std::fs::create_dir(&ws).unwrap();
        std::fs::create_dir(&out).unwrap();
        let f = out.join("f");
        std::fs::write(&f, "outside\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        Self {
            _dir: dir,
            root,
            ws,
            out,
        }
    }

    /// `out/f`, the outside file every world has.
    pub fn outside_file(&self) -> PathBuf {
        self.out.join("f")
    }

    /// Makes the workspace a git repository with one commit and an existing
    /// `.git/hooks/pre-commit`; returns the git binary.
    pub fn git_init(&self) -> PathBuf {
        let git = git_binary().expect("git is not installed (/usr/bin/git, /usr/local/bin/git)");
        std::fs::write(self.ws.join("README"), "hello\n").unwrap();
        for args in [
            &["init", "-q", "."][..],
            &["add", "README"],
            &["commit", "-q", "-m", "initial"],
        ] {
            self.host_git(&git, args);
        }
        std::fs::write(self.ws.join(".git/hooks/pre-commit"), HOOK).unwrap();
        std::fs::set_permissions(
            self.ws.join(".git/hooks/pre-commit"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        git
    }

    /// Runs git on the host in the workspace (with a HOME of its own, so it works as any user).
    pub fn host_git(&self, git: &Path, args: &[&str]) -> String {
        let out = Command::new(git)
            .args([
                "-c",
                "user.name=ralph-test",
                "-c",
                "user.email=test@example.invalid",
            ])
            .args(args)
            .current_dir(&self.ws)
            .env("HOME", &self.root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "host git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The content of the pre-commit hook [`World::git_init`] installs.
pub const HOOK: &str = "#!/bin/sh\nexit 0\n";

pub fn git_binary() -> Option<PathBuf> {
    ["/usr/bin/git", "/usr/local/bin/git"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
}

/// Mode bits of a host path.
pub fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

// ---------------------------------------------------------------------------------------------
// One run
// ---------------------------------------------------------------------------------------------

/// What a `ralph` run printed.
#[derive(Debug)]
pub struct Run {
    pub command: String,
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// The probe's line, if stdout is exactly one JSON object line.
    pub fn json(&self) -> Option<Value> {
        let mut lines = self.stdout.lines().filter(|l| !l.trim().is_empty());
        let first = lines.next()?;
        if lines.next().is_some() {
            return None;
        }
        serde_json::from_str(first).ok()
    }

    pub fn describe(&self) -> String {
        format!(
            "  command: {}\n  exit: {}\n  stdout: {}\n  stderr: {}",
            self.command,
            self.code,
            show(&self.stdout),
            show(&self.stderr)
        )
    }
}

fn show(text: &str) -> String {
    let text = text.replace('\0', "\\0");
    let text = text.trim_end();
    if text.is_empty() {
        "(empty)".to_owned()
    } else if text.len() > 4000 {
        format!("{}… ({} bytes)", &text[..4000], text.len())
    } else {
        text.to_owned()
    }
}

fn shell_words(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                s.into_owned()
            } else {
                format!("'{}'", s.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A check made after the run (host state, listener, …): `Err` explains what is wrong.
pub type After = Box<dyn FnOnce(&Run) -> Result<(), String>>;

/// What to run in one sandbox variant, and what must come out.
pub struct Spec {
    /// The sandboxed command.
    pub cmd: Vec<OsString>,
    /// Extra `ralph sandbox exec` flags.
    pub flags: Vec<OsString>,
    /// Extra environment of `ralph`.
    pub env: Vec<(String, String)>,
    /// The workspace, if not the world's.
    pub ws: Option<PathBuf>,
    pub expect: Expect,
    /// A probe call that must succeed in the same sandbox first (the target is there).
    pub visible: Option<Vec<OsString>>,
    pub after: Vec<After>,
    /// How `ralph` is started (pty, inherited descriptor).
    pub launch: Launch,
    /// Kept alive until the run is checked (listeners, other worlds, child processes).
    pub keep: Vec<Box<dyn std::any::Any>>,
    /// Why this case cannot run on this host (printed; the case does not count as passed).
    pub skip: Option<String>,
}

impl Spec {
    /// Runs the probe with `args`.
    pub fn probe(args: Vec<OsString>, expect: Expect) -> Self {
        let mut cmd = vec![probe().into_os_string()];
        cmd.extend(args);
        Self::cmd(cmd, expect)
    }

    /// Runs `cmd` as is.
    pub fn cmd(cmd: Vec<OsString>, expect: Expect) -> Self {
        Self {
            cmd,
            flags: Vec::new(),
            env: Vec::new(),
            ws: None,
            expect,
            visible: None,
            after: Vec::new(),
            launch: Launch::default(),
            keep: Vec::new(),
            skip: None,
        }
    }

    /// Runs `/bin/sh -c script` with `$0` = the probe and `$1…` = `args`; a script that ends
    /// with `exec "$0" ACTION …` makes the probe's line the run's result.
    pub fn sh(script: &str, args: Vec<OsString>, expect: Expect) -> Self {
        let mut cmd = argv!["/bin/sh", "-c", script, probe()];
        cmd.extend(args);
        Self::cmd(cmd, expect)
    }

    /// Runs a Python snippet (see [`py_script`]) with `args` as `sys.argv[1:]`.
    pub fn py(body: &str, args: Vec<OsString>, expect: Expect) -> Self {
        let mut cmd = argv![PYTHON, "-c", py_script(body)];
        cmd.extend(args);
        let mut spec = Self::cmd(cmd, expect);
        if !Path::new(PYTHON).is_file() {
            spec.skip = Some(format!("{PYTHON} is not installed"));
        }
        spec
    }

    pub fn skip(reason: impl Into<String>) -> Self {
        let mut s = Self::cmd(Vec::new(), ok());
        s.skip = Some(reason.into());
        s
    }

    pub fn flag(mut self, f: impl AsRef<OsStr>) -> Self {
        self.flags.push(f.as_ref().to_owned());
        self
    }

    pub fn flags(mut self, f: Vec<OsString>) -> Self {
        self.flags.extend(f);
        self
    }

    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_owned(), v.to_owned()));
        self
    }

    pub fn ws(mut self, ws: &Path) -> Self {
        self.ws = Some(ws.to_owned());
        self
    }

    /// Before the attempt, `probe ARGS` must succeed in the same sandbox.
    pub fn visible(mut self, args: Vec<OsString>) -> Self {
        self.visible = Some(args);
        self
    }

    pub fn after(mut self, check: impl FnOnce(&Run) -> Result<(), String> + 'static) -> Self {
        self.after.push(Box::new(check));
        self
    }

    pub fn keep(mut self, thing: impl std::any::Any) -> Self {
        self.keep.push(Box::new(thing));
        self
    }

    /// Starts `ralph` with a new pseudo-terminal as stdin and controlling terminal.
    pub fn pty(mut self) -> Self {
        self.launch.pty = true;
        self
    }

    /// Starts `ralph` with `path` open on descriptor 7 (not close-on-exec).
    pub fn inherit(mut self, path: &Path) -> Self {
        self.launch.inherit = Some(path.to_owned());
        self
    }
}

pub const PYTHON: &str = "/usr/bin/python3";

/// A Python program that prints one probe-style JSON line: `out(True, …)` or `fail(e, step)`.
pub fn py_script(body: &str) -> String {
    format!(
        "import errno, json, os, socket, sys\n\
         def out(ok, **kw):\n    print(json.dumps(dict(action='py', ok=ok, **kw))); sys.exit(0)\n\
         def fail(e, step):\n    out(False, errno=errno.errorcode.get(e.errno, 'E%d' % e.errno), code=e.errno, step=step)\n\
         {body}\n"
    )
}

/// How `ralph` is started.
#[derive(Clone, Debug, Default)]
pub struct Launch {
    /// stdin is a new pseudo-terminal, the controlling terminal of `ralph`.
    pub pty: bool,
    /// This path is open on descriptor 7 of `ralph`, without close-on-exec.
    pub inherit: Option<PathBuf>,
}

thread_local! {
    /// Flags every run of the current test adds (the docker matrix: `--backend docker …`). Per
    /// thread, that is per test: one binary may run the same cases against several backends.
    static BACKEND_FLAGS: std::cell::RefCell<Vec<OsString>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes every `ralph sandbox exec` of the current test use these backend flags.
pub fn set_backend_flags(flags: Vec<OsString>) {
    BACKEND_FLAGS.with(|f| *f.borrow_mut() = flags);
}

/// The backend flags of the current test.
pub fn backend_flags() -> Vec<OsString> {
    BACKEND_FLAGS.with(|f| f.borrow().clone())
}

/// Runs `ralph sandbox exec` in `sb` with the extra `flags` and `cmd`.
pub fn exec(
    sb: Sb,
    ws: &Path,
    flags: &[OsString],
    env: &[(String, String)],
    cmd: &[OsString],
    launch: &Launch,
) -> Run {
    let mut argv = argv!["sandbox", "exec"];
    argv.extend(backend_flags());
    argv.extend(sb.flags());
    argv.extend(argv!["--workspace", ws, "--read", bin_dir()]);
    // A hung case must not hang the suite (unless the case sets its own timeout).
    if !flags.iter().any(|f| f == "--timeout") {
        argv.extend(argv!["--timeout", "60s"]);
    }
    argv.extend(flags.iter().cloned());
    argv.push("--".into());
    argv.extend(cmd.iter().cloned());
    run_ralph(&argv, env, launch)
}

/// Runs `ralph ARGV` from `/` (so the command's directory is the workspace).
pub fn run_ralph(argv: &[OsString], env: &[(String, String)], launch: &Launch) -> Run {
    let mut c = Command::new(ralph());
    c.args(argv).current_dir("/");
    let mut command = "cd / &&".to_owned();
    for (k, v) in env {
        c.env(k, v);
        command = format!("{command} {k}={v}");
    }
    command.push(' ');
    command.push_str(&shell_words(&[ralph().into_os_string()]));
    command.push(' ');
    command.push_str(&shell_words(argv));
    let mut keep = Vec::new();
    if let Some(path) = &launch.inherit {
        let file = std::fs::File::open(path).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        keep.push(file);
        command.push_str(&format!(" 7<{}", path.display()));
        // SAFETY: between fork and exec the closure only calls dup2(2), which is
        // async-signal-safe; `fd` stays open in the parent until the child has exec'd.
        unsafe {
            c.pre_exec(move || {
                if libc::dup2(fd, 7) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut master = None;
    if launch.pty {
        let pty = nix::pty::openpty(None, None).unwrap();
        c.stdin(Stdio::from(pty.slave));
        with_controlling_tty(&mut c);
        master = Some(pty.master);
        command.push_str("   # stdin: a new pty, the controlling terminal of ralph");
    } else {
        c.stdin(Stdio::null());
    }
    let out = c.output().unwrap();
    drop((master, keep));
    Run {
        command,
        code: out.status.code().unwrap_or_else(|| {
            use std::os::unix::process::ExitStatusExt;
            128 + out.status.signal().unwrap_or(0)
        }),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Makes the child a session leader whose controlling terminal is its stdin.
pub fn with_controlling_tty(c: &mut Command) {
    // SAFETY: between fork and exec the closure only calls setsid(2) and ioctl(2), which are
    // async-signal-safe, and touches no memory shared with the parent.
    unsafe {
        c.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Runs the probe on the host, outside any sandbox (only for harmless actions).
pub fn host_probe(args: Vec<OsString>) -> Value {
    let out = Command::new(probe())
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "host probe {args:?}: not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Compares a run with what was expected.
pub fn check(expect: &Expect, run: &Run) -> Result<(), String> {
    match expect {
        Expect::Ok(fields) => {
            let j = probe_line(run)?;
            if j["ok"] != Value::Bool(true) {
                return Err(format!("the probe failed: {j}"));
            }
            for (k, v) in fields {
                if &j[*k] != v {
                    return Err(format!("field {k} is {}, expected {v}", j[*k]));
                }
            }
            Ok(())
        }
        Expect::Err { errno, step } => {
            let j = probe_line(run)?;
            if j["ok"] != Value::Bool(false) || j["errno"] != *errno || j["step"] != *step {
                return Err(format!("got {j}"));
            }
            Ok(())
        }
        Expect::ErrIn { errnos, step } => {
            let j = probe_line(run)?;
            let errno = j["errno"].as_str().unwrap_or("");
            if j["ok"] != Value::Bool(false) || !errnos.contains(&errno) || j["step"] != *step {
                return Err(format!("got {j}"));
            }
            Ok(())
        }
        Expect::Exit {
            code,
            stdout,
            stderr,
        } => {
            if run.code != *code {
                return Err(format!("exit code {}, expected {code}", run.code));
            }
            for s in stdout {
                if !run.stdout.contains(s.as_str()) {
                    return Err(format!("stdout does not contain {s:?}"));
                }
            }
            for s in stderr {
                if !run.stderr.contains(s.as_str()) {
                    return Err(format!("stderr does not contain {s:?}"));
                }
            }
            Ok(())
        }
    }
}

fn probe_line(run: &Run) -> Result<Value, String> {
    if run.code != 0 {
        return Err(format!(
            "ralph exited {} (expected 0: the command ran and reported)",
            run.code
        ));
    }
    run.json()
        .ok_or_else(|| "stdout is not exactly one JSON line".to_owned())
}

// ---------------------------------------------------------------------------------------------
// Cases and the runner
// ---------------------------------------------------------------------------------------------

/// Builds the run of a case for one variant in a fresh world.
pub type Build = fn(&World, Sb) -> Spec;

/// One row of the matrix.
pub struct Case {
    pub name: &'static str,
    pub sandboxes: &'static [Sb],
    /// Variants where the sandbox is known to be wrong (with the evidence in the message): the
    /// matrix skips them and an `#[ignore = "BUG: …"]` test runs them.
    pub bug: Option<(&'static [Sb], &'static str)>,
    pub build: Build,
}

impl Case {
    pub fn new(name: &'static str, sandboxes: &'static [Sb], build: Build) -> Self {
        Self {
            name,
            sandboxes,
            bug: None,
            build,
        }
    }

    /// Marks the case as a known bug in `sandboxes` (a subset of its variants).
    pub fn bug(mut self, sandboxes: &'static [Sb], why: &'static str) -> Self {
        self.bug = Some((sandboxes, why));
        self
    }

    fn is_bug(&self, sb: Sb) -> bool {
        self.bug.is_some_and(|(sbs, _)| sbs.contains(&sb))
    }
}

/// The result of one case run.
pub enum Outcome {
    Passed,
    Skipped(String),
    Failed(String),
}

/// Runs one case in one variant.
pub fn run_case(case: &Case, sb: Sb) -> Outcome {
    let world = World::new();
    let built = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (case.build)(&world, sb)));
    let spec = match built {
        Ok(spec) => spec,
        Err(panic) => {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            return Outcome::Failed(format!(
                "[{} | {}] precondition failed while setting up: {why}",
                case.name,
                sb.label()
            ));
        }
    };
    if let Some(reason) = spec.skip {
        return Outcome::Skipped(reason);
    }
    let ws = spec.ws.clone().unwrap_or_else(|| world.ws.clone());
    let header = format!(
        "[{} | {}] expected {}{}",
        case.name,
        sb.label(),
        spec.expect,
        case.bug
            .filter(|(sbs, _)| sbs.contains(&sb))
            .map(|(_, why)| format!("\n  known BUG: {why}"))
            .unwrap_or_default()
    );
    if let Some(args) = &spec.visible {
        let mut cmd = vec![probe().into_os_string()];
        cmd.extend(args.iter().cloned());
        let pre = exec(sb, &ws, &spec.flags, &spec.env, &cmd, &Launch::default());
        if let Err(why) = check(&ok(), &pre) {
            return Outcome::Failed(format!(
                "{header}\n  precondition failed: the target is not visible in the sandbox \
                 ({why}), so a refusal would prove nothing\n{}",
                pre.describe()
            ));
        }
    }
    let run = exec(sb, &ws, &spec.flags, &spec.env, &spec.cmd, &spec.launch);
    let mut problems = Vec::new();
    if let Err(why) = check(&spec.expect, &run) {
        problems.push(why);
    }
    for after in spec.after {
        if let Err(why) = after(&run) {
            problems.push(why);
        }
    }
    drop(spec.keep);
    if problems.is_empty() {
        Outcome::Passed
    } else {
        Outcome::Failed(format!(
            "{header}\n  problem: {}\n{}",
            problems.join("\n  problem: "),
            run.describe()
        ))
    }
}

/// Runs every (case, variant) of `cases` except known bugs; fails listing every mismatch.
pub fn run_matrix(group: &str, cases: &[Case]) {
    let mut failures = Vec::new();
    let mut report = String::new();
    let (mut passed, mut skipped, mut bugs) = (0, 0, 0);
    for case in cases {
        for &sb in case.sandboxes {
            if case.is_bug(sb) {
                bugs += 1;
                let _ = writeln!(
                    report,
                    "  BUG (ignored here)  {} | {}",
                    case.name,
                    sb.label()
                );
                continue;
            }
            match run_case(case, sb) {
                Outcome::Passed => passed += 1,
                Outcome::Skipped(reason) => {
                    skipped += 1;
                    let _ = writeln!(
                        report,
                        "  SKIPPED  {} | {}: {reason}",
                        case.name,
                        sb.label()
                    );
                }
                Outcome::Failed(msg) => failures.push(msg),
            }
        }
    }
    eprintln!(
        "{group}: {passed} passed, {} failed, {skipped} skipped, {bugs} known bugs (uid {})\n{report}",
        failures.len(),
        nix::unistd::geteuid()
    );
    assert!(
        failures.is_empty(),
        "{group}: {} case run(s) failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Runs the BUG variants of the case `name` (for its `#[ignore = "BUG: …"]` test).
pub fn run_bug(cases: &[Case], name: &str) {
    let case = cases
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no case {name}"));
    let (sbs, why) = case
        .bug
        .unwrap_or_else(|| panic!("case {name} is not marked BUG"));
    let mut failures = Vec::new();
    for &sb in sbs {
        match run_case(case, sb) {
            Outcome::Passed => {}
            Outcome::Skipped(reason) => eprintln!("{name} | {}: skipped: {reason}", sb.label()),
            Outcome::Failed(msg) => failures.push(msg),
        }
    }
    assert!(
        failures.is_empty(),
        "{name} (known BUG: {why}):\n\n{}",
        failures.join("\n\n")
    );
}

/// Checks the shape of the matrix: unique names, variants of bugs among the case's variants.
pub fn check_table(cases: &[Case]) -> (usize, usize) {
    let mut names = std::collections::HashSet::new();
    let mut runs = 0;
    for c in cases {
        assert!(names.insert(c.name), "duplicate case name {}", c.name);
        assert!(!c.sandboxes.is_empty(), "{} runs nowhere", c.name);
        if let Some((sbs, _)) = c.bug {
            for sb in sbs {
                assert!(
                    c.sandboxes.contains(sb),
                    "{}: bug variant not a variant",
                    c.name
                );
            }
        }
        runs += c.sandboxes.len();
    }
    (names.len(), runs)
}

// ---------------------------------------------------------------------------------------------
// Host helpers
// ---------------------------------------------------------------------------------------------

/// A child process killed (and reaped) when dropped.
#[derive(Debug)]
pub struct Guard(pub std::process::Child);

impl Guard {
    pub fn pid(&self) -> i32 {
        i32::try_from(self.0.id()).unwrap()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `sleep` on the host, outside any sandbox, running as the test's user.
pub fn host_sleeper() -> Guard {
    let child = Command::new("sleep")
        .arg("60")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let g = Guard(child);
    assert!(
        Path::new(&format!("/proc/{}", g.pid())).exists(),
        "the host process is not running"
    );
    // Host pids this large cannot be confused with the few pids of a sandbox's own namespace.
    assert!(g.pid() > 50, "host pid {} is implausibly small", g.pid());
    g
}

/// Whether the current user can create cgroups for a controller (`memory`, `pids`) where
/// `ralph` would: below the cgroup this process is in.
pub fn cgroup_writable(controller: &str) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return false;
    };
    let mut dir = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if ctrls.split(',').any(|c| c == controller) {
            dir = Some(
                Path::new("/sys/fs/cgroup")
                    .join(controller)
                    .join(path.trim_start_matches('/')),
            );
        } else if ctrls.is_empty() && dir.is_none() {
            let v2 =
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            if v2.split_whitespace().any(|c| c == controller) {
                dir = Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')));
            }
        }
    }
    dir.is_some_and(|d| nix::unistd::access(&d, nix::unistd::AccessFlags::W_OK).is_ok())
}

/// What the probe gets on the host, outside any sandbox, as the expectation (for actions that
/// full-access must leave exactly as the host has them; only harmless read-type actions).
/// Valid where the answer does not hang on capabilities, which the sandbox drops: for the
/// Debian defaults used here (`/root` 0700 root, `/etc/shadow` 0640 root, `/etc/ssl/private`
/// 0700 root) root reads them as their owner, other users not at all.
pub fn like_host(args: Vec<OsString>) -> Expect {
    let j = host_probe(args);
    if j["ok"] == Value::Bool(true) {
        ok()
    } else {
        let leak = |v: &Value| -> &'static str {
            Box::leak(v.as_str().unwrap_or("?").to_owned().into_boxed_str())
        };
        err(leak(&j["errno"]), leak(&j["step"]))
    }
}

/// After the run, `path` exists on the host exactly when `want`.
pub fn exists_iff(path: PathBuf, want: bool) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| {
        let exists = path.symlink_metadata().is_ok();
        if exists == want {
            Ok(())
        } else if exists {
            Err(format!("{} exists on the host afterwards", path.display()))
        } else {
            Err(format!(
                "{} does not exist on the host afterwards",
                path.display()
            ))
        }
    }
}

/// After the run, the host file `path` holds `want`.
pub fn content_is(path: PathBuf, want: &'static str) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| {
        let got = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "{} holds {got:?} afterwards, expected {want:?}",
                path.display()
            ))
        }
    }
}

/// A name no other test run uses.
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
