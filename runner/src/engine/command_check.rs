//! Before round 1: can the sandbox run the program an `--agent-cmd` or `--verify` command (or a
//! preset's CLI, [`super::preset_check`]) starts with, and is it the same program the runner's
//! shell would run (SPEC §6, §12)? A script in `/tmp` or a tool under a home directory is there on
//! the runner but not inside the sandbox; a `python3` from a virtualenv the sandbox cannot see
//! is silently `/usr/bin/python3` inside, without the project's packages. Without this check the
//! job finds out in round 1 (`not found`, exit 127, or `No module named pytest`) after a round is
//! spent, and every later round fails the same way.
//!
//! What the round will see, the job's sandbox says ([`ralph_sandbox::Sandbox::can_see`]: the
//! policy's trees, the workspace, the job's `--read`/`--write` paths and its toolchain grant
//! ([`crate::toolchain`])); a program in a toolchain the grant covers needs no hint. Otherwise
//! the answer is a fix that works: `--toolchain auto` where the job turned toolchains off and a
//! toolchain rule covers the program, else the `--read` paths of the program, what its links
//! lead to and its script's interpreter (a file rather than a directory that would show
//! credentials). Which programs can be judged without running the shell:
//! [`crate::toolchain::program::first_program`].

use std::path::{Path, PathBuf};

use ralph_sandbox::Mode;

use super::env::{DEFAULT_PATH, RunnerEnv};
use super::preset_check::grant_for;
use super::sandboxes::Sandboxes;
use crate::job::JobSpec;
use crate::toolchain::program::{candidates, interpreter};
use crate::toolchain::{RealFs, ToolchainMode};

pub use crate::toolchain::program::first_program;

/// What the sandbox of a job shows of the runner's filesystem.
pub(super) struct View<'a> {
    spec: &'a JobSpec,
    env: &'a RunnerEnv,
    /// The job's sandbox, which says what it shows.
    sandbox: &'a dyn ralph_sandbox::Sandbox,
    /// The mode's policy.
    policy: ralph_sandbox::policy::Policy,
    /// The request the sandbox is asked what it shows: the job's trees and its toolchain
    /// grant's (the private directories, which hold nothing of the runner, left empty).
    req: ralph_sandbox::SandboxRequest,
}

impl<'a> View<'a> {
    /// The view of `spec`'s sandbox (its mode's policy); `None` in `full-access` (everything is
    /// seen).
    pub(super) fn of(
        spec: &'a JobSpec,
        env: &'a RunnerEnv,
        sandboxes: &'a Sandboxes,
    ) -> Result<Option<Self>, String> {
        if spec.sandbox.mode == Mode::FullAccess {
            return Ok(None);
        }
        let policy = sandboxes
            .policies()
            .get(spec.sandbox.mode)
            .map_err(|e| e.to_string())?
            .clone();
        let grant = crate::toolchain::for_job(spec, env, &policy.filesystem.read, &[]);
        let s = &spec.sandbox;
        let req = ralph_sandbox::SandboxRequest {
            read: s
                .read
                .iter()
                .chain(grant.toolchains.iter().flat_map(|t| &t.read))
                .cloned()
                .collect(),
            write: s.write.clone(),
            ..ralph_sandbox::SandboxRequest::minimal(
                s.mode,
                spec.workspace.clone(),
                PathBuf::new(),
                PathBuf::new(),
            )
        };
        let sandbox = sandboxes.get(s.backend);
        // The sandbox's answer needs the mode's policy: a failure to have it is said here, once.
        sandbox
            .can_see(&req, &spec.workspace)
            .map_err(|e| e.to_string())?;
        Ok(Some(Self {
            spec,
            env,
            sandbox,
            policy,
            req,
        }))
    }

    /// Whether the round can see `p` (the sandbox says: [`ralph_sandbox::Sandbox::can_see`]);
    /// not when it cannot say (fails closed: the check above had its answer).
    fn visible(&self, p: &Path) -> bool {
        self.sandbox.can_see(&self.req, p).unwrap_or(false)
    }

    fn path(&self) -> &str {
        self.env.get("PATH").unwrap_or(DEFAULT_PATH)
    }

    /// Judges `program` as the round's shell would run it: `Ok` when the first one the runner
    /// finds is the one the round runs and everything it needs is visible; else why not, as a
    /// [`Problem`] whose fix works.
    pub(super) fn judge(&self, program: &str) -> Result<(), Problem> {
        let found = candidates(&RealFs, program, self.path());
        let Some((first, first_real)) = found.first().cloned() else {
            return Err(Problem::Missing);
        };
        let runs = |(c, real): &(PathBuf, PathBuf)| self.visible(c) && self.visible(real);
        let inside = found.iter().find(|c| runs(c)).map(|(c, _)| c.clone());
        let mut needed: Vec<PathBuf> = [&first, &first_real]
            .into_iter()
            .filter(|p| !self.visible(p))
            .cloned()
            .collect();
        let program_hidden = !needed.is_empty();
        // A script runs only if its interpreter (and where that leads) is there too: one fix
        // for both, so that applying it is enough.
        let mut interp = None;
        if let Some(i) = interpreter(&RealFs, &first_real, self.path()) {
            let real = std::fs::canonicalize(&i).unwrap_or_else(|_| i.clone());
            let more: Vec<PathBuf> = [&i, &real]
                .into_iter()
                .filter(|p| !self.visible(p))
                .cloned()
                .collect();
            if !more.is_empty() {
                needed.extend(more);
                interp = Some(i);
            }
        }
        if needed.is_empty() {
            return Ok(());
        }
        let fix = self.fix(&needed);
        let at = Found {
            first,
            first_real,
            fix,
        };
        Err(match (program_hidden, inside, interp) {
            (true, Some(other), _) => Problem::Swapped(at, other),
            (true, None, _) => Problem::Hidden(at),
            (false, _, Some(i)) => Problem::Interpreter(at, i),
            (false, _, None) => Problem::Hidden(at),
        })
    }

