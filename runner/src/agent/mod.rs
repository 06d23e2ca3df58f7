//! Agents: what runs in a round. `--agent-cmd CMD` runs any command line with `/bin/sh -c` in the
//! workspace; `--agent NAME` picks a preset that knows how to drive a particular agent CLI: it
//! builds the command line, feeds the prompt on stdin, and reads the CLI's own output for the
//! report, the token usage and the CLI's request retries ([`output`]).
//!
//! - [`codex`]: OpenAI Codex CLI (`codex exec --json`).
//! - [`claude`]: Claude Code (`claude -p --output-format stream-json`).
//! - [`builtin`]: ralph's own agent ([`crate::builtin`]), the same executable run in the round.

pub mod builtin;
pub mod claude;
pub mod codex;
pub mod output;
pub mod retry;

use std::path::Path;

use ralph_sandbox::{Mode, Network};

use crate::job::{AgentSpec, JobSpec};
use output::OutputReader;

/// The report contract as a JSON Schema, for CLIs that can constrain their final answer.
pub const REPORT_SCHEMA: &str = include_str!("report.schema.json");

/// What a preset needs to build one round's command line.
#[derive(Debug)]
pub struct RoundFiles<'a> {
    /// The prompt file.
    pub prompt: &'a Path,
    /// Where the report goes.
    pub report: &'a Path,
    /// Where usage lines go.
    pub usage: &'a Path,
    /// The workspace.
    pub workspace: &'a Path,
    /// The round's agent-readable input directory (where [`Preset::inputs`] are written).
    pub input_dir: &'a Path,
}

/// What a round's agent is given besides its files: the model gateway's address inside the
/// round, the model and the extra arguments of the job (SPEC §9).
#[derive(Clone, Copy, Debug, Default)]
pub struct AgentOptions<'a> {
    /// The model gateway's base URL as the round reaches it (`RALPH_GATEWAY_URL`), when the
    /// job has one.
    pub gateway_url: Option<&'a str>,
    /// `--model`.
    pub model: Option<&'a str>,
    /// `--agent-arg`s, in order.
    pub args: &'a [String],
    /// Where this `ralph` executable is inside the round, for presets that run it
    /// ([`Preset::runs_ralph`]).
    pub ralph_exe: Option<&'a str>,
    /// `--agent-max-steps` (the built-in agent's bound of model calls per round).
    pub max_steps: Option<u32>,
}

/// The wire protocol family of a model API: decides how the gateway adds the key.
pub use crate::gateway::ApiFamily;

/// Where a preset's model lives unless the job says otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpstreamDefaults {
    /// The API base URL.
    pub url: &'static str,
    /// The protocol family.
    pub api: ApiFamily,
    /// The runner-side variable holding the key.
    pub key_env: &'static str,
}

/// The value of the key variable inside a round that uses the gateway: the CLI wants one, the
/// gateway drops it and adds the real key on the way out.
pub const KEY_PLACEHOLDER: &str = "ralph-gateway-placeholder";

