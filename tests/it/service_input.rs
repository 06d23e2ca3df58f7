//! `ralph serve` refuses what it cannot honour: type errors name the key, every error answer is
//! JSON, a body must be JSON, stalled clients are cut off, a path outside the roots cannot be
//! probed, the database is private, and a drain whose grace passed says so.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::server::{Server, job};
use common::{complete_report, wait_for_file};
use serde_json::{Value, json};

/// One raw request; the whole answer (head and body) as text.
fn exchange(s: &Server, head: &str, body: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn request(s: &Server, method: &str, path: &str, headers: &[&str], body: &str) -> String {
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    exchange(s, &head, body.as_bytes())
}

/// The status, the lower-cased head and the body of an answer.
fn parts(answer: &str) -> (u16, String, String) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// Asserts the API's JSON error shape with `Content-Type: application/json`; returns the error.
fn json_error(answer: &str, status: u16) -> Value {
    let (code, head, body) = parts(answer);
    assert_eq!(code, status, "{answer}");
    assert!(
        head.contains("content-type: application/json"),
        "not JSON: {answer}"
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    let err = v["error"].clone();
    assert!(err["code"].as_str().is_some_and(|c| !c.is_empty()), "{v}");
    assert!(
        err["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{v}"
    );
    err
}

fn bearer(s: &Server) -> String {
    format!("Authorization: Bearer {}", s.token())
}

#[test]
fn type_errors_name_the_key_not_the_value() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent("a.sh", "true");
    let auth = bearer(&s);
    for (extra, field) in [
        (json!({"max_rounds": "x"}), "max_rounds"),
        (json!({"kind": "loopy"}), "kind"),
        (json!({"mode": "rw"}), "mode"),
        (json!({"memory": "lots"}), "memory"),
        (json!({"round_timeout": 5}), "round_timeout"),
        (json!({"protect": ["tests", 1]}), "protect[1]"),
        (json!({"env": "HOME"}), "env"),
        (json!({"priority": "high"}), "priority"),
    ] {
        let body = json!({"job": [job(&ws, &agent, json!({})), job(&ws, &agent, extra.clone())]});
        let answer = request(
            &s,
            "POST",
            "/v1/jobs",
            &[&auth, "Content-Type: application/json"],
            &body.to_string(),
        );
        let err = json_error(&answer, 400);
        assert_eq!(err["field"], field, "{extra}: {err}");
        assert!(
            err["message"].as_str().unwrap().starts_with("job[1]: "),
            "{err}"
        );
    }
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"], json!([]), "nothing is queued");
}

#[test]
fn every_error_answer_is_json() {
    let s = Server::new("");
    let auth = bearer(&s);
    let ct = "Content-Type: application/json";
    // axum's own refusals first.
    let e = json_error(&request(&s, "GET", "/nope", &[], ""), 404);
    assert_eq!(e["code"], "not_found");
    let e = json_error(&request(&s, "GET", "/v1/nope", &[&auth], ""), 404);
    assert_eq!(e["code"], "not_found");
    let answer = request(&s, "DELETE", "/v1/jobs", &[&auth], "");
    let e = json_error(&answer, 405);
    assert_eq!(e["code"], "method_not_allowed");
    assert!(parts(&answer).1.contains("allow: "), "{answer}");
    let e = json_error(&request(&s, "PUT", "/healthz", &[], ""), 405);
    assert_eq!(e["code"], "method_not_allowed");
    let big = "x".repeat(2 << 20);
    let e = json_error(&request(&s, "POST", "/v1/jobs", &[&auth, ct], &big), 413);
    assert_eq!(e["code"], "too_large");
    let e = json_error(
        &request(&s, "POST", "/v1/jobs", &[&auth, ct], "{\"job\": ["),
        400,
    );
    assert_eq!(e["code"], "invalid_request");
    let e = json_error(
        &request(
            &s,
            "POST",
            "/v1/jobs",
            &[&auth, "Content-Type: text/plain"],
            "{}",
        ),
        415,
    );
    assert_eq!(e["code"], "unsupported_media_type");
    let e = json_error(&request(&s, "GET", "/v1/jobs?limit=x", &[&auth], ""), 400);
    assert_eq!(e["code"], "invalid_request");
    let e = json_error(
        &request(&s, "GET", "/v1/jobs/nope/rounds/x/logs", &[&auth], ""),
        400,
    );
    assert_eq!(e["code"], "invalid_request");
    let e = json_error(&request(&s, "GET", "/v1/jobs", &[], ""), 401);
    assert_eq!(e["code"], "unauthorized");
}

#[test]
fn a_body_that_is_not_json_is_refused_with_415() {
    let s = Server::new("");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "done.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let auth = bearer(&s);
    let body = json!({"job": [job(&ws, &agent, json!({}))]}).to_string();
    // Hostile first: no Content-Type, another type, a look-alike; nothing is queued.
    let mut head = format!(
        "POST /v1/jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let e = json_error(&exchange(&s, &head, body.as_bytes()), 415);
    assert_eq!(e["code"], "unsupported_media_type", "{e}");
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/jsonx",
        "text/json",
    ] {
        let answer = request(
            &s,
            "POST",
            "/v1/jobs",
            &[&auth, &format!("Content-Type: {ct}")],
            &body,
        );
        let e = json_error(&answer, 415);
        assert_eq!(e["code"], "unsupported_media_type", "{ct}: {e}");
    }
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"], json!([]), "nothing is queued");
    // JSON with parameters is JSON; a body-less POST needs no type.
    let answer = request(
        &s,
        "POST",
        "/v1/jobs",
        &[&auth, "Content-Type: Application/JSON; charset=utf-8"],
        &body,
    );
    assert_eq!(parts(&answer).0, 201, "{answer}");
    let id = serde_json::from_str::<Value>(&parts(&answer).2).unwrap()["jobs"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.wait_finished(&id, Duration::from_secs(60));
    head = format!(
        "POST /v1/jobs/{id}/resume HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\nContent-Length: 0\r\n\r\n"
    );
    let (code, _, _) = parts(&exchange(&s, &head, b""));
    assert_ne!(code, 415);
}

/// Reads until the peer closes; fails past `limit`. Returns what was read and when it closed.
fn read_until_closed(c: &mut TcpStream, limit: Duration) -> (String, Duration) {
    let start = Instant::now();
    c.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
        assert!(
            start.elapsed() < limit,
            "the server kept a stalled connection open for {limit:?}; read so far: {:?}",
            String::from_utf8_lossy(&out)
        );
    }
    (String::from_utf8_lossy(&out).into_owned(), start.elapsed())
}

#[test]
fn stalled_clients_are_answered_408_and_cut_off_while_others_are_served() {
    let s = Server::new("header_read_timeout = \"1s\"\nbody_read_timeout = \"2s\"\n");
    let auth = bearer(&s);
    // Half a header, then nothing.
    let mut half_head = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    half_head
        .write_all(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Ty")
        .unwrap();
    // A whole head, then part of the body, then nothing.
    let mut half_body = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    half_body
        .write_all(
            format!(
                "POST /v1/jobs HTTP/1.1\r\nHost: x\r\n{auth}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{{\"job\": ["
            )
            .as_bytes(),
        )
        .unwrap();
    // Meanwhile the others are served.
    for _ in 0..5 {
        let (code, _) = s.api("GET", "/v1/jobs", None);
        assert_eq!(code, 200);
    }
    let bound = Duration::from_secs(15);
    let (answer, _) = read_until_closed(&mut half_head, bound);
    let e = json_error(&answer, 408);
    assert_eq!(e["code"], "request_timeout", "{answer}");
    let (answer, _) = read_until_closed(&mut half_body, bound);
    let e = json_error(&answer, 408);
    assert_eq!(e["code"], "request_timeout", "{answer}");
    assert!(
        e["message"].as_str().unwrap().contains("body_read_timeout"),
        "{e}"
    );
    let (code, _) = s.api("GET", "/v1/jobs", None);
    assert_eq!(code, 200, "the server still serves");
}

#[test]
fn a_workspace_outside_the_roots_answers_alike_whether_it_exists_or_not() {
    let s = Server::new("");
    let agent = s.agent("a.sh", "true");
    let auth = bearer(&s);
    let outside = s.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let missing = s.dir.path().join("outsidf");
    let answer = |ws: &std::path::Path| {
        let body = json!({"job": [job(ws, &agent, json!({}))]}).to_string();
        let a = request(
            &s,
            "POST",
            "/v1/jobs",
            &[&auth, "Content-Type: application/json"],
            &body,
        );
        // The answer without its Date header.
        a.lines()
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    for (there, absent) in [
        (outside.clone(), missing.clone()),
        (outside.join("."), missing.join(".")),
        ("/etc".into(), "/etd".into()),
        (s.root.join("../outside"), s.root.join("../outsidf")),
    ] {
        let (a, b) = (answer(&there), answer(&absent));
        assert_eq!(
            a,
            b,
            "{} and {} answer differently",
            there.display(),
            absent.display()
        );
        let e = json_error(&a.replace('\n', "\r\n"), 403);
        assert_eq!(
            (e["rule"].as_str(), e["field"].as_str()),
            (Some("limits.workspace_roots"), Some("job[0].workspace")),
            "{e}"
        );
    }
}

#[test]
fn the_database_is_private_whatever_the_state_dir_mode() {
    let mut s = Server::new("");
    let state = s.state.clone();
    let mode = |f: &str| {
        std::fs::metadata(state.join(f))
            .map(|m| m.permissions().mode() & 0o777)
            .ok()
    };
    let ws = s.workspace("ws");
    let agent = s.agent("a.sh", "true");
    let (code, _) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({"job": [job(&ws, &agent, json!({"kind": "task"}))]}).to_string()),
    );
    assert_eq!(code, 201);
    assert_eq!(mode("ralph.db"), Some(0o600));
    for f in ["ralph.db-wal", "ralph.db-shm"] {
        assert!(matches!(mode(f), None | Some(0o600)), "{f}: {:?}", mode(f));
    }
    // A state dir opened up and a database made readable by all, by hand: tightened at start.
    s.terminate();
    std::fs::set_permissions(&s.state, std::fs::Permissions::from_mode(0o755)).unwrap();
    for f in ["ralph.db", "ralph.db-wal", "ralph.db-shm"] {
        let _ = std::fs::set_permissions(s.state.join(f), std::fs::Permissions::from_mode(0o644));
    }
    s.start();
    let (code, _) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({"job": [job(&ws, &agent, json!({"kind": "task"}))]}).to_string()),
    );
    assert_eq!(code, 201);
    for f in ["ralph.db", "ralph.db-wal", "ralph.db-shm"] {
        assert!(matches!(mode(f), None | Some(0o600)), "{f}: {:?}", mode(f));
    }
    assert_eq!(mode("ralph.db"), Some(0o600));
}

#[test]
fn a_job_stopped_when_the_drain_grace_passed_says_so() {
    let mut s = Server::new("drain_grace = \"1s\"\n");
    let ws = s.workspace("ws");
    let agent = s.agent("hang.sh", "touch started\nexec sleep 94433");
    let (code, c) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({"job": [job(&ws, &agent, json!({}))]}).to_string()),
    );
    assert_eq!(code, 201, "{c}");
    let id = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for_file(&ws.join("started"), Duration::from_secs(30));
    let status = s.terminate();
    assert!(status.success(), "{status}\n{}", s.log_text());
    let events = s.events(&id);
    let fin = events
        .iter()
        .rev()
        .find(|e| e["type"] == "job_finished")
        .unwrap();
    assert_eq!(fin["outcome"], "cancelled", "{fin}");
    let message = fin["message"].as_str().unwrap();
    assert!(message.contains("drain grace passed"), "{fin}");
    assert!(message.contains("SIGTERM"), "{fin}");
}
