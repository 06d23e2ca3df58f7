//! The runner's own git command: run on trees a round may have written, so it must never execute
//! anything those trees configure. The environment is cleared (no system or global config, no
//! HOME, no askpass, no terminal prompt), hooks, fsmonitor and external diff programs are off on
//! the command line, and only the transports in [`PROTOCOLS`] are allowed (never `ext::`).
//! Callers that read a workspace point `GIT_DIR` at a repository of the runner's own, so the
//! workspace's `.git/config` is never read at all. Where it reads what a round wrote, it runs
//! under a memory bound ([`Git::bounded`], [`super::git_bound`]).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};

use super::git_bound::{self, Bound};

/// Transports the runner's git may use.
const PROTOCOLS: [&str; 5] = ["http", "https", "git", "ssh", "file"];

/// Longest stderr quoted in an error.
const STDERR_QUOTE: usize = 2048;

/// A git command that failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be started.
    #[error("failed to run `git {args}`: {source}")]
    Spawn {
        /// The arguments.
        args: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// git ran and failed.
    #[error("failed to run `git {args}`: {status}: {stderr}")]
    Failed {
        /// The arguments.
        args: String,
        /// How it ended.
        status: std::process::ExitStatus,
        /// The end of its stderr.
        stderr: String,
    },
    /// A bounded git ran out of the memory the runner allows it.
    #[error(
        "failed to run `git {args}`: it ran out of memory under the runner's bound of {limit} of address space ({how}): {stderr}"
    )]
    OutOfMemory {
        /// The arguments.
        args: String,
        /// The bound (`1G`).
        limit: String,
        /// What told (a signal, git's message).
        how: String,
        /// The end of its stderr.
        stderr: String,
    },
}

/// How a git command ended, whatever its exit status.
#[derive(Debug)]
pub struct Ran {
    /// How it ended.
    pub status: ExitStatus,
    /// Its stdout (empty when it went to a file).
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
}

/// A git command with the runner's safe environment.
#[derive(Debug)]
pub struct Git {
    cmd: Command,
    settings: Vec<String>,
    args: Vec<OsString>,
    shown: Vec<String>,
    bound: Option<Bound>,
    stdin: Option<std::fs::File>,
}

/// The PATH the runner's git runs with (the runner's own, or the usual system one).
fn search_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