    /// The flags that make `needed` visible: `--toolchain auto` where toolchains are off and
    /// a toolchain rule would show the path, else a `--read` of its tree (of the file itself
    /// when its directory would show a home or its credentials).
    fn fix(&self, needed: &[PathBuf]) -> Vec<String> {
        let auto = (self.spec.toolchain == ToolchainMode::None).then(|| {
            let mut spec = self.spec.clone();
            spec.toolchain = ToolchainMode::Auto;
            crate::toolchain::for_job(&spec, self.env, &self.policy.filesystem.read, &[])
        });
        let home = self.env.get("HOME").map(Path::new);
        let cargo_home = self
            .env
            .get("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| home.map(|h| h.join(".cargo")));
        let mut flags: Vec<String> = Vec::new();
        for p in needed {
            let flag = if auto.as_ref().is_some_and(|g| g.shows(p)) {
                "--toolchain auto".to_owned()
            } else {
                let dir = grant_for(p);
                let tree = match crate::toolchain::secrets::refusal(
                    &dir,
                    home,
                    cargo_home.as_deref(),
                    &[],
                ) {
                    None => dir,
                    Some(_) => p.clone(),
                };
                format!("--read {}", tree.display())
            };
            if !flags.contains(&flag) {
                flags.push(flag);
            }
        }
        flags
    }
}

/// Where a program was found on the runner and the flags that let the round run it.
#[derive(Debug)]
pub(super) struct Found {
    /// As found on the PATH (or given).
    pub first: PathBuf,
    /// Where its links lead.
    pub first_real: PathBuf,
    /// The fix.
    pub fix: Vec<String>,
}

impl Found {
    /// `` `first` `` or `` `first` (→ `real`) ``.
    pub fn shown(&self) -> String {
        if self.first == self.first_real {
            format!("`{}`", self.first.display())
        } else {
            format!(
                "`{}` (→ `{}`)",
                self.first.display(),
                self.first_real.display()
            )
        }
    }
}

/// Why the round cannot run a program as the runner would.
#[derive(Debug)]
pub(super) enum Problem {
    /// Not on the runner at all.
    Missing,
    /// On the runner, not visible inside (nor any other of that name).
    Hidden(Found),
    /// On the runner, not visible inside, where another one of that name would run instead.
    Swapped(Found, PathBuf),
    /// Visible, but the interpreter of the script is not.
    Interpreter(Found, PathBuf),
}

impl Problem {
    /// The message: `subject` names what runs it (`the verify command `x` runs`), `found` the
    /// program as found.
    pub(super) fn message(&self, subject: &str, missing: String) -> String {
        match self {
            Problem::Missing => missing,
            Problem::Hidden(f) => format!(
                "{subject} {}, which the sandbox cannot see: add {}",
                f.shown(),
                f.fix.join(" ")
            ),
            Problem::Swapped(f, other) => format!(
                "{subject} {} on the runner, which the sandbox cannot see: inside, the shell would run `{}` instead, a different program: add {}",
                f.shown(),
                other.display(),
                f.fix.join(" ")
            ),
            Problem::Interpreter(f, i) => format!(
                "{subject} {}, whose interpreter `{}` the sandbox cannot see: add {}",
                f.shown(),
                i.display(),
                f.fix.join(" ")
            ),
        }
    }
}

/// Checks that the program `command` starts with exists and that the sandbox of `spec` runs
/// it as the runner would; `what` names the command in the message ("the agent command", "the
/// verify command").
pub fn command_visible(
    what: &str,
    command: &str,
    spec: &JobSpec,
    env: &RunnerEnv,
    sandboxes: &Sandboxes,
) -> Result<(), String> {
    let Some(program) = first_program(command) else {
        return Ok(());
    };
    let path = env.get("PATH").unwrap_or(DEFAULT_PATH);
    let missing = || {
        if program.starts_with('/') {
            format!(
                "{what} `{command}` runs `{program}`, which does not exist on the runner (or is not an executable file): fix the path"
            )
        } else {
            format!(
                "{what} `{command}` runs `{program}`, which is not on the PATH ({path}): install it, put its directory on the runner's PATH, or give its full path"
            )
        }
    };
    let Some(view) = View::of(spec, env, sandboxes)? else {
        // Full access sees everything; the program must still exist.
        return if candidates(&RealFs, program, path).is_empty() {
            Err(missing())
        } else {
            Ok(())
        };
    };
    view.judge(program)
        .map_err(|p| p.message(&format!("{what} `{command}` runs"), missing()))
}
