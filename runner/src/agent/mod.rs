//! Agents: what runs in a round. `--agent-cmd CMD` runs any command line with `/bin/sh -c` in the
//! workspace; `--agent NAME` picks a preset that knows how to drive a particular agent CLI: it
//! builds the command line, feeds the prompt on stdin, and reads the CLI's own output for the
//! report, the token usage and the CLI's request retries ([`output`]).
//!
//! - [`codex`]: OpenAI Codex CLI (`codex exec --json`).
//! - [`claude`]: Claude Code (`claude -p --output-format stream-json`).

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

/// An adapter for a known agent CLI.
pub trait Preset: Send + Sync + std::fmt::Debug {
    /// The name used with `--agent`.
    fn name(&self) -> &'static str;
    /// One line saying what it runs.
    fn summary(&self) -> &'static str;
    /// The round's command line.
    fn argv(&self, files: &RoundFiles<'_>) -> Vec<String>;
    /// Files written to the round's input directory before it runs: (name, content).
    fn inputs(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// Variables the preset sets in the round's environment (never secrets).
    fn env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// A fresh reader of one round's standard output.
    fn reader(&self) -> Box<dyn OutputReader>;
    /// Refuses a job this preset cannot run. By default: the CLI calls a hosted model, so the
    /// round needs the network.
    fn check(&self, spec: &JobSpec) -> Result<(), String> {
        let s = &spec.sandbox;
        let network = match (s.mode, s.network) {
            (Mode::ReadOnly, _) => Network::None,
            (_, Some(n)) => n,
            (Mode::FullAccess, None) => Network::Full,
            (Mode::WorkspaceWrite, None) => Network::None,
        };
        if network == Network::None {
            return Err(format!(
                "the `{}` preset calls a hosted model and needs the network: add --network full (mode `{}` has no network{})",
                self.name(),
                s.mode.as_str(),
                if s.mode == Mode::ReadOnly {
                    ", and read-only never has; use --mode workspace-write"
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
    &[&codex::Codex, &claude::Claude]
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
    pub fn argv(&self, files: &RoundFiles<'_>) -> Vec<String> {
        match self {
            Agent::Command(cmd) => vec!["/bin/sh".into(), "-c".into(), cmd.clone()],
            Agent::Preset(p) => p.argv(files),
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
        assert_eq!(a.argv(&files), vec!["/bin/sh", "-c", "echo hi"]);
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
