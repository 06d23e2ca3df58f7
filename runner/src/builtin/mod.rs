//! The built-in agent (SPEC §10): ralph's own minimal coding agent, run inside a round as the
//! same static binary (`ralph __builtin-agent`). It speaks Chat Completions to the runner's model
//! gateway (never holding a key), offers the model four tools ([`tools`]), feeds their bounded
//! results back, and ends the round when the model answers without a tool call: that answer is
//! the report candidate, written to the report file. Its steps are bounded.
//!
//! - [`wire`]: the wire format, whole and streamed replies, the tool schemas.
//! - [`http`]: requests with retries and backoff.
//! - [`tools`]: `shell`, `read_file`, `write_file`, `edit_file`.
//! - [`context`]: trimming old tool output to a context budget.
//! - [`entry`]: the hidden subcommand a round runs.

pub mod context;
pub mod entry;
pub mod http;
pub mod tools;
pub mod wire;

use std::path::PathBuf;

use serde_json::json;

use http::{ChatClient, ChatError, Retry};
use tools::ToolLimits;
use wire::Message;

/// The system message (what `ralph agent show builtin` prints).
pub const SYSTEM_MESSAGE: &str = include_str!("system.md");

/// Default steps per round (`--agent-max-steps`).
pub const DEFAULT_MAX_STEPS: u32 = 50;

/// Default context budget, in characters of the conversation (about 100k tokens).
pub const DEFAULT_CONTEXT_BUDGET: usize = 400_000;

/// One round's agent.
#[derive(Debug, Clone)]
pub struct Config {
    /// The Chat Completions base URL (the gateway's, e.g. `$RALPH_GATEWAY_URL/v1`).
    pub base_url: String,
    /// The model.
    pub model: String,
    /// Model calls allowed in this round.
    pub max_steps: u32,
    /// Where the tools work.
    pub workspace: PathBuf,
    /// Where the report candidate goes.
    pub report_file: PathBuf,
    /// The runner's prompt: the user message.
    pub prompt: String,
    /// Ask for a stream (a server that answers with plain JSON is read as such).
    pub stream: bool,
    /// Context budget, in characters.
    pub context_budget: usize,
    /// Tool bounds.
    pub limits: ToolLimits,
}

/// How a round's agent ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The model answered without a tool call after `steps` model calls.
    Answered {
        /// Model calls made.
        steps: u32,
    },
}

/// A round the agent could not finish.
#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    /// Every step was used without a final answer.
    #[error(
        "the built-in agent used all {max_steps} steps (--agent-max-steps) without a final answer"
    )]
    OutOfSteps {
        /// The bound.
        max_steps: u32,
    },
    /// The model server failed.
    #[error("failed at step {step}: {source}")]
    Chat {
        /// The step.
        step: u32,
        /// Why.
        source: ChatError,
    },
    /// The report file could not be written.
    #[error("failed to write the report file {path}: {source}")]
    Report {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The report candidate in a final answer: a fenced block's content when there is exactly one,
/// else the whole answer (the runner validates it either way).
pub fn report_candidate(answer: &str) -> String {
    let mut blocks = Vec::new();
    let mut rest = answer;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
        let body = &after[body_start..];
        let Some(close) = body.find("```") else { break };
        blocks.push(body[..close].trim().to_owned());
        rest = &body[close + 3..];
    }
    match blocks.as_slice() {
        [one] => one.clone(),
        _ => answer.trim().to_owned(),
    }
}

/// Runs one round. `event` hears each step, tool call and retry (as JSON values, printed as
/// lines on stdout by the binary for the runner to read).
pub async fn run(
    cfg: &Config,
    mut event: impl FnMut(serde_json::Value),
) -> Result<Ending, BuiltinError> {
    let client = ChatClient::new(&cfg.base_url, &cfg.model, cfg.stream)
        .map_err(|source| BuiltinError::Chat { step: 0, source })?;
    let mut messages = vec![
        Message::text("system", SYSTEM_MESSAGE),
        Message::text("user", cfg.prompt.clone()),
    ];
    for step in 1..=cfg.max_steps {
        let trimmed = context::trim(&mut messages, cfg.context_budget);
        if trimmed > 0 {
            event(json!({"type": "context_trimmed", "step": step, "results": trimmed}));
        }
        let reply = client
            .complete(&messages, |r: &Retry| {
                event(json!({
                    "type": "retry", "step": step, "attempt": r.attempt,
                    "status": r.status, "reason": r.reason,
                }));
            })
            .await
            .map_err(|source| BuiltinError::Chat { step, source })?;
        let usage = reply.usage.unwrap_or_default();
        event(json!({
            "type": "step", "step": step, "tool_calls": reply.tool_calls.len(),
            "input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
        }));
        messages.push(reply.message());
        if reply.tool_calls.is_empty() {
            let answer = reply.content.unwrap_or_default();
            let candidate = report_candidate(&answer);
            std::fs::write(&cfg.report_file, candidate).map_err(|source| BuiltinError::Report {
                path: cfg.report_file.clone(),
                source,
            })?;
            return Ok(Ending::Answered { steps: step });
        }
        // Parallel calls: run concurrently, answered in the order they were made.
        let calls = reply.tool_calls.iter().map(|c| async move {
            let out = tools::run(
                &c.function.name,
                &c.function.arguments,
                &cfg.workspace,
                &cfg.limits,
            )
            .await;
            (c, out)
        });
        for (call, out) in futures_util::future::join_all(calls).await {
            event(json!({
                "type": "tool", "step": step, "name": crate::util::text::bounded(&call.function.name, 64),
                "error": out.starts_with("error:"),
            }));
            messages.push(Message::tool(&call.id, out));
        }
    }
    Err(BuiltinError::OutOfSteps {
        max_steps: cfg.max_steps,
    })
}

#[cfg(test)]
mod tests;
