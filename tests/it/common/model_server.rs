//! A scripted model server for end-to-end tests of real agent CLIs: it plays the model (OpenAI
//! Responses, Anthropic Messages or OpenAI Chat Completions) on `127.0.0.1:0`, answers each model
//! request with the next [`Turn`] of a script (a shell tool call or a final message, with the
//! usage the test chose) and records every request, headers included.
//!
//! Past the end of the script a model request gets the script's last text turn again; a script
//! with no text turn answers it with a 500. Requests that are not model requests take no turn:
//! `HEAD`/`GET` anything gets an empty 200, `POST /v1/messages/count_tokens` a token count, a
//! Messages request without `tools` (a side request such as a title) the text `ok`, a WebSocket
//! upgrade and unknown paths a 404; a Chat server answers `POST /v1/completions` and `POST
//! /v1/embeddings` with [`SIDE_TOKENS`] tokens of usage each (in their APIs' shapes). All are
//! recorded (`turn: None`).
//!
//! # What the real CLIs send (found with the versions pinned in `.ci/agent-clis`)
//!
//! **codex 0.169.0** (`codex exec --json`, the native musl binary; no Node needed):
//! - Pointed at the server with a custom provider: `-c model_provider=mock -c
//!   model_providers.mock.base_url="http://127.0.0.1:PORT/v1" -c model_providers.mock.env_key=VAR
//!   -c model_providers.mock.wire_api="responses"` (and `.name`). `env_key` works with any
//!   variable name (the test uses `RALPH_TEST_MODEL_KEY`; `OPENAI_API_KEY` unset): every request
//!   carries `Authorization: Bearer <$VAR>`.
//! - Requests: exactly one `POST /v1/responses` per model turn, `stream: true`, `Accept:
//!   text/event-stream`, `model` as given by `-m`; with a custom provider no WebSocket attempt and
//!   no side requests (no `/v1/models`). Other headers: `originator: codex_exec`, `user-agent:
//!   codex_exec/0.169.0 (...)`, `session-id`, `thread-id`, `x-client-request-id`,
//!   `x-codex-window-id`, `x-codex-beta-features`, `x-codex-turn-metadata` (JSON: ids, sandbox
//!   mode, model). The tool is the function `exec_command {"cmd"}` (run as `/bin/bash -lc`); the
//!   next request's `input` holds a `function_call_output` with the call's `call_id`.
//! - `--json` stdout: `thread.started`, an `item.completed` of type `error` warning "Model
//!   metadata for `gpt-5` not found" (harmless), `turn.started`, `command_execution` items,
//!   `agent_message`, then `turn.completed {usage: {input_tokens, cached_input_tokens,
//!   cache_write_input_tokens, output_tokens, reasoning_output_tokens}}`: the sums over all the
//!   turn's requests (`input_tokens` includes the cached ones).
//! - Offline: by default it also resolves `ab.chatgpt.com` (analytics), `github.com`,
//!   `api.github.com` and `chatgpt.com` (curated plugin sync) — seen with strace; `-c
//!   analytics.enabled=false -c features.plugins=false` leaves only the model server. It needs a
//!   writable `CODEX_HOME` (default `$HOME/.codex`); under a temporary dir it warns "could not
//!   create PATH aliases" on stderr and goes on. `--dangerously-bypass-approvals-and-sandbox`
//!   runs the tool without codex's own sandbox.
//!
//! **claude 2.1.328** (`claude -p --output-format stream-json --verbose
//! --dangerously-skip-permissions --model M`, prompt on stdin; the npm package's postinstall puts
//! a native (Bun, glibc) binary at `@anthropic-ai/claude-code-linux-x64/claude`, also copied
//! over `bin/claude.exe`; no Node needed at run time):
//! - Env: `ANTHROPIC_BASE_URL=http://127.0.0.1:PORT` (no `/v1`), `ANTHROPIC_API_KEY` (no login
//!   needed; the init line says `apiKeySource: ANTHROPIC_API_KEY`), a writable `HOME`. As root it
//!   refuses `--dangerously-skip-permissions` ("cannot be used with root/sudo privileges") unless
//!   `IS_SANDBOX=1` (or `CLAUDE_CODE_BUBBLEWRAP`) is set.
//! - Requests: first `HEAD /api/hello` (a connectivity probe, no key), then exactly one `POST
//!   /v1/messages?beta=true` per model turn, `stream: true`, `max_tokens: 32000`, 12 tools, with
//!   `x-api-key: <key>` (no `Authorization`), `anthropic-version: 2023-06-01`, `anthropic-beta:
//!   claude-code-20250219,...`, `x-app: cli`, `user-agent: claude-cli/2.1.328 (external,
//!   sdk-cli)`, `x-claude-code-session-id`. No title/summary side request, no count_tokens in
//!   `-p` mode. The tool is `Bash {"command"}`; the next request's last message holds a
//!   `tool_result` with the `tool_use_id`.
//! - Offline: by default it also resolves `api.anthropic.com` several times (seen with strace);
//!   `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` removes those lookups and the `HEAD /api/hello`
//!   probe, leaving only the `POST /v1/messages` requests.
//! - stream-json stdout: `system/init`, `assistant` and `user` (tool_result) lines, then `result
//!   {result, usage: {input_tokens, cache_read_input_tokens, cache_creation_input_tokens,
//!   output_tokens, ...}, total_cost_usd, num_turns}`: sums over the requests, `input_tokens`
//!   being the uncached part as in the Messages API.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub use super::model_api::{Reply, Turn, Usage};
use super::model_api::{chat, messages, responses};

