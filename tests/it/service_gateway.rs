//! `ralph serve` and the model gateway (SPEC §9): upstreams are named in the service's
//! configuration with a key file only the service reads; a job names an upstream, never a key;
//! `limits.allowed_hosts` and `limits.allowed_upstreams` bound what jobs may ask for.

use crate::common;

use std::time::Duration;

use common::model_server::{Api, ModelServer, Turn, Usage};
use common::server::{Server, job};
use serde_json::{Value, json};

const KEY: &str = "sk-service-file-key-51d0";

fn post_jobs(s: &Server, jobs: Vec<Value>) -> (u16, Value) {
    s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    )
}

#[test]
fn a_job_names_an_upstream_and_the_service_adds_the_key_from_its_file() {
    let model = ModelServer::start(
        Api::Chat,
        vec![Turn::text("hello", Usage::new(300, 100, 40, 0))],
    );
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("mock.key");
    std::fs::write(&key_file, format!("{KEY}\n")).unwrap();
    let s = Server::new(&format!(
        "[gateway.upstreams.mock]\nurl = \"{}/v1\"\napi = \"openai\"\nkey_file = \"{}\"\n\n[limits]\nallowed_hosts = [\"pypi.org\"]\nallowed_upstreams = [\"mock\"]\n",
        model.url(),
        key_file.display()
    ));
    let ws = s.workspace("ws");
    let agent = s.agent(
        "ask.sh",
        r#"env > env.txt
curl -s -X POST "$RALPH_GATEWAY_URL/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"m1","messages":[{"role":"user","content":"hi"}]}' > answer.json
echo '{"status":"complete","summary":"asked","evidence":["answer.json"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE""#,
    );
    let (code, body) = post_jobs(&s, vec![job(&ws, &agent, json!({"upstream": "mock"}))]);
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let j = s.wait_finished(&id, Duration::from_secs(120));
    assert_eq!(j["outcome"], "complete", "{j}");
    let answer = std::fs::read_to_string(ws.join("answer.json")).unwrap();
    assert!(answer.contains("hello"), "{answer}");
    let env = std::fs::read_to_string(ws.join("env.txt")).unwrap();
    assert!(!env.contains(KEY), "{env}");
    assert!(env.contains("RALPH_GATEWAY_URL=http://127.0.0.2:"), "{env}");
    let reqs = model.requests();
    assert_eq!(reqs.len(), 1, "{}", model.summary());
    assert_eq!(
        reqs[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let events = s.events(&id);
    let m: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "model_request")
        .collect();
    assert_eq!(m.len(), 1, "{events:?}");
    assert_eq!(m[0]["api"], "chat");
    assert_eq!(m[0]["usage"]["input_tokens"], 300);
    assert_eq!(j["usage"]["input_tokens"], 300, "{j}");
    assert_eq!(j["usage"]["output_tokens"], 40, "{j}");

    // A job may not bring a URL, a key variable, an upstream not allowed, or a host not listed.
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"upstream": "http://127.0.0.1:1/v1"}),
            "limits.allowed_upstreams",
            "job[0].upstream",
        ),
        (
            json!({"upstream": "mock", "api_key_env": "HOME"}),
            "limits.allowed_upstreams",
            "job[0].api_key_env",
        ),
        (
            json!({"upstream": "other"}),
            "limits.allowed_upstreams",
            "job[0].upstream",
        ),
        (
            json!({"allow_host": ["evil.example"]}),
            "limits.allowed_hosts",
            "job[0].allow_host",
        ),
    ];
    for (extra, rule, field) in cases {
        let (code, body) = post_jobs(&s, vec![job(&ws, &agent, extra.clone())]);
        assert_eq!(code, 403, "{extra}: {body}");
        assert_eq!(body["error"]["rule"], rule, "{extra}: {body}");
        assert_eq!(body["error"]["field"], field, "{extra}: {body}");
    }
    assert_eq!(model.request_count(), 1, "no refused job reached the model");
}
