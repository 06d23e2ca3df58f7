//! The client of `ralph serve`'s API, used by `ralph submit/jobs/show/logs/cancel/resume/wait`
//! and `ralph token`: `http://` or `https://` (a CA file for a private CA, a client certificate
//! for mutual TLS: [`TlsOptions`]).

use futures_util::StreamExt;
use serde_json::Value;

use crate::store::Event;

/// Default server address.
pub const DEFAULT_SERVER: &str = "http://127.0.0.1:7979";

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server could not be reached.
    #[error(
        "cannot reach the ralph server at {server}: {message} (is `ralph serve` running? see --server / RALPH_SERVER)"
    )]
    Unreachable {
        /// The server address.
        server: String,
        /// The transport error.
        message: String,
    },
    /// The token was missing or wrong.
    #[error("the server refused the token: {message} (see --token-file / RALPH_TOKEN)")]
    Unauthorized {
        /// The server's message.
        message: String,
    },
    /// The server answered with an error.
    #[error("{message}{}{}", field.as_ref().map(|f| format!(" (field `{f}`)")).unwrap_or_default(), rule.as_ref().map(|r| format!(" [rule `{r}`]")).unwrap_or_default())]
    Api {
        /// HTTP status.
        status: u16,
        /// Error code.
        code: String,
        /// Message.
        message: String,
        /// Offending field.
        field: Option<String>,
        /// Configuration rule.
        rule: Option<String>,
    },
    /// The answer could not be read.
    #[error("unreadable answer from the server: {0}")]
    Decode(String),
    /// The TLS handshake with the server failed.
    #[error("failed to talk TLS with the ralph server at {server}: {hint} ({message})")]
    Tls {
        /// The server address.
        server: String,
        /// The transport error.
        message: String,
        /// What to do about it.
        hint: &'static str,
    },
    /// A directory could not be packed for an upload.
    #[error("failed to upload `{dir}`: {message}")]
    Pack {
        /// The directory.
        dir: String,
        /// Why.
        message: String,
    },
    /// A CA file or client certificate could not be used.
    #[error("failed to read {what} `{path}`: {message}")]
    TlsFile {
        /// Which file (`--ca-file`, `--client-cert`, `--client-key`).
        what: &'static str,
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// How the client checks the server, and proves who it is, over `https://`.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// Also trust the CA certificates in this PEM file (a private CA); a server presenting one
    /// of them exactly is trusted too (a self-signed certificate pinned).
    pub ca_file: Option<std::path::PathBuf>,
    /// The client certificate (PEM) for mutual TLS.
    pub client_cert: Option<std::path::PathBuf>,
    /// Its private key (PEM); absent: the key is in `client_cert`'s file.
    pub client_key: Option<std::path::PathBuf>,
}

/// A hint for a TLS failure, from the transport error's text.
fn tls_hint(message: &str) -> Option<&'static str> {
    if message.contains("UnknownIssuer") || message.contains("unknown issuer") {
        Some(
            "the server's certificate is not signed by a CA this client trusts: give the CA's certificate (or the server's own certificate, when it is self-signed) with --ca-file / RALPH_CA_FILE",
        )
    } else if message.contains("CaUsedAsEndEntity") {
        Some(
            "the server presents a self-signed (CA) certificate that is not in --ca-file / RALPH_CA_FILE: give that very certificate (it is then pinned), or the certificate of the CA that signed it",
        )
    } else if message.contains("Expired")
        || message.contains("certificate expired")
        || message.contains("NotValidYet")
        || message.contains("not valid yet")
    {
        Some(
            "the server's certificate is outside its validity dates: renew it on the server (then `systemctl reload ralph`), or check this machine's clock",
        )
    } else if message.contains("NotValidForName") || message.contains("not valid for name") {
        Some(
            "the server's certificate does not name the host in the server address: use the name (or IP) the certificate was made for",
        )
    } else if message.contains("CertificateRequired") || message.contains("certificate required") {
        Some(
            "the server requires a client certificate: give it with --client-cert / RALPH_CLIENT_CERT and --client-key / RALPH_CLIENT_KEY",
        )
    } else if message.contains("InvalidContentType") || message.contains("corrupt message") {
        Some("the server does not speak TLS there: use an http:// server address")
    } else {
        None
    }
}

/// Bytes of one chunk of an upload's stream.
const CHUNK: usize = 256 * 1024;

/// The writer [`crate::provision::untar::pack`] writes an upload into: chunks sent to the
/// request's body stream.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<bytes::Bytes>>,
    buf: Vec<u8>,
    /// The request stopped reading the stream.
    closed: bool,
}