/// Which model API the server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Responses: `POST /v1/responses` (codex).
    Responses,
    /// Anthropic Messages: `POST /v1/messages` (claude).
    Messages,
    /// OpenAI Chat Completions: `POST /v1/chat/completions`.
    Chat,
}

/// Tokens a Chat server's answer to `POST /v1/completions` or `/v1/embeddings` reports
/// (completions: half prompt, half completion; embeddings: all prompt).
pub const SIDE_TOKENS: u64 = 1000;

/// The turns answered in order, one per model request (side requests take none).
pub type Script = Vec<Turn>;

/// One request the server received, side requests and refused ones included.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string, empty when there was none.
    pub query: String,
    /// Header names are lower case, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body as JSON; a non-JSON body is a JSON string, an empty one `null`.
    pub body: Value,
    /// The index of the script turn this request was answered with (`None`: a side request,
    /// or answered with an error).
    pub turn: Option<usize>,
}

impl RecordedRequest {
    /// The first value of a header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// How the server behaves besides its script.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Answer Chat Completions with one JSON body even when the request asks for a stream (a
    /// server without streaming).
    pub json_only: bool,
    /// Past the end of the script, answer with its last turn again, whatever it is (a model
    /// that never stops calling tools).
    pub repeat_last: bool,
}

struct Shared {
    options: Options,
    api: Api,
    script: Script,
    next: usize,
    requests: Vec<RecordedRequest>,
}

/// A running server; stopped when dropped.
pub struct ModelServer {
    addr: SocketAddr,
    shared: Arc<Mutex<Shared>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for ModelServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelServer")
            .field("addr", &self.addr)
            .finish()
    }
}

impl ModelServer {
    /// Listens on `127.0.0.1:0` and serves from a runtime on its own thread, so sync tests can
    /// use it. The port is bound before this returns.
    pub fn start(api: Api, script: Script) -> Self {
        Self::start_with(api, script, Options::default())
    }

