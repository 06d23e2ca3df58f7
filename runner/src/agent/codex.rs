//! The `codex` preset: OpenAI Codex CLI in non-interactive mode.
//!
//! Command: `codex exec --json --output-schema <in>/report.schema.json
//! --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check --cd <workspace> -` with the
//! prompt on stdin (`-`). Codex's own sandbox is off: the round already runs in ralph's, and
//! nesting Codex's Landlock/seccomp sandbox inside it fails or restricts twice.
//!
//! Reading `--json` (JSON Lines on stdout):
//! - `thread.started {thread_id}` names the conversation the next events belong to;
//! - `turn.completed {usage}` carries the thread's **cumulative** usage (`input_tokens`, which
//!   includes `cached_input_tokens` and `cache_write_input_tokens`, `output_tokens`, which
//!   includes the optional `reasoning_output_tokens`). The round's usage is the last snapshot of
//!   each thread minus what earlier rounds already counted for it ([`Carry`]), so a resumed
//!   thread or several turns in one round are never counted twice;
//! - `item.completed` with an `agent_message` item: the last one is the final answer, which
//!   `--output-schema` constrains to the report contract;
//! - `turn.failed {error}` or a run without any `turn.completed`: the run failed;
//! - `error {message}` with "Reconnecting… n/m": Codex retried a request (counted by reason).
//!
//! The stream names no model, so usage is booked under the model `unknown`.

use std::collections::BTreeMap;

use serde_json::Value;

use super::output::{Carry, OutputReader, PresetOutput, json_objects, overlong, u64_field};
use super::{AgentOptions, ApiFamily, Preset, RoundFiles, UpstreamDefaults, retry};
use crate::usage::{RoundUsage, UNKNOWN_MODEL, UsageTotals};
use crate::util::text::bounded;

/// The preset.
#[derive(Debug)]
pub struct Codex;

/// File name of the report schema in the round's input directory.
pub const SCHEMA_FILE: &str = "report.schema.json";

/// The model provider the preset defines for the gateway (`-c model_providers.ralph…`).
pub const PROVIDER: &str = "ralph";

/// A TOML string (the value syntax of codex's `-c key=value`).
fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

impl Preset for Codex {
    fn name(&self) -> &'static str {
        "codex"
    }

    fn summary(&self) -> &'static str {
        "OpenAI Codex CLI: `codex exec --json`, its model provider pointed at the runner's gateway (key: OPENAI_API_KEY on the runner side)"
    }

    fn program(&self) -> &'static str {
        "codex"
    }

    fn upstream(&self) -> UpstreamDefaults {
        UpstreamDefaults {
            url: "https://api.openai.com/v1",
            api: ApiFamily::OpenAi,
            key_env: "OPENAI_API_KEY",
        }
    }

    fn argv(&self, files: &RoundFiles<'_>, opts: &AgentOptions<'_>) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "codex".into(),
            "exec".into(),
            "--json".into(),
            "--output-schema".into(),
            files.input_dir.join(SCHEMA_FILE).display().to_string(),
            "--dangerously-bypass-approvals-and-sandbox".into(),
            "--skip-git-repo-check".into(),
            "--cd".into(),
            files.workspace.display().to_string(),
        ];
        // Codex 0.169 ignores OPENAI_BASE_URL; a model provider of its own is what points it at
        // the gateway (FIELD-NOTES "Real agent CLIs, offline").
        if let Some(url) = opts.gateway_url {
            for setting in [
                format!("model_provider={}", toml_string(PROVIDER)),
                format!(
                    "model_providers.{PROVIDER}.name={}",
                    toml_string("ralph gateway")
                ),
                format!("model_providers.{PROVIDER}.base_url={}", toml_string(url)),
                format!(
                    "model_providers.{PROVIDER}.env_key={}",
                    toml_string("OPENAI_API_KEY")
                ),
                format!(
                    "model_providers.{PROVIDER}.wire_api={}",
                    toml_string("responses")
                ),
                // Nothing but the model requests: no analytics, no plugin sync (they would be
                // refused at the sandbox's edge anyway, and waited on).
                "analytics.enabled=false".to_owned(),
                "features.plugins=false".to_owned(),
            ] {
                argv.push("-c".into());
                argv.push(setting);
            }
        }
        if let Some(m) = opts.model {
            argv.push("--model".into());
            argv.push(m.to_owned());
        }
        argv.extend(opts.args.iter().cloned());
        argv.push("-".into());
        argv
    }

    fn inputs(&self) -> Vec<(&'static str, &'static str)> {
        vec![(SCHEMA_FILE, super::REPORT_SCHEMA)]
    }

    fn env(&self, opts: &AgentOptions<'_>) -> Vec<(String, String)> {
        match opts.gateway_url {
            Some(_) => vec![("OPENAI_API_KEY".into(), super::KEY_PLACEHOLDER.into())],
            None => Vec::new(),
        }
    }

    fn reader(&self) -> Box<dyn OutputReader> {
        Box::<CodexReader>::default()
    }
}

