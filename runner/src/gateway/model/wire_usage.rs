//! Token usage read from the model API's own responses, per API (SPEC §9), normalised to
//! ralph's convention ([`crate::usage`]): Responses `response.usage`, Chat and Completions
//! `usage` (`prompt_tokens`, `completion_tokens`), Embeddings `usage` (`prompt_tokens` only), Messages
//! `message_start.message.usage` + `message_delta.usage` (Anthropic's `input_tokens` excludes
//! cache reads and writes; they are added, the same mapping as [`crate::agent`]'s claude preset).

use serde_json::Value;

use crate::gateway::sink::Api;
use crate::usage::UsageTotals;

/// Usage and model collected from one response.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WireUsage {
    /// The model named by the response.
    pub model: Option<String>,
    /// Normalised totals (zero until seen).
    pub usage: UsageTotals,
    /// True once any usage object was read.
    pub seen: bool,
    /// Anthropic's raw counts (kept apart so `message_delta` can update them).
    anthropic: AnthropicCounts,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct AnthropicCounts {
    input: u64,
    cache_read: u64,
    cache_creation: u64,
    output: u64,
}

fn num(v: &Value, path: &[&str]) -> Option<u64> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_u64()
}

fn model_of(v: &Value) -> Option<String> {
    v.get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
}

impl WireUsage {
    /// Reads one SSE event's data (a JSON object) of `api`.
    pub fn observe_event(&mut self, api: Api, data: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        match api {
            Api::Responses => {
                let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
                if let Some(resp) = v.get("response") {
                    if let Some(m) = model_of(resp) {
                        self.model = Some(m);
                    }
                    let done = matches!(
                        ty,
                        "response.completed" | "response.incomplete" | "response.failed"
                    );
                    if let Some(u) = resp.get("usage").filter(|u| done && u.is_object()) {
                        self.responses_usage(u);
                    }
                }
            }
            Api::Chat | Api::Completions | Api::Embeddings => self.observe_chat(&v),
            Api::Messages => {
                let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
                match ty {
                    "message_start" => {
                        if let Some(msg) = v.get("message") {
                            if let Some(m) = model_of(msg) {
                                self.model = Some(m);
                            }
                            if let Some(u) = msg.get("usage") {
                                self.anthropic_usage(u);
                            }
                        }
                    }
                    "message_delta" => {
                        if let Some(u) = v.get("usage") {
                            self.anthropic_usage(u);
                        }
                    }
                    _ => {}
                }
            }
            Api::Other => {}
        }
    }

    /// Reads a whole (non-streamed) JSON response body of `api`.
    pub fn observe_body(&mut self, api: Api, body: &[u8]) {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        match api {
            Api::Responses => {
                if let Some(m) = model_of(&v) {
                    self.model = Some(m);
                }
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    self.responses_usage(u);
                }
            }
            Api::Chat | Api::Completions | Api::Embeddings => self.observe_chat(&v),
            Api::Messages => {
                if let Some(m) = model_of(&v) {
                    self.model = Some(m);
                }
                if let Some(u) = v.get("usage") {
                    self.anthropic_usage(u);
                }
            }
            Api::Other => {}
        }
    }

    fn observe_chat(&mut self, v: &Value) {
        if let Some(m) = model_of(v) {
            self.model = Some(m);
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.seen = true;
            self.usage = UsageTotals {
                input_tokens: num(u, &["prompt_tokens"]).unwrap_or(0),
                cached_input_tokens: num(u, &["prompt_tokens_details", "cached_tokens"])
                    .unwrap_or(0),
                output_tokens: num(u, &["completion_tokens"]).unwrap_or(0),
                reasoning_tokens: num(u, &["completion_tokens_details", "reasoning_tokens"])
                    .unwrap_or(0),
                cache_write_input_tokens: 0,
            };
        }
    }

    fn responses_usage(&mut self, u: &Value) {
        self.seen = true;
        self.usage = UsageTotals {
            input_tokens: num(u, &["input_tokens"]).unwrap_or(0),
            cached_input_tokens: num(u, &["input_tokens_details", "cached_tokens"]).unwrap_or(0),
            output_tokens: num(u, &["output_tokens"]).unwrap_or(0),
            reasoning_tokens: num(u, &["output_tokens_details", "reasoning_tokens"]).unwrap_or(0),
            cache_write_input_tokens: 0,
        };
    }

    /// Anthropic counts are cumulative: a later object's fields replace earlier ones.
    fn anthropic_usage(&mut self, u: &Value) {
        if !u.is_object() {
            return;
        }
        self.seen = true;
        let a = &mut self.anthropic;
        if let Some(n) = num(u, &["input_tokens"]) {
            a.input = n;
        }
        if let Some(n) = num(u, &["cache_read_input_tokens"]) {
            a.cache_read = n;
        }
        if let Some(n) = num(u, &["cache_creation_input_tokens"]) {
            a.cache_creation = n;
        }
        if let Some(n) = num(u, &["output_tokens"]) {
            a.output = n;
        }
        self.usage = UsageTotals {
            input_tokens: a
                .input
                .saturating_add(a.cache_read)
                .saturating_add(a.cache_creation),
            cached_input_tokens: a.cache_read,
            output_tokens: a.output,
            reasoning_tokens: 0,
            cache_write_input_tokens: a.cache_creation,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_delta_updates_cumulative_counts() {
        let mut w = WireUsage::default();
        w.observe_event(
            Api::Messages,
            br#"{"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":10,"cache_read_input_tokens":100,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
        );
        w.observe_event(
            Api::Messages,
            br#"{"type":"message_delta","usage":{"output_tokens":42}}"#,
        );
        assert_eq!(w.model.as_deref(), Some("claude-x"));
        assert_eq!(
            w.usage,
            UsageTotals {
                input_tokens: 115,
                cached_input_tokens: 100,
                output_tokens: 42,
                reasoning_tokens: 0,
                cache_write_input_tokens: 5,
            }
        );
    }

    #[test]
    fn completions_and_embeddings_usage_is_read_like_chat() {
        let mut w = WireUsage::default();
        w.observe_body(
            Api::Embeddings,
            br#"{"model":"text-embedding-3-small","usage":{"prompt_tokens":1000,"total_tokens":1000}}"#,
        );
        assert_eq!(w.usage.budget_tokens(), 1000);
        assert_eq!(w.usage.output_tokens, 0);
        let mut w = WireUsage::default();
        w.observe_event(
            Api::Completions,
            br#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":988,"total_tokens":1000}}"#,
        );
        assert_eq!((w.usage.input_tokens, w.usage.output_tokens), (12, 988));
    }

    #[test]
    fn null_chat_usage_and_garbage_are_ignored() {
        let mut w = WireUsage::default();
        w.observe_event(Api::Chat, br#"{"model":"m","usage":null}"#);
        w.observe_event(Api::Chat, b"[DONE]");
        assert!(!w.seen);
        assert_eq!(w.model.as_deref(), Some("m"));
    }
}