/// An adapter for a known agent CLI.
pub trait Preset: Send + Sync + std::fmt::Debug {
    /// The name used with `--agent`.
    fn name(&self) -> &'static str;
    /// One line saying what it runs.
    fn summary(&self) -> &'static str;
    /// The executable the command line starts with (checked before round 1).
    fn program(&self) -> &'static str;
    /// True when the round runs this `ralph` executable itself (the runner shows it to the
    /// round; nothing to find on `PATH`).
    fn runs_ralph(&self) -> bool {
        false
    }
    /// True when the preset may run without a key: given `--upstream` without
    /// `--api-key-env`, it sends none (a local model server).
    fn key_optional(&self) -> bool {
        false
    }
    /// More to say in `ralph agent show` (e.g. the built-in agent's system message and tool
    /// schemas), as named JSON values.
    fn details(&self) -> Vec<(&'static str, serde_json::Value)> {
        Vec::new()
    }
    /// The model API the CLI speaks, by default.
    fn upstream(&self) -> UpstreamDefaults;
    /// The round's command line: the preset's own, configured for the gateway when there is
    /// one, then `--model`, then each `--agent-arg`.
    fn argv(&self, files: &RoundFiles<'_>, opts: &AgentOptions<'_>) -> Vec<String>;
    /// Files written to the round's input directory before it runs: (name, content).
    fn inputs(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// Variables the preset sets in the round's environment (never secrets: with the gateway,
    /// the key variable holds [`KEY_PLACEHOLDER`]).
    fn env(&self, opts: &AgentOptions<'_>) -> Vec<(String, String)> {
        let _ = opts;
        Vec::new()
    }
    /// A fresh reader of one round's standard output.
    fn reader(&self) -> Box<dyn OutputReader>;
    /// Refuses a job this preset cannot run: the CLI calls a hosted model, so the round needs
    /// the gateway (the default) or the network.
    fn check(&self, spec: &JobSpec) -> Result<(), String> {
        let s = &spec.sandbox;
        if spec.network() == Network::None {
            return Err(format!(
                "the `{}` preset calls a hosted model: it needs `--network gateway` (the default with --agent) or `--network full`, not `none`{}",
                self.name(),
                if s.mode == Mode::ReadOnly {
                    " (read-only mode reaches the model only through the gateway)"
                } else {
                    ""
                }
            ));
        }
        Ok(())
    }
}

/// The presets of this build.
pub fn presets() -> &'static [&'static dyn Preset] {
    &[&codex::Codex, &claude::Claude, &builtin::Builtin]
}

/// An `--agent` name that is not a preset.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent preset `{name}` (available: {available})")]
pub struct UnknownPreset {
    /// The name given.
    pub name: String,
    /// The presets of this build.
    pub available: String,
}

/// The agent of a job, resolved.
#[derive(Clone, Debug)]
pub enum Agent {
    /// A shell command line.
    Command(String),
    /// A preset.
    Preset(&'static dyn Preset),
}

impl Agent {
    /// Resolves a job's agent.
    pub fn resolve(spec: &AgentSpec) -> Result<Agent, UnknownPreset> {
        match spec {
            AgentSpec::Command { command } => Ok(Agent::Command(command.clone())),
            AgentSpec::Preset { name } => presets()
                .iter()
                .find(|p| p.name() == name)
                .map(|p| Agent::Preset(*p))
                .ok_or_else(|| {
                    let names: Vec<&str> = presets().iter().map(|p| p.name()).collect();
                    UnknownPreset {
                        name: name.clone(),
                        available: if names.is_empty() {
                            "none in this build".into()
                        } else {
                            names.join(", ")
                        },
                    }
                }),
        }
    }

    /// The round's command line.
    pub fn argv(&self, files: &RoundFiles<'_>, opts: &AgentOptions<'_>) -> Vec<String> {
        match self {
            Agent::Command(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
            Agent::Preset(p) => p.argv(files, opts),
        }
    }

    /// The preset, if this agent is one.
    pub fn preset(&self) -> Option<&'static dyn Preset> {
        match self {
            Agent::Command(_) => None,
            Agent::Preset(p) => Some(*p),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_runs_under_sh() {
        let a = Agent::resolve(&AgentSpec::Command {
            command: "echo hi".into(),
        })
        .unwrap();
        let p = Path::new("/x");
        let files = RoundFiles {
            prompt: p,
            report: p,
            usage: p,
            workspace: p,
            input_dir: p,
        };
        assert_eq!(
            a.argv(&files, &AgentOptions::default()),
            vec!["/bin/sh", "-c", "echo hi"]
        );
    }

    #[test]
    fn an_unknown_preset_names_the_choices() {
        let e = Agent::resolve(&AgentSpec::Preset {
            name: "nope".into(),
        })
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unknown agent preset `nope` (available: "),
            "{e}"
        );
    }
}