impl Git {
    /// `git ARGS…` with a cleared environment and the safe settings.
    pub fn new() -> Self {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", search_path())
            .env("HOME", "/nonexistent")
            .env("LC_ALL", "C")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_ATTR_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "/bin/false")
            .env("SSH_ASKPASS", "/bin/false")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_AUTHOR_NAME", "ralph")
            .env("GIT_AUTHOR_EMAIL", "ralph@localhost")
            .env("GIT_COMMITTER_NAME", "ralph")
            .env("GIT_COMMITTER_EMAIL", "ralph@localhost")
            .stdin(Stdio::null());
        let mut settings = vec![
            "core.hooksPath=/dev/null".to_owned(),
            "core.fsmonitor=false".to_owned(),
            "core.untrackedCache=false".to_owned(),
            "core.sshCommand=ssh -o BatchMode=yes".to_owned(),
            "diff.external=".to_owned(),
            "credential.helper=".to_owned(),
            "safe.directory=*".to_owned(),
            "protocol.allow=never".to_owned(),
            "advice.detachedHead=false".to_owned(),
            "init.defaultBranch=main".to_owned(),
        ];
        settings.extend(
            PROTOCOLS
                .iter()
                .map(|p| format!("protocol.{p}.allow=always")),
        );
        Self {
            cmd,
            settings,
            args: Vec::new(),
            shown: Vec::new(),
            bound: None,
            stdin: None,
        }
    }

    /// Adds a `-c NAME=VALUE` setting (shown on its command line: never a secret).
    pub fn config(mut self, setting: &str) -> Self {
        self.settings.push(setting.to_owned());
        self
    }

    /// Runs it under the memory bound `bound` ([`super::git_bound`]): its address space
    /// limited, large files streamed, its peak resident memory recorded, a failure for memory
    /// reported as [`GitError::OutOfMemory`].
    pub fn bounded(mut self, bound: &Bound) -> Self {
        self.settings
            .extend(git_bound::SETTINGS.iter().map(|s| (*s).to_owned()));
        self.cmd.env("MALLOC_ARENA_MAX", "1");
        self.bound = Some(bound.clone());
        self
    }

    /// Gives it `file` as its stdin.
    pub fn stdin_file(mut self, file: std::fs::File) -> Self {
        self.stdin = Some(file);
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.shown.push(a.as_ref().to_string_lossy().into_owned());
            self.args.push(a.as_ref().to_owned());
        }
        self
    }

    /// Sets an environment variable (`GIT_DIR`, `GIT_WORK_TREE`, `GIT_INDEX_FILE`, …).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Runs git in `dir`.
    pub fn current_dir(mut self, dir: &Path) -> Self {
        self.cmd.current_dir(dir);
        self
    }

    /// Adds runner-side configuration through the environment (`GIT_CONFIG_COUNT`), so a
    /// secret in it never shows on a command line.
    pub fn secret_config(mut self, pairs: &[(String, String)]) -> Self {
        self.cmd.env("GIT_CONFIG_COUNT", pairs.len().to_string());
        for (i, (k, v)) in pairs.iter().enumerate() {
            self.cmd.env(format!("GIT_CONFIG_KEY_{i}"), k);
            self.cmd.env(format!("GIT_CONFIG_VALUE_{i}"), v);
        }
        self
    }

    fn shown(&self) -> String {
        crate::util::text::bounded(&self.shown.join(" "), 512)
    }

    /// Runs it; its stdout on success.
    pub fn output(self) -> Result<Vec<u8>, GitError> {
        Ok(self.run_to(None, true)?.stdout)
    }

    /// Runs it, its stdout written to `to`.
    pub fn output_to(self, to: &Path) -> Result<(), GitError> {
        let args = self.shown();
        let file = std::fs::File::create(to).map_err(|source| GitError::Spawn {
            args: format!("{args} > {}", to.display()),
            source,
        })?;
        self.run_to(Some(file), true).map(|_| ())
    }

    /// Runs it and says how it ended, whatever its exit status (a bounded git out of memory
    /// is still [`GitError::OutOfMemory`]).
    pub fn run(self) -> Result<Ran, GitError> {
        self.run_to(None, false)
    }

    /// Runs it, stdout to `file` when given (else captured); `checked`: a failure is an error.
    fn run_to(mut self, file: Option<std::fs::File>, checked: bool) -> Result<Ran, GitError> {
        let args = self.shown();
        let spawn_err = |source| GitError::Spawn {
            args: args.clone(),
            source,
        };
        let ran = match spawnable(self.bound.as_ref()) {
            Some(git) => self.spawned(git, file),
            None => self.forked(file),
        }
        .map_err(spawn_err)?;
        if let Some(bound) = &self.bound
            && !ran.status.success()
        {
            let stderr = quote(&ran.stderr);
            if let Some(how) = git_bound::out_of_memory(ran.status, &stderr) {
                return Err(GitError::OutOfMemory {
                    args,
                    limit: bound.shown(),
                    how,
                    stderr,
                });
            }
        }
        if checked && !ran.status.success() {
            return Err(GitError::Failed {
                args,
                status: ran.status,
                stderr: quote(&ran.stderr),
            });
        }
        Ok(ran)
    }

    /// Runs it without forking the runner ([`ralph_sandbox::posix_spawn::run`]): `git` the
    /// program found in the runner's PATH; a bounded one through `/bin/sh`, which sets the
    /// address-space limit before it executes git ([`git_bound::limited`]).
    fn spawned(&mut self, git: &Path, file: Option<std::fs::File>) -> std::io::Result<Ran> {
        let mut argv: Vec<OsString> = match &self.bound {
            Some(bound) => git_bound::limited(git, bound.address_space),
            None => vec![git.as_os_str().to_owned()],
        };
        for s in &self.settings {
            argv.push("-c".into());
            argv.push(s.into());
        }
        argv.extend(self.args.iter().cloned());
        let env = self
            .cmd
            .get_envs()
            .filter_map(|(k, v)| {
                let mut kv = k.to_owned();
                kv.push("=");
                kv.push(v?);
                Some(kv)
            })
            .collect();
        let done = ralph_sandbox::posix_spawn::run(ralph_sandbox::posix_spawn::Command {
            argv,
            env,
            cwd: self.cmd.get_current_dir().map(Path::to_path_buf),
            stdin: self.stdin.take(),
            stdout: file,
        })?;
        if let Some(bound) = &self.bound {
            git_bound::record(bound, done.max_rss);
        }
        Ok(Ran {
            status: done.status,
            stdout: done.stdout,
            stderr: done.stderr,
        })
    }

    /// Runs it with `std::process::Command` (a fork of the runner): where git is not found in
    /// the PATH (the error is then std's), or `/bin/sh` cannot set a bounded one's limit.
    fn forked(&mut self, file: Option<std::fs::File>) -> std::io::Result<Ran> {
        for s in &self.settings {
            self.cmd.arg("-c").arg(s);
        }
        self.cmd.args(&self.args);
        if let Some(stdin) = self.stdin.take() {
            self.cmd.stdin(stdin);
        }
        let to_file = file.is_some();
        self.cmd.stdout(file.map_or_else(Stdio::piped, Stdio::from));
        self.cmd.stderr(Stdio::piped());
        match &self.bound {
            None => {
                let out: Output = self.cmd.output()?;
                Ok(Ran {
                    status: out.status,
                    stdout: if to_file { Vec::new() } else { out.stdout },
                    stderr: out.stderr,
                })
            }
            Some(bound) => {
                let bound = bound.clone();
                git_bound::limit_child(&mut self.cmd, bound.address_space);
                measured(&mut self.cmd, &bound)
            }
        }
    }

    /// Runs it; its stdout as one trimmed line.
    pub fn line(self) -> Result<String, GitError> {
        let out = self.output()?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }
}

