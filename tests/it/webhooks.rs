//! Completion webhooks (SPEC §13) against a real `ralph serve` and a receiver on loopback: one
//! signed delivery per job end whose signature the documented Python check accepts, a 500
//! retried under the same delivery id, every attempt journalled and counted, a job's own
//! `notify_url` only under `limits.allowed_notify`, and a dead receiver that never delays the
//! next job.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::complete_report;
use common::server::{Server, job};
use common::webhook_receiver::Receiver;
use serde_json::{Value, json};

const SECRET: &str = "4f1c2a9be0d3a7e6c5b8f2d1a0e9c8b7";

fn secret_file(dir: &Path) -> PathBuf {
    let p = dir.join("notify.secret");
    std::fs::write(&p, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn post_job(s: &Server, j: Value) -> (u16, Value) {
    s.api("POST", "/v1/jobs", Some(&json!({ "job": [j] }).to_string()))
}

/// The Python check of docs/webhooks.md, run as written on `body` and `signature`.
fn python_verifies(dir: &Path, body: &[u8], signature: &str) -> bool {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/webhooks.md"))
            .unwrap();
    let start = doc
        .find("```python\n")
        .expect("a python block in docs/webhooks.md")
        + 10;
    let snippet = &doc[start..start + doc[start..].find("```").unwrap()];
    let script = dir.join("verify.py");
    std::fs::write(
        &script,
        format!(
            "{snippet}\nimport sys\nsecret = open(sys.argv[1], 'rb').read().rstrip(b'\\r\\n')\nbody = open(sys.argv[2], 'rb').read()\nsys.exit(0 if verify(secret, body, sys.argv[3]) else 1)\n"
        ),
    )
    .unwrap();
    let body_file = dir.join("body.json");
    std::fs::write(&body_file, body).unwrap();
    std::process::Command::new("python3")
        .arg(&script)
        .arg(dir.join("notify.secret"))
        .arg(&body_file)
        .arg(signature)
        .status()
        .unwrap()
        .success()
}

/// Polls `f` until it gives a value (panics at `limit`).
fn poll<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < limit, "not reached in {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn complete_agent(s: &Server) -> PathBuf {
    s.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    )
}

#[test]
fn each_job_end_is_one_signed_delivery_and_a_500_is_retried() {
    let keys = tempfile::tempdir().unwrap();
    let secret = secret_file(keys.path());
    let rx = Receiver::start(&[500]);
    let s = Server::new(&format!(
        "[notify]\nurl = \"{}\"\nsecret_file = \"{}\"\n",
        rx.url("/hook/secret-path?k=v"),
        secret.display()
    ));
    let agent = complete_agent(&s);
    let ws = s.workspace("ws");
    let (code, c) = post_job(&s, job(&ws, &agent, json!({"labels": {"team": "infra"}})));
    assert_eq!(code, 201, "{c}");
    let id = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.wait_finished(&id, Duration::from_secs(30))["outcome"],
        "complete"
    );
    // The first attempt got a 500; the second, the same delivery, a 200.
    let got = rx.wait_for(2, Duration::from_secs(60));
    assert_eq!(got.len(), 2, "{got:?}");
    let (a, b) = (&got[0], &got[1]);
    for r in [a, b] {
        assert_eq!(r.line, "POST /hook/secret-path?k=v HTTP/1.1");
        assert_eq!(r.headers["content-type"], "application/json");
        assert_eq!(r.headers["x-ralph-event"], "job_finished");
    }
    assert_eq!(a.headers["x-ralph-delivery"], b.headers["x-ralph-delivery"]);
    assert_eq!(
        (
            a.headers["x-ralph-attempt"].as_str(),
            b.headers["x-ralph-attempt"].as_str()
        ),
        ("1", "2")
    );
    assert_eq!(a.body, b.body);
    // The body is the job's result; the signature checks with the documented Python, and a
    // changed body or another secret does not.
    let body: Value = serde_json::from_slice(&b.body).unwrap();
    assert_eq!(
        (body["job_id"].as_str(), body["id"].as_str()),
        (Some(id.as_str()), Some(id.as_str()))
    );
    assert_eq!(body["outcome"], "complete");
    assert_eq!(body["labels"]["team"], "infra");
    let sig = &b.headers["x-ralph-signature"];
    assert!(sig.starts_with("sha256=") && sig.len() == 71, "{sig}");
    assert!(python_verifies(keys.path(), &b.body, sig));
    let mut tampered = b.body.clone();
    tampered[0] = b' ';
    assert!(!python_verifies(keys.path(), &tampered, sig));
    // Every attempt journalled, the receiver named by its origin only, and counted.
    let notified = poll(Duration::from_secs(30), || {
        let n = s.events_of(&id, "notified");
        (n.len() == 2).then_some(n)
    });
    let origin = format!("http://127.0.0.1:{}", rx.port);
    assert_eq!(
        notified
            .iter()
            .map(|e| (
                e["attempt"].as_u64().unwrap(),
                e["status"].as_u64().unwrap(),
                e["result"].as_str().unwrap(),
                e["to"].as_str().unwrap(),
                e["receiver"].as_str().unwrap()
            ))
            .collect::<Vec<_>>(),
        vec![
            (1, 500, "retrying", origin.as_str(), "service"),
            (2, 200, "delivered", origin.as_str(), "service"),
        ]
    );
    let journal = serde_json::to_string(&s.events(&id)).unwrap();
    assert!(
        !journal.contains("secret-path"),
        "the URL's path was journalled"
    );
    let (_, metrics) = s
        .raw("GET", "/metrics", Some(&s.token()), None, None)
        .unwrap();
    for line in [
        "ralph_notifications_total{result=\"delivered\"} 1",
        "ralph_notifications_total{result=\"retrying\"} 1",
        "ralph_notifications_total{result=\"gave_up\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }
    // A second job: exactly one more delivery, a new id; nothing more for the first.
    let ws2 = s.workspace("ws2");
    let (_, c) = post_job(&s, job(&ws2, &agent, json!({})));
    let id2 = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    s.wait_finished(&id2, Duration::from_secs(30));
    let got = rx.wait_for(3, Duration::from_secs(30));
    poll(Duration::from_secs(30), || {
        (s.events_of(&id2, "notified").len() == 1).then_some(())
    });
    let got_now = rx.received();
    assert_eq!(got_now.len(), 3, "{got_now:?}");
    assert_ne!(
        got[2].headers["x-ralph-delivery"],
        a.headers["x-ralph-delivery"]
    );
    let body: Value = serde_json::from_slice(&got[2].body).unwrap();
    assert_eq!(body["job_id"], id2.as_str());
}

