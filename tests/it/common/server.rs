//! A real `ralph serve` for end-to-end tests: a temporary state dir and workspace root, a free
//! loopback port, raw HTTP helpers, and the CLI client pointed at it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Output, ralph_bin};

/// A server under test.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub state: PathBuf,
    pub agents: PathBuf,
    pub config: PathBuf,
    pub port: u16,
    pub child: Option<Child>,
    pub log: PathBuf,
    /// The shared PostgreSQL store, when the server uses one instead of SQLite.
    pub database_url: Option<String>,
    /// Extra `ralph serve` arguments and environment (e.g. `--log-format`, `RUST_LOG`).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

fn free_port() -> u16 {
    super::listen_port()
}

impl Server {
    /// A server whose `[limits]` and other settings are `extra` (TOML appended to the base).
    pub fn new(extra: &str) -> Self {
        Self::build(extra, None)
    }

    /// Like [`Server::new`], with its journal and queue in the PostgreSQL database at `url`.
    pub fn with_database(extra: &str, url: &str) -> Self {
        Self::build(extra, Some(url))
    }

    /// Like [`Server::new`], started with extra `ralph serve` arguments and environment.
    pub fn with_args(extra: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::build_with(extra, None, args, env)
    }

    /// Like [`Server::new`], with every directory of the server (state, workspaces, agents,
    /// log) in a fresh directory under `parent` (e.g. a small filesystem the test mounted).
    pub fn new_in(extra: &str, parent: &Path) -> Self {
        Self::build_in(extra, None, &[], &[], Some(parent))
    }

    fn build(extra: &str, database_url: Option<&str>) -> Self {
        Self::build_with(extra, database_url, &[], &[])
    }

    fn build_with(
        extra: &str,
        database_url: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::build_in(extra, database_url, args, env, None)
    }

