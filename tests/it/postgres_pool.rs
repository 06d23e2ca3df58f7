//! One slow database call must not stall a host (issue 17, part 4), end to end on PostgreSQL:
//! a cancel waiting on a row lock held by another session leaves the API's other calls
//! answering (the store has a pool of connections), and `/readyz` follows the store: 503 while
//! a TCP proxy between the server and PostgreSQL is cut, 200 again once it is restored, with
//! `/healthz` 200 throughout and API calls failing with an error instead of hanging.
//!
//! The database comes from `RALPH_TEST_DATABASE_URL` (default: what `.ci/setup` creates); without
//! PostgreSQL the tests say why and skip, except under `CI`.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use common::server::{Server, job};
use common::test_db::TestDatabase;
use common::{complete_report, wait_until};
use serde_json::{Value, json};

fn submit(server: &Server, job: Value) -> String {
    let (code, created) = server.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job] }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    created["jobs"][0]["id"].as_str().unwrap().to_owned()
}

/// Backends of the test database waiting for a lock (seen from a session of the test's own).
fn lock_waiters(admin: &mut postgres::Client) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
            &[],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_cancel_waiting_on_a_row_lock_does_not_stall_the_api() {
    let Some(db) = TestDatabase::create("pool_row_lock") else {
        return;
    };
    let server = Server::with_database("max_concurrent_jobs = 2\n", &db.url);
    let ws = server.workspace("ws");
    let hang = server.agent(
        "pool-hang.sh",
        "touch \"$RALPH_WORKSPACE/started\"\nexec sleep 301.5",
    );
    // A runs and holds the workspace; B waits in the queue behind it (the scheduler never
    // claims a job whose workspace is busy, so nothing of the server touches B's row).
    let running = submit(&server, job(&ws, &hang, json!({})));
    common::wait_for_file(&ws.join("started"), Duration::from_secs(60));
    let queued = submit(&server, job(&ws, &hang, json!({})));
    let (_, b) = server.api("GET", &format!("/v1/jobs/{queued}"), None);
    assert_eq!(b["state"], "queued", "{b}");

    // Another session locks B's row; a cancel of B through the API waits on that lock.
    let mut locker = db.client();
    let mut tx = locker.transaction().unwrap();
    let locked = tx
        .query("SELECT id FROM jobs WHERE id = $1 FOR UPDATE", &[&queued])
        .unwrap();
    assert_eq!(locked.len(), 1);
    let (done, cancel_answer) = mpsc::channel();
    let cancel = {
        let (port, token, id) = (server.port, server.token(), queued.clone());
        std::thread::spawn(move || {
            let answer = raw_post(port, &format!("/v1/jobs/{id}/cancel"), &token);
            let _ = done.send(answer);
        })
    };
    let mut admin = db.client();
    wait_until(
        "the cancel waits on the row lock",
        Duration::from_secs(30),
        || lock_waiters(&mut admin) >= 1,
    );

    // While it waits, the API still answers: the list, another job, a new job.
    let (code, list) = server.api("GET", "/v1/jobs", None);
    assert_eq!(code, 200, "{list}");
    let ids: Vec<&str> = list["jobs"]
        .as_array()
        .unwrap_or_else(|| panic!("{list}"))
        .iter()
        .filter_map(|j| j["id"].as_str())
        .collect();
    assert!(
        ids.contains(&running.as_str()) && ids.contains(&queued.as_str()),
        "{list}"
    );
    let (code, a) = server.api("GET", &format!("/v1/jobs/{running}"), None);
    assert_eq!(code, 200, "{a}");
    assert_eq!(a["state"], "running", "{a}");
    let other_ws = server.workspace("other");
    let done_agent = server.agent(
        "pool-done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let fresh = submit(&server, job(&other_ws, &done_agent, json!({})));

    // All of that happened while the cancel still waited on the lock.
    assert!(
        matches!(cancel_answer.try_recv(), Err(mpsc::TryRecvError::Empty)),
        "the cancel returned before the lock was released"
    );
    assert!(lock_waiters(&mut admin) >= 1);
    tx.rollback().unwrap();

    let (code, body) = cancel_answer.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(code == 200 || code == 202, "{code} {body}");
    cancel.join().unwrap();
    let b = server.wait_finished(&queued, Duration::from_secs(60));
    assert_eq!(b["outcome"], "cancelled", "{b}");
    let f = server.wait_finished(&fresh, Duration::from_secs(120));
    assert_eq!(f["outcome"], "complete", "{f}");
    let (code, body) = server.api("POST", &format!("/v1/jobs/{running}/cancel"), None);
    assert!(code == 200 || code == 202, "{code} {body}");
    server.wait_finished(&running, Duration::from_secs(60));
}

/// An authenticated POST without a body, on a thread of its own: (status, body).
fn raw_post(port: u16, path: &str, token: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\
         Authorization: Bearer {token}\r\n\r\n"
    );
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = resp
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// A loopback TCP proxy to PostgreSQL that can be cut (listener closed, every connection shut
/// down: new ones are refused) and restored on the same port.
struct Proxy {
    port: u16,
    upstream: String,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    fn start(upstream: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut p = Proxy {
            port,
            upstream: upstream.to_owned(),
            stop: Arc::new(AtomicBool::new(false)),
            conns: Arc::new(Mutex::new(Vec::new())),
            acceptor: None,
        };
        p.serve(listener);
        p
    }

    fn serve(&mut self, listener: TcpListener) {
        listener.set_nonblocking(true).unwrap();
        self.stop.store(false, Ordering::SeqCst);
        let (stop, conns, upstream) =
            (self.stop.clone(), self.conns.clone(), self.upstream.clone());
        self.acceptor = Some(std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(&upstream) else {
                            continue;
                        };
                        let mut all = conns.lock().unwrap();
                        all.push(client.try_clone().unwrap());
                        all.push(server.try_clone().unwrap());
                        pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                        pipe(server, client);
                    }
                    // The accept loop polls so that a cut can close the listener.
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => {}
                }
            }
        }));
    }

    /// Closes the listener and every proxied connection.
    fn cut(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            a.join().unwrap();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        assert!(TcpStream::connect(("127.0.0.1", self.port)).is_err());
    }

    /// Listens on the same port again.
    fn restore(&mut self) {
        let listener = TcpListener::bind(("127.0.0.1", self.port)).unwrap();
        self.serve(listener);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.cut();
    }
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from, &mut to);
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// `url`'s host and port (`host:5432` when it names none), and `url` pointed at `proxy` instead;
/// `None` for a connection string this test cannot re-point (a socket, key=value).
fn through_proxy(url: &str, proxy: Option<u16>) -> Option<(String, String)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (user, host) = authority
        .rsplit_once('@')
        .map_or(("", authority), |(u, h)| (u, h));
    if host.is_empty() || tail.contains("host=") {
        return None;
    }
    let upstream = if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    };
    let at = if user.is_empty() { "" } else { "@" };
    let port = proxy.unwrap_or(0);
    Some((
        upstream,
        format!("{scheme}://{user}{at}127.0.0.1:{port}{tail}"),
    ))
}

