//! A small WebDriver (W3C) client for the dashboard's browser tests: a local `chromedriver` on a
//! free port driving headless Chromium, spoken to in JSON over plain HTTP/1.1 (one connection per
//! command). Dropping the [`Browser`] deletes its session and kills chromedriver and every
//! Chromium process it started (all of them carry the browser's temporary directory in their
//! command line, which is how a test checks that none is left). Chromium and chromedriver are
//! Debian's `chromium` and `chromium-driver`; without them a test fails in CI and skips (saying
//! why) when `CI` is unset, as the docker and PostgreSQL tests do.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::server::parse_response;

/// The key under which W3C WebDriver names an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long one WebDriver command may take (a navigation waits for the page's load).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The program `name` on `PATH` (or in /usr/bin), if installed.
fn program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn browser_problem() -> Option<String> {
    let missing: Vec<&str> = ["chromium", "chromedriver"]
        .into_iter()
        .filter(|p| program(p).is_none())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "no {} (apt-get install chromium chromium-driver; .ci/setup does)",
            missing.join(" and no ")
        )
    })
}

/// Whether the browser tests can run; prints why not. Panics in CI when they cannot.
pub fn ready(test: &str) -> bool {
    match browser_problem() {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: CI is set but the dashboard cannot be tested in a browser: {why}")
        }
        Some(why) => {
            eprintln!("{test}: skipped (CI unset): {why}");
            false
        }
    }
}

/// A headless Chromium driven through its own chromedriver.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    /// The user data dir, HOME and chromedriver's log: its path marks every process started.
    dir: tempfile::TempDir,
    /// The console entries read so far (the endpoint hands each out once).
    console: RefCell<Vec<Value>>,
}

/// A reference to an element of the current page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

/// A failed WebDriver command: its W3C error code (`no such element`, ...) and message.
#[derive(Debug)]
pub struct WdError {
    pub error: String,
    pub message: String,
}

