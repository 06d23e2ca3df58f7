//! The dashboard (`/ui`, SPEC §13) in a real headless Chromium against a real `ralph serve`:
//! logging in with a read token, filtering jobs by label, a job's rounds, reports and verify
//! results, the live log of a running round, the patch download, cancel refused and allowed by
//! scope, hostile agent text shown as inert text, and screenshots of the main pages. The DOM ids
//! and classes used here are the dashboard's contract (issue 32).

use crate::common;

use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

use common::git_server::GitServer;
use common::server::{RawResponse, Server, job};
use common::webdriver::{Browser, ENTER, TAB, ready};
use common::{complete_report, continue_report, processes_with, wait_for_file, wait_until};
use serde_json::{Value, json};

/// The policy every `/ui` answer carries (the contract's, lower-cased as the raw head is).
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
                   base-uri 'none'";

/// How long any one wait may take (CI has two busy cores).
const LIMIT: Duration = Duration::from_secs(120);

/// A GET of the server, with a bearer token when given (status, head, body).
fn get(s: &Server, path: &str, token: Option<&str>) -> RawResponse {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    s.request("GET", path, &headers, "")
}

/// Submits jobs through the API with the admin token; their ids.
fn submit(s: &Server, jobs: Vec<Value>) -> Vec<String> {
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    );
    assert_eq!(code, 201, "{body}");
    body["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Logs in through the login form and waits to land on the job list.
fn login(b: &Browser, s: &Server, token: &str) {
    b.navigate(&format!("{}/ui/login", s.url()));
    let form = b.find("form#login-form");
    assert_eq!(form.attr("method").unwrap().to_lowercase(), "post");
    assert_eq!(form.attr("action").as_deref(), Some("/ui/login"));
    let input = b.find("input#token");
    assert_eq!(input.attr("type").as_deref(), Some("password"));
    assert_eq!(input.attr("name").as_deref(), Some("token"));
    input.send_keys(token);
    b.find("button#login-submit").click();
    let jobs = format!("{}/ui/jobs", s.url());
    b.wait_until("the login lands on /ui/jobs", LIMIT, |b| {
        b.url().starts_with(&jobs) && b.try_find("table#jobs, p#no-jobs").is_ok()
    });
}

/// Opens a job's page and waits for its title.
fn open_job(b: &Browser, s: &Server, id: &str) {
    b.navigate(&format!("{}/ui/jobs/{id}", s.url()));
    b.wait_until("the job page shows", LIMIT, |b| {
        b.try_find("h1#job-title").is_ok()
    });
}

/// The largest N of the `tick N` lines of a log.
fn last_tick(log: &str) -> u64 {
    log.lines()
        .filter_map(|l| l.trim().strip_prefix("tick ")?.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

/// An agent that prints `tick N` every ~200 ms until `stop` appears in its workspace (or about
/// 60 s passed), then reports complete. It touches `started` first.
fn ticker(s: &Server) -> std::path::PathBuf {
    s.agent(
        "ticker.sh",
        &format!(
            "touch started\ni=0\nwhile [ ! -e stop ] && [ $i -lt 300 ]; do\n  i=$((i+1))\n  \
             echo \"tick $i\"\n  sleep 0.2\ndone\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("ticked")
        ),
    )
}

#[test]
fn webdriver_drives_a_local_page() {
    if !ready("webdriver_drives_a_local_page") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let page = "<!doctype html><title>harness</title>\
            <body style=\"background:#fff;font:32px sans-serif\">\
            <h1 style=\"color:#c00\">Hello harness</h1>\
            <input id=in><button id=go onclick=\"const v=document.getElementById('in').value;\
            document.getElementById('out').textContent=v;console.error('typed '+v)\">go</button>\
            <p id=out></p><script>console.warn('page-loaded-marker')</script>";
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                c,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    let b = Browser::start();
    let (marker, driver) = (b.marker(), b.driver_pid());
    let url = format!("http://127.0.0.1:{port}/page");
    b.navigate(&url);
    assert_eq!(b.url(), url);
    assert!(b.source().contains("Hello harness"));
    assert_eq!(b.find("h1").text(), "Hello harness");
    let input = b.find("input#in");
    input.send_keys("hello webdriver");
    assert_eq!(input.prop("value"), "hello webdriver");
    assert_eq!(input.attr("id").as_deref(), Some("in"));
    b.find("button#go").click();
    b.wait_until("the click copies the input", LIMIT, |b| {
        b.text_of("p#out").as_deref() == Some("hello webdriver")
    });
    assert_eq!(b.find_all("input, button").len(), 2);
    assert!(b.try_find("#nothing-here").is_err());
    assert_eq!(b.execute("return arguments[0] + 1", json!([41])), json!(42));
    assert_eq!(
        b.execute_async("arguments[1](arguments[0] * 2)", json!([21])),
        json!(42)
    );
    assert!(b.cookies().is_empty());
    b.wait_until("the console shows both entries", LIMIT, |b| {
        let log = b.console_log();
        let has = |level: &str, text: &str| {
            log.iter()
                .any(|e| e["level"] == level && e["message"].as_str().unwrap_or("").contains(text))
        };
        has("WARNING", "page-loaded-marker") && has("SEVERE", "typed hello webdriver")
    });
    let png = b.screenshot(None);
    assert!(
        b.distinct_colours(&png, 16) > 2,
        "the screenshot is (nearly) one colour"
    );
    // The session and chromedriver survive the extra tab.
    assert_eq!(b.text_of("p#out").as_deref(), Some("hello webdriver"));
    assert!(!processes_with(&marker).is_empty(), "no marked chromium");
    drop(b);
    assert!(
        !processes_with("chromedriver").contains(&driver),
        "chromedriver {driver} is still alive"
    );
    common::wait_until_gone(&marker, LIMIT, "chromium processes survived the Browser");
}

#[test]
fn a_read_token_logs_in_finds_a_job_by_label_and_sees_round_2_and_the_verify_failure() {
    let test = "a_read_token_logs_in_finds_a_job_by_label_and_sees_round_2_and_the_verify_failure";
    if !ready(test) {
        return;
    }
    let s = Server::new("");
    let reader = s.make_token("ui-reader", &["read"]);
    let agent = s.agent(
        "two_rounds.sh",
        &format!(
            "if [ \"$RALPH_ROUND\" = 1 ]; then\n  echo '{}' > \"$RALPH_REPORT_FILE\"\nelse\n  \
             echo '{}' > \"$RALPH_REPORT_FILE\"\nfi",
            continue_report("ROUND-ONE-STILL-WORKING"),
            complete_report("ROUND-TWO-CLAIMS-DONE")
        ),
    );
    let quick = s.agent(
        "quick.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("quick")
        ),
    );
    let ids = submit(
        &s,
        vec![
            job(
                &s.workspace("labelled"),
                &agent,
                json!({
                    "name": "labelled-job",
                    "labels": {"team": "ui-test"},
                    "max_rounds": 2,
                    // The output says 42; the command text does not.
                    "verify": "echo VERIFY-SAID-NO-$((40 + 2)); exit 1",
                }),
            ),
            job(
                &s.workspace("other"),
                &quick,
                json!({"labels": {"team": "other"}}),
            ),
            job(&s.workspace("plain"), &quick, json!({})),
        ],
    );
    let id = &ids[0];
    for i in &ids {
        s.wait_finished(i, LIMIT);
    }
    let j = s.wait_finished(id, LIMIT);
    assert_ne!(j["outcome"], "complete", "{j}");

    let b = Browser::start();
    // Without a session the job list sends the browser to the login page.
    b.navigate(&format!("{}/ui/jobs", s.url()));
    b.wait_until("/ui/jobs redirects to the login page", LIMIT, |b| {
        b.url().contains("/ui/login") && b.try_find("form#login-form").is_ok()
    });
    assert!(b.url().contains("next="), "{}", b.url());
    // A wrong token: 401 and an error on the page.
    let (code, body) = s
        .raw(
            "POST",
            "/ui/login",
            None,
            Some("token=not-a-token"),
            Some("application/x-www-form-urlencoded"),
        )
        .unwrap();
    assert_eq!(code, 401, "{body}");
    b.find("input#token").send_keys("not-a-token");
    b.find("button#login-submit").click();
    b.wait_until("a wrong token shows #error", LIMIT, |b| {
        b.try_find("#error").is_ok()
    });

    login(&b, &s, &reader);
    assert_eq!(b.text_of("span#whoami").unwrap().trim(), "ui-reader");
    for css in [
        "nav#nav a#nav-jobs",
        "nav#nav a#nav-health",
        "form#logout-form button#logout",
    ] {
        b.find(css);
    }
    // Every job is listed before the filter.
    for i in &ids {
        b.find(&format!("table#jobs tbody > tr.job[data-id=\"{i}\"]"));
    }
    // A label nothing has: no rows, and it says so.
    b.navigate(&format!("{}/ui/jobs?label=team%3Dnobody", s.url()));
    b.find("p#no-jobs");
    assert!(b.find_all("tr.job").is_empty());
    b.find("nav#nav a#nav-jobs").click();
    b.wait_until("the unfiltered list is back", LIMIT, |b| {
        b.find_all("tr.job").len() == ids.len()
    });
    let form = b.find("form#filters");
    assert_eq!(form.attr("method").unwrap().to_lowercase(), "get");
    b.find("input#f-label").send_keys("team=ui-test");
    b.find("button#f-apply").click();
    b.wait_until("the filtered list shows", LIMIT, |b| {
        b.url().contains("label=") && b.try_find("table#jobs, p#no-jobs").is_ok()
    });
    let rows = b.find_all("table#jobs tbody > tr.job");
    let listed: Vec<Option<String>> = rows.iter().map(|r| r.attr("data-id")).collect();
    assert_eq!(
        listed,
        vec![Some(id.clone())],
        "rows listed for team=ui-test"
    );
    let row = &rows[0];
    assert!(
        row.try_find("td.job-labels")
            .unwrap()
            .text()
            .contains("team=ui-test")
    );
    assert_eq!(
        row.try_find("td.job-name").unwrap().text().trim(),
        "labelled-job"
    );
    assert_eq!(
        row.try_find("td.job-state").unwrap().text().trim(),
        "finished"
    );
    let link = row.try_find("td.job-id > a.job-link").unwrap();
    assert_eq!(link.attr("href"), Some(format!("/ui/jobs/{id}")));
    link.click();
    let page = format!("{}/ui/jobs/{id}", s.url());
    b.wait_until("the job's page opens", LIMIT, |b| {
        b.url() == page && b.try_find("section#rounds").is_ok()
    });
    assert_eq!(b.text_of("dd#job-state").unwrap().trim(), "finished");
    assert_eq!(
        b.text_of("dd#job-outcome").unwrap().trim(),
        j["outcome"].as_str().unwrap()
    );
    if let Some(by) = j["submitted_by"].as_str() {
        assert_eq!(b.text_of("dd#job-submitted-by").unwrap().trim(), by);
    }
    let round2 = b.find("section#rounds article.round#round-2");
    assert_eq!(round2.attr("data-round").as_deref(), Some("2"));
    let summary = round2.try_find("div.report pre.report-summary").unwrap();
    assert!(
        summary.text().contains("ROUND-TWO-CLAIMS-DONE"),
        "{}",
        summary.text()
    );
    let round1 = b.find("article.round#round-1 pre.report-summary");
    assert!(round1.text().contains("ROUND-ONE-STILL-WORKING"));
    let verify = b.find("section.verify#verify-2");
    assert_eq!(verify.attr("data-passed").as_deref(), Some("false"));
    let command = b
        .text_of("section.verify#verify-2 code.verify-command")
        .unwrap();
    assert!(command.contains("VERIFY-SAID-NO-$((40 + 2))"), "{command}");
    let output = b
        .text_of("section.verify#verify-2 pre.verify-output")
        .unwrap();
    assert!(output.contains("VERIFY-SAID-NO-42"), "{output}");
    for css in ["dd#job-rounds", "dd#job-tokens"] {
        b.find(&format!("dl#summary {css}"));
    }
    for n in [1, 2] {
        for part in [".round-status", ".round-duration", ".round-tokens"] {
            b.find(&format!("article.round#round-{n} {part}"));
        }
    }
    assert!(!b.find_all("section#artifacts a.artifact").is_empty());
    assert!(
        b.try_find("form#cancel-form").is_err(),
        "a finished job offers cancel"
    );

    // The session cookie: HttpOnly, SameSite=Strict, and it is not the token.
    let cookies = b.cookies();
    let session = cookies
        .iter()
        .find(|c| c["name"] == "ralph_session")
        .unwrap_or_else(|| panic!("no ralph_session cookie: {cookies:?}"));
    assert_eq!(session["httpOnly"], true, "{session}");
    assert_eq!(session["sameSite"], "Strict", "{session}");
    assert_eq!(session["path"], "/ui", "{session}");
    for c in &cookies {
        assert!(!c["value"].as_str().unwrap().contains(&reader), "{c}");
    }
    assert!(!b.source().contains(&reader), "the token is in the page");
}

#[test]
fn a_running_rounds_log_updates_live_in_the_page() {
    if !ready("a_running_rounds_log_updates_live_in_the_page") {
        return;
    }
    let s = Server::new("");
    let reader = s.make_token("live-reader", &["read"]);
    let ws = s.workspace("live");
    let id = submit(&s, vec![job(&ws, &ticker(&s), json!({"max_rounds": 1}))]).remove(0);
    wait_for_file(&ws.join("started"), LIMIT);
    let b = Browser::start();
    login(&b, &s, &reader);
    open_job(&b, &s, &id);
    let live = b.find("section#live");
    let src = live.attr("data-src").unwrap_or_default();
    assert!(!src.is_empty(), "section#live has no data-src");
    b.wait_until("the live log shows tick 3", LIMIT, |b| {
        last_tick(&b.text_of("pre#live-log").unwrap_or_default()) >= 3
    });
    let seen = last_tick(&b.text_of("pre#live-log").unwrap());
    b.wait_until("a later tick arrives without a reload", LIMIT, |b| {
        last_tick(&b.text_of("pre#live-log").unwrap_or_default()) > seen
    });
    assert_eq!(b.text_of("p#live-status").unwrap().trim(), "live");
    std::fs::write(ws.join("stop"), "").unwrap();
    b.wait_until("the live status says ended", LIMIT, |b| {
        b.text_of("p#live-status")
            .is_some_and(|t| t.trim() == "ended")
    });
    // The page offers the reload that shows the round's report.
    assert_eq!(
        b.execute(
            "return document.getElementById('live-next').hidden",
            json!([])
        ),
        json!(false)
    );
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
}

/// A bare repository whose one file the agent appends a line to.
fn patch_repo(g: &GitServer) {
    g.create("proj.git", |dir: &Path| {
        std::fs::write(dir.join("notes.txt"), "first line\n").unwrap();
    });
}

/// A `repo` job of the git server's project.
fn repo_job(s: &Server, g: &GitServer, agent: &Path, extra: Value) -> Value {
    let mut j = json!({
        "objective": "add a line",
        "repo": g.url("proj.git"),
        "agent_cmd": agent.display().to_string(),
        "read": [s.agents],
        "retry_backoff": "10ms",
        "kill_grace": "1s",
    });
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

fn repo_server(g: &GitServer) -> Server {
    Server::new(&format!(
        "[limits]\nallowed_repos = [\"git://127.0.0.1:{}/\"]\n",
        g.port
    ))
}

#[test]
fn the_patch_downloads() {
    if !ready("the_patch_downloads") {
        return;
    }
    let g = GitServer::start();
    patch_repo(&g);
    let s = repo_server(&g);
    let reader = s.make_token("patch-reader", &["read"]);
    let agent = s.agent(
        "append.sh",
        &format!(
            "echo 'ADDED-BY-THE-AGENT-7' >> notes.txt\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("appended")
        ),
    );
    let id = submit(&s, vec![repo_job(&s, &g, &agent, json!({}))]).remove(0);
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let api = get(&s, &format!("/v1/jobs/{id}/patch"), Some(&s.token()));
    assert_eq!(api.status, 200, "{}", api.body);
    assert!(api.body.contains("+ADDED-BY-THE-AGENT-7"), "{}", api.body);

    let b = Browser::start();
    login(&b, &s, &reader);
    open_job(&b, &s, &id);
    b.find("section#patch pre.diff");
    let added: Vec<String> = b
        .find_all("section#patch pre.diff span.diff-add")
        .iter()
        .map(|e| e.text())
        .collect();
    assert!(
        added.iter().any(|t| t.contains("ADDED-BY-THE-AGENT-7")),
        "no .diff-add line with the change: {added:?}"
    );
    assert!(
        !b.find_all("section#patch pre.diff span.diff-file")
            .is_empty()
    );
    assert!(
        !b.find_all("section#patch pre.diff span.diff-hunk")
            .is_empty()
    );
    let link = b.find("section#patch a#patch-download");
    let href = link.attr("href").unwrap();
    assert_eq!(href, format!("/ui/jobs/{id}/patch"));
    assert!(
        link.attr("download").is_some(),
        "a#patch-download has no download attribute"
    );
    let fetched = b.execute_async(
        "const [href, done] = arguments;
         fetch(href, {credentials: 'same-origin'})
           .then(r => r.text().then(t => done({status: r.status, text: t})))
           .catch(e => done({status: -1, text: String(e)}));",
        json!([href]),
    );
    assert_eq!(fetched["status"], 200, "{fetched}");
    assert_eq!(fetched["text"].as_str().unwrap(), api.body);
    // The download itself, over HTTP with a bearer token.
    let ui = get(&s, &href, Some(&reader));
    assert_eq!(ui.status, 200);
    assert!(
        ui.header("content-type")
            .is_some_and(|v| v.starts_with("text/x-diff")),
        "{}",
        ui.head
    );
    assert!(
        ui.header("content-disposition")
            .is_some_and(|v| v.starts_with("attachment")),
        "{}",
        ui.head
    );
    assert_eq!(ui.body, api.body);
}

/// The job's state through the API.
fn api_state(s: &Server, id: &str) -> Value {
    let (code, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(code, 200, "{j}");
    j
}

#[test]
fn cancel_is_refused_to_a_read_token_and_allowed_to_a_cancel_token() {
    if !ready("cancel_is_refused_to_a_read_token_and_allowed_to_a_cancel_token") {
        return;
    }
    let s = Server::new("");
    let reader = s.make_token("only-reads", &["read"]);
    let canceller = s.make_token("may-cancel", &["read", "cancel"]);
    let ws = s.workspace("long");
    let agent = s.agent("long.sh", "touch started\nexec sleep 300");
    let id = submit(&s, vec![job(&ws, &agent, json!({"max_rounds": 1}))]).remove(0);
    wait_for_file(&ws.join("started"), LIMIT);
    wait_until("the API says running", LIMIT, || {
        api_state(&s, &id)["state"] == "running"
    });

    let b = Browser::start();
    login(&b, &s, &reader);
    open_job(&b, &s, &id);
    assert!(
        b.try_find("form#cancel-form").is_err(),
        "a read token is offered the cancel form"
    );
    // A cancel form posted by hand, with the session's csrf value if the page has one.
    let answer = b.execute_async(
        "const [id, done] = arguments;
         const body = new URLSearchParams();
         const csrf = document.querySelector('input[name=csrf]');
         if (csrf) body.set('csrf', csrf.value);
         fetch('/ui/jobs/' + id + '/cancel', {method: 'POST', body, credentials: 'same-origin',
                                              redirect: 'manual'})
           .then(r => r.text().then(t => done({status: r.status, csrf: !!csrf,
              error: !!new DOMParser().parseFromString(t, 'text/html')
                                      .querySelector('p#error')})))
           .catch(e => done({status: -1, error: String(e)}));",
        json!([id]),
    );
    assert_eq!(answer["status"], 403, "{answer}");
    assert_eq!(
        answer["error"], true,
        "the 403 page has no p#error: {answer}"
    );
    eprintln!("the read token's cancel POST: {answer}");
    let j = api_state(&s, &id);
    assert_eq!(j["state"], "running", "{j}");
    assert!(
        s.events_of(&id, "cancel_requested").is_empty(),
        "a read token's POST requested a cancel"
    );

    b.find("form#logout-form button#logout").click();
    b.wait_until("the logout lands on the login page", LIMIT, |b| {
        b.url().contains("/ui/login") && b.try_find("form#login-form").is_ok()
    });
    b.navigate(&format!("{}/ui/jobs/{id}", s.url()));
    b.wait_until("the ended session is sent to log in", LIMIT, |b| {
        b.url().contains("/ui/login")
    });

    login(&b, &s, &canceller);
    open_job(&b, &s, &id);
    let form = b.find("form#cancel-form");
    assert_eq!(form.attr("method").unwrap().to_lowercase(), "post");
    assert_eq!(form.attr("action"), Some(format!("/ui/jobs/{id}/cancel")));
    assert!(
        form.try_find("input[name=csrf]").is_some(),
        "no csrf in the cancel form"
    );
    b.find("form#cancel-form button#cancel").click();
    let page = format!("{}/ui/jobs/{id}", s.url());
    b.wait_until("the cancel returns to the job's page", LIMIT, |b| {
        b.url() == page && b.try_find("h1#job-title").is_ok()
    });
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "cancelled", "{j}");
}

/// Checks that nothing the agent wrote runs or links as script in the current page.
fn assert_inert(b: &Browser) {
    let v = b.execute(
        "return {
           pwned: typeof window.__pwned,
           inline: document.querySelectorAll('script:not([src])').length,
           on: [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
                 .filter(a => a.name.toLowerCase().startsWith('on'))
                 .map(a => e.tagName + ' ' + a.name)),
           js: document.querySelectorAll('a[href^=\"javascript:\" i], [src^=\"javascript:\" i]')
                 .length,
           esc: document.documentElement.textContent.includes('\\u001b'),
           bel: document.documentElement.textContent.includes('\\u0007'),
         };",
        json!([]),
    );
    assert_eq!(v["pwned"], "undefined", "{v}");
    assert_eq!(v["inline"], 0, "inline scripts: {v}");
    assert_eq!(v["on"], json!([]), "event handler attributes: {v}");
    assert_eq!(v["js"], 0, "javascript: links: {v}");
    assert_eq!(v["esc"], false, "a raw ESC is in the page's text: {v}");
    assert_eq!(v["bel"], false, "a raw BEL is in the page's text: {v}");
}

const OSC8: &str = "\u{1b}]8;;javascript:window.__pwned=5\u{1b}\\click\u{1b}]8;;\u{1b}\\";
const OSC52: &str = "\u{1b}]52;c;aGk=\u{7}";

#[test]
fn a_hostile_report_renders_as_text_and_runs_no_script() {
    if !ready("a_hostile_report_renders_as_text_and_runs_no_script") {
        return;
    }
    let s = Server::new("");
    let reader = s.make_token("hostile-reader", &["read"]);
    let report = json!({
        "status": "continue",
        "summary": "<script>window.__pwned=1</script>",
        "evidence": [
            "<img src=x onerror=\"window.__pwned=2\">",
            "[x](javascript:window.__pwned=3)",
            "javascript:window.__pwned=4",
        ],
        "nextSteps": [OSC8, OSC52],
        "blocker": "",
    });
    std::fs::write(s.agents.join("hostile.json"), report.to_string()).unwrap();
    std::fs::write(
        s.agents.join("hostile.out"),
        format!("{OSC8}\n{OSC52}\n<script>window.__pwned=6</script>\nHOSTILE-OUTPUT-DONE\n"),
    )
    .unwrap();
    let agent = s.agent(
        "hostile.sh",
        &format!(
            // The output again every second: a page opened late still gets it live.
            "touch started\ni=0\n\
             while [ ! -e stop ] && [ $i -lt 120 ]; do i=$((i+1)); cat {dir}/hostile.out; sleep 1; \
             done\ncat {dir}/hostile.json > \"$RALPH_REPORT_FILE\"",
            dir = s.agents.display()
        ),
    );
    let ws = s.workspace("hostile");
    let id = submit(&s, vec![job(&ws, &agent, json!({"max_rounds": 1}))]).remove(0);
    wait_for_file(&ws.join("started"), LIMIT);

    let b = Browser::start();
    login(&b, &s, &reader);
    open_job(&b, &s, &id);
    // The running round's live log gets the hostile output as text.
    b.wait_until("the live log shows the hostile output", LIMIT, |b| {
        b.text_of("pre#live-log")
            .is_some_and(|t| t.contains("HOSTILE-OUTPUT-DONE"))
    });
    let live = b.text_of("pre#live-log").unwrap();
    assert!(live.contains("<script>window.__pwned=6</script>"), "{live}");
    assert!(
        live.contains("\\x1b"),
        "the live log does not show ESC as \\x1b: {live:?}"
    );
    assert_inert(&b);

    std::fs::write(ws.join("stop"), "").unwrap();
    s.wait_finished(&id, LIMIT);
    open_job(&b, &s, &id);
    b.find("article.round#round-1 div.report");
    assert_inert(&b);
    let summary = b
        .text_of("article.round#round-1 pre.report-summary")
        .unwrap();
    assert!(
        summary.contains("<script>window.__pwned=1</script>"),
        "{summary}"
    );
    let evidence: Vec<String> = b
        .find_all("article.round#round-1 ul.report-evidence > li")
        .iter()
        .map(|e| e.text())
        .collect();
    assert_eq!(evidence.len(), 3, "{evidence:?}");
    assert!(
        evidence[0].contains("<img src=x onerror=\"window.__pwned=2\">"),
        "{evidence:?}"
    );
    assert!(
        evidence[1].contains("[x](javascript:window.__pwned=3)"),
        "{evidence:?}"
    );
    let next = b
        .text_of("article.round#round-1 ul.report-next-steps")
        .unwrap();
    assert!(
        next.contains("\\x1b"),
        "ESC is not shown as \\x1b: {next:?}"
    );
    assert!(next.contains("click"), "{next:?}");

    let console = b.console_log();
    eprintln!("the browser console on the hostile pages: {console:#?}");
    // Nothing went wrong in the page at all: no CSP violation, no script error, no missing
    // resource (the favicon is served).
    let severe: Vec<&Value> = console.iter().filter(|e| e["level"] == "SEVERE").collect();
    assert!(severe.is_empty(), "errors in the console: {severe:#?}");

    let page = get(&s, &format!("/ui/jobs/{id}"), Some(&reader));
    assert_eq!(page.status, 200);
    let policy = page
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("no Content-Security-Policy: {}", page.head));
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
}

/// A page must have rendered: 200 over HTTP and its main element in the browser; then its
/// screenshot, which must not be one colour, is saved as `name` when a directory is given.
fn shoot(b: &Browser, dir: Option<&Path>, name: &str, main: &str) {
    b.wait_until(&format!("{main} renders for {name}"), LIMIT, |b| {
        b.try_find(main).is_ok()
    });
    let path = dir.map(|d| d.join(name));
    let png = b.full_page_screenshot(path.as_deref());
    let colours = b.distinct_colours(&png, 64);
    assert!(colours > 1, "{name} is blank (one colour)");
    if let Some(p) = path {
        eprintln!(
            "saved {} ({} bytes, {colours}+ colours)",
            p.display(),
            png.len()
        );
    }
}

#[test]
fn screenshots_of_the_main_pages() {
    if !ready("screenshots_of_the_main_pages") {
        return;
    }
    let dir = std::env::var_os("RALPH_UI_SCREENSHOTS").map(std::path::PathBuf::from);
    if let Some(d) = &dir {
        std::fs::create_dir_all(d).unwrap();
    }
    let g = GitServer::start();
    patch_repo(&g);
    let s = repo_server(&g);
    let reader = s.make_token("screenshots", &["read", "cancel"]);
    // Round 1 claims completion too early (verify fails), round 2 finishes the work.
    let finisher = s.agent(
        "finisher.sh",
        &format!(
            "echo \"round $RALPH_ROUND\" >> notes.txt\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("appended a line")
        ),
    );
    let quick = s.agent(
        "quick.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("quick")
        ),
    );
    let finished = submit(
        &s,
        vec![repo_job(
            &s,
            &g,
            &finisher,
            json!({"name": "add-a-line", "labels": {"team": "docs"}, "max_rounds": 3,
                   "verify": "grep -q 'round 2' notes.txt"}),
        )],
    )
    .remove(0);
    let mut others = Vec::new();
    for i in 0..3 {
        let ws = s.workspace(&format!("quick{i}"));
        let labels = json!({"n": i.to_string()});
        others.extend(submit(
            &s,
            vec![job(
                &ws,
                &quick,
                json!({"name": format!("quick-{i}"), "labels": labels}),
            )],
        ));
    }
    let j = s.wait_finished(&finished, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    for o in &others {
        s.wait_finished(o, LIMIT);
    }
    let live_ws = s.workspace("live");
    let running = submit(
        &s,
        vec![job(&live_ws, &ticker(&s), json!({"name": "ticking"}))],
    )
    .remove(0);
    wait_for_file(&live_ws.join("started"), LIMIT);

    for (path, token) in [
        ("/ui/login".to_owned(), None),
        ("/ui/jobs".to_owned(), Some(&reader)),
        (format!("/ui/jobs/{finished}"), Some(&reader)),
        (format!("/ui/jobs/{running}"), Some(&reader)),
        ("/ui/health".to_owned(), Some(&reader)),
    ] {
        let r = get(&s, &path, token.map(String::as_str));
        assert_eq!(r.status, 200, "{path}: {}", r.head);
        assert_eq!(r.header("content-security-policy"), Some(CSP), "{path}");
    }

    let b = Browser::start();
    b.navigate(&format!("{}/ui/login", s.url()));
    shoot(&b, dir.as_deref(), "ui-login.png", "form#login-form");
    login(&b, &s, &reader);
    for i in others.iter().chain([&finished, &running]) {
        b.find(&format!("table#jobs tr.job[data-id=\"{i}\"]"));
    }
    shoot(&b, dir.as_deref(), "ui-jobs.png", "table#jobs");
    open_job(&b, &s, &finished);
    b.find("section.verify#verify-1[data-passed=\"false\"]");
    b.find("section.verify#verify-2[data-passed=\"true\"]");
    b.find("section#patch pre.diff span.diff-add");
    shoot(
        &b,
        dir.as_deref(),
        "ui-job.png",
        "section#rounds article.round#round-2",
    );
    open_job(&b, &s, &running);
    b.wait_until("the live log has a few ticks", LIMIT, |b| {
        last_tick(&b.text_of("pre#live-log").unwrap_or_default()) >= 5
    });
    shoot(
        &b,
        dir.as_deref(),
        "ui-live.png",
        "section#live pre#live-log",
    );
    b.navigate(&format!("{}/ui/health", s.url()));
    b.wait_until("the health page renders", LIMIT, |b| {
        b.try_find("dd#health-ready").is_ok() && b.try_find("table#hosts").is_ok()
    });
    assert!(
        !b.find_all("table#hosts tr.host").is_empty(),
        "no host rows"
    );
    std::fs::write(live_ws.join("stop"), "").unwrap();
    assert_eq!(s.wait_finished(&running, LIMIT)["outcome"], "complete");
}

/// Tabs until `want` (an id, or `tag.class`) has the focus; at most 60 presses.
fn tab_to(b: &Browser, want: &str) {
    for _ in 0..60 {
        if b.focused() == want {
            return;
        }
        b.keys(&TAB.to_string());
    }
    panic!("Tab never reached {want}; the focus is on {}", b.focused());
}

#[test]
fn the_dashboard_works_with_the_keyboard_alone() {
    if !ready("the_dashboard_works_with_the_keyboard_alone") {
        return;
    }
    let s = Server::new("");
    let ws = s.workspace("kb");
    let agent = s.agent(
        "kb.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("typed")
        ),
    );
    let other = s.workspace("kb-other");
    let ids = submit(
        &s,
        vec![
            job(
                &ws,
                &agent,
                json!({"max_rounds": 1, "labels": {"team": "keys"}}),
            ),
            job(&other, &agent, json!({"max_rounds": 1})),
        ],
    );
    s.wait_finished(&ids[0], LIMIT);
    let b = Browser::start();
    // The token field has the focus on arrival; Enter signs in.
    b.navigate(&format!("{}/ui/login", s.url()));
    assert_eq!(b.focused(), "token");
    b.keys(&format!("{}{ENTER}", s.token()));
    let jobs = format!("{}/ui/jobs", s.url());
    b.wait_until("Enter signs in", LIMIT, |b| {
        b.url().starts_with(&jobs) && b.try_find("table#jobs").is_ok()
    });
    // The first Tab reaches the skip link.
    b.keys(&TAB.to_string());
    assert_eq!(b.focused(), "a.skip");
    // The label filter, typed and applied with Enter.
    tab_to(&b, "f-label");
    b.keys(&format!("team=keys{ENTER}"));
    b.wait_until("Enter applies the filter", LIMIT, |b| {
        b.url().contains("label=team%3Dkeys") && b.find_all("tr.job").len() == 1
    });
    // The job's link, followed with Enter.
    tab_to(&b, "a.job-link");
    b.keys(&ENTER.to_string());
    let page = format!("{}/ui/jobs/{}", s.url(), ids[0]);
    b.wait_until("Enter opens the job", LIMIT, |b| {
        b.url() == page && b.try_find("article.round#round-1").is_ok()
    });
    // Logging out too: Tab to the button, Enter.
    tab_to(&b, "logout");
    b.keys(&ENTER.to_string());
    b.wait_until("Enter logs out", LIMIT, |b| b.url().contains("/ui/login"));
}
