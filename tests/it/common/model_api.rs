//! Wire formats of the scripted model server (`model_server.rs`): how one script turn is
//! written as an OpenAI Responses, Anthropic Messages or OpenAI Chat Completions answer
//! (server-sent events when the request streams, one JSON body otherwise).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

/// Token counts a turn reports. `input` counts all prompt tokens, `cached` of which came from
/// the cache; `reasoning` is part of `output` (the OpenAI APIs report it separately, the
/// Messages API has no field for it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
    pub reasoning: u64,
}

impl Usage {
    pub fn new(input: u64, cached: u64, output: u64, reasoning: u64) -> Self {
        Self {
            input,
            cached,
            output,
            reasoning,
        }
    }
}

/// What the model answers in one turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// A call of the API's shell tool (`exec_command {"cmd"}` for Responses, as codex
    /// declares it; `Bash {"command"}` for Messages, as claude declares it; `shell {"command"}`
    /// for Chat Completions).
    Shell(String),
    /// A call of any tool with these JSON arguments.
    Tool { name: String, arguments: Value },
    /// A final assistant message.
    Text(String),
    /// Several tool calls in one answer (Chat Completions only), each a name and its raw
    /// `arguments` text, which may be malformed JSON.
    Calls(Vec<(String, String)>),
    /// An HTTP error instead of an answer (`Retry-After` seconds when given).
    Status {
        status: u16,
        retry_after: Option<u64>,
    },
}

/// One scripted answer: a reply and the usage it reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    pub reply: Reply,
    pub usage: Usage,
}

impl Turn {
    pub fn shell(command: &str, usage: Usage) -> Self {
        Self {
            reply: Reply::Shell(command.to_owned()),
            usage,
        }
    }

    pub fn tool(name: &str, arguments: Value, usage: Usage) -> Self {
        Self {
            reply: Reply::Tool {
                name: name.to_owned(),
                arguments,
            },
            usage,
        }
    }

    /// Several calls at once: (name, raw arguments text).
    pub fn calls(calls: &[(&str, &str)], usage: Usage) -> Self {
        Self {
            reply: Reply::Calls(
                calls
                    .iter()
                    .map(|(n, a)| ((*n).to_owned(), (*a).to_owned()))
                    .collect(),
            ),
            usage,
        }
    }

    /// An HTTP error answer.
    pub fn status(status: u16, retry_after: Option<u64>) -> Self {
        Self {
            reply: Reply::Status {
                status,
                retry_after,
            },
            usage: Usage::default(),
        }
    }

    pub fn text(text: &str, usage: Usage) -> Self {
        Self {
            reply: Reply::Text(text.to_owned()),
            usage,
        }
    }

    /// The tool name and arguments when this turn calls a tool; `shell` names the API's shell
    /// tool and the key of its command argument.
    fn tool_call(&self, shell: (&str, &str)) -> Option<(String, Value)> {
        match &self.reply {
            Reply::Shell(cmd) => Some((shell.0.to_owned(), json!({ shell.1: cmd }))),
            Reply::Tool { name, arguments } => Some((name.clone(), arguments.clone())),
            Reply::Calls(calls) => calls.first().map(|(name, args)| {
                (
                    name.clone(),
                    serde_json::from_str(args).unwrap_or(Value::String(args.clone())),
                )
            }),
            Reply::Text(_) | Reply::Status { .. } => None,
        }
    }

    fn text_or_empty(&self) -> &str {
        match &self.reply {
            Reply::Text(t) => t,
            _ => "",
        }
    }
}

/// One `event: NAME` / `data: JSON` server-sent event.
fn sse(event: &str, data: &Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

/// The `POST /v1/responses` answer (always streamed: codex sets `stream: true`). `n` numbers
/// the ids.
pub fn responses(turn: &Turn, model: &str, n: usize) -> String {
    let item = match turn.tool_call(("exec_command", "cmd")) {
        Some((name, args)) => json!({
            "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
            "name": name, "arguments": args.to_string(), "status": "completed",
        }),
        None => json!({
            "type": "message", "id": format!("msg_{n}"), "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": turn.text_or_empty(), "annotations": []}],
        }),
    };
    let u = turn.usage;
    let response = |status: &str, output: Value, usage: Value| {
        json!({
            "id": format!("resp_{n}"), "object": "response", "created_at": 0, "status": status,
            "model": model, "output": output, "usage": usage,
        })
    };
    let usage = json!({
        "input_tokens": u.input, "input_tokens_details": {"cached_tokens": u.cached},
        "output_tokens": u.output, "output_tokens_details": {"reasoning_tokens": u.reasoning},
        "total_tokens": u.input + u.output,
    });
    [
        sse(
            "response.created",
            &json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null)}),
        ),
        sse(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        ),
        sse(
            "response.completed",
            &json!({"type": "response.completed", "response": response("completed", json!([item]), usage)}),
        ),
    ]
    .concat()
}

