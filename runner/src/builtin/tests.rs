//! The agent loop against a scripted Chat Completions server on loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Response, StatusCode};
use axum::routing::post;
use serde_json::{Value, json};

use super::*;

/// One scripted answer: status, whether to stream, the body (a reply JSON, or SSE chunks).
#[derive(Clone)]
enum Answer {
    Json(u16, Value),
    Sse(Vec<Value>),
}

struct Script {
    answers: Mutex<Vec<Answer>>,
    seen: Mutex<Vec<Value>>,
}

fn tool_call(id: &str, name: &str, args: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
}

fn calls(list: Vec<Value>) -> Answer {
    Answer::Json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": null, "tool_calls": list},
               "finish_reason": "tool_calls"}], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
    )
}

fn answer(text: &str) -> Answer {
    Answer::Json(
        200,
        json!({"choices": [{"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}),
    )
}

async fn serve(script: Arc<Script>) -> String {
    let app = Router::new().route(
        "/v1/chat/completions",
        post({
            let script = script.clone();
            move |body: axum::Json<Value>| {
                let script = script.clone();
                async move {
                    script.seen.lock().unwrap().push(body.0);
                    let next = {
                        let mut a = script.answers.lock().unwrap();
                        if a.is_empty() {
                            None
                        } else {
                            Some(a.remove(0))
                        }
                    };
                    match next {
                        Some(Answer::Json(status, v)) => Response::builder()
                            .status(StatusCode::from_u16(status).unwrap())
                            .header("content-type", "application/json")
                            .header("retry-after", "0")
                            .body(Body::from(v.to_string()))
                            .unwrap(),
                        Some(Answer::Sse(chunks)) => {
                            let mut text = String::new();
                            for c in chunks {
                                text.push_str(&format!("data: {c}\n\n"));
                            }
                            text.push_str("data: [DONE]\n\n");
                            Response::builder()
                                .header("content-type", "text/event-stream")
                                .body(Body::from(text))
                                .unwrap()
                        }
                        None => Response::builder()
                            .status(StatusCode::INTERNAL_SERVER_ERROR)
                            .body(Body::from("script exhausted"))
                            .unwrap(),
                    }
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

fn config(url: String, ws: &std::path::Path, max_steps: u32) -> Config {
    Config {
        base_url: url,
        model: "scripted".into(),
        max_steps,
        workspace: ws.to_owned(),
        report_file: ws.join(".report.json"),
        prompt: "Make the tests pass.".into(),
        stream: true,
        context_budget: DEFAULT_CONTEXT_BUDGET,
        limits: ToolLimits {
            shell_timeout: Duration::from_secs(30),
            ..ToolLimits::default()
        },
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const REPORT: &str = r#"{"status":"complete","summary":"fixed","evidence":["sh test.sh passes"],"nextSteps":[],"blocker":""}"#;

#[test]
fn a_multi_step_round_reads_edits_runs_and_reports() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("test.sh"), "grep -q 'answer=42' code.sh\n").unwrap();
    std::fs::write(ws.path().join("code.sh"), "answer=41\n").unwrap();
    let script = Arc::new(Script {
        answers: Mutex::new(vec![
            // Two calls at once, one of them malformed.
            calls(vec![
                tool_call("c1", "read_file", r#"{"path":"code.sh"}"#),
                tool_call("c2", "shell", r#"{"command": "sh test.sh"#),
            ]),
            // A 429 first: retried.
            Answer::Json(429, json!({"error": {"message": "slow down"}})),
            calls(vec![tool_call(
                "c3",
                "edit_file",
                r#"{"path":"code.sh","old":"41","new":"42"}"#,
            )]),
            calls(vec![tool_call(
                "c4",
                "shell",
                r#"{"command":"sh test.sh && echo PASS"}"#,
            )]),
            answer(&format!("All done.\n```json\n{REPORT}\n```\n")),
        ]),
        seen: Mutex::new(Vec::new()),
    });
    let mut events = Vec::new();
    let ending = rt().block_on(async {
        let url = serve(script.clone()).await;
        run(&config(url, ws.path(), 10), |e| events.push(e)).await
    });
    assert_eq!(ending.unwrap(), Ending::Answered { steps: 4 });
    assert_eq!(
        std::fs::read_to_string(ws.path().join("code.sh")).unwrap(),
        "answer=42\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".report.json")).unwrap(),
        REPORT
    );
    let seen = script.seen.lock().unwrap();
    assert_eq!(seen.len(), 5, "four steps and one retry");
    // The second request answers both calls, in order, and the malformed one with an error.
    let msgs = seen[1]["messages"].as_array().unwrap();
    let tools: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["tool_call_id"], "c1");
    assert!(tools[0]["content"].as_str().unwrap().contains("answer=41"));
    assert_eq!(tools[1]["tool_call_id"], "c2");
    assert!(
        tools[1]["content"]
            .as_str()
            .unwrap()
            .starts_with("error: the arguments are not valid JSON")
    );
    // The run of the tests was fed back with its status.
    let last = seen[4]["messages"].as_array().unwrap();
    let fed = last.last().unwrap()["content"].as_str().unwrap();
    assert!(
        fed.starts_with("exit status 0") && fed.contains("PASS"),
        "{fed}"
    );
    // Every request offered the four tools and asked for the model.
    assert!(
        seen.iter()
            .all(|r| r["tools"].as_array().unwrap().len() == 4 && r["model"] == "scripted")
    );
    assert_eq!(seen[0]["messages"][0]["content"], SYSTEM_MESSAGE);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "retry" && e["reason"] == "rate_limit")
    );
}

#[test]
fn a_streaming_server_is_read_as_a_stream() {
    let ws = tempfile::tempdir().unwrap();
    let script = Arc::new(Script {
        answers: Mutex::new(vec![
            Answer::Sse(vec![
                json!({"choices": [{"delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "s1", "function": {"name": "write_file", "arguments": "{\"path\":\"out.txt\","}}]}}]}),
                json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "\"content\":\"hi\"}"}}]}, "finish_reason": "tool_calls"}]}),
            ]),
            Answer::Sse(vec![
                json!({"choices": [{"delta": {"content": REPORT[..20].to_owned()}}]}),
                json!({"choices": [{"delta": {"content": REPORT[20..].to_owned()}, "finish_reason": "stop"}]}),
                json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}),
            ]),
        ]),
        seen: Mutex::new(Vec::new()),
    });
    let mut events = Vec::new();
    let ending = rt().block_on(async {
        let url = serve(script.clone()).await;
        run(&config(url, ws.path(), 10), |e| events.push(e)).await
    });
    assert_eq!(ending.unwrap(), Ending::Answered { steps: 2 });
    assert_eq!(
        std::fs::read_to_string(ws.path().join("out.txt")).unwrap(),
        "hi"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join(".report.json")).unwrap(),
        REPORT
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "step" && e["output_tokens"] == 4)
    );
    assert_eq!(script.seen.lock().unwrap()[0]["stream"], true);
}

