//! The Chat Completions wire format the built-in agent speaks: messages, tool calls, the tool
//! schemas it offers, and a response (whole, or assembled from a stream's deltas).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (null for an assistant message that only calls tools).
    #[serde(default)]
    pub content: Option<String>,
    /// The assistant's tool calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    /// A message with text only.
    pub fn text(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_owned(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A tool's answer to a call.
    pub fn tool(call_id: &str, content: impl Into<String>) -> Self {
        Self {
            role: "tool".to_owned(),
            content: Some(content.into()),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.to_owned()),
        }
    }

    /// Characters this message puts in the context (for the budget).
    pub fn size(&self) -> usize {
        self.content.as_deref().map_or(0, str::len)
            + self
                .tool_calls
                .iter()
                .map(|c| c.function.name.len() + c.function.arguments.len())
                .sum::<usize>()
    }
}

/// A tool call of the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id (echoed in the answer).
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_type")]
    pub kind: String,
    /// The function and its arguments (a JSON text, as the model wrote it).
    pub function: FunctionCall,
}

fn function_type() -> String {
    "function".to_owned()
}

/// The function part of a tool call.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The tool's name.
    #[serde(default)]
    pub name: String,
    /// Its arguments as JSON text (may be malformed: the model wrote it).
    #[serde(default)]
    pub arguments: String,
}

/// Token counts of one response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
}

/// What the model answered in one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    /// The assistant message (text and/or tool calls).
    pub content: Option<String>,
    /// Its tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped (`stop`, `tool_calls`, `length`, …).
    pub finish_reason: Option<String>,
    /// Token counts, when the server sent them.
    pub usage: Option<Usage>,
}

impl Reply {
    /// The assistant message to keep in the conversation.
    pub fn message(&self) -> Message {
        Message {
            role: "assistant".to_owned(),
            content: self.content.clone(),
            tool_calls: self.tool_calls.clone(),
            tool_call_id: None,
        }
    }
}

/// A malformed response.
#[derive(Debug, thiserror::Error)]
#[error("the model server's response is not a chat completion: {reason}")]
pub struct WireError {
    /// What was wrong.
    pub reason: String,
}

/// Parses a whole (non-streaming) response body.
pub fn parse_reply(body: &[u8]) -> Result<Reply, WireError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| WireError {
        reason: format!("not JSON: {e}"),
    })?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| WireError {
            reason: "no `choices[0]`".into(),
        })?;
    let msg = choice.get("message").ok_or_else(|| WireError {
        reason: "no `choices[0].message`".into(),
    })?;
    let tool_calls: Vec<ToolCall> = match msg.get("tool_calls") {
        None | Some(Value::Null) => Vec::new(),
        Some(t) => serde_json::from_value(t.clone()).map_err(|e| WireError {
            reason: format!("`tool_calls`: {e}"),
        })?,
    };
    Ok(Reply {
        content: msg
            .get("content")
            .and_then(Value::as_str)
            .map(str::to_owned),
        tool_calls,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_owned),
        usage: v
            .get("usage")
            .and_then(|u| serde_json::from_value(u.clone()).ok()),
    })
}

/// Assembles a streamed response from its `data:` chunks.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    reply: Reply,
    content: String,
    saw_content: bool,
    done: bool,
}

