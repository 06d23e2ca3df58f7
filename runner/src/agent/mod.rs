//! Agents: what runs in a round. `--agent-cmd CMD` runs any command line with `/bin/sh -c` in the
//! workspace; `--agent NAME` picks a preset that knows how to drive a particular agent CLI.

use std::path::Path;

use crate::job::AgentSpec;

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
}

/// An adapter for a known agent CLI.
pub trait Preset: Send + Sync + std::fmt::Debug {
    /// The name used with `--agent`.
    fn name(&self) -> &'static str;
    /// One line saying what it runs.
    fn summary(&self) -> &'static str;
    /// The round's command line.
    fn argv(&self, files: &RoundFiles<'_>) -> Vec<String>;
}

/// The presets of this build. Later work adds the adapters for agent CLIs here.
pub fn presets() -> &'static [&'static dyn Preset] {
    &[]
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