#[test]
fn a_jobs_own_receiver_must_be_allowed_and_ralph_run_refuses_one() {
    let keys = tempfile::tempdir().unwrap();
    let secret = secret_file(keys.path());
    let rx = Receiver::start(&[]);
    let s = Server::new(&format!(
        "[notify]\nsecret_file = \"{}\"\n[limits]\nallowed_notify = [\"{}\"]\n",
        secret.display(),
        rx.url("/hooks")
    ));
    let agent = complete_agent(&s);
    // Outside the prefix (a sibling path, another port, a climb, a file URL): 403, nothing queued.
    for bad in [
        rx.url("/hooks-evil"),
        format!("http://127.0.0.1:{}/hooks", rx.port + 1),
        rx.url("/hooks/../admin"),
        "file:///etc/passwd".to_owned(),
        format!("http://user:pw@127.0.0.1:{}/hooks", rx.port),
    ] {
        let ws = s.workspace("refused");
        let (code, body) = post_job(&s, job(&ws, &agent, json!({"notify_url": bad})));
        assert_eq!(code, 403, "{bad}: {body}");
        assert_eq!(body["error"]["rule"], "limits.allowed_notify", "{body}");
        assert_eq!(body["error"]["field"], "job[0].notify_url", "{body}");
    }
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");
    // Under it, through `ralph submit --notify-url`: delivered there, as the job's receiver.
    let ws = s.workspace("ws");
    let out = s.ralph(&[
        "submit",
        "--workspace",
        ws.to_str().unwrap(),
        "--agent-cmd",
        agent.to_str().unwrap(),
        "--read",
        s.agents.to_str().unwrap(),
        "--objective",
        "be done",
        "--notify-url",
        &rx.url("/hooks/team-a"),
    ]);
    out.expect_code(0);
    let id = out.stdout.trim().to_owned();
    s.wait_finished(&id, Duration::from_secs(30));
    let got = rx.wait_for(1, Duration::from_secs(30));
    assert_eq!(got[0].line, "POST /hooks/team-a HTTP/1.1");
    let n = poll(Duration::from_secs(30), || {
        let n = s.events_of(&id, "notified");
        (!n.is_empty()).then_some(n)
    });
    assert_eq!(
        (n[0]["receiver"].as_str(), n[0]["result"].as_str()),
        (Some("job"), Some("delivered"))
    );
    // `ralph run` has no service to send it: refused before anything runs.
    let out = std::process::Command::new(common::ralph_bin())
        .args([
            "run",
            "--workspace",
            ws.to_str().unwrap(),
            "--agent-cmd",
            agent.to_str().unwrap(),
            "--objective",
            "x",
            "--notify-url",
            &rx.url("/hooks/x"),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--notify-url"));
}

#[test]
fn a_dead_receiver_never_delays_the_next_job() {
    let keys = tempfile::tempdir().unwrap();
    let secret = secret_file(keys.path());
    let dead = Receiver::hanging();
    let s = Server::new(&format!(
        "max_concurrent_jobs = 1\n[notify]\nurl = \"{}\"\nsecret_file = \"{}\"\ntimeout = \"60s\"\nretry_for = \"5m\"\n",
        dead.url("/hook"),
        secret.display()
    ));
    let agent = complete_agent(&s);
    let (ws1, ws2) = (s.workspace("ws1"), s.workspace("ws2"));
    let (_, c) = post_job(&s, job(&ws1, &agent, json!({})));
    let first = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    s.wait_finished(&first, Duration::from_secs(30));
    // The receiver has the first delivery and holds it unanswered (for up to 60 s).
    dead.wait_for(1, Duration::from_secs(30));
    let (_, c) = post_job(&s, job(&ws2, &agent, json!({})));
    let second = c["jobs"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        s.wait_finished(&second, Duration::from_secs(30))["outcome"],
        "complete"
    );
    // The second job ran and ended while the first delivery's attempt was still open: no
    // attempt of it has an outcome yet.
    assert!(
        s.events_of(&first, "notified").is_empty(),
        "the first delivery ended before the second job: {:?}",
        s.events_of(&first, "notified")
    );
    dead.wait_for(2, Duration::from_secs(30));
}

#[test]
fn webhooks_without_a_secret_are_refused_at_start_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{}\"\nstate_dir = \"{}\"\n[notify]\nurl = \"http://127.0.0.1:9/x\"\n",
            common::listen_port(),
            dir.path().join("state").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::ralph_bin())
        .args(["serve", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`notify.secret_file` is required"), "{err}");
}