/// The Messages usage object: `input_tokens` counts the uncached part, as the API does.
fn messages_usage(u: Usage, output: u64) -> Value {
    json!({
        "input_tokens": u.input.saturating_sub(u.cached), "cache_read_input_tokens": u.cached,
        "cache_creation_input_tokens": 0, "output_tokens": output,
    })
}

/// The `POST /v1/messages` answer: a stream of events when `stream` is set, else one message.
pub fn messages(turn: &Turn, model: &str, n: usize, stream: bool) -> (String, &'static str) {
    let (block, stop) = match turn.tool_call(("Bash", "command")) {
        Some((name, input)) => (
            json!({"type": "tool_use", "id": format!("toolu_{n}"), "name": name, "input": input}),
            "tool_use",
        ),
        None => (
            json!({"type": "text", "text": turn.text_or_empty()}),
            "end_turn",
        ),
    };
    let message = |content: Value, stop: Value, usage: Value| {
        json!({
            "id": format!("msg_{n}"), "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop, "stop_sequence": null, "usage": usage,
        })
    };
    if !stream {
        let body = message(
            json!([block]),
            json!(stop),
            messages_usage(turn.usage, turn.usage.output),
        );
        return (body.to_string(), "application/json");
    }
    let (start, delta) = match block["type"].as_str() {
        Some("tool_use") => (
            json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
            json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}),
        ),
        _ => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        ),
    };
    let events = [
        sse(
            "message_start",
            &json!({"type": "message_start", "message": message(json!([]), Value::Null, messages_usage(turn.usage, 1))}),
        ),
        sse(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        sse(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        sse(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        sse(
            "message_delta",
            &json!({
                "type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                "usage": {"output_tokens": turn.usage.output},
            }),
        ),
        sse("message_stop", &json!({"type": "message_stop"})),
    ];
    (events.concat(), "text/event-stream")
}

/// The `POST /v1/chat/completions` answer. Streamed: a role chunk, a content or `tool_calls`
/// chunk, a chunk with `finish_reason`, then, only when `include_usage`, a chunk with empty
/// `choices` and the `usage`, then `data: [DONE]`.
pub fn chat(
    turn: &Turn,
    model: &str,
    n: usize,
    stream: bool,
    include_usage: bool,
) -> (String, &'static str) {
    let u = turn.usage;
    let usage = json!({
        "prompt_tokens": u.input, "completion_tokens": u.output,
        "total_tokens": u.input + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cached},
        "completion_tokens_details": {"reasoning_tokens": u.reasoning},
    });
    // Every call as (name, raw arguments text).
    let calls: Vec<(String, String)> = match &turn.reply {
        Reply::Calls(c) => c.clone(),
        _ => turn
            .tool_call(("shell", "command"))
            .map(|(n, a)| vec![(n, a.to_string())])
            .unwrap_or_default(),
    };
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    let id = format!("chatcmpl-{n}");
    let chunk = |choices: Value| json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices});
    if !stream {
        let message = if calls.is_empty() {
            json!({"role": "assistant", "content": turn.text_or_empty()})
        } else {
            let tool_calls: Vec<Value> = calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| {
                    json!({"id": format!("call_{n}_{i}"), "type": "function",
                    "function": {"name": name, "arguments": args}})
                })
                .collect();
            json!({"role": "assistant", "content": null, "tool_calls": tool_calls})
        };
        let body = json!({
            "id": id, "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        });
        return (body.to_string(), "application/json");
    }
    let mut chunks = vec![chunk(
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
    )];
    if calls.is_empty() {
        chunks.push(chunk(
            json!([{"index": 0, "delta": {"content": turn.text_or_empty()}, "finish_reason": null}]),
        ));
    }
    // A single call in one chunk; several (`Reply::Calls`) as real servers stream them: the
    // id and name first, the arguments in pieces.
    if !matches!(turn.reply, Reply::Calls(_)) {
        for (name, args) in &calls {
            chunks.push(chunk(
                json!([{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "id": format!("call_{n}"), "type": "function",
                "function": {"name": name, "arguments": args}}]}, "finish_reason": null}]),
            ));
        }
    }
    for (i, (name, args)) in calls
        .iter()
        .enumerate()
        .filter(|_| matches!(turn.reply, Reply::Calls(_)))
    {
        chunks.push(chunk(
            json!([{"index": 0, "delta": {"tool_calls": [{"index": i,
            "id": format!("call_{n}_{i}"), "type": "function",
            "function": {"name": name, "arguments": ""}}]}, "finish_reason": null}]),
        ));
        let bytes = args.as_bytes();
        let mut at = 0;
        while at < bytes.len() {
            let mut end = (at + 7).min(bytes.len());
            while !args.is_char_boundary(end) {
                end += 1;
            }
            chunks.push(chunk(
                json!([{"index": 0, "delta": {"tool_calls": [{"index": i,
                "function": {"arguments": &args[at..end]}}]}, "finish_reason": null}]),
            ));
            at = end;
        }
    }
    chunks.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
    ));
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        chunks.push(last);
    }
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    (body, "text/event-stream")
}
