//! A running round's log as server-sent events for the job page's script: the API's followed
//! log ([`crate::service::api::round_logs`] with `follow`), cut into whole lines, each line
//! made safe ([`super::text`]: no control character reaches the page, an OSC escape is
//! text), sent as `event: log` whose `data` is a JSON string and whose `id` is the count of
//! bytes of the log sent so far. A browser that reconnects sends that count back
//! (`Last-Event-ID`) and gets only what follows. `event: end` says the round ended (the
//! script then stops listening); `event: error` carries why the log cannot be followed. A
//! comment every [`KEEP_ALIVE`] keeps proxies from closing a quiet stream.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;

use super::error::UiError;
use super::signin::viewer;
use crate::service::Service;
use crate::service::api::{LogsQuery, round_logs};
use crate::util::terminal;

/// How often a quiet stream gets a comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The longest line kept whole; the rest of it is counted in a marker.
const LINE_MAX: usize = 64 * 1024;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LiveQuery {
    attempt: Option<u32>,
    stream: Option<String>,
}

/// Whole lines out of chunks of bytes: what is complete, made safe, and how many raw bytes
/// that was.
#[derive(Debug, Default)]
pub struct Lines {
    pending: Vec<u8>,
}

impl Lines {
    /// Takes `chunk`; returns the text of the lines it completes (each ended by `\n`) and the
    /// raw bytes they used.
    pub fn push(&mut self, chunk: &[u8]) -> (String, usize) {
        self.pending.extend_from_slice(chunk);
        let Some(end) = self.pending.iter().rposition(|&b| b == b'\n') else {
            if self.pending.len() > LINE_MAX {
                return self.flush();
            }
            return (String::new(), 0);
        };
        let done: Vec<u8> = self.pending.drain(..=end).collect();
        (shown(&done), done.len())
    }

    /// What is left (a last line without its newline).
    pub fn flush(&mut self) -> (String, usize) {
        let done = std::mem::take(&mut self.pending);
        if done.is_empty() {
            return (String::new(), 0);
        }
        (shown(&done), done.len())
    }
}

fn shown(bytes: &[u8]) -> String {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut out = String::new();
    for l in body.split(|&b| b == b'\n') {
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let kept = l.len().min(LINE_MAX);
        out.push_str(&terminal::output_line(
            &l[..kept],
            l.len() - kept,
            LINE_MAX * 4,
        ));
        out.push('\n');
    }
    out
}

/// Where a followed log is: the API's body, the line cut, the bytes still to skip (what a
/// reconnecting browser has) and the bytes sent so far.
struct Follow<S> {
    chunks: S,
    lines: Lines,
    skip: usize,
    sent: usize,
    done: bool,
}

/// One event in the stream's wire form.
fn event(kind: &str, id: Option<usize>, data: &str) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_else(|_| "\"\"".into());
    let id = id.map(|n| format!("id: {n}\n")).unwrap_or_default();
    Bytes::from(format!("event: {kind}\n{id}data: {data}\n\n"))
}

/// `GET /ui/jobs/{id}/rounds/{round}/live?attempt=&stream=`.
pub(super) async fn stream(
    State(svc): State<Arc<Service>>,
    headers: HeaderMap,
    Path((id, round)): Path<(String, u32)>,
    Query(q): Query<LiveQuery>,
) -> Result<Response, UiError> {
    viewer(&svc, &headers, &format!("/ui/jobs/{id}"))?;
    let id = crate::service::api::resolve(&svc, &id)?;
    // What a reconnecting browser already has.
    let skip: usize = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let answer = round_logs(
        State(svc),
        Path((id, round)),
        Ok(Query(LogsQuery {
            attempt: q.attempt,
            stream: q.stream,
            follow: Some(true),
        })),
    )
    .await;
    let body = match answer {
        Ok(r) if r.status() == StatusCode::OK => {
            let st = Follow {
                chunks: r.into_body().into_data_stream(),
                lines: Lines::default(),
                skip,
                sent: skip,
                done: false,
            };
            let s = futures_util::stream::unfold(st, |mut st| async move {
                if st.done {
                    return None;
                }
                loop {
                    match tokio::time::timeout(KEEP_ALIVE, st.chunks.next()).await {
                        Err(_) => return Some((Bytes::from_static(b": keep-alive\n\n"), st)),
                        Ok(Some(Ok(mut chunk))) => {
                            if st.skip > 0 {
                                let n = st.skip.min(chunk.len());
                                st.skip -= n;
                                chunk = chunk.slice(n..);
                            }
                            let (text, used) = st.lines.push(&chunk);
                            if used > 0 {
                                st.sent += used;
                                return Some((event("log", Some(st.sent), &text), st));
                            }
                        }
                        Ok(Some(Err(e))) => {
                            st.done = true;
                            return Some((event("error", None, &e.to_string()), st));
                        }
                        Ok(None) => {
                            st.done = true;
                            let (text, used) = st.lines.flush();
                            let mut out = Vec::new();
                            if used > 0 {
                                st.sent += used;
                                out.extend_from_slice(&event("log", Some(st.sent), &text));
                            }
                            out.extend_from_slice(&event("end", Some(st.sent), ""));
                            return Some((Bytes::from(out), st));
                        }
                    }
                }
            });
            Body::from_stream(s.map(Ok::<_, std::io::Error>))
        }
        Ok(r) => {
            // The API's refusal says why (another host of the fleet runs the round, say).
            let status = r.status();
            let body = axum::body::to_bytes(r.into_body(), 64 * 1024)
                .await
                .unwrap_or_default();
            let message = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or_else(|| status.to_string());
            let why = format!(
                "the log cannot be followed here: {}",
                super::text::line(&message)
            );
            Body::from(event("error", None, &why))
        }
        Err(e) => Body::from(event("error", None, &super::text::line(&e.message))),
    };
    let mut resp = body.into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_lines_made_safe_with_their_byte_counts() {
        let mut l = Lines::default();
        assert_eq!(l.push(b"tick 1\ntick"), ("tick 1\n".to_owned(), 7));
        assert_eq!(
            l.push(b" 2\n\x1b]52;c;aGk=\x07\n"),
            ("tick 2\n\\x1b]52;c;aGk=\\x07\n".to_owned(), 20)
        );
        assert_eq!(l.push(b"\n"), ("\n".to_owned(), 1));
        assert_eq!(l.push(b"last"), (String::new(), 0));
        assert_eq!(l.flush(), ("last\n".to_owned(), 4));
        assert_eq!(l.flush(), (String::new(), 0));
    }

    #[test]
    fn events_carry_json_data_on_one_line() {
        let e = event("log", Some(9), "a\n<b>\u{2028}");
        let s = std::str::from_utf8(&e).unwrap();
        assert_eq!(s.matches('\n').count(), 4);
        assert!(s.starts_with("event: log\nid: 9\ndata: \"a\\n<b>"));
    }
}
