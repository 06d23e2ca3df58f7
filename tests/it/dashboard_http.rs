//! The dashboard over plain HTTP (SPEC §13), against a real `ralph serve`: the login and its
//! cookie, sessions that end with their token, scopes, CSRF and origin checks on the actions,
//! the security headers of every page, hostile agent text as it reaches the HTML, the live
//! log's events, and the downloads. (The same pages in a real browser: `dashboard`.)

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::server::{RawResponse, Server, job};

const FORM: (&str, &str) = ("Content-Type", "application/x-www-form-urlencoded");

/// A `GET` of `path` with `auth` (an `Authorization` header's value).
fn get(s: &Server, path: &str, auth: &str) -> RawResponse {
    s.request("GET", path, &[("Authorization", auth)], "")
}

/// Logs in with `token`; returns the session cookie's value.
fn login(s: &Server, token: &str) -> String {
    let r = s.request(
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={token}&next=%2Fui%2Fjobs"),
    );
    assert_eq!(r.status, 303, "{}\n{}", r.head, r.body);
    let set = r.header("set-cookie").expect("a session cookie");
    let value = set
        .strip_prefix("ralph_session=")
        .and_then(|v| v.split(';').next())
        .unwrap()
        .to_owned();
    assert_eq!(value.len(), 64);
    value
}

fn cookie(value: &str) -> (String, String) {
    ("Cookie".to_owned(), format!("ralph_session={value}"))
}

fn get_with_cookie(s: &Server, path: &str, session: &str) -> RawResponse {
    let (k, v) = cookie(session);
    s.request("GET", path, &[(k.as_str(), v.as_str())], "")
}

/// The value of the hidden `csrf` field of a page.
fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

fn submit(s: &Server, body: Value) -> String {
    let (status, v) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [body] }).to_string()),
    );
    assert_eq!(status, 201, "{v}");
    v["jobs"][0]["id"].as_str().unwrap().to_owned()
}