#[test]
fn a_model_that_never_stops_calling_tools_runs_out_of_steps() {
    let ws = tempfile::tempdir().unwrap();
    let answers = (0..5)
        .map(|i| {
            calls(vec![tool_call(
                &format!("c{i}"),
                "shell",
                r#"{"command":"true"}"#,
            )])
        })
        .collect();
    let script = Arc::new(Script {
        answers: Mutex::new(answers),
        seen: Mutex::new(Vec::new()),
    });
    let e = rt()
        .block_on(async {
            let url = serve(script.clone()).await;
            run(&config(url, ws.path(), 3), |_| {}).await
        })
        .unwrap_err();
    assert!(
        matches!(e, BuiltinError::OutOfSteps { max_steps: 3 }),
        "{e}"
    );
    assert!(e.to_string().contains("--agent-max-steps"), "{e}");
    assert_eq!(script.seen.lock().unwrap().len(), 3);
    assert!(!ws.path().join(".report.json").exists());
}

#[test]
fn a_refusal_is_not_retried_and_a_gateway_refusal_neither() {
    let ws = tempfile::tempdir().unwrap();
    for (status, body) in [
        (400, json!({"error": {"message": "bad model"}})),
        (
            503,
            json!({"error": {"code": "ralph_budget_exceeded", "message": "budget"}}),
        ),
    ] {
        let script = Arc::new(Script {
            answers: Mutex::new(vec![Answer::Json(status, body), answer(REPORT)]),
            seen: Mutex::new(Vec::new()),
        });
        let e = rt()
            .block_on(async {
                let url = serve(script.clone()).await;
                run(&config(url, ws.path(), 3), |_| {}).await
            })
            .unwrap_err();
        assert!(
            matches!(&e, BuiltinError::Chat { step: 1, source: ChatError::Refused { status: s, .. } } if *s == status),
            "{e}"
        );
        assert_eq!(script.seen.lock().unwrap().len(), 1);
    }
}

#[test]
fn the_report_candidate_is_the_one_fenced_block_or_the_answer() {
    assert_eq!(
        report_candidate("x\n```json\n{\"a\":1}\n```\ny"),
        "{\"a\":1}"
    );
    assert_eq!(report_candidate("  {\"a\":1}\n"), "{\"a\":1}");
    let two = "```\n{}\n```\n```\n{}\n```";
    assert_eq!(report_candidate(two), two);
}
