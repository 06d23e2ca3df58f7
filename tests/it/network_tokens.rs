//! `ralph serve` on a network, token side (issue 15): named tokens with scopes (`ralph token`),
//! every endpoint against every scope, `submitted_by`/`cancelled_by` in the API, `show`, the
//! journal and the metrics, `limits.cancel_own_only`, per-token limits and rate limits.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::complete_report;
use common::server::{Server, job, parse_response};
use serde_json::{Value, json};

/// One raw call: status, response head (lower case), JSON body.
fn call(
    s: &Server,
    method: &str,
    path: &str,
    token: &str,
    body: Option<&Value>,
) -> (u16, String, Value) {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    c.write_all(body.as_bytes()).unwrap();
    let mut resp = Vec::new();
    c.read_to_end(&mut resp).unwrap();
    let r = parse_response(&resp);
    let json = r.json();
    (r.status, r.head, json)
}

/// `ralph token create NAME --scope SCOPES` with the admin token; returns the new token.
fn create_token(s: &Server, name: &str, scopes: &str) -> String {
    let out = s.ralph(&["token", "create", name, "--scope", scopes]);
    out.expect_code(0);
    assert!(
        out.stderr.contains(&format!("token `{name}` created")),
        "{}",
        out.stderr
    );
    let token = out.stdout.trim().to_owned();
    assert_eq!(token.len(), 64, "{}", out.stdout);
    token
}