impl Default for Git {
    fn default() -> Self {
        Self::new()
    }
}

/// The end of git's stderr, safe to print.
fn quote(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    crate::util::text::bounded_tail(text.trim(), STDERR_QUOTE)
}

/// Runs `cmd` (stdout piped or to a file, stderr piped) and reaps it with `wait4`, its peak
/// resident memory recorded in `bound`'s meter.
fn measured(cmd: &mut Command, bound: &Bound) -> std::io::Result<Ran> {
    let mut child = cmd.spawn()?;
    let mut err = child.stderr.take();
    let stderr = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut buf);
        }
        buf
    });
    let mut stdout = Vec::new();
    let read = match child.stdout.take() {
        Some(mut out) => out.read_to_end(&mut stdout).map(|_| ()),
        None => Ok(()),
    };
    let reaped = git_bound::reap(&child);
    let stderr = stderr.join().unwrap_or_default();
    let (status, max_rss) = reaped?;
    read?;
    git_bound::record(bound, max_rss);
    Ok(Ran {
        status,
        stdout,
        stderr,
    })
}

/// The git a command runs through `posix_spawn`, if it can: the first `git` in the runner's
/// PATH (found once), for a bounded command only where `/bin/sh` can set the bound
/// ([`git_bound::shell_limits`]).
fn spawnable(bound: Option<&Bound>) -> Option<&'static Path> {
    static GIT: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    let git = GIT
        .get_or_init(|| {
            std::env::split_paths(&search_path())
                .map(|dir| dir.join("git"))
                .find(|p| {
                    p.is_absolute()
                        && nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::X_OK).is_ok()
                        && p.is_file()
                })
        })
        .as_deref()?;
    (bound.is_none() || git_bound::shell_limits()).then_some(git)
}

/// `git --git-dir=DIR …`.
pub fn at(git_dir: &Path) -> Git {
    Git::new().env("GIT_DIR", git_dir)
}
