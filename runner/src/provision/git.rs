//! The runner's own git command: run on trees a round may have written, so it must never execute
//! anything those trees configure. The environment is cleared (no system or global config, no
//! HOME, no askpass, no terminal prompt), hooks, fsmonitor and external diff programs are off on
//! the command line, and only the transports in [`PROTOCOLS`] are allowed (never `ext::`).
//! Callers that read a workspace point `GIT_DIR` at a repository of the runner's own, so the
//! workspace's `.git/config` is never read at all.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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
}

/// A git command with the runner's safe environment.
#[derive(Debug)]
pub struct Git {
    cmd: Command,
    shown: Vec<String>,
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
        for s in settings {
            cmd.arg("-c").arg(s);
        }
        Self {
            cmd,
            shown: Vec::new(),
        }
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        for a in args {
            self.shown.push(a.as_ref().to_string_lossy().into_owned());
            self.cmd.arg(a);
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
    pub fn output(mut self) -> Result<Vec<u8>, GitError> {
        let args = self.shown();
        let out: Output = self
            .cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| GitError::Spawn {
                args: args.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args,
                status: out.status,
                stderr: quote(&out.stderr),
            });
        }
        Ok(out.stdout)
    }

    /// Runs it, its stdout written to `to`.
    pub fn output_to(mut self, to: &Path) -> Result<(), GitError> {
        let args = self.shown();
        let file = std::fs::File::create(to).map_err(|source| GitError::Spawn {
            args: format!("{args} > {}", to.display()),
            source,
        })?;
        self.cmd.stdout(file);
        let out = self
            .cmd
            .stderr(Stdio::piped())
            .output()
            .map_err(|source| GitError::Spawn {
                args: args.clone(),
                source,
            })?;
        if !out.status.success() {
            return Err(GitError::Failed {
                args,
                status: out.status,
                stderr: quote(&out.stderr),
            });
        }
        Ok(())
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

/// `git --git-dir=DIR …`.
pub fn at(git_dir: &Path) -> Git {
    Git::new().env("GIT_DIR", git_dir)
}
