//! `ralph agent list` and `ralph agent show NAME`: the agent presets of this build, what they
//! run and what they need.

use std::path::Path;

use clap::{Args, Subcommand};
use ralph_runner::agent::{AgentOptions, Preset, RoundFiles, presets};

use super::CliError;
use super::exit::Exit;

/// `ralph agent ...`
#[derive(Subcommand, Debug)]
pub enum AgentCommand {
    /// List the agent presets (`--agent NAME`).
    List(ListArgs),
    /// Show what a preset runs in a round.
    Show(ShowArgs),
}

/// `ralph agent list` flags.
#[derive(Args, Debug)]
pub struct ListArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// `ralph agent show` flags.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The preset.
    pub name: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The round's files, as placeholders.
fn placeholder_files() -> RoundFiles<'static> {
    RoundFiles {
        prompt: Path::new("<round>/in/prompt.md"),
        report: Path::new("<round>/out/report.json"),
        usage: Path::new("<round>/out/usage.jsonl"),
        workspace: Path::new("<workspace>"),
        input_dir: Path::new("<round>/in"),
    }
}

/// The options of a round through the gateway, as placeholders.
fn placeholder_options() -> AgentOptions<'static> {
    AgentOptions {
        gateway_url: Some("$RALPH_GATEWAY_URL"),
        model: None,
        args: &[],
        ralph_exe: Some("<ralph>"),
        max_steps: None,
    }
}

fn describe(p: &dyn Preset) -> serde_json::Value {
    let up = p.upstream();
    let mut d = serde_json::json!({
        "name": p.name(),
        "summary": p.summary(),
        "argv": p.argv(&placeholder_files(), &placeholder_options()),
        "stdin": "the round's prompt",
        "env": p.env(&placeholder_options()).into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        "upstream": up.url,
        "api_key_env": up.key_env,
        "inputs": p.inputs().into_iter().map(|(n, _)| format!("<round>/in/{n}")).collect::<Vec<_>>(),
    });
    for (k, v) in p.details() {
        d[k] = v;
    }
    d
}

fn print(text: &str) -> Result<(), CliError> {
    super::stdout::line(format_args!("{text}"));
    Ok(())
}

/// Runs `ralph agent ...`.
pub fn execute(cmd: &AgentCommand) -> Result<Exit, CliError> {
    match cmd {
        AgentCommand::List(a) => {
            if a.json {
                let all: Vec<_> = presets().iter().map(|p| describe(*p)).collect();
                print(&serde_json::Value::from(all).to_string())?;
            } else {
                for p in presets() {
                    print(&format!("{:<8} {}", p.name(), p.summary()))?;
                }
                print("\nany other CLI: --agent-cmd CMD (see docs/agents.md)")?;
            }
        }
        AgentCommand::Show(a) => {
            let p = presets()
                .iter()
                .find(|p| p.name() == a.name)
                .ok_or_else(|| {
                    let names: Vec<&str> = presets().iter().map(|p| p.name()).collect();
                    CliError::usage(format!(
                        "unknown agent preset `{}` (available: {})",
                        a.name,
                        names.join(", ")
                    ))
                })?;
            if a.json {
                print(&describe(*p).to_string())?;
            } else {
                print(&format!("{}: {}", p.name(), p.summary()))?;
                print(&format!(
                    "runs:   {}",
                    p.argv(&placeholder_files(), &placeholder_options())
                        .join(" ")
                ))?;
                print("stdin:  the round's prompt")?;
                for (k, v) in p.env(&placeholder_options()) {
                    print(&format!("env:    {k}={v}"))?;
                }
                let up = p.upstream();
                print(&format!(
                    "model:  {} through the runner's gateway, key from ${} on the runner side (--upstream, --api-key-env)",
                    up.url, up.key_env
                ))?;
                if p.runs_ralph() {
                    print(
                        "reads:  its event lines for retries and its verdict; it writes the report file itself; usage is the gateway's count",
                    )?;
                } else {
                    print("reads:  its own output stream for the report, token usage and retries")?;
                }
                for (k, v) in p.details() {
                    let text = match v {
                        serde_json::Value::String(s) => s,
                        other => serde_json::to_string_pretty(&other).unwrap_or_default(),
                    };
                    print(&format!("\n{}:\n{}", k.replace('_', " "), text.trim_end()))?;
                }
            }
        }
    }
    Ok(Exit::Complete)
}
