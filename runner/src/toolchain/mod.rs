//! Toolchains (SPEC §12): a program the agent command, set-up or verify starts that lives in a
//! per-user toolchain on the runner (rustup/cargo, pyenv, a virtualenv, nvm, a Go install,
//! asdf/mise) is made visible to the round read-only, with the variables it needs, and its
//! writable state redirected into the round's private HOME. This module owns the rules, as
//! pure data over a narrow [`HostFs`]: [`detect`] (which directories of the runner's PATH belong
//! to which toolchain, resolved through shims and symlink chains on the runner), the
//! [`ToolchainGrant`] it yields, and what may never be granted ([`secrets`]). The engine
//! journals the grant (`toolchain_granted`) and applies it to every round and verify;
//! `ralph doctor --workspace DIR` prints it. See docs/toolchains.md.

mod detect;
mod go;
mod grant;
pub mod host;
mod managers;
mod node;
pub mod program;
mod python;
mod rust;
pub mod secrets;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use detect::{Host, Scope, detect, path_dirs};
pub use grant::{GrantRecord, Kind, Refused, Toolchain, ToolchainGrant, Value};
pub use host::{HostFs, RealFs};
pub use program::first_program;

use crate::engine::env::RunnerEnv;
use crate::job::{AgentSpec, JobSpec};

/// Whether a job is granted the runner's toolchains (`--toolchain`, job key `toolchain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ToolchainMode {
    /// Every per-user toolchain on the runner's PATH (docs/toolchains.md).
    #[default]
    Auto,
    /// None: the round sees only the system trees, the workspace and `--read` paths.
    None,
}

impl ToolchainMode {
    /// The mode's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ToolchainMode::Auto => "auto",
            ToolchainMode::None => "none",
        }
    }

    /// Whether this is the default (left out of a journalled spec).
    pub fn is_default(&self) -> bool {
        *self == ToolchainMode::default()
    }
}

/// The commands of `spec` whose programs the runner starts in the sandbox (the agent command,
/// set-up and verify), for the directories of programs named by absolute path.
pub fn job_commands(spec: &JobSpec) -> Vec<&str> {
    let mut v = Vec::new();
    if let AgentSpec::Command { command } = &spec.agent {
        v.push(command.as_str());
    }
    if let Some(s) = &spec.setup {
        v.push(s.command.as_str());
    }
    if let Some(c) = &spec.verify {
        v.push(c.as_str());
    }
    v
}

/// The grant of a job: nothing with `--toolchain none`; else [`detect`] over the real
/// filesystem and `env`, `shown` being the trees the job's sandbox shows anyway (the policy's
/// read trees) and `forbidden` the runner's state.
pub fn for_job(
    spec: &JobSpec,
    env: &RunnerEnv,
    shown: &[PathBuf],
    forbidden: &[PathBuf],
) -> ToolchainGrant {
    if spec.toolchain == ToolchainMode::None {
        return ToolchainGrant::default();
    }
    let program_dirs: Vec<PathBuf> = job_commands(spec)
        .into_iter()
        .filter_map(first_program)
        .filter(|p| p.starts_with('/'))
        .filter_map(|p| Path::new(p).parent().map(Path::to_path_buf))
        .collect();
    detect(
        &Host { fs: &RealFs, env },
        &Scope {
            workspace: &spec.workspace,
            program_dirs: &program_dirs,
            shown,
            docker: spec.sandbox.backend == ralph_sandbox::BackendKind::Docker,
            forbidden,
        },
    )
}

/// The grant of a docker round that runs as `round_uid` (the workspace's owner, or the agent
/// user: [`ralph_sandbox::docker::plan::command_uid`]). The image
/// keeps `/root` mode 0700, so a round that is not uid 0 cannot reach a toolchain tree under it
/// (natively the round's own root has no such directory). Such a toolchain is left out (said in
/// [`ToolchainGrant::refused`]); when one of `programs` (what the job's commands start, as
/// found on the runner) lives in it, the job cannot run as asked: the error names why.
pub fn for_docker(
    mut grant: ToolchainGrant,
    round_uid: u32,
    programs: &[PathBuf],
) -> Result<ToolchainGrant, String> {
    if round_uid == 0 {
        return Ok(grant);
    }
    let unreachable = |t: &Toolchain| t.read.iter().any(|p| p.starts_with("/root"));
    for t in grant.toolchains.iter().filter(|t| unreachable(t)) {
        let needed = programs.iter().find(|p| {
            p.parent() == Some(t.found_at.as_path()) || t.read.iter().any(|r| p.starts_with(r))
        });
        if let Some(p) = needed {
            let trees: Vec<String> = t
                .read
                .iter()
                .filter(|r| r.starts_with("/root"))
                .map(|r| format!("`{}`", r.display()))
                .collect();
            return Err(format!(
                "`{}` is in the toolchain {}, whose tree(s) {} lie under `/root`, which the container image keeps mode 0700, and the round runs as uid {round_uid}, not root: install the toolchain outside `/root` (e.g. under /opt), use the image's own with `--toolchain none`, or use the native backend",
                p.display(),
                t.label(),
                trees.join(", ")
            ));
        }
    }
    let (kept, left): (Vec<Toolchain>, Vec<Toolchain>) =
        grant.toolchains.into_iter().partition(|t| !unreachable(t));
    grant.toolchains = kept;
    grant.refused.extend(left.into_iter().map(|t| Refused {
        why: format!(
            "under `/root`, which a container round as uid {round_uid} cannot reach ({})",
            t.label()
        ),
        path: t.found_at,
    }));
    Ok(grant)
}
