//! The `builtin` preset: ralph's own coding agent ([`crate::builtin`], SPEC §10), run in the
//! round as the same static executable (`ralph __builtin-agent --model M --max-steps N`; on the
//! native backend the runner shows the round its own executable, read-only; in a container it
//! is the init already mounted at `/.ralph-init`). Nothing to install, no interpreter.
//!
//! It talks Chat Completions to `$RALPH_GATEWAY_URL` only, so it needs the gateway (never
//! `--network full` or `none`) and a `--model`. It writes the report file itself; its stdout is
//! a stream of JSON event lines (`step`, `tool`, `retry`, `context_trimmed`, `done`, `error`),
//! read here for the request retries and its own verdict (out of steps, server failure). Usage
//! is the gateway's count (the agent holds no number the runner would trust more).

use std::collections::BTreeMap;

use ralph_sandbox::Network;
use serde_json::Value;

use super::output::{Carry, OutputReader, PresetOutput, json_objects, overlong};
use super::{AgentOptions, ApiFamily, Preset, RoundFiles, UpstreamDefaults, retry};
use crate::builtin::entry::ARG;
use crate::builtin::{DEFAULT_MAX_STEPS, SYSTEM_MESSAGE, wire};
use crate::job::JobSpec;
use crate::util::text::bounded;

/// The preset.
#[derive(Debug)]
pub struct Builtin;

/// The preset's name.
pub const NAME: &str = "builtin";

impl Preset for Builtin {
    fn name(&self) -> &'static str {
        NAME
    }

    fn summary(&self) -> &'static str {
        "ralph's own agent (no CLI to install): Chat Completions with shell, read_file, write_file and edit_file tools, through the runner's gateway (--upstream, --model; key only if --api-key-env)"
    }

    fn program(&self) -> &'static str {
        "ralph"
    }

    fn runs_ralph(&self) -> bool {
        true
    }

    fn key_optional(&self) -> bool {
        true
    }

    fn upstream(&self) -> UpstreamDefaults {
        UpstreamDefaults {
            url: "https://api.openai.com/v1",
            api: ApiFamily::OpenAi,
            key_env: "OPENAI_API_KEY",
        }
    }

    fn argv(&self, _files: &RoundFiles<'_>, opts: &AgentOptions<'_>) -> Vec<String> {
        let mut argv = vec![
            opts.ralph_exe.unwrap_or("ralph").to_owned(),
            ARG.to_owned(),
            "--model".to_owned(),
            opts.model.unwrap_or("<model>").to_owned(),
            "--max-steps".to_owned(),
            opts.max_steps.unwrap_or(DEFAULT_MAX_STEPS).to_string(),
        ];
        argv.extend(opts.args.iter().cloned());
        argv
    }

    fn reader(&self) -> Box<dyn OutputReader> {
        Box::<BuiltinReader>::default()
    }

    fn check(&self, spec: &JobSpec) -> Result<(), String> {
        let network = spec.network();
        if network != Network::Gateway {
            return Err(format!(
                "the `builtin` agent talks only to the runner's model gateway: it needs `--network gateway` (the default with --agent), not `{network}`"
            ));
        }
        if spec.model_access.model.is_none() {
            return Err(
                "the `builtin` agent needs `--model NAME` (`model` in a job file): the model the upstream serves, e.g. `gpt-4.1`, or `qwen2.5-coder:7b` on a local Ollama".to_owned(),
            );
        }
        Ok(())
    }

    fn details(&self) -> Vec<(&'static str, Value)> {
        vec![
            ("system_message", Value::String(SYSTEM_MESSAGE.to_owned())),
            ("tools", wire::tool_schemas()),
        ]
    }
}

/// Reads the built-in agent's event lines.
#[derive(Debug, Default)]
pub struct BuiltinReader {
    retries: BTreeMap<String, u64>,
    error: Option<String>,
    done: bool,
    problems: Vec<String>,
}

impl BuiltinReader {
    fn event(&mut self, v: &Value) {
        let text = |key: &str| v.get(key).and_then(Value::as_str);
        match text("type") {
            Some("retry") => {
                // The agent names the reason; only known labels are kept (metric cardinality).
                let reason = text("reason")
                    .filter(|r| retry::RETRY_REASONS.contains(r))
                    .map_or_else(
                        || {
                            retry::classify(
                                v.get("status").and_then(Value::as_u64),
                                text("reason").unwrap_or(""),
                            )
                        },
                        |r| {
                            retry::RETRY_REASONS
                                .iter()
                                .find(|k| **k == r)
                                .copied()
                                .unwrap_or("other")
                        },
                    );
                *self.retries.entry(reason.to_owned()).or_default() += 1;
            }
            Some("error") => {
                let message = text("message").unwrap_or("no message");
                self.error = Some(bounded(&format!("builtin agent: {message}"), 2048));
            }
            Some("done") => self.done = true,
            _ => {}
        }
    }
}

impl OutputReader for BuiltinReader {
    fn line(&mut self, line: &[u8]) {
        for v in json_objects(line, &mut self.problems) {
            self.event(&v);
        }
    }

    fn skipped(&mut self, len: usize) {
        self.problems.push(overlong(len));
    }

    fn finish(self: Box<Self>, _carry: &mut Carry) -> PresetOutput {
        PresetOutput {
            // The agent writes the report file; the runner reads and validates that.
            report: None,
            usage: Default::default(),
            retries: self.retries,
            error: if self.done { None } else { self.error },
            problems: self.problems,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_command_line_runs_ralph_itself_with_the_model_and_the_step_bound() {
        let p = Path::new("/x");
        let files = RoundFiles {
            prompt: p,
            report: p,
            usage: p,
            workspace: p,
            input_dir: p,
        };
        let args = vec!["--no-stream".to_owned()];
        let opts = AgentOptions {
            gateway_url: Some("http://127.0.0.1:1/v1"),
            model: Some("m"),
            args: &args,
            ralph_exe: Some("/.ralph-init"),
            max_steps: Some(7),
        };
        assert_eq!(
            Builtin.argv(&files, &opts),
            vec![
                "/.ralph-init",
                ARG,
                "--model",
                "m",
                "--max-steps",
                "7",
                "--no-stream"
            ]
        );
    }

    #[test]
    fn events_give_retries_by_known_reason_and_the_agents_verdict() {
        let mut r = Box::<BuiltinReader>::default();
        for l in [
            r#"{"type":"step","step":1,"tool_calls":1}"#,
            r#"{"type":"retry","step":1,"attempt":1,"status":429,"reason":"rate_limit"}"#,
            r#"{"type":"retry","step":1,"attempt":2,"status":503,"reason":"made-up label"}"#,
            "not json",
            r#"{"type":"error","message":"the built-in agent used all 3 steps (--agent-max-steps) without a final answer"}"#,
        ] {
            r.line(l.as_bytes());
        }
        let out = r.finish(&mut Carry::default());
        assert_eq!(out.retries.get("rate_limit"), Some(&1));
        assert_eq!(out.retries.get("server_error"), Some(&1));
        assert!(
            out.error.as_deref().unwrap().contains("--agent-max-steps"),
            "{out:?}"
        );
        assert_eq!(out.problems.len(), 1);
        assert!(out.usage.total().is_zero());
    }

    #[test]
    fn a_finished_run_has_no_error() {
        let mut r = Box::<BuiltinReader>::default();
        r.line(br#"{"type":"done","steps":4}"#);
        let out = r.finish(&mut Carry::default());
        assert_eq!(out.error, None);
        assert_eq!(out.report, None);
    }
}