    fn build_in(
        extra: &str,
        database_url: Option<&str>,
        args: &[&str],
        env: &[(&str, &str)],
        parent: Option<&Path>,
    ) -> Self {
        let mut builder = tempfile::Builder::new();
        builder.prefix("ralph-serve-");
        let dir = match parent {
            Some(p) => builder.tempdir_in(p),
            None => builder.tempdir(),
        }
        .unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("root");
        let agents = root.join("agents");
        let state = base.join("state");
        std::fs::create_dir_all(&agents).unwrap();
        let port = free_port();
        let config = base.join("config.toml");
        let has_limits = extra.contains("[limits]");
        let limits = if has_limits {
            extra.replacen(
                "[limits]",
                &format!("[limits]\nworkspace_roots = [\"{}\"]", root.display()),
                1,
            )
        } else {
            format!(
                "{extra}\n[limits]\nworkspace_roots = [\"{}\"]\n",
                root.display()
            )
        };
        let database =
            database_url.map_or_else(String::new, |u| format!("database_url = \"{u}\"\n"));
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:{port}\"\nstate_dir = \"{}\"\n{database}{limits}",
                state.display()
            ),
        )
        .unwrap();
        let log = base.join("serve.log");
        let mut s = Server {
            dir,
            root,
            state,
            agents,
            config,
            port,
            child: None,
            log,
            database_url: database_url.map(str::to_owned),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        s.start();
        s
    }

    /// Starts (or restarts) the server and waits until it is ready.
    pub fn start(&mut self) {
        self.start_with(3);
    }

    fn start_with(&mut self, mut retries_left: u32) {
        // A second start while the first server runs would leak it (and the new one would fail
        // on the held state directory while the old one answered the readiness probe).
        if let Some(c) = self.child.as_mut() {
            assert!(
                c.try_wait().unwrap().is_some(),
                "the server is already running: kill9() or terminate() it before start()"
            );
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(ralph_bin())
            .args(["serve", "--config"])
            .arg(&self.config)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let start = Instant::now();
        loop {
            if let Ok((200, _)) = self.raw("GET", "/readyz", None, None, None) {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                let log = self.log_text();
                if log.contains(&format!("127.0.0.1:{}`: Address already in use", self.port))
                    && retries_left > 0
                {
                    // Another process took the port between its pick and the listen: another.
                    retries_left -= 1;
                    let old = format!("listen = \"127.0.0.1:{}\"", self.port);
                    self.port = free_port();
                    let config = std::fs::read_to_string(&self.config).unwrap();
                    let new = format!("listen = \"127.0.0.1:{}\"", self.port);
                    std::fs::write(&self.config, config.replacen(&old, &new, 1)).unwrap();
                    return self.start_with(retries_left);
                }
                panic!("ralph serve exited with {status}:\n{log}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "server not ready:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILLs the server.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits for the server to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.state.join("token"))
            .unwrap()
            .trim()
            .to_owned()
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One raw HTTP/1.1 request; returns the status and the body.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
        content_type: Option<&str>,
    ) -> std::io::Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let body = body.unwrap_or("");
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(t) = token {
            req.push_str(&format!("Authorization: Bearer {t}\r\n"));
        }
        req.push_str(&format!(
            "Content-Type: {}\r\n\r\n",
            content_type.unwrap_or("application/json")
        ));
        s.write_all(req.as_bytes())?;
        s.write_all(body.as_bytes())?;
        let mut resp = Vec::new();
        s.read_to_end(&mut resp)?;
        let r = parse_response(&resp);
        Ok((r.status, r.body))
    }

    /// One raw HTTP/1.1 request with extra headers (`Host` is this server's); the answer with
    /// its head (lower case) and body.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> RawResponse {
        let mut c = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.port,
            body.len()
        );
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        c.write_all(req.as_bytes()).unwrap();
        c.write_all(body.as_bytes()).unwrap();
        let mut resp = Vec::new();
        c.read_to_end(&mut resp).unwrap();
        parse_response(&resp)
    }

    /// A token `name` with `scopes`, made through the CLI (`ralph token create`, which prints
    /// the token alone on stdout).
    pub fn make_token(&self, name: &str, scopes: &[&str]) -> String {
        let mut args = vec!["token", "create", name];
        for sc in scopes {
            args.extend(["--scope", sc]);
        }
        let out = self.ralph(&args);
        out.expect_code(0);
        let token = out.stdout.trim().to_owned();
        assert!(!token.is_empty() && !token.contains('\n'), "{out:?}");
        token
    }

    /// An authenticated JSON call.
    pub fn api(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = self
            .raw(method, path, Some(&self.token()), body, None)
            .unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Submits one job (a [`job`] body) and returns its id; anything but `201` fails the test.
    pub fn submit(&self, job: Value) -> String {
        let (code, c) = self.api(
            "POST",
            "/v1/jobs",
            Some(&serde_json::json!({ "job": [job] }).to_string()),
        );
        assert_eq!(code, 201, "{c}");
        c["jobs"][0]["id"].as_str().unwrap().to_owned()
    }

    /// The CLI client, pointed at this server.
    pub fn ralph(&self, args: &[&str]) -> Output {
        let out = Command::new(ralph_bin())
            .args(args)
            .env("RALPH_SERVER", self.url())
            .env("RALPH_TOKEN", self.token())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Writes an executable agent script under the workspace root (readable by the sandbox
    /// through `read = [agents]`).
    pub fn agent(&self, name: &str, body: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = self.agents.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// A fresh workspace under the root.
    pub fn workspace(&self, name: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// The journal of a job, from the store on disk.
    pub fn events(&self, id: &str) -> Vec<Value> {
        let store =
            ralph_runner::store::Store::open(&self.state, self.database_url.as_deref()).unwrap();
        store
            .events(id)
            .unwrap()
            .into_iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    /// Waits until the job is finished; returns its JSON.
    /// The job's events of one type.
    pub fn events_of(&self, id: &str, kind: &str) -> Vec<Value> {
        self.events(id)
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    pub fn wait_finished(&self, id: &str, limit: Duration) -> Value {
        let start = Instant::now();
        loop {
            let (_, j) = self.api("GET", &format!("/v1/jobs/{id}"), None);
            if j["state"] == "finished" {
                return j;
            }
            assert!(
                start.elapsed() < limit,
                "job {id} did not finish: {j}\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
        // A test that failed mid-job leaves its workspace overlay mounted (start-up recovery
        // would unmount it; nothing starts again): unmount it so the directory can go.
        if let Ok(entries) = std::fs::read_dir(self.state.join("workspaces")) {
            for e in entries.flatten() {
                let _ = nix::mount::umount2(&e.path(), nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

/// A raw HTTP/1.1 response, parsed.
pub struct RawResponse {
    /// The status code (0 when there was none).
    pub status: u16,
    /// The head (status line and headers), lower case.
    pub head: String,
    /// The body, dechunked when it was chunked.
    pub body: String,
}

impl RawResponse {
    /// The body as JSON (a JSON string of it when it is not JSON).
    /// A header's value (the head is lower case, so is `name`).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::String(self.body.clone()))
    }
}

/// Parses the bytes a server answered on a `Connection: close` request.
pub fn parse_response(resp: &[u8]) -> RawResponse {
    let text = String::from_utf8_lossy(resp).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(rest)
    } else {
        rest.to_owned()
    };
    RawResponse { status, head, body }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// A job entry of a JSON job file.
pub fn job(workspace: &Path, agent: &Path, extra: Value) -> Value {
    let mut j = serde_json::json!({
        "objective": "test objective",
        "workspace": workspace,
        "agent_cmd": agent.display().to_string(),
        "read": [agent.parent().unwrap()],
        "retry_backoff": "10ms",
        "kill_grace": "1s",
    });
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

/// The (round, attempt) pairs an agent logged in `<ws>/executions` (one "ROUND ATTEMPT" line per
/// execution), with how often each ran.
pub fn executions(ws: &Path) -> std::collections::BTreeMap<(u64, u64), usize> {
    let log = std::fs::read_to_string(ws.join("executions")).unwrap_or_default();
    let mut runs = std::collections::BTreeMap::new();
    for line in log.lines() {
        let mut it = line.split_whitespace().map(|x| x.parse::<u64>().unwrap());
        *runs
            .entry((it.next().unwrap(), it.next().unwrap()))
            .or_default() += 1;
    }
    runs
}

/// The (round, attempt) pairs whose `round_started` is in a job's journal.
pub fn started_attempts(events: &[Value]) -> std::collections::BTreeSet<(u64, u64)> {
    events
        .iter()
        .filter(|e| e["type"] == "round_started")
        .map(|e| (e["round"].as_u64().unwrap(), e["attempt"].as_u64().unwrap()))
        .collect()
}
