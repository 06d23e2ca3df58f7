//! The `claude` preset: Anthropic's Claude Code CLI in print mode.
//!
//! Command: `claude -p --output-format stream-json --verbose --json-schema <schema>
//! --dangerously-skip-permissions` with the prompt on stdin. Claude Code's permission prompts
//! are off (nobody could answer them, and the round already runs in ralph's sandbox);
//! `IS_SANDBOX=1` tells it that it does, which it requires for that flag when running as root.
//!
//! Reading the output (one JSON object per line; a single object or an array of them, as
//! `--output-format json` prints, is read the same way):
//! - `system`/`init` names the model;
//! - `system`/`api_retry` (`error_status`, `error`): Claude Code retried an API request;
//! - the `result` message ends the run: `is_error` is respected even when `subtype` says
//!   `success`, and any `subtype` other than `success` is a failure too; `structured_output`
//!   (from `--json-schema`) or else the `result` text is the report candidate;
//! - usage: per model from `modelUsage` when present, else the top-level `usage` under the
//!   `init` model. Anthropic counts `input_tokens` *without* cache reads and cache writes; they
//!   are normalised to ralph's convention: `input = input_tokens + cache_read_input_tokens +
//!   cache_creation_input_tokens`, `cached_input = cache_read_input_tokens`,
//!   `cache_write_input = cache_creation_input_tokens`. Claude Code does not report reasoning
//!   tokens separately (they are in `output_tokens`), so `reasoning` stays 0.

use std::collections::BTreeMap;

use serde_json::Value;

use super::output::{Carry, OutputReader, PresetOutput, json_objects, overlong, u64_field};
use super::{AgentOptions, ApiFamily, Preset, RoundFiles, UpstreamDefaults, retry};
use crate::usage::{RoundUsage, UNKNOWN_MODEL, UsageTotals};
use crate::util::text::bounded;

/// The preset.
#[derive(Debug)]
pub struct Claude;

impl Preset for Claude {
    fn name(&self) -> &'static str {
        "claude"
    }

    fn summary(&self) -> &'static str {
        "Claude Code: `claude -p --output-format stream-json`, ANTHROPIC_BASE_URL pointed at the runner's gateway (key: ANTHROPIC_API_KEY on the runner side)"
    }

    fn program(&self) -> &'static str {
        "claude"
    }

    fn upstream(&self) -> UpstreamDefaults {
        UpstreamDefaults {
            url: "https://api.anthropic.com",
            api: ApiFamily::Anthropic,
            key_env: "ANTHROPIC_API_KEY",
        }
    }

    fn argv(&self, _files: &RoundFiles<'_>, opts: &AgentOptions<'_>) -> Vec<String> {
        let mut argv: Vec<String> = vec![
            "claude".into(),
            "-p".into(),
            "--output-format".into(),
            "stream-json".into(),
            "--verbose".into(),
            "--json-schema".into(),
            compact_schema(),
            "--dangerously-skip-permissions".into(),
        ];
        if let Some(m) = opts.model {
            argv.push("--model".into());
            argv.push(m.to_owned());
        }
        argv.extend(opts.args.iter().cloned());
        argv
    }

    fn env(&self, opts: &AgentOptions<'_>) -> Vec<(String, String)> {
        let mut env = vec![("IS_SANDBOX".to_owned(), "1".to_owned())];
        if let Some(url) = opts.gateway_url {
            env.extend([
                ("ANTHROPIC_BASE_URL".to_owned(), url.to_owned()),
                (
                    "ANTHROPIC_API_KEY".to_owned(),
                    super::KEY_PLACEHOLDER.to_owned(),
                ),
                // Only the model API goes through the gateway: no telemetry, error reports or
                // update checks (they would be refused anyway, and retried).
                (
                    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".to_owned(),
                    "1".to_owned(),
                ),
                ("DISABLE_AUTOUPDATER".to_owned(), "1".to_owned()),
            ]);
        }
        env
    }

    fn reader(&self) -> Box<dyn OutputReader> {
        Box::<ClaudeReader>::default()
    }
}

/// The report schema on one line (an argument, not a file, for `--json-schema`).
fn compact_schema() -> String {
    serde_json::from_str::<Value>(super::REPORT_SCHEMA)
        .ok()
        .and_then(|mut v| {
            if let Some(o) = v.as_object_mut() {
                o.remove("$comment");
            }
            serde_json::to_string(&v).ok()
        })
        .unwrap_or_else(|| super::REPORT_SCHEMA.to_owned())
}