/// The CLI with another token.
fn ralph_as(s: &Server, token: &str, args: &[&str]) -> common::Output {
    let out = std::process::Command::new(common::ralph_bin())
        .args(args)
        .env("RALPH_SERVER", s.url())
        .env("RALPH_TOKEN", token)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    common::Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn metrics(s: &Server) -> String {
    let (status, body) = s
        .raw("GET", "/metrics", Some(&s.token()), None, None)
        .unwrap();
    assert_eq!(status, 200, "{body}");
    body
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn each_scope_is_allowed_its_calls_and_refused_the_others_with_403_naming_the_scope() {
    let s = Server::new("metrics_require_auth = true\n");
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = s.workspace("ws");
    let body = json!({"job": [job(&ws, &agent, json!({}))]});
    let (st, _, created) = call(&s, "POST", "/v1/jobs", &s.token(), Some(&body));
    assert_eq!(st, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    s.wait_finished(&id, Duration::from_secs(60));

    let tokens: Vec<(&str, String)> = ["read", "submit", "cancel", "admin"]
        .into_iter()
        .map(|sc| (sc, create_token(&s, &format!("t-{sc}"), sc)))
        .collect();

    // Every endpoint, the scope it needs.
    let tmp = |sc: &str| json!({"name": format!("tmp-{sc}"), "scopes": ["read"]});
    let endpoints: Vec<(&str, String, &str)> = vec![
        ("GET", "/v1/jobs".into(), "read"),
        ("GET", format!("/v1/jobs/{id}"), "read"),
        ("GET", format!("/v1/jobs/{id}/events"), "read"),
        ("GET", format!("/v1/jobs/{id}/rounds/1/logs"), "read"),
        ("GET", format!("/v1/jobs/{id}/patch"), "read"),
        ("GET", "/metrics".into(), "read"),
        ("POST", "/v1/jobs".into(), "submit"),
        ("POST", "/v1/uploads".into(), "submit"),
        ("POST", format!("/v1/jobs/{id}/cancel"), "cancel"),
        ("POST", format!("/v1/jobs/{id}/resume"), "cancel"),
        ("GET", "/v1/tokens".into(), "admin"),
        ("POST", "/v1/tokens".into(), "admin"),
        ("DELETE", "/v1/tokens/tmp-SCOPE".into(), "admin"),
        // Fail-closed: a method or path without a rule needs admin (then 404/405 for admin).
        ("DELETE", format!("/v1/jobs/{id}"), "admin"),
        ("GET", "/v1/nope".into(), "admin"),
    ];
    let mut table = Vec::new();
    for (scope, token) in &tokens {
        for (method, path, needed) in &endpoints {
            let path = path.replace("SCOPE", scope);
            let body = match (*method, path.as_str()) {
                ("POST", "/v1/jobs") => Some(json!({"job": [job(&ws, &agent, json!({}))]})),
                ("POST", "/v1/tokens") => Some(tmp(scope)),
                _ => None,
            };
            let (status, _, answer) = call(&s, method, &path, token, body.as_ref());
            let allowed = *scope == "admin" || scope == needed;
            if allowed {
                assert!(
                    status != 403 && status != 401 && status < 500,
                    "{scope} {method} {path}: {status} {answer}"
                );
            } else {
                assert_eq!(status, 403, "{scope} {method} {path}: {answer}");
                assert_eq!(answer["error"]["scope"], *needed, "{answer}");
                assert!(
                    answer["error"]["message"]
                        .as_str()
                        .unwrap()
                        .contains(&format!("needs the `{needed}` scope")),
                    "{answer}"
                );
            }
            table.push(format!("{scope} {method} {path} {status}"));
        }
    }
    // Allowed calls did what they say: the admin token made and revoked its tmp token, and the
    // submit token's job is recorded as its own.
    let (_, _, list) = call(&s, "GET", "/v1/tokens", &s.token(), None);
    let names: Vec<&str> = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"tmp-admin"), "{list}");
    assert!(
        names.contains(&"t-read") && names.contains(&"admin"),
        "{list}"
    );
    assert!(
        !list.to_string().contains(&tokens[0].1),
        "a token is never listed"
    );
    let (_, _, jobs) = call(&s, "GET", "/v1/jobs?limit=1000", &s.token(), None);
    let by: Vec<String> = jobs["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            let id = j["id"].as_str().unwrap();
            let (_, _, j) = call(&s, "GET", &format!("/v1/jobs/{id}"), &s.token(), None);
            j["submitted_by"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    assert_eq!(by.len(), 3, "{jobs}");
    for who in ["t-submit", "t-admin", "admin"] {
        assert!(by.iter().any(|b| b == who), "{by:?}");
    }
    // An unknown token is 401, not 403.
    let (status, head, _) = call(&s, "GET", "/v1/jobs", "0123456789abcdef0123", None);
    assert_eq!(status, 401);
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    eprintln!("{}", table.join("\n"));
}

#[test]
fn tokens_are_created_listed_revoked_and_stored_hashed() {
    let s = Server::new("");
    let ci = create_token(&s, "ci", "submit,read");
    ralph_as(&s, &ci, &["jobs"]).expect_code(0);
    // The service's log names the scopes as they are written (not `[Submit, Read]`).
    wait_for("the log names the new token's scopes", || {
        s.log_text()
            .contains("token `ci` created with scopes submit,read")
    });
    assert!(!s.log_text().contains("[Submit"), "{}", s.log_text());
    let stored = std::fs::read_to_string(s.state.join("tokens.json")).unwrap();
    assert!(
        !stored.contains(&ci) && stored.contains("\"ci\""),
        "{stored}"
    );
    let out = s.ralph(&["token", "list"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("admin") && out.stdout.contains("generated"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .lines()
            .any(|l| l.starts_with("ci ") && l.contains("read,submit") && l.contains("created")),
        "{}",
        out.stdout
    );
    // A non-admin token cannot manage tokens.
    let out = ralph_as(&s, &ci, &["token", "create", "x", "--scope", "admin"]);
    assert_eq!(out.code, 64, "{out:?}");
    assert!(
        out.stderr.contains("needs the `admin` scope"),
        "{}",
        out.stderr
    );
    // A bad scope or a taken name are refused.
    let out = s.ralph(&["token", "create", "y", "--scope", "root"]);
    assert_eq!(out.code, 64);
    assert!(
        out.stderr.contains("`root` is not a scope"),
        "{}",
        out.stderr
    );
    let out = s.ralph(&["token", "create", "ci", "--scope", "read"]);
    assert_eq!(out.code, 64);
    assert!(out.stderr.contains("exists already"), "{}", out.stderr);
    let out = s.ralph(&["token", "revoke", "admin"]);
    assert_eq!(out.code, 64);
    // The tokens survive a restart; a revoked one is refused at once.
    let mut s = s;
    s.kill9();
    s.start();
    ralph_as(&s, &ci, &["jobs"]).expect_code(0);
    let out = s.ralph(&["token", "revoke", "ci"]);
    out.expect_code(0);
    assert!(out.stdout.contains("token `ci` revoked"), "{}", out.stdout);
    let out = ralph_as(&s, &ci, &["jobs"]);
    assert_eq!(out.code, 64, "{out:?}");
    assert!(out.stderr.contains("refused the token"), "{}", out.stderr);
}

#[test]
fn a_token_defined_in_the_config_by_its_hash_works_with_its_scopes() {
    let secret = "config-defined-token-0123456789";
    let hash: String = ralph_runner::service::tokens::hash(secret)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let s = Server::new(&format!(
        "[tokens.dashboard]\nsha256 = \"{hash}\"\nscopes = [\"read\"]\n"
    ));
    ralph_as(&s, secret, &["jobs"]).expect_code(0);
    let (status, _, answer) = call(&s, "POST", "/v1/jobs/abcd/cancel", secret, None);
    assert_eq!(status, 403, "{answer}");
    assert_eq!(answer["error"]["scope"], "cancel");
    let out = s.ralph(&["token", "revoke", "dashboard"]);
    assert_eq!(out.code, 64);
    assert!(
        out.stderr.contains("defined in the configuration"),
        "{}",
        out.stderr
    );
}

#[test]
fn jobs_record_who_submitted_and_who_cancelled_them() {
    let s = Server::new("");
    let ci = create_token(&s, "ci", "submit,read");
    let ops = create_token(&s, "ops", "cancel,read");
    let hang = s.agent("hang.sh", "touch started\nexec sleep 60");
    let ws = s.workspace("ws");
    let out = ralph_as(
        &s,
        &ci,
        &[
            "submit",
            "--json",
            "--objective",
            "x",
            "--workspace",
            ws.to_str().unwrap(),
            "--agent-cmd",
            hang.to_str().unwrap(),
            "--read",
            s.agents.to_str().unwrap(),
        ],
    );
    out.expect_code(0);
    let id = out.json()["jobs"][0]["id"].as_str().unwrap().to_owned();
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(j["submitted_by"], "ci", "{j}");
    let m = metrics(&s);
    assert!(
        m.contains("ralph_jobs_submitted_total{token=\"ci\"} 1"),
        "{m}"
    );
    // The journal's submission holds it.
    let events = s.events(&id);
    assert_eq!(events[0]["spec"]["submitted_by"], "ci", "{:?}", events[0]);
    // `ops` cancels it (running or still queued).
    // Once its agent runs (a cancel while the sandbox is set up is another story).
    wait_for("the agent to start", || ws.join("started").exists());
    ralph_as(&s, &ops, &["cancel", &id]).expect_code(0);
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["cancelled_by"], "ops", "{j}");
    assert!(
        s.events(&id)
            .iter()
            .any(|e| e["type"] == "cancel_requested" && e["by"] == "token:ops"),
        "{:?}",
        s.events(&id)
    );
    let out = s.ralph(&["show", &id]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("submitted by: ci") && out.stdout.contains("cancelled by: ops"),
        "{}",
        out.stdout
    );
    let out = s.ralph(&["logs", &id]);
    assert!(
        out.stdout.contains("cancel requested by token `ops`"),
        "{}",
        out.stdout
    );
    // `ops` resumes it: the journal says who.
    ralph_as(&s, &ops, &["resume", &id]).expect_code(0);
    assert!(
        s.events(&id)
            .iter()
            .any(|e| e["type"] == "resumed" && e["by"] == "ops"),
        "{:?}",
        s.events(&id)
    );
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(j["resumed_by"], "ops", "{j}");
    s.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
}

#[test]
fn cancel_own_only_lets_a_submitter_cancel_only_its_own_jobs() {
    let s = Server::new("[limits]\ncancel_own_only = true\n");
    let alice = create_token(&s, "alice", "submit,cancel,read");
    let bob = create_token(&s, "bob", "submit,cancel,read");
    let hang = s.agent("hang.sh", "touch started\nexec sleep 60");
    let ws = s.workspace("ws");
    let body = json!({"job": [job(&ws, &hang, json!({}))]});
    let (st, _, created) = call(&s, "POST", "/v1/jobs", &alice, Some(&body));
    assert_eq!(st, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    wait_for("the agent to start", || ws.join("started").exists());
    // Bob may not.
    let (st, _, answer) = call(&s, "POST", &format!("/v1/jobs/{id}/cancel"), &bob, None);
    assert_eq!(st, 403, "{answer}");
    assert_eq!(answer["error"]["rule"], "limits.cancel_own_only");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("token `alice`"),
        "{answer}"
    );
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_ne!(j["state"], "finished", "{j}");
    // Alice may; so may an admin token.
    let (st, _, answer) = call(&s, "POST", &format!("/v1/jobs/{id}/cancel"), &alice, None);
    assert!(st == 200 || st == 202, "{st} {answer}");
    let j = s.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(j["cancelled_by"], "alice", "{j}\n{:?}", s.events(&id));
    let (st, _, answer) = call(&s, "POST", &format!("/v1/jobs/{id}/resume"), &bob, None);
    assert_eq!(st, 403, "{answer}");
    let (st, _, answer) = call(
        &s,
        "POST",
        &format!("/v1/jobs/{id}/resume"),
        &s.token(),
        None,
    );
    assert_eq!(st, 202, "{answer}");
    s.api("POST", &format!("/v1/jobs/{id}/cancel"), None);
}

#[test]
fn per_token_limits_and_rate_limits() {
    let s = Server::new(
        "[tokens.ci]\njobs_per_minute = 1\n[tokens.ci.limits]\nmax_mode = \"full-access\"\n\
         [tokens.chatty]\nrequests_per_minute = 3\n",
    );
    let ci = create_token(&s, "ci", "submit,read");
    let people = create_token(&s, "people", "submit,read");
    let chatty = create_token(&s, "chatty", "read");
    let agent = s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let full = |name: &str| {
        let ws = s.workspace(name);
        json!({"job": [job(&ws, &agent, json!({"mode": "full-access"}))]})
    };
    // People may not ask for full-access; CI may.
    let (st, _, answer) = call(&s, "POST", "/v1/jobs", &people, Some(&full("p")));
    assert_eq!(st, 403, "{answer}");
    assert_eq!(answer["error"]["rule"], "limits.max_mode", "{answer}");
    let (st, _, answer) = call(&s, "POST", "/v1/jobs", &ci, Some(&full("c1")));
    assert_eq!(st, 201, "{answer}");
    // CI's second job within the minute: 429 with Retry-After.
    let (st, head, answer) = call(&s, "POST", "/v1/jobs", &ci, Some(&full("c2")));
    assert_eq!(st, 429, "{answer}");
    assert_eq!(answer["error"]["code"], "rate_limited");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("jobs_per_minute"),
        "{answer}"
    );
    let retry: u64 = head
        .lines()
        .find_map(|l| l.strip_prefix("retry-after: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Retry-After: {head}"));
    assert!((1..=60).contains(&retry), "{retry}");
    // Three requests a minute: the fourth is refused with Retry-After; others are not.
    for _ in 0..3 {
        let (st, _, a) = call(&s, "GET", "/v1/jobs", &chatty, None);
        assert_eq!(st, 200, "{a}");
    }
    let (st, head, _) = call(&s, "GET", "/v1/jobs", &chatty, None);
    assert_eq!(st, 429);
    assert!(head.contains("retry-after: "), "{head}");
    let out = ralph_as(&s, &chatty, &["jobs"]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("rate limit"), "{}", out.stderr);
    let (st, _, _) = call(&s, "GET", "/v1/jobs", &people, None);
    assert_eq!(st, 200);
}