impl StreamAssembler {
    /// Feeds one SSE `data:` payload. Returns true once `[DONE]` was seen.
    pub fn feed(&mut self, data: &str) -> Result<bool, WireError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(data).map_err(|e| WireError {
            reason: format!("a stream chunk is not JSON: {e}"),
        })?;
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            self.reply.usage = serde_json::from_value(u.clone()).ok();
        }
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return Ok(false);
        };
        if let Some(r) = choice.get("finish_reason").and_then(Value::as_str) {
            self.reply.finish_reason = Some(r.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(false);
        };
        if let Some(t) = delta.get("content").and_then(Value::as_str) {
            self.content.push_str(t);
            self.saw_content = true;
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for (pos, c) in calls.iter().enumerate() {
                let index = c
                    .get("index")
                    .and_then(Value::as_u64)
                    .map_or(pos, |i| usize::try_from(i).unwrap_or(usize::MAX));
                if index > 127 {
                    return Err(WireError {
                        reason: format!("a tool call index of {index}"),
                    });
                }
                while self.reply.tool_calls.len() <= index {
                    self.reply.tool_calls.push(ToolCall {
                        id: String::new(),
                        kind: function_type(),
                        function: FunctionCall::default(),
                    });
                }
                let slot = &mut self.reply.tool_calls[index];
                if let Some(id) = c.get("id").and_then(Value::as_str) {
                    slot.id.push_str(id);
                }
                if let Some(f) = c.get("function") {
                    if let Some(n) = f.get("name").and_then(Value::as_str) {
                        slot.function.name.push_str(n);
                    }
                    if let Some(a) = f.get("arguments").and_then(Value::as_str) {
                        slot.function.arguments.push_str(a);
                    }
                }
            }
        }
        Ok(false)
    }

    /// The reply, once the stream ended.
    pub fn finish(mut self) -> Result<Reply, WireError> {
        if !self.done && self.reply.finish_reason.is_none() {
            return Err(WireError {
                reason: "the stream ended before the reply was complete".into(),
            });
        }
        if self.saw_content {
            self.reply.content = Some(self.content);
        }
        for (i, c) in self.reply.tool_calls.iter_mut().enumerate() {
            if c.id.is_empty() {
                c.id = format!("call_{i}");
            }
        }
        Ok(self.reply)
    }
}

/// The tool schemas offered to the model.
pub fn tool_schemas() -> Value {
    let tool = |name: &str, description: &str, props: Value, required: &[&str]| {
        json!({
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": props,
                    "required": required,
                    "additionalProperties": false,
                }
            }
        })
    };
    json!([
        tool(
            "shell",
            "Run `/bin/sh -c COMMAND` in the workspace. Returns the exit status and the tail of stdout and stderr. Bounded in time and output.",
            json!({"command": {"type": "string", "description": "The shell command line."}}),
            &["command"],
        ),
        tool(
            "read_file",
            "Read a text file (a path relative to the workspace, or absolute). Long files are cut.",
            json!({"path": {"type": "string"}}),
            &["path"],
        ),
        tool(
            "write_file",
            "Create or replace a file with the given content (parent directories are created).",
            json!({"path": {"type": "string"}, "content": {"type": "string"}}),
            &["path", "content"],
        ),
        tool(
            "edit_file",
            "Replace exactly one occurrence of `old` with `new` in a file. Fails, changing nothing, when `old` occurs zero or several times.",
            json!({"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}),
            &["path", "old", "new"],
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_reply_with_tool_calls_parses() {
        let body = br#"{"choices":[{"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"shell","arguments":"{\"command\":\"ls\"}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#;
        let r = parse_reply(body).unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].function.name, "shell");
        assert_eq!(r.usage.unwrap().prompt_tokens, 10);
        assert!(parse_reply(b"{}").is_err());
        assert!(parse_reply(b"nope").is_err());
    }

    #[test]
    fn a_stream_is_assembled_across_chunks_and_parallel_calls() {
        let mut a = StreamAssembler::default();
        for d in [
            r#"{"choices":[{"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"shell","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
        ] {
            assert!(!a.feed(d).unwrap());
        }
        assert!(a.feed("[DONE]").unwrap());
        let r = a.finish().unwrap();
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].function.arguments, r#"{"path":"x"}"#);
        assert_eq!(r.tool_calls[1].id, "b");
        assert_eq!(r.usage.unwrap().completion_tokens, 2);
        assert_eq!(r.content, None);
    }

    #[test]
    fn a_cut_stream_is_an_error() {
        let mut a = StreamAssembler::default();
        a.feed(r#"{"choices":[{"delta":{"content":"hal"}}]}"#)
            .unwrap();
        assert!(a.finish().is_err());
        let mut a = StreamAssembler::default();
        assert!(
            a.feed(r#"{"choices":[{"delta":{"tool_calls":[{"index":100000}]}}]}"#)
                .is_err()
        );
    }

    #[test]
    fn four_tools_are_offered() {
        let names: Vec<String> = tool_schemas()
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["shell", "read_file", "write_file", "edit_file"]);
    }
}