#[test]
fn readyz_follows_the_store_and_calls_fail_instead_of_hanging_while_it_is_gone() {
    let Some(db) = TestDatabase::create("pool_readyz") else {
        return;
    };
    let Some((upstream, _)) = through_proxy(&db.url, None) else {
        eprintln!("skipping: cannot put a proxy in front of {}", db.url);
        return;
    };
    let mut proxy = Proxy::start(&upstream);
    let (_, url) = through_proxy(&db.url, Some(proxy.port)).unwrap();
    let server = Server::with_database("", &url);
    let status = |path: &str| server.raw("GET", path, None, None, None).ok();

    proxy.cut();
    wait_until("/readyz answers 503", Duration::from_secs(30), || {
        matches!(status("/readyz"), Some((503, _)))
    });
    let (code, body) = status("/readyz").unwrap();
    assert_eq!(code, 503);
    assert!(
        body.starts_with("not ready: the store is unreachable: ")
            && body.contains(":***@")
            && !body.contains(":ralph_test@"),
        "{body}"
    );
    assert_eq!(status("/healthz").map(|s| s.0), Some(200));
    let (code, list) = server.api("GET", "/v1/jobs", None);
    assert_eq!(code, 500, "{list}");
    let message = list["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{list}"));
    assert!(message.contains("PostgreSQL store"), "{message}");

    proxy.restore();
    wait_until("/readyz answers 200 again", Duration::from_secs(60), || {
        matches!(status("/readyz"), Some((200, _)))
    });
    assert_eq!(status("/healthz").map(|s| s.0), Some(200));
    let ws = server.workspace("ws");
    let agent = server.agent(
        "pool-after.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let id = submit(&server, job(&ws, &agent, json!({})));
    let j = server.wait_finished(&id, Duration::from_secs(120));
    assert_eq!(j["outcome"], "complete", "{j}");
}