impl ChunkWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = bytes::Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            self.closed = true;
            std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "the server stopped reading the upload",
            )
        })
    }
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// An API client.
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of the server at `base` (e.g. `http://127.0.0.1:7979`).
    pub fn new(base: &str, token: &str) -> Result<Self, ClientError> {
        Self::with_tls(base, token, &TlsOptions::default())
    }

    /// A client of the server at `base` (`http://` or `https://`) with `tls`.
    pub fn with_tls(base: &str, token: &str, tls: &TlsOptions) -> Result<Self, ClientError> {
        let mut builder =
            reqwest::Client::builder().connect_timeout(std::time::Duration::from_secs(5));
        if tls.ca_file.is_some() || tls.client_cert.is_some() {
            let client = tls
                .client_cert
                .as_deref()
                .map(|c| (c, tls.client_key.as_deref()));
            let config =
                crate::client_tls::client_config(tls.ca_file.as_deref(), client).map_err(|e| {
                    ClientError::TlsFile {
                        what: e.what,
                        path: e.path,
                        message: e.message,
                    }
                })?;
            builder = builder.use_preconfigured_tls(config);
        }
        let http = builder.build().map_err(|e| ClientError::Unreachable {
            server: base.to_owned(),
            message: e.to_string(),
        })?;
        Ok(Self {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http,
        })
    }

    fn unreachable(&self, e: &reqwest::Error) -> ClientError {
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg = format!("{msg}: {s}");
            src = s.source();
        }
        if let Some(hint) = tls_hint(&msg) {
            return ClientError::Tls {
                server: self.base.clone(),
                message: msg,
                hint,
            };
        }
        ClientError::Unreachable {
            server: self.base.clone(),
            message: msg,
        }
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, ClientError> {
        let resp = req
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        let e = &body["error"];
        let message = e["message"].as_str().unwrap_or("no message").to_owned();
        if status.as_u16() == 401 {
            return Err(ClientError::Unauthorized { message });
        }
        Err(ClientError::Api {
            status: status.as_u16(),
            code: e["code"].as_str().unwrap_or("unknown").to_owned(),
            message,
            field: e["field"].as_str().map(str::to_owned),
            rule: e["rule"].as_str().map(str::to_owned),
        })
    }

    async fn json(&self, req: reqwest::RequestBuilder) -> Result<Value, ClientError> {
        self.send(req)
            .await?
            .json()
            .await
            .map_err(|e| ClientError::Decode(e.to_string()))
    }

    fn url(&self, path: &str) -> String {
        format!("{}/v1{path}", self.base)
    }

    /// Submits a JSON job file (`{"job": [...]}`); returns the created jobs.
    pub async fn submit(&self, body: &Value) -> Result<Value, ClientError> {
        self.json(self.http.post(self.url("/jobs")).json(body))
            .await
    }

    /// Uploads the contents of `dir` as a tar stream ([`crate::provision::untar::pack`], on a
    /// thread of its own, streamed: never held whole in memory); returns the server's answer
    /// (`{"upload": id, "files": n, "bytes": n}`).
    pub async fn upload(&self, dir: &std::path::Path) -> Result<Value, ClientError> {
        let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(8);
        let packed_dir = dir.to_path_buf();
        let packer = std::thread::spawn(move || {
            let mut writer = ChunkWriter {
                tx,
                buf: Vec::with_capacity(CHUNK),
                closed: false,
            };
            let packed = crate::provision::untar::pack(&packed_dir, &mut writer);
            if let Err(e) = &packed {
                // The request must not end as if the stream were complete.
                let _ = writer
                    .tx
                    .blocking_send(Err(std::io::Error::other(e.to_string())));
            }
            // A pack cut short because the request ended is not a failure of its own.
            packed.map_err(|e| (!writer.closed).then_some(e))
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let req = self
            .http
            .post(self.url("/uploads"))
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(reqwest::Body::wrap_stream(stream));
        let answer = self.json(req).await;
        let packed = packer.join().map_err(|_| ClientError::Pack {
            dir: dir.display().to_string(),
            message: "the packing thread panicked".into(),
        })?;
        match packed {
            // A pack that failed here is the cause, whatever the server made of the cut stream.
            Err(Some(e)) => Err(ClientError::Pack {
                dir: dir.display().to_string(),
                message: e.to_string(),
            }),
            _ => answer,
        }
    }

    /// Lists jobs (`query` is `[("state", "running"), ...]`).
    pub async fn list(&self, query: &[(&str, String)]) -> Result<Value, ClientError> {
        self.json(self.http.get(self.url("/jobs")).query(query))
            .await
    }

    /// A batch's summary (`GET /v1/batches/{id}`).
    pub async fn batch(&self, id: &str) -> Result<Value, ClientError> {
        self.json(self.http.get(self.url(&format!("/batches/{id}"))))
            .await
    }

    /// Retries a batch's jobs that ended with one of `outcomes` (empty: all but complete).
    pub async fn batch_retry(&self, id: &str, outcomes: &[String]) -> Result<Value, ClientError> {
        let req = self.http.post(self.url(&format!("/batches/{id}/retry")));
        let req = if outcomes.is_empty() {
            req
        } else {
            req.json(&serde_json::json!({ "outcome": outcomes }))
        };
        self.json(req).await
    }

    /// One job.
    pub async fn job(&self, id: &str) -> Result<Value, ClientError> {
        self.json(self.http.get(self.url(&format!("/jobs/{id}"))))
            .await
    }

    /// The ceilings a submission by this token is judged against (`GET /v1/limits`); `None`
    /// from a server older than that endpoint (404).
    pub async fn limits(&self) -> Result<Option<Value>, ClientError> {
        match self.json(self.http.get(self.url("/limits"))).await {
            Ok(v) => Ok(Some(v)),
            Err(ClientError::Api { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A job's artifact files, on whichever host of a fleet they are.
    pub async fn artifacts(&self, id: &str) -> Result<Value, ClientError> {
        self.json(self.http.get(self.url(&format!("/jobs/{id}/artifacts"))))
            .await
    }

    /// A provisioned job's `result.patch`.
    pub async fn patch(&self, id: &str) -> Result<Vec<u8>, ClientError> {
        let bytes = self
            .send(self.http.get(self.url(&format!("/jobs/{id}/patch"))))
            .await?
            .bytes()
            .await
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(bytes.to_vec())
    }

    /// Cancels a job.
    pub async fn cancel(&self, id: &str) -> Result<Value, ClientError> {
        self.json(self.http.post(self.url(&format!("/jobs/{id}/cancel"))))
            .await
    }

    /// The server's tokens (admin).
    pub async fn tokens(&self) -> Result<Value, ClientError> {
        self.json(self.http.get(self.url("/tokens"))).await
    }

    /// Makes a token (admin); the answer holds it, shown this once.
    pub async fn token_create(&self, name: &str, scopes: &[String]) -> Result<Value, ClientError> {
        let body = serde_json::json!({"name": name, "scopes": scopes});
        self.json(self.http.post(self.url("/tokens")).json(&body))
            .await
    }

    /// Revokes a token (admin).
    pub async fn token_revoke(&self, name: &str) -> Result<Value, ClientError> {
        self.json(self.http.delete(self.url(&format!("/tokens/{name}"))))
            .await
    }

    /// Resumes a job, raising `caps` (none: with its remaining budget).
    pub async fn resume(
        &self,
        id: &str,
        caps: &crate::job::RaisedCaps,
    ) -> Result<Value, ClientError> {
        let req = self.http.post(self.url(&format!("/jobs/{id}/resume")));
        let req = if caps.is_empty() { req } else { req.json(caps) };
        self.json(req).await
    }

    /// A round's captured output, its bytes as captured.
    pub async fn logs(
        &self,
        id: &str,
        round: u32,
        attempt: u32,
        stream: &str,
    ) -> Result<Vec<u8>, ClientError> {
        let req = self
            .http
            .get(self.url(&format!("/jobs/{id}/rounds/{round}/logs")))
            .query(&[
                ("attempt", attempt.to_string()),
                ("stream", stream.to_owned()),
            ]);
        let bytes = self
            .send(req)
            .await?
            .bytes()
            .await
            .map_err(|e| ClientError::Decode(e.to_string()))?;
        Ok(bytes.to_vec())
    }

    /// A round's captured output followed as it grows: `each` sees every chunk as it arrives;
    /// returns when that attempt (or verify run) has ended. An attempt not started yet is
    /// waited for; one the job ended without is an `Api` error (404).
    pub async fn logs_follow(
        &self,
        id: &str,
        round: u32,
        attempt: u32,
        stream: &str,
        mut each: impl FnMut(&[u8]),
    ) -> Result<(), ClientError> {
        let req = self
            .http
            .get(self.url(&format!("/jobs/{id}/rounds/{round}/logs")))
            .query(&[
                ("attempt", attempt.to_string()),
                ("stream", stream.to_owned()),
                ("follow", "true".to_owned()),
            ]);
        let mut body = self.send(req).await?.bytes_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(&e))?;
            each(&chunk);
        }
        Ok(())
    }

    /// The journal of a job, optionally following it until it finishes; `each` sees every event.
    pub async fn events(
        &self,
        id: &str,
        after: u64,
        follow: bool,
        mut each: impl FnMut(Event),
    ) -> Result<(), ClientError> {
        let req = self
            .http
            .get(self.url(&format!("/jobs/{id}/events")))
            .query(&[("after", after.to_string()), ("follow", follow.to_string())]);
        let resp = self.send(req).await?;
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.unreachable(&e))?;
            buf.extend_from_slice(&chunk);
            while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let ev: Event = serde_json::from_slice(&line)
                    .map_err(|e| ClientError::Decode(e.to_string()))?;
                each(ev);
            }
        }
        Ok(())
    }
}