/// Reads Claude Code's JSON output.
#[derive(Debug, Default)]
pub struct ClaudeReader {
    model: Option<String>,
    result: Option<Value>,
    retries: BTreeMap<String, u64>,
    problems: Vec<String>,
}

/// Ralph's usage numbers from one Anthropic usage object (snake_case or Claude Code's camelCase
/// `modelUsage` entries).
fn normalise(u: &Value) -> UsageTotals {
    let pick = |snake: &str, camel: &str| u64_field(u, snake).max(u64_field(u, camel));
    let input = pick("input_tokens", "inputTokens");
    let read = pick("cache_read_input_tokens", "cacheReadInputTokens");
    let write = pick("cache_creation_input_tokens", "cacheCreationInputTokens");
    UsageTotals {
        input_tokens: input.saturating_add(read).saturating_add(write),
        cached_input_tokens: read,
        output_tokens: pick("output_tokens", "outputTokens"),
        reasoning_tokens: 0,
        cache_write_input_tokens: write,
    }
}

impl ClaudeReader {
    fn message(&mut self, v: &Value) {
        let text = |key: &str| v.get(key).and_then(Value::as_str);
        match (text("type"), text("subtype")) {
            (Some("system"), Some("init")) => {
                self.model = text("model").map(str::to_owned);
            }
            (Some("system"), Some("api_retry")) => {
                let status = v.get("error_status").and_then(Value::as_u64);
                let error = v
                    .get("error")
                    .map(|e| match e {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .unwrap_or_default();
                *self
                    .retries
                    .entry(retry::classify(status, &error).to_owned())
                    .or_default() += 1;
            }
            (Some("result"), _) => self.result = Some(v.clone()),
            _ => {}
        }
    }

    fn usage(&self, result: &Value) -> RoundUsage {
        let mut usage = RoundUsage::default();
        if let Some(models) = result.get("modelUsage").and_then(Value::as_object)
            && !models.is_empty()
        {
            for (model, u) in models {
                let model = bounded(model, 128);
                usage.by_model.entry(model).or_default().add(&normalise(u));
            }
        } else if let Some(u) = result.get("usage") {
            let model = self
                .model
                .clone()
                .unwrap_or_else(|| UNKNOWN_MODEL.to_owned());
            usage.by_model.insert(bounded(&model, 128), normalise(u));
        }
        usage.by_model.retain(|_, u| !u.is_zero());
        usage
    }
}

impl OutputReader for ClaudeReader {
    fn line(&mut self, line: &[u8]) {
        for v in json_objects(line, &mut self.problems) {
            self.message(&v);
        }
    }

    fn skipped(&mut self, len: usize) {
        self.problems.push(overlong(len));
    }

    fn usage_now(&self, _carry: &Carry) -> RoundUsage {
        self.result
            .as_ref()
            .map(|r| self.usage(r))
            .unwrap_or_default()
    }

    fn finish(self: Box<Self>, _carry: &mut Carry) -> PresetOutput {
        let Some(result) = &self.result else {
            return PresetOutput {
                error: Some("claude: the run ended without a result message".into()),
                retries: self.retries,
                problems: self.problems,
                ..PresetOutput::default()
            };
        };
        let usage = self.usage(result);
        let subtype = result.get("subtype").and_then(Value::as_str).unwrap_or("");
        let is_error = result
            .get("is_error")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let text = result.get("result").and_then(Value::as_str);
        let error = if is_error || subtype != "success" {
            let what = text
                .filter(|t| !t.trim().is_empty())
                .map(str::to_owned)
                .or_else(|| result.get("errors").map(|e| e.to_string()))
                .unwrap_or_else(|| "no message".to_owned());
            Some(bounded(
                &format!("claude: run failed (subtype `{subtype}`, is_error {is_error}): {what}"),
                2048,
            ))
        } else {
            None
        };
        let report = match result.get("structured_output") {
            Some(v) if v.is_object() => serde_json::to_string(v).ok(),
            _ => text.map(|t| t.trim().to_owned()),
        };
        PresetOutput {
            report,
            usage,
            retries: self.retries,
            error,
            problems: self.problems,
        }
    }
}
