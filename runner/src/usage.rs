//! Token usage (SPEC §4): the agent appends JSON lines to `$RALPH_USAGE_FILE`; the runner reads
//! them after each round. Malformed lines are reported and skipped, never fatal.
//!
//! Normalisation (the OpenAI convention, documented in `docs/metrics.md`): `input_tokens` counts
//! every input token, `cached_input_tokens` (read from a prompt cache) and
//! `cache_write_input_tokens` (written to one) are subsets of it, and `reasoning_tokens` is a
//! subset of `output_tokens`. Presets convert CLIs that count otherwise (Anthropic's
//! `input_tokens` excludes cache reads and writes). The token budget counts
//! `input_tokens + output_tokens`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::util::text::bounded;

/// Largest usage file read; the rest is ignored with a warning.
pub const MAX_USAGE_FILE_BYTES: usize = 1 << 20;

/// Model name used when a line names none.
pub const UNKNOWN_MODEL: &str = "unknown";

/// Token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageTotals {
    /// Input (prompt) tokens, cached ones included.
    pub input_tokens: u64,
    /// Input tokens served from a cache.
    pub cached_input_tokens: u64,
    /// Output tokens, reasoning included.
    pub output_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Input tokens written to a prompt cache (a subset of `input_tokens`); only shown when
    /// non-zero, as few agents report it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl UsageTotals {
    /// Adds `other` (saturating).
    pub fn add(&mut self, other: &UsageTotals) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cache_write_input_tokens = self
            .cache_write_input_tokens
            .saturating_add(other.cache_write_input_tokens);
    }

    /// `self - earlier`, per field, never below zero: the usage between two cumulative
    /// snapshots.
    pub fn since(&self, earlier: &UsageTotals) -> UsageTotals {
        UsageTotals {
            input_tokens: self.input_tokens.saturating_sub(earlier.input_tokens),
            cached_input_tokens: self
                .cached_input_tokens
                .saturating_sub(earlier.cached_input_tokens),
            output_tokens: self.output_tokens.saturating_sub(earlier.output_tokens),
            reasoning_tokens: self
                .reasoning_tokens
                .saturating_sub(earlier.reasoning_tokens),
            cache_write_input_tokens: self
                .cache_write_input_tokens
                .saturating_sub(earlier.cache_write_input_tokens),
        }
    }

    /// The counts by metric `kind` label (`ralph_tokens_total{kind}`).
    pub fn by_kind(&self) -> [(&'static str, u64); 5] {
        [
            ("input", self.input_tokens),
            ("cached_input", self.cached_input_tokens),
            ("cache_write_input", self.cache_write_input_tokens),
            ("output", self.output_tokens),
            ("reasoning", self.reasoning_tokens),
        ]
    }

    /// Tokens counted against `--max-tokens`.
    pub fn budget_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// True when every count is zero.
    pub fn is_zero(&self) -> bool {
        *self == UsageTotals::default()
    }
}

/// Usage of one round, by model.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundUsage {
    /// Totals per model name.
    pub by_model: BTreeMap<String, UsageTotals>,
}

impl RoundUsage {
    /// The sum over models.
    pub fn total(&self) -> UsageTotals {
        let mut t = UsageTotals::default();
        for u in self.by_model.values() {
            t.add(u);
        }
        t
    }
}

/// A usage line that was skipped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageProblem {
    /// 1-based line number (0 for the file as a whole).
    pub line: u32,
    /// What was wrong.
    pub message: String,
}

#[derive(Deserialize)]
struct Line {
    model: Option<String>,
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cached_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
    #[serde(default)]
    cache_write_input_tokens: Option<u64>,
}

/// Parses the content of a usage file. Unknown keys are ignored (agents may add cost fields);
/// wrong types, negative numbers and non-objects are problems.
pub fn parse(bytes: &[u8]) -> (RoundUsage, Vec<UsageProblem>) {
    let mut usage = RoundUsage::default();
    let mut problems = Vec::new();
    let body = if bytes.len() > MAX_USAGE_FILE_BYTES {
        problems.push(UsageProblem {
            line: 0,
            message: format!(
                "usage file is {} bytes; only the first {MAX_USAGE_FILE_BYTES} were read",
                bytes.len()
            ),
        });
        &bytes[..MAX_USAGE_FILE_BYTES]
    } else {
        bytes
    };
    for (i, raw) in body.split(|b| *b == b'\n').enumerate() {
        let line_no = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let text = String::from_utf8_lossy(raw);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let parsed: Result<Line, _> = serde_json::from_str(text);
        match parsed {
            Ok(l) => {
                let model = l
                    .model
                    .filter(|m| !m.trim().is_empty())
                    .unwrap_or_else(|| UNKNOWN_MODEL.to_owned());
                let model = bounded(&model, 128);
                let entry = usage.by_model.entry(model).or_default();
                entry.add(&UsageTotals {
                    input_tokens: l.input_tokens.unwrap_or(0),
                    cached_input_tokens: l.cached_input_tokens.unwrap_or(0),
                    output_tokens: l.output_tokens.unwrap_or(0),
                    reasoning_tokens: l.reasoning_tokens.unwrap_or(0),
                    cache_write_input_tokens: l.cache_write_input_tokens.unwrap_or(0),
                });
            }
            Err(e) => problems.push(UsageProblem {
                line: line_no,
                message: bounded(&e.to_string(), 256),
            }),
        }
    }
    (usage, problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_lines_per_model_and_skips_malformed_ones() {
        let input = br#"{"model":"m","input_tokens":10,"cached_input_tokens":4,"output_tokens":3,"reasoning_tokens":1}
{"model":"m","input_tokens":5}
not json
{"input_tokens":-1}
{"output_tokens":7,"cost_usd":0.1}

"#;
        let (u, problems) = parse(input);
        assert_eq!(
            u.by_model["m"],
            UsageTotals {
                input_tokens: 15,
                cached_input_tokens: 4,
                output_tokens: 3,
                reasoning_tokens: 1,
                cache_write_input_tokens: 0,
            }
        );
        assert_eq!(u.by_model[UNKNOWN_MODEL].output_tokens, 7);
        assert_eq!(
            problems.iter().map(|p| p.line).collect::<Vec<_>>(),
            vec![3, 4]
        );
        assert_eq!(u.total().budget_tokens(), 25);
    }

    #[test]
    fn oversized_files_are_cut_with_a_problem() {
        let line = b"{\"input_tokens\":1}\n".repeat(MAX_USAGE_FILE_BYTES / 10);
        let (_, problems) = parse(&line);
        assert_eq!(problems[0].line, 0);
    }
}