fn wait_state(s: &Server, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, v) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        if v["state"] == state {
            return v;
        }
        assert!(Instant::now() < deadline, "job {id} never {state}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_browser_signs_in_with_a_token_and_its_session_ends_with_the_token() {
    let s = Server::new("");
    // Not signed in: the login form, then back to the page asked for.
    let r = s.request("GET", "/ui/jobs?state=queued", &[], "");
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location"),
        Some("/ui/login?next=%2fui%2fjobs%3fstate%3dqueued"),
        "(the head is lower-cased)"
    );
    let r = s.request("GET", "/ui/login", &[], "");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("id=\"login-form\""));
    // A wrong token: 401, no cookie.
    let r = s.request(
        "POST",
        "/ui/login",
        &[FORM],
        "token=not-a-token-000000000000",
    );
    assert_eq!(r.status, 401);
    assert!(r.header("set-cookie").is_none());
    assert!(r.body.contains("id=\"error\""));
    // A `submit` token cannot look.
    let submitter = s.make_token("submitter", &["submit"]);
    let r = s.request("POST", "/ui/login", &[FORM], &format!("token={submitter}"));
    assert_eq!(r.status, 403);
    assert!(r.header("set-cookie").is_none());
    // A `read` token: a cookie that is HttpOnly, SameSite=Strict, scoped to /ui, and is not
    // the token.
    let reader = s.make_token("reader", &["read"]);
    let r = s.request(
        "POST",
        "/ui/login",
        &[FORM],
        &format!("token={reader}&next=%2F%2Fevil.example%2F"),
    );
    assert_eq!(r.status, 303);
    assert_eq!(
        r.header("location"),
        Some("/ui/jobs"),
        "an off-site next is not followed"
    );
    let set = r.header("set-cookie").unwrap();
    for attr in ["httponly", "samesite=strict", "path=/ui", "max-age="] {
        assert!(set.contains(attr), "{attr} missing from {set}");
    }
    assert!(!set.contains("secure"), "plain HTTP here: {set}");
    assert!(!set.contains(&reader));
    let session = login(&s, &reader);
    let page = get_with_cookie(&s, "/ui/jobs", &session);
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<span id=\"whoami\">reader</span>"));
    assert!(!page.body.contains(&reader), "the token is never in a page");
    // A bearer token works too, and a wrong one is 401.
    let r = s.request(
        "GET",
        "/ui/jobs",
        &[("Authorization", &format!("Bearer {reader}"))],
        "",
    );
    assert_eq!(r.status, 200);
    let r = s.request(
        "GET",
        "/ui/jobs",
        &[("Authorization", "Bearer wrong-wrong-wrong-wrong")],
        "",
    );
    assert_eq!(r.status, 401);
    // Revoking the token ends its sessions at their next request.
    let out = s.ralph(&["token", "revoke", "reader"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let r = get_with_cookie(&s, "/ui/jobs", &session);
    assert_eq!(r.status, 303, "a revoked token's session must end");
    assert!(r.header("location").unwrap().starts_with("/ui/login"));
    // Logout ends a session.
    let admin = s.token();
    let session = login(&s, &admin);
    let page = get_with_cookie(&s, "/ui/jobs", &session).body;
    let csrf = csrf_of(&page);
    let (k, v) = cookie(&session);
    let r = s.request(
        "POST",
        "/ui/logout",
        &[FORM, (k.as_str(), v.as_str())],
        &format!("csrf={csrf}"),
    );
    assert_eq!(r.status, 303);
    assert!(r.header("set-cookie").unwrap().contains("max-age=0"));
    assert_eq!(get_with_cookie(&s, "/ui/jobs", &session).status, 303);
}

#[test]
fn every_page_carries_the_security_headers() {
    let s = Server::new("");
    let admin = s.token();
    let ws = s.workspace("w");
    let agent = s.agent(
        "a.sh",
        r#"echo '{"status":"complete","summary":"ok","evidence":["ok"],"nextSteps":[],"blocker":""}'"#,
    );
    let id = submit(&s, job(&ws, &agent, json!({"max_rounds": 1})));
    wait_state(&s, &id, "finished");
    let auth = format!("Bearer {admin}");
    for path in [
        "/ui/login".to_owned(),
        "/ui/jobs".to_owned(),
        format!("/ui/jobs/{id}"),
        "/ui/health".to_owned(),
        format!("/ui/jobs/{id}/rounds/1/logs?attempt=1&stream=stdout"),
        "/ui/jobs/no-such-job".to_owned(),
    ] {
        let r = s.request("GET", &path, &[("Authorization", &auth)], "");
        assert!(r.status == 200 || r.status == 404, "{path}: {}", r.status);
        let csp = r.header("content-security-policy").unwrap_or_default();
        assert!(csp.contains("script-src 'self'"), "{path}: {csp}");
        assert!(csp.contains("default-src 'none'"), "{path}: {csp}");
        assert!(!csp.contains("unsafe"), "{path}: {csp}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(r.header("x-frame-options"), Some("deny"), "{path}");
        if r.status == 404 {
            assert!(
                r.body.contains("id=\"error\""),
                "an error is a page: {}",
                r.body
            );
        }
    }
    // No inline script or style anywhere: only the embedded files.
    let page = get(&s, &format!("/ui/jobs/{id}"), &auth).body;
    assert!(
        !page.contains("<script>") && !page.contains("style=\""),
        "{page}"
    );
    let js = s.request("GET", "/ui/static/live.js", &[], "");
    assert_eq!(js.status, 200);
    assert!(
        js.header("content-type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(
        !js.body.contains("innerHTML"),
        "the live log is appended as text"
    );
    let log = get(
        &s,
        &format!("/ui/jobs/{id}/rounds/1/logs?attempt=1&stream=stdout"),
        &auth,
    );
    assert!(
        log.header("content-disposition")
            .unwrap()
            .starts_with("attachment")
    );
}

#[test]
fn hostile_agent_text_reaches_the_page_as_text() {
    let s = Server::new("");
    let admin = s.token();
    let ws = s.workspace("w");
    // The report and the round's output as an attacker would write them.
    let agent = s.agent(
        "evil.sh",
        r#"printf 'out <script>window.__pwned=9</script>\n'
printf '\033]8;;javascript:alert(1)\033\\click\033]8;;\033\\\n'
printf '\033]52;c;aGk=\007\n'
cat <<'JSON'
{"status":"blocked","summary":"<script>window.__pwned=1</script>\u001b]52;c;aGk=\u0007","evidence":["<img src=x onerror=\"window.__pwned=2\">","[x](javascript:window.__pwned=3)"],"nextSteps":["javascript:window.__pwned=4","\u001b]8;;javascript:window.__pwned=5\u001b\\click\u001b]8;;\u001b\\"],"blocker":"\"><svg onload=alert(6)>"}
JSON
# Until the test has the live stream open.
while [ ! -e go ]; do sleep 0.05; done"#,
    );
    let id = submit(
        &s,
        job(
            &ws,
            &agent,
            json!({"max_rounds": 1, "name": "<b>bold</b>", "labels": {"team": "x"}}),
        ),
    );
    let auth = format!("Bearer {admin}");
    // While it runs (the agent sleeps after its report is written out), the live log.
    let deadline = Instant::now() + Duration::from_secs(120);
    let live = loop {
        let page = get(&s, &format!("/ui/jobs/{id}"), &auth).body;
        if let Some(at) = page.find("data-src=\"") {
            break page[at + 10..]
                .split('"')
                .next()
                .unwrap()
                .replace("&#38;", "&");
        }
        assert!(
            Instant::now() < deadline,
            "the job never showed a live log: {page}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, v) = s.api(
            "GET",
            &format!("/v1/jobs/{id}/rounds/1/logs?attempt=1"),
            None,
        );
        let out = v.as_str().unwrap_or_default().to_owned();
        if out.contains("blocker") {
            break;
        }
        assert!(Instant::now() < deadline, "no output: {out}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Follow the live log, then let the round end: the stream ends with it.
    let events = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            s.request("GET", &live, &[("Authorization", &auth)], "")
                .body
        });
        std::fs::write(ws.join("go"), "").unwrap();
        reader.join().unwrap()
    });
    assert!(events.contains("event: log\n"), "{events}");
    assert!(events.contains("event: end\n"), "{events}");
    assert!(
        !events.contains('\u{1b}') && !events.contains('\u{7}'),
        "{events}"
    );
    assert!(events.contains("\\\\x1b]52;c;aGk=\\\\x07"), "{events}");
    wait_state(&s, &id, "finished");
    let page = get(&s, &format!("/ui/jobs/{id}"), &auth).body;
    // Every tag an agent wrote is text; no control character reaches the page.
    for raw in [
        "<script>window",
        "<img src=x",
        "<svg",
        "<b>bold",
        "href=\"javascript",
        "onerror=\"",
    ] {
        assert!(!page.contains(raw), "`{raw}` reached the page raw");
    }
    assert!(page.contains("&#60;script&#62;window.__pwned=1&#60;/script&#62;"));
    assert!(page.contains("&#60;b&#62;bold&#60;/b&#62;"));
    assert!(
        !page
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\t')
    );
    assert_eq!(
        page.matches("<script").count(),
        0,
        "a finished job's page has no script"
    );
}

#[test]
fn the_actions_need_the_cancel_scope_the_session_csrf_and_this_origin() {
    let s = Server::new("");
    let ws = s.workspace("w");
    let agent = s.agent("slow.sh", "sleep 300");
    let id = submit(&s, job(&ws, &agent, json!({"max_rounds": 1})));
    wait_state(&s, &id, "running");
    let page_path = format!("/ui/jobs/{id}");
    let cancel_path = format!("/ui/jobs/{id}/cancel");
    // A read token: no cancel button, and a forged post is refused.
    let reader = s.make_token("reader", &["read"]);
    let rs = login(&s, &reader);
    let page = get_with_cookie(&s, &page_path, &rs).body;
    assert!(!page.contains("id=\"cancel-form\""));
    let csrf = csrf_of(&page);
    let (k, v) = cookie(&rs);
    let r = s.request(
        "POST",
        &cancel_path,
        &[FORM, (k.as_str(), v.as_str())],
        &format!("csrf={csrf}"),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("cancel"), "{}", r.body);
    assert_eq!(
        s.api("GET", &format!("/v1/jobs/{id}"), None).1["state"],
        "running"
    );
    // A cancel token: the button; a post without the session's csrf, or from another
    // origin, is refused; the real form cancels.
    let canceller = s.make_token("canceller", &["read", "cancel"]);
    let cs = login(&s, &canceller);
    let page = get_with_cookie(&s, &page_path, &cs).body;
    assert!(page.contains("id=\"cancel-form\""), "{page}");
    let csrf = csrf_of(&page);
    let (k, v) = cookie(&cs);
    let c = (k.as_str(), v.as_str());
    let r = s.request("POST", &cancel_path, &[FORM, c], "csrf=");
    assert_eq!(r.status, 403);
    let r = s.request("POST", &cancel_path, &[FORM, c], "csrf=0000");
    assert_eq!(r.status, 403);
    let r = s.request(
        "POST",
        &cancel_path,
        &[FORM, c, ("Origin", "https://evil.example")],
        &format!("csrf={csrf}"),
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        s.api("GET", &format!("/v1/jobs/{id}"), None).1["state"],
        "running"
    );
    let origin = format!("http://127.0.0.1:{}", s.port);
    let r = s.request(
        "POST",
        &cancel_path,
        &[FORM, c, ("Origin", origin.as_str())],
        &format!("csrf={csrf}"),
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.header("location"), Some(page_path.as_str()));
    let v = wait_state(&s, &id, "finished");
    assert_eq!(v["outcome"], "cancelled");
    assert_eq!(v["cancelled_by"], "canceller");
}

#[test]
fn the_queue_filters_by_label_name_state_and_submitter_and_pages() {
    let s = Server::new("");
    let ws = s.workspace("w");
    let agent = s.agent(
        "a.sh",
        r#"echo '{"status":"complete","summary":"ok","evidence":["ok"],"nextSteps":[],"blocker":""}'"#,
    );
    let submitter = s.make_token("alice", &["submit", "read"]);
    let mut ids = Vec::new();
    for i in 0..55 {
        let body = json!({ "job": [job(&ws, &agent, json!({
            "max_rounds": 1,
            "name": format!("job-{i}"),
            "labels": {"team": if i == 7 { "blue" } else { "red" }},
        }))]});
        let token = if i == 9 { submitter.clone() } else { s.token() };
        let (status, text) = s
            .raw(
                "POST",
                "/v1/jobs",
                Some(&token),
                Some(&body.to_string()),
                None,
            )
            .unwrap();
        assert_eq!(status, 201, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        ids.push(v["jobs"][0]["id"].as_str().unwrap().to_owned());
    }
    let auth = format!("Bearer {}", s.token());
    let list = |q: &str| get(&s, &format!("/ui/jobs{q}"), &auth);
    let rows = |body: &str| body.matches("<tr class=\"job\"").count();
    let r = list("?label=team%3Dblue&state=&outcome=&name=&submitted_by=");
    assert_eq!(r.status, 200);
    assert_eq!(rows(&r.body), 1);
    assert!(r.body.contains(&format!("data-id=\"{}\"", ids[7])));
    let r = list("?name=job-3");
    assert_eq!(rows(&r.body), 1);
    let r = list("?submitted_by=alice");
    assert_eq!(rows(&r.body), 1);
    assert!(r.body.contains(&format!("data-id=\"{}\"", ids[9])));
    let r = list("?label=team%3Dgreen");
    assert!(r.body.contains("id=\"no-jobs\""));
    // Fifty a page, newest first; the next page keeps the filters.
    let r = list("?label=team%3Dred");
    assert_eq!(rows(&r.body), 50);
    let at = r.body.find("id=\"next-page\" href=\"").unwrap() + 21;
    let next = r.body[at..]
        .split('"')
        .next()
        .unwrap()
        .replace("&#38;", "&");
    assert!(
        next.contains("label=team%3Dred") && next.contains("before="),
        "{next}"
    );
    let r = s.request("GET", &next, &[("Authorization", &auth)], "");
    assert_eq!(rows(&r.body), 4);
    // A bad filter is a page that says which.
    let r = list("?state=sideways");
    assert_eq!(r.status, 400);
    assert!(r.body.contains("sideways") && r.body.contains("id=\"filters\""));
    let r = list("?label=NOPE");
    assert_eq!(r.status, 400);
    assert!(r.body.contains("label"));
}

#[test]
fn the_health_page_lists_the_fleets_hosts_and_their_leases_on_postgresql() {
    let Some(db) = crate::common::test_db::TestDatabase::create("ui_fleet") else {
        return;
    };
    let a = Server::with_database("", &db.url);
    let b = Server::with_database("", &db.url);
    let ws = a.workspace("w");
    let agent = a.agent("slow.sh", "while [ ! -e go ]; do sleep 0.05; done");
    let id = submit(&a, job(&ws, &agent, json!({"max_rounds": 1})));
    wait_state(&a, &id, "running");
    // Either host answers for the whole fleet: both leases, the job under one of them.
    for s in [&a, &b] {
        let auth = format!("Bearer {}", s.token());
        let r = s.request("GET", "/ui/health", &[("Authorization", &auth)], "");
        assert_eq!(r.status, 200, "{}", r.body);
        assert!(
            r.body.contains("<dd id=\"health-ready\">ready</dd>"),
            "{}",
            r.body
        );
        assert!(r.body.contains("The fleet&#39;s hosts") || r.body.contains("The fleet's hosts"));
        let rows: Vec<&str> = r.body.split("<tr class=\"host").skip(1).collect();
        assert!(rows.len() >= 2, "both hosts' leases: {}", r.body);
        assert!(
            rows.iter().all(|row| row.contains("live until")),
            "{}",
            r.body
        );
        let running: u64 = rows
            .iter()
            .filter_map(|row| {
                row.split("<td>")
                    .last()
                    .and_then(|c| c.split('<').next())
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
            .sum();
        assert_eq!(running, 1, "one job runs in the fleet: {}", r.body);
        // The job's page reads the same on either host.
        let page = get(s, &format!("/ui/jobs/{id}"), &auth);
        assert!(page.body.contains("<dd id=\"job-state\">running</dd>"));
    }
    std::fs::write(ws.join("go"), "").unwrap();
    wait_state(&a, &id, "finished");
}

#[test]
fn a_fan_out_jobs_page_lists_its_attempts_and_each_attempt_links_back() {
    let s = Server::new("max_concurrent_jobs = 2\n");
    let ws = s.workspace("ws");
    let agent = s.agent(
        "fan.sh",
        r#"echo ok > ok
echo '{"status":"complete","summary":"done","evidence":["ok"],"nextSteps":[],"blocker":""}'"#,
    );
    let id = submit(
        &s,
        job(&ws, &agent, json!({"attempts": 2, "verify": "test -e ok"})),
    );
    let j = s.wait_finished(&id, Duration::from_secs(120));
    assert_eq!(j["outcome"], "complete", "{j}");
    let auth = format!("Bearer {}", s.token());
    let page = get(&s, &format!("/ui/jobs/{id}"), &auth).body;
    assert!(page.contains("id=\"attempts\""), "{page}");
    assert_eq!(
        page.matches("<tr class=\"attempt-row\"").count(),
        2,
        "{page}"
    );
    assert_eq!(page.matches("<strong>chosen</strong>").count(), 1, "{page}");
    for a in j["attempts"].as_array().unwrap() {
        let aid = a["job"].as_str().unwrap();
        assert!(page.contains(&format!("href=\"/ui/jobs/{aid}\"")), "{page}");
        let ap = get(&s, &format!("/ui/jobs/{aid}"), &auth).body;
        assert!(ap.contains("id=\"attempt-of\""), "{ap}");
        assert!(ap.contains(&format!("href=\"/ui/jobs/{id}\"")), "{ap}");
    }
}