impl Browser {
    /// Starts chromedriver on a free port, waits until it is ready and opens a headless session.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("ralph-webdriver-")
            .tempdir()
            .unwrap();
        let port = super::listen_port();
        let log = dir.path().join("chromedriver.log");
        let driver = Command::new(program("chromedriver").expect("chromedriver"))
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            // Chromium's crash handler keeps its database under HOME: inside the marked dir.
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut b = Browser {
            driver,
            port,
            session: String::new(),
            dir,
            console: RefCell::new(Vec::new()),
        };
        let start = Instant::now();
        loop {
            if let Ok(v) = b.call("GET", "/status", None) {
                if v["ready"] == true {
                    break;
                }
            }
            if let Some(status) = b.driver.try_wait().unwrap() {
                panic!("chromedriver exited with {status}:\n{}", b.driver_log());
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "chromedriver not ready after 60s:\n{}",
                b.driver_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let user_data = b.dir.path().join("profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": program("chromium").expect("chromium"),
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--window-size=1280,900", "--no-first-run", "--no-default-browser-check",
                    format!("--user-data-dir={}", user_data.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
            "timeouts": {"pageLoad": 120_000, "script": 60_000},
        }}});
        let v = b
            .call("POST", "/session", Some(caps))
            .unwrap_or_else(|e| panic!("no browser session: {e:?}\n{}", b.driver_log()));
        b.session = v["sessionId"].as_str().unwrap().to_owned();
        b
    }

    /// A string in the command line of chromedriver's Chromium and all of its processes.
    pub fn marker(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// chromedriver's pid.
    pub fn driver_pid(&self) -> i32 {
        i32::try_from(self.driver.id()).unwrap()
    }

    /// chromedriver's log (for failure messages).
    pub fn driver_log(&self) -> String {
        let text =
            std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default();
        let mut tail = text.len().saturating_sub(4000);
        while !text.is_char_boundary(tail) {
            tail += 1;
        }
        text[tail..].to_owned()
    }

    /// One WebDriver command: its `value`, or the error it answered.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, WdError> {
        let io = |e: std::io::Error| WdError {
            error: "io".into(),
            message: format!("{method} {path}: {e}"),
        };
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(io)?;
        s.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(io)?;
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\
             Content-Type: application/json; charset=utf-8\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        );
        s.write_all(head.as_bytes()).map_err(io)?;
        s.write_all(body.as_bytes()).map_err(io)?;
        let r = parse_response(&read_response(&mut s).map_err(io)?);
        let v: Value = serde_json::from_str(&r.body).map_err(|e| WdError {
            error: "bad response".into(),
            message: format!("{method} {path}: {e}: {} {}", r.status, r.body),
        })?;
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if let Some(error) = value.get("error").and_then(Value::as_str) {
            return Err(WdError {
                error: error.to_owned(),
                message: value["message"].as_str().unwrap_or("").to_owned(),
            });
        }
        Ok(value)
    }

    /// A command of this session that must succeed.
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let full = format!("/session/{}{path}", self.session);
        self.call(method, &full, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {}: {}", e.error, e.message))
    }

    /// Opens `url` and waits for its load.
    pub fn navigate(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    /// Types `text` on the keyboard into whatever has the focus (W3C key actions): a user
    /// without a mouse. [`TAB`] and [`ENTER`] are keys of their own.
    pub fn keys(&self, text: &str) {
        let mut actions = Vec::new();
        for c in text.chars() {
            actions.push(json!({"type": "keyDown", "value": c.to_string()}));
            actions.push(json!({"type": "keyUp", "value": c.to_string()}));
        }
        self.cmd(
            "POST",
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    /// The id, else the tag and class, of the focused element.
    pub fn focused(&self) -> String {
        self.execute(
            "var e = document.activeElement; return e ? (e.id || (e.tagName.toLowerCase() + '.' + e.className)) : '';",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_owned()
    }

    /// The current page's URL.
    pub fn url(&self) -> String {
        self.cmd("GET", "/url", None).as_str().unwrap().to_owned()
    }

    /// The current page's source (the DOM serialised).
    pub fn source(&self) -> String {
        self.cmd("GET", "/source", None)
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The first element matching `css`, or the WebDriver error (`no such element`).
    pub fn try_find(&self, css: &str) -> Result<Element<'_>, WdError> {
        let full = format!("/session/{}/element", self.session);
        let v = self.call(
            "POST",
            &full,
            Some(json!({"using": "css selector", "value": css})),
        )?;
        Ok(self.element(&v))
    }

    /// The first element matching `css`, which must exist.
    pub fn find(&self, css: &str) -> Element<'_> {
        self.try_find(css).unwrap_or_else(|e| {
            panic!(
                "no element `{css}` on {}: {}\n--- page ---\n{}",
                self.url(),
                e.message,
                self.source()
            )
        })
    }

    /// Every element matching `css`.
    pub fn find_all(&self, css: &str) -> Vec<Element<'_>> {
        let v = self.cmd(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| self.element(e))
            .collect()
    }

    fn element(&self, v: &Value) -> Element<'_> {
        Element {
            browser: self,
            id: v[ELEMENT_KEY].as_str().unwrap().to_owned(),
        }
    }

    /// Runs `script` (a function body; `arguments` are `args`) in the page; its return value.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Runs `script` asynchronously: it ends by calling `arguments[arguments.length - 1]`
    /// with its result.
    pub fn execute_async(&self, script: &str, args: Value) -> Value {
        self.cmd(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// The text content of the first element matching `css`, if there is one (read in one
    /// script, so a page replacing the element meanwhile is no stale reference).
    pub fn text_of(&self, css: &str) -> Option<String> {
        let v = self.execute(
            "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            json!([css]),
        );
        v.as_str().map(str::to_owned)
    }

    /// The cookies the browser holds for the current page.
    pub fn cookies(&self) -> Vec<Value> {
        self.cmd("GET", "/cookie", None)
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The browser console's entries so far (`level`, `message`, `source`, `timestamp`).
    pub fn console_log(&self) -> Vec<Value> {
        let fresh = self.cmd("POST", "/se/log", Some(json!({"type": "browser"})));
        let mut all = self.console.borrow_mut();
        all.extend(fresh.as_array().cloned().unwrap_or_default());
        all.clone()
    }

    /// A PNG of the viewport, written to `path` when given; its bytes.
    pub fn screenshot(&self, path: Option<&Path>) -> Vec<u8> {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64_decode(b64.as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
        if let Some(p) = path {
            std::fs::write(p, &png).unwrap();
        }
        png
    }

    /// A PNG of the whole page (the window made as tall as the document, at most 6000 px, for
    /// the shot, then put back), written to `path` when given; its bytes.
    pub fn full_page_screenshot(&self, path: Option<&Path>) -> Vec<u8> {
        let rect = self.cmd("GET", "/window/rect", None);
        let height = self.execute(
            "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)",
            json!([]),
        );
        let chrome = rect["height"].as_i64().unwrap()
            - self
                .execute("return window.innerHeight", json!([]))
                .as_i64()
                .unwrap();
        let tall =
            (height.as_i64().unwrap() + chrome).clamp(rect["height"].as_i64().unwrap(), 6000);
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": rect["width"], "height": tall})),
        );
        let png = self.screenshot(path);
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({"width": rect["width"], "height": rect["height"]})),
        );
        png
    }

    /// How many distinct colours a PNG has, counted up to `cap`: decoded by the browser itself,
    /// on a canvas in a tab of its own (the page under test keeps its state and its CSP).
    pub fn distinct_colours(&self, png: &[u8], cap: u64) -> u64 {
        let back = self.cmd("GET", "/window", None);
        let tab = self.cmd("POST", "/window/new", Some(json!({"type": "tab"})));
        self.cmd("POST", "/window", Some(json!({"handle": tab["handle"]})));
        self.navigate("about:blank");
        let n = self.execute_async(
            "const [src, cap, done] = arguments;
             const img = new Image();
             img.onerror = () => done(-1);
             img.onload = () => {
               const c = document.createElement('canvas');
               c.width = img.width; c.height = img.height;
               const g = c.getContext('2d');
               g.drawImage(img, 0, 0);
               const d = g.getImageData(0, 0, c.width, c.height).data;
               const seen = new Set();
               for (let i = 0; i < d.length && seen.size < cap; i += 4) {
                 seen.add(((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]) * 256 + d[i + 3]);
               }
               done(seen.size);
             };
             img.src = 'data:image/png;base64,' + src;",
            json!([base64_encode(png), cap]),
        );
        self.cmd("DELETE", "/window", None);
        self.cmd("POST", "/window", Some(json!({ "handle": back })));
        let n = n.as_i64().unwrap();
        assert!(n >= 0, "the browser could not decode the screenshot");
        u64::try_from(n).unwrap()
    }

    /// Waits (at most `limit`) until `cond` holds, polling; panics naming `what`, with the page's
    /// URL and source, when it never does.
    pub fn wait_until(&self, what: &str, limit: Duration, mut cond: impl FnMut(&Browser) -> bool) {
        let start = Instant::now();
        while !cond(self) {
            if start.elapsed() >= limit {
                panic!(
                    "timed out after {limit:?} waiting until {what}; at {}:\n{}",
                    self.url(),
                    self.source()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Element<'_> {
    fn path(&self, rest: &str) -> String {
        format!("/element/{}{rest}", self.id)
    }

    /// Its rendered text.
    pub fn text(&self) -> String {
        let v = self.browser.cmd("GET", &self.path("/text"), None);
        v.as_str().unwrap_or("").to_owned()
    }

    /// Its attribute `name`, if set.
    pub fn attr(&self, name: &str) -> Option<String> {
        let v = self
            .browser
            .cmd("GET", &self.path(&format!("/attribute/{name}")), None);
        v.as_str().map(str::to_owned)
    }

    /// Its DOM property `name`.
    pub fn prop(&self, name: &str) -> Value {
        self.browser
            .cmd("GET", &self.path(&format!("/property/{name}")), None)
    }

    /// Clicks it (a submit button submits its form).
    pub fn click(&self) {
        self.browser
            .cmd("POST", &self.path("/click"), Some(json!({})));
    }

    /// Types `text` into it.
    pub fn send_keys(&self, text: &str) {
        self.browser
            .cmd("POST", &self.path("/value"), Some(json!({ "text": text })));
    }

    /// Empties an input.
    pub fn clear(&self) {
        self.browser
            .cmd("POST", &self.path("/clear"), Some(json!({})));
    }

    /// The first element inside it matching `css`, if any.
    pub fn try_find(&self, css: &str) -> Option<Element<'_>> {
        let full = format!("/session/{}{}", self.browser.session, self.path("/element"));
        self.browser
            .call(
                "POST",
                &full,
                Some(json!({"using": "css selector", "value": css})),
            )
            .ok()
            .map(|v| self.browser.element(&v))
    }

    /// Every element inside it matching `css`.
    pub fn find_all(&self, css: &str) -> Vec<Element<'_>> {
        let v = self.browser.cmd(
            "POST",
            &self.path("/elements"),
            Some(json!({"using": "css selector", "value": css})),
        );
        v.as_array()
            .unwrap()
            .iter()
            .map(|e| self.browser.element(e))
            .collect()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.call("DELETE", &format!("/session/{}", self.session), None);
        }
        // Chromium runs in chromedriver's process group; its crash handlers detach from it but
        // carry the marked directory in their command line.
        let pgid = nix::unistd::Pid::from_raw(self.driver_pid());
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
        let _ = self.driver.wait();
        let marker = self.marker();
        let start = Instant::now();
        loop {
            let left = super::processes_with(&marker);
            if left.is_empty() || start.elapsed() > Duration::from_secs(20) {
                break;
            }
            for pid in left {
                let pid = nix::unistd::Pid::from_raw(pid);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One HTTP/1.1 response, read up to its `Content-Length` (chromedriver says `Connection:
/// close` but keeps the connection open) or, without one, to the end of the stream.
fn read_response(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut resp = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        if let Some(end) = resp.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&resp[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| {
                let v = l.strip_prefix("content-length:")?;
                v.trim().parse::<usize>().ok()
            });
            if let Some(n) = length {
                while resp.len() < end + 4 + n {
                    let got = s.read(&mut buf)?;
                    if got == 0 {
                        break;
                    }
                    resp.extend_from_slice(&buf[..got]);
                }
                return Ok(resp);
            }
        }
        let got = s.read(&mut buf)?;
        if got == 0 {
            return Ok(resp);
        }
        resp.extend_from_slice(&buf[..got]);
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The Tab key, for [`Browser::keys`].
pub const TAB: char = '\u{E004}';
/// The Enter key, for [`Browser::keys`].
pub const ENTER: char = '\u{E007}';

/// Decodes standard base64 (padding and whitespace ignored).
pub fn base64_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let Some(v) = B64.iter().position(|&b| b == c) else {
            assert!(
                c == b'=' || c.is_ascii_whitespace(),
                "not base64: byte {c:#x}"
            );
            continue;
        };
        acc = (acc << 6) | u32::try_from(v).unwrap();
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from((acc >> bits) & 0xff).unwrap());
        }
    }
    out
}

/// Encodes standard base64, padded.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(
                    B64[usize::try_from((n >> (18 - 6 * i)) & 63).unwrap()],
                ));
            } else {
                out.push('=');
            }
        }
    }
    out
}
