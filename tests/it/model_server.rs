//! The scripted model server itself (`tests/it/common/model_server.rs`), over plain HTTP: Chat
//! Completions (which no CLI here speaks) streamed and not, `include_usage`, turns in order and
//! past the end, and Messages side requests that take no turn.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::model_server::{Api, ModelServer, Turn, Usage};
use serde_json::{Value, json};

/// `POST path` with a JSON body and a bearer key; returns the status and the body text.
fn post(server: &ModelServer, path: &str, body: &Value) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.to_string();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k-1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// The JSON of each `data:` line of an event stream (`[DONE]` left out).
fn data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn chat_completions_stream_tool_calls_and_usage_only_when_asked() {
    let server = ModelServer::start(
        Api::Chat,
        vec![
            Turn::shell("ls", Usage::new(100, 40, 10, 4)),
            Turn::text("bye", Usage::new(200, 50, 5, 0)),
        ],
    );
    let ask = |include: bool| {
        let mut body = json!({"model": "m", "stream": true, "messages": []});
        if include {
            body["stream_options"] = json!({"include_usage": true});
        }
        post(&server, "/v1/chat/completions", &body)
    };
    let (status, body) = ask(true);
    assert_eq!(status, 200);
    assert!(body.ends_with("data: [DONE]\n\n"));
    let chunks = data(&body);
    let call = &chunks[1]["choices"][0]["delta"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "shell");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"command": "ls"}));
    assert_eq!(chunks[2]["choices"][0]["finish_reason"], "tool_calls");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], 100);
    assert_eq!(last["usage"]["prompt_tokens_details"]["cached_tokens"], 40);
    assert_eq!(last["usage"]["completion_tokens"], 10);
    assert_eq!(
        last["usage"]["completion_tokens_details"]["reasoning_tokens"],
        4
    );

    let (_, body) = ask(false);
    let chunks = data(&body);
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert_eq!(chunks[1]["choices"][0]["delta"]["content"], "bye");

    // Past the end of the script: the last text turn again.
    let (status, body) = post(
        &server,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": []}),
    );
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "bye");
    assert_eq!(v["usage"]["total_tokens"], 205);

    let turns: Vec<_> = server.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(0), Some(1), Some(1)]);
    assert_eq!(server.request_count(), 3);
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.header("Authorization") == Some("Bearer k-1"))
    );
}

#[test]
fn a_script_without_a_final_message_answers_500_past_its_end() {
    let server = ModelServer::start(Api::Responses, vec![Turn::shell("true", Usage::default())]);
    let body = json!({"model": "m", "stream": true, "input": []});
    let (status, events) = post(&server, "/v1/responses", &body);
    assert_eq!(status, 200);
    let item = &data(&events)[1]["item"];
    assert_eq!(item["name"], "exec_command");
    assert_eq!(post(&server, "/v1/responses", &body).0, 500);
    let turns: Vec<_> = server.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [Some(0), None]);
}

#[test]
fn messages_side_requests_take_no_turn() {
    let server = ModelServer::start(
        Api::Messages,
        vec![Turn::text("main answer", Usage::new(10, 4, 3, 0))],
    );
    // A request without tools (a title or summary request) gets a short text, not the script.
    let (status, body) = post(
        &server,
        "/v1/messages",
        &json!({"model": "claude-haiku-4-5", "max_tokens": 50, "messages": []}),
    );
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["content"][0]["text"], "ok");
    let (status, body) = post(
        &server,
        "/v1/messages/count_tokens",
        &json!({"model": "m", "messages": []}),
    );
    assert_eq!((status, body.contains("input_tokens")), (200, true));
    let (status, body) = post(
        &server,
        "/v1/messages?beta=true",
        &json!({"model": "m", "stream": true, "messages": [], "tools": [{"name": "Bash"}]}),
    );
    assert_eq!(status, 200);
    let events = data(&body);
    assert_eq!(events[0]["message"]["usage"]["input_tokens"], 6);
    assert_eq!(events[0]["message"]["usage"]["cache_read_input_tokens"], 4);
    assert_eq!(events[2]["delta"]["text"], "main answer");
    assert_eq!(events[4]["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[4]["usage"]["output_tokens"], 3);
    let turns: Vec<_> = server.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, [None, None, Some(0)]);
    assert_eq!(server.requests()[2].query, "beta=true");
}