/// Reads `codex exec --json` output.
#[derive(Debug, Default)]
pub struct CodexReader {
    thread: Option<String>,
    /// Last cumulative snapshot per thread in this round.
    snapshots: BTreeMap<String, UsageTotals>,
    /// Usage of snapshots that went backwards (a counter reset), already final.
    reset_usage: UsageTotals,
    turns_completed: u32,
    last_message: Option<String>,
    failed: Option<String>,
    last_error: Option<String>,
    retries: BTreeMap<String, u64>,
    problems: Vec<String>,
}

/// The anonymous thread id used when usage arrives before any `thread.started`.
const NO_THREAD: &str = "";

fn snapshot(usage: &Value) -> UsageTotals {
    UsageTotals {
        input_tokens: u64_field(usage, "input_tokens"),
        cached_input_tokens: u64_field(usage, "cached_input_tokens"),
        output_tokens: u64_field(usage, "output_tokens"),
        reasoning_tokens: u64_field(usage, "reasoning_output_tokens"),
        cache_write_input_tokens: u64_field(usage, "cache_write_input_tokens"),
    }
}

fn went_backwards(new: &UsageTotals, old: &UsageTotals) -> bool {
    new.input_tokens < old.input_tokens || new.output_tokens < old.output_tokens
}

impl CodexReader {
    fn event(&mut self, v: &Value) {
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
        match v.get("type").and_then(Value::as_str) {
            Some("thread.started") => self.thread = text(v, "thread_id"),
            Some("turn.completed") => {
                self.turns_completed += 1;
                let Some(usage) = v.get("usage") else { return };
                let now = snapshot(usage);
                let thread = self.thread.clone().unwrap_or_else(|| NO_THREAD.to_owned());
                if let Some(prev) = self.snapshots.get(&thread)
                    && went_backwards(&now, prev)
                {
                    // Not cumulative after all (or a counter reset): keep what was counted.
                    let prev = *prev;
                    self.reset_usage.add(&prev);
                }
                self.snapshots.insert(thread, now);
            }
            Some("turn.failed") => {
                let msg = v
                    .get("error")
                    .and_then(|e| text(e, "message"))
                    .unwrap_or_else(|| "turn failed".to_owned());
                self.failed = Some(msg);
            }
            Some("error") => {
                let msg = text(v, "message").unwrap_or_default();
                if msg.to_ascii_lowercase().starts_with("reconnecting") {
                    *self
                        .retries
                        .entry(retry::classify(None, &msg).to_owned())
                        .or_default() += 1;
                } else {
                    self.last_error = Some(msg);
                }
            }
            Some("item.completed") => {
                let Some(item) = v.get("item") else { return };
                if item.get("type").and_then(Value::as_str) == Some("agent_message")
                    && let Some(t) = text(item, "text")
                {
                    self.last_message = Some(t);
                }
            }
            _ => {}
        }
    }
}

impl CodexReader {
    /// This round's usage so far: each thread's last cumulative snapshot minus what earlier
    /// rounds left in `carry`.
    fn round_usage(&self, carry: &Carry) -> RoundUsage {
        let mut total = self.reset_usage;
        for (thread, now) in &self.snapshots {
            let before = carry.threads.get(thread).copied().unwrap_or_default();
            let delta = if went_backwards(now, &before) {
                *now
            } else {
                now.since(&before)
            };
            total.add(&delta);
        }
        let mut usage = RoundUsage::default();
        if !total.is_zero() {
            usage.by_model.insert(UNKNOWN_MODEL.to_owned(), total);
        }
        usage
    }
}

impl OutputReader for CodexReader {
    fn line(&mut self, line: &[u8]) {
        for v in json_objects(line, &mut self.problems) {
            self.event(&v);
        }
    }

    fn skipped(&mut self, len: usize) {
        self.problems.push(overlong(len));
    }

    fn usage_now(&self, carry: &Carry) -> RoundUsage {
        self.round_usage(carry)
    }

    fn finish(self: Box<Self>, carry: &mut Carry) -> PresetOutput {
        let usage = self.round_usage(carry);
        for (thread, now) in &self.snapshots {
            carry.threads.insert(thread.clone(), *now);
        }
        let error = match (self.failed, self.turns_completed) {
            (Some(m), _) => Some(bounded(&format!("codex: turn failed: {m}"), 2048)),
            (None, 0) => Some(bounded(
                &format!(
                    "codex: the run ended without a completed turn{}",
                    self.last_error
                        .map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                ),
                2048,
            )),
            (None, _) => None,
        };
        PresetOutput {
            report: self.last_message.map(|m| m.trim().to_owned()),
            usage,
            retries: self.retries,
            error,
            problems: self.problems,
        }
    }
}