    /// [`Self::start`] with [`Options`].
    pub fn start_with(api: Api, script: Script, options: Options) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Mutex::new(Shared {
            options,
            api,
            script,
            next: 0,
            requests: Vec::new(),
        }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .fallback(handle)
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    r = axum::serve(listener, app) => r.unwrap(),
                    _ = stopped => {}
                }
            });
            // Dropping the runtime here cancels the connections still open.
        });
        Self {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT` (no path: append `/v1` where a client wants it).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.lock().unwrap().requests.clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.lock().unwrap().requests.len()
    }

    /// The requests answered with a script turn, in order.
    pub fn turn_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.turn.is_some())
            .collect()
    }

    /// A one-line summary of each request (`METHOD path?query turn=N`), for failure messages.
    pub fn summary(&self) -> String {
        self.requests()
            .iter()
            .map(|r| {
                let q = if r.query.is_empty() {
                    String::new()
                } else {
                    format!("?{}", r.query)
                };
                format!("{} {}{q} turn={:?}\n", r.method, r.path, r.turn)
            })
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What kind of answer a request gets.
enum Kind {
    /// A model request: takes the next script turn.
    Turn {
        stream: bool,
        include_usage: bool,
    },
    /// A Messages request without tools (claude's side requests): a short text, no turn.
    Side {
        stream: bool,
    },
    CountTokens,
    /// Legacy Completions or Embeddings on a Chat server: [`SIDE_TOKENS`] of usage, no turn.
    Completions {
        embeddings: bool,
    },
    /// The WebSocket upgrade codex tries before `POST /v1/responses`: refused.
    Upgrade,
    /// A `HEAD` or `GET` (claude's `HEAD /api/hello` connectivity check): 200, empty.
    Probe,
    /// Anything else (unknown paths): 404, recorded.
    Other,
}

fn classify(api: Api, method: &Method, path: &str, headers: &HeaderMap, body: &Value) -> Kind {
    let stream = body["stream"].as_bool().unwrap_or(false);
    if headers.contains_key(header::UPGRADE) {
        return Kind::Upgrade;
    }
    if method == Method::HEAD || method == Method::GET {
        return Kind::Probe;
    }
    if method != Method::POST {
        return Kind::Other;
    }
    let turn = Kind::Turn {
        stream,
        include_usage: body["stream_options"]["include_usage"]
            .as_bool()
            .unwrap_or(false),
    };
    match api {
        Api::Responses if path.ends_with("/responses") => turn,
        Api::Chat if path.ends_with("/chat/completions") => turn,
        Api::Chat if path.ends_with("/completions") => Kind::Completions { embeddings: false },
        Api::Chat if path.ends_with("/embeddings") => Kind::Completions { embeddings: true },
        Api::Messages if path.ends_with("/messages/count_tokens") => Kind::CountTokens,
        Api::Messages if path.ends_with("/messages") => {
            let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
            if has_tools {
                turn
            } else {
                Kind::Side { stream }
            }
        }
        _ => Kind::Other,
    }
}

async fn handle(
    State(shared): State<Arc<Mutex<Shared>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()))
    };
    let path = uri.path().to_owned();
    let mut shared = shared.lock().unwrap();
    let api = shared.api;
    let kind = classify(api, &method, &path, &headers, &body);
    let model = body["model"].as_str().unwrap_or("mock-model").to_owned();
    let n = shared.requests.len();
    let mut turn_index = None;
    let response = match kind {
        Kind::Turn {
            stream,
            include_usage,
        } => match next_turn(&mut shared) {
            Some((i, turn)) => {
                turn_index = Some(i);
                if let Reply::Status {
                    status,
                    retry_after,
                } = turn.reply
                {
                    let mut r = error(
                        StatusCode::from_u16(status).unwrap(),
                        "scripted error status",
                    );
                    if let Some(s) = retry_after {
                        r.headers_mut()
                            .insert(header::RETRY_AFTER, s.to_string().parse().unwrap());
                    }
                    r
                } else {
                    let stream = stream && !shared.options.json_only;
                    let (text, content_type) = match api {
                        Api::Responses => (responses(&turn, &model, n), "text/event-stream"),
                        Api::Messages => messages(&turn, &model, n, stream),
                        Api::Chat => chat(&turn, &model, n, stream, include_usage),
                    };
                    ([(header::CONTENT_TYPE, content_type)], text).into_response()
                }
            }
            None => error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the script has no more turns",
            ),
        },
        Kind::Side { stream } => {
            let turn = Turn::text("ok", Usage::new(1, 0, 1, 0));
            let (text, content_type) = messages(&turn, &model, n, stream);
            ([(header::CONTENT_TYPE, content_type)], text).into_response()
        }
        Kind::CountTokens => axum::Json(json!({"input_tokens": 1})).into_response(),
        Kind::Completions { embeddings: true } => axum::Json(json!({
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}],
            "usage": {"prompt_tokens": SIDE_TOKENS, "total_tokens": SIDE_TOKENS},
        }))
        .into_response(),
        Kind::Completions { embeddings: false } => axum::Json(json!({
            "object": "text_completion", "model": model,
            "choices": [{"text": "ok", "index": 0, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": SIDE_TOKENS / 2, "completion_tokens": SIDE_TOKENS / 2,
                      "total_tokens": SIDE_TOKENS},
        }))
        .into_response(),
        Kind::Upgrade => error(StatusCode::NOT_FOUND, "no websockets here"),
        Kind::Probe => StatusCode::OK.into_response(),
        Kind::Other => error(StatusCode::NOT_FOUND, "not found"),
    };
    shared.requests.push(RecordedRequest {
        method: method.to_string(),
        path,
        query: uri.query().unwrap_or("").to_owned(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body,
        turn: turn_index,
    });
    response
}

/// The next script turn; past the end, the script's last text turn again (so a client that
/// asks once more gets a final answer); `None` (answered 500) when the script has no text turn.
fn next_turn(shared: &mut Shared) -> Option<(usize, Turn)> {
    let i = if shared.next < shared.script.len() {
        shared.next += 1;
        shared.next - 1
    } else if shared.options.repeat_last {
        shared.script.len().checked_sub(1)?
    } else {
        shared
            .script
            .iter()
            .rposition(|t| matches!(t.reply, Reply::Text(_)))?
    };
    Some((i, shared.script[i].clone()))
}

fn error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"type": "error", "error": {"type": "mock_error", "message": message}})),
    )
        .into_response()
}
