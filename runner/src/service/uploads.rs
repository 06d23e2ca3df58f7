//! The service's side of uploads (SPEC §11, `ralph submit --upload DIR`): `POST /v1/uploads`
//! streams its body (a tar stream) straight into [`untar::unpack`] on a blocking thread, into
//! `<state-dir>/uploads/<id>.partial/tree`, renamed to `<id>` once complete (a refused upload
//! leaves nothing); the check that a job's `upload` names a complete upload; and the removal of
//! uploads no queued or running job names, once `[provision] upload_retention` has passed since
//! they were received or last named by a submitted job.

use std::collections::HashSet;
use std::io::{self, Read};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::json;

use super::Service;
use super::api::{ApiError, Svc};
use super::config::Limits;
use crate::job::WorkspaceSource;
use crate::provision::config::DEFAULT_UPLOAD_RETENTION;
use crate::provision::untar::{self, Rule, UnpackLimits, UnpackSummary, UntarError};
use crate::provision::upload;
use crate::store::JobState;

/// The suffix of an upload still being received.
const PARTIAL: &str = ".partial";

/// How much of a body is still read (and dropped) after its upload was refused or ended, so
/// that a client still writing it can read the answer.
const DRAIN_MAX: usize = 16 << 20;

/// Uploads this process is receiving (their `.partial` directories are not swept).
static RECEIVING: Mutex<Option<HashSet<String>>> = Mutex::new(None);

fn receiving(id: &str, add: bool) {
    let mut set = RECEIVING.lock().unwrap_or_else(|e| e.into_inner());
    let set = set.get_or_insert_with(HashSet::new);
    if add {
        set.insert(id.to_owned());
    } else {
        set.remove(id);
    }
}

fn is_receiving(id: &str) -> bool {
    RECEIVING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(id))
}

fn internal(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
}

/// The short name of an unpack rule, as the JSON error's `rule` gives it.
fn rule_name(rule: &Rule) -> &'static str {
    match rule {
        Rule::AbsolutePath => "upload.absolute_path",
        Rule::ParentDir => "upload.parent_dir",
        Rule::NulByte => "upload.nul_byte",
        Rule::EmptyPath => "upload.empty_path",
        Rule::ThroughLink => "upload.through_link",
        Rule::IsDirectory => "upload.is_directory",
        Rule::EmptyLinkTarget => "upload.empty_link_target",
        Rule::LinkAbsolute => "upload.link_absolute",
        Rule::LinkOutside => "upload.link_outside",
        Rule::LinkThroughLink => "upload.link_through_link",
        Rule::HardLinkTarget => "upload.hard_link_target",
        Rule::Special(_) => "upload.special_file",
        Rule::Unsupported(_) => "upload.unsupported_type",
        Rule::TooManyFiles(_) => "limits.max_upload_files",
        Rule::TooManyBytes(_) => "limits.max_upload_bytes",
    }
}

/// The answer to an upload [`untar::unpack`] refused or failed.
fn refusal(e: UntarError) -> ApiError {
    let message = e.to_string();
    let refused = |rule: &Rule, entry: &str| {
        let status = match rule {
            Rule::TooManyFiles(_) | Rule::TooManyBytes(_) => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, "upload_refused", message.clone())
            .rule(rule_name(rule))
            .entry(entry)
    };
    match &e {
        UntarError::Refused { path, rule } | UntarError::LinkRefused { path, rule, .. } => {
            refused(rule, path)
        }
        UntarError::StreamTooLarge { .. } => {
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "upload_refused", message)
                .rule("limits.max_upload_bytes")
        }
        UntarError::Stream { .. } => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("{message} (expected a tar stream)"),
        ),
        UntarError::Dest { .. }
        | UntarError::Io { .. }
        | UntarError::Cleanup { .. }
        | UntarError::Pack { .. } => internal(message),
    }
}

/// The tar stream a blocking unpack reads: chunks of the request body, fed by the handler.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    chunk: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.chunk.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Err(e)) => return Err(e),
                Some(Ok(b)) => self.chunk = b,
            }
        }
        let n = buf.len().min(self.chunk.len());
        let part = self.chunk.split_to(n);
        if let Some(dst) = buf.get_mut(..n) {
            dst.copy_from_slice(&part);
        }
        Ok(n)
    }
}

/// How feeding the body to the unpack ended.
#[derive(Debug, PartialEq, Eq)]
enum Fed {
    /// The whole body was fed.
    Whole,
    /// The unpack stopped reading (it finished or refused the upload) before the body ended.
    Stopped,
    /// A chunk did not arrive within the body read timeout.
    TimedOut,
    /// The body could not be read.
    Failed,
}

/// Feeds `body` to `tx` chunk by chunk; each chunk must arrive within `idle`. Returns how it
/// ended and the bytes fed.
async fn feed(
    body: &mut Body,
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    idle: Duration,
) -> (Fed, u64) {
    let mut seen = 0u64;
    loop {
        let frame = match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                let _ = tx
                    .send(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the body stopped arriving (body_read_timeout)",
                    )))
                    .await;
                return (Fed::TimedOut, seen);
            }
            Ok(None) => return (Fed::Whole, seen),
            Ok(Some(Err(e))) => {
                let _ = tx.send(Err(io::Error::other(e.to_string()))).await;
                return (Fed::Failed, seen);
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen = seen.saturating_add(data.len() as u64);
        if tx.send(Ok(data)).await.is_err() {
            return (Fed::Stopped, seen);
        }
    }
}

/// Reads and drops what is left of `body` (at most [`DRAIN_MAX`] bytes, within `limit`);
/// whether it ended.
async fn drain(body: &mut Body, limit: Duration) -> bool {
    let mut seen = 0usize;
    let read = async {
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { return false };
            if let Ok(data) = frame.into_data() {
                seen = seen.saturating_add(data.len());
                if seen > DRAIN_MAX {
                    return false;
                }
            }
        }
        true
    };
    tokio::time::timeout(limit, read).await.unwrap_or(false)
}

/// The content types an upload may be sent with.
fn is_tar(content_type: Option<&str>) -> bool {
    let media = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        media.as_str(),
        "application/x-tar" | "application/tar" | "application/octet-stream"
    )
}

/// `POST /v1/uploads`: a tar stream unpacked under the state dir → 201 `{"upload": id,
/// "files": n, "bytes": n}`; a refused one → 400 (413 over `limits.max_upload_bytes` or
/// `limits.max_upload_files`) naming the entry and the rule, nothing kept.
pub async fn create_upload(
    State(svc): Svc,
    axum::Extension(caller): axum::Extension<super::tokens::Caller>,
    req: Request,
) -> Result<Response, ApiError> {
    let (parts, mut body) = req.into_parts();
    let idle = svc.config().body_read_timeout.0;
    if svc.is_draining() {
        drain(&mut body, idle).await;
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "the service is draining (stopping): upload again once it is back",
        )
        .closing());
    }
    let ct = parts
        .headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    if !is_tar(ct) {
        let shown = ct.map_or_else(|| "without one".to_owned(), |t| format!("`{t}`"));
        drain(&mut body, idle).await;
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            format!("an upload must be sent with `Content-Type: application/x-tar`, not {shown}"),
        )
        .field("Content-Type")
        .closing());
    }
    let limits = svc.config().limits_for(&caller.name).clone();
    let state_dir = svc.engine().state_dir().to_owned();
    let id = crate::job::new_job_id();
    let root = upload::uploads_dir(&state_dir);
    let partial = root.join(format!("{id}{PARTIAL}"));
    std::fs::create_dir_all(&root).map_err(|e| {
        internal(format!(
            "failed to create the uploads directory `{}`: {e}",
            root.display()
        ))
    })?;
    std::fs::create_dir(&partial).map_err(|e| {
        internal(format!(
            "failed to create the upload directory `{}`: {e}",
            partial.display()
        ))
    })?;
    receiving(&id, true);
    let result = receive(&mut body, &partial, &limits, idle).await;
    let result = match result {
        Ok(summary) => finish(&partial, &root.join(&id), &caller.name, &summary).map(|()| summary),
        Err(e) => Err(e),
    };
    receiving(&id, false);
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            drain(&mut body, idle).await;
            return Err(e.closing());
        }
    };
    tracing::info!(
        upload = %id,
        token = %caller.name,
        files = summary.files,
        bytes = summary.bytes,
        "upload {id} received: {} entries, {} bytes",
        summary.files,
        summary.bytes
    );
    let mut resp = (
        StatusCode::CREATED,
        axum::Json(json!({"upload": id, "files": summary.files, "bytes": summary.bytes})),
    )
        .into_response();
    // Anything after the end of the archive is read (bounded) and dropped.
    if !drain(&mut body, idle).await {
        resp.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    Ok(resp)
}

/// Streams `body` into an unpack of `partial/tree` on a blocking thread.
async fn receive(
    body: &mut Body,
    partial: &Path,
    limits: &Limits,
    idle: Duration,
) -> Result<UnpackSummary, ApiError> {
    let unpack_limits = UnpackLimits {
        max_bytes: limits.max_upload_bytes.0,
        max_files: limits.max_upload_files,
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let tree = upload::tree_dir(partial);
    let unpacking = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader {
            rx,
            chunk: Bytes::new(),
        };
        untar::unpack(reader, &tree, &unpack_limits)
    });
    let (fed, seen) = feed(body, tx, idle).await;
    let unpacked = unpacking
        .await
        .map_err(|e| internal(format!("failed to unpack the upload: {e}")))?;
    if fed == Fed::TimedOut {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the upload stopped arriving for longer than the server's `body_read_timeout` ({})",
                crate::util::units::HumanDuration(idle)
            ),
        ));
    }
    if seen == 0 {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the upload is empty: send a tar stream (`ralph submit --upload DIR` makes one)",
        ));
    }
    unpacked.map_err(refusal)
}

/// Records what an upload holds and makes it complete (`<id>.partial` renamed to `<id>`).
fn finish(
    partial: &Path,
    done: &Path,
    token: &str,
    summary: &UnpackSummary,
) -> Result<(), ApiError> {
    let meta = partial.join("upload.json");
    let text = json!({
        "files": summary.files,
        "bytes": summary.bytes,
        "submitted_by": token,
        "received_at": humantime::format_rfc3339_seconds(SystemTime::now()).to_string(),
    })
    .to_string();
    std::fs::write(&meta, text)
        .map_err(|e| internal(format!("failed to write `{}`: {e}", meta.display())))?;
    std::fs::rename(partial, done).map_err(|e| {
        internal(format!(
            "failed to complete the upload `{}`: {e}",
            done.display()
        ))
    })
}

/// Checks that a job's `upload` names a complete upload of this server (field `at`), and
/// marks it used now (its retention counts from the last job that named it).
pub fn check_source(
    svc: &Service,
    source: Option<&WorkspaceSource>,
    at: &dyn Fn(&str) -> String,
) -> Result<(), ApiError> {
    let Some(WorkspaceSource::Upload { upload: id }) = source else {
        return Ok(());
    };
    let state_dir = svc.engine().state_dir();
    if !upload::exists(state_dir, id) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!(
                "no upload `{id}` on this server (send the tree first: POST /v1/uploads, or `ralph submit --upload DIR`; unused uploads are removed after `upload_retention`)"
            ),
        )
        .field(at("upload")));
    }
    if let Ok(dir) = std::fs::File::open(upload::upload_dir(state_dir, id)) {
        let _ = dir.set_modified(SystemTime::now());
    }
    Ok(())
}

/// How often unused uploads are looked for: a quarter of the retention, between 1 s and 1 min.
fn sweep_every(retention: Duration) -> Duration {
    (retention / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

impl Service {
    /// Removes unused uploads until the service drains.
    pub(super) async fn keep_uploads(self: Arc<Self>) {
        loop {
            if self.draining.load(Ordering::SeqCst) {
                return;
            }
            let retention = self.upload_retention();
            let svc = self.clone();
            let _ = tokio::task::spawn_blocking(move || svc.sweep_uploads()).await;
            tokio::time::sleep(sweep_every(retention)).await;
        }
    }

    fn upload_retention(&self) -> Duration {
        self.config()
            .provision
            .upload_retention
            .map_or(DEFAULT_UPLOAD_RETENTION, |r| r.0)
    }

    /// The uploads the queued and running jobs name.
    fn uploads_in_use(&self) -> Option<HashSet<String>> {
        let store = self.engine().store();
        let mut used = HashSet::new();
        for state in [JobState::Queued, JobState::Running] {
            for id in store.job_ids_in_state(state).ok()? {
                let view = store.load(&id).ok()?;
                if let Some(WorkspaceSource::Upload { upload }) = view.spec.source {
                    used.insert(upload);
                }
            }
        }
        Some(used)
    }

    /// One pass: uploads (and half-received ones a dead process left) unused for the
    /// retention are removed (blocking).
    pub fn sweep_uploads(&self) {
        let retention = self.upload_retention();
        let root = upload::uploads_dir(self.engine().state_dir());
        let Ok(entries) = std::fs::read_dir(&root) else {
            return;
        };
        let now = SystemTime::now();
        let mut old = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(meta) = std::fs::symlink_metadata(entry.path()) else {
                continue;
            };
            let age = meta
                .modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if age >= retention {
                old.push(name);
            }
        }
        if old.is_empty() {
            return;
        }
        // Under the gate: no submission naming an upload is between its check and its
        // queueing; one before has its job in the store, one after finds the upload gone.
        let _gate = self.uploads_gate.blocking_lock();
        // Read after the ages: a job submitted meanwhile is seen (or refreshed the age).
        let Some(used) = self.uploads_in_use() else {
            return;
        };
        for name in old {
            let id = name.strip_suffix(PARTIAL).unwrap_or(&name);
            if used.contains(id) || is_receiving(id) {
                continue;
            }
            let path = root.join(&name);
            let removed = match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
                Ok(_) => std::fs::remove_file(&path),
                Err(e) => Err(e),
            };
            match removed {
                Ok(()) => tracing::info!(
                    upload = %id,
                    "upload {id} removed (upload_retention: no queued or running job names it)"
                ),
                Err(e) => {
                    tracing::warn!(upload = %id, error = %e, "uploads: failed to remove `{}`: {e}", path.display())
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_413_and_other_rules_400_each_named() {
        let e = refusal(UntarError::Refused {
            path: "../x".into(),
            rule: Rule::ParentDir,
        });
        let r = e.into_response();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let e = refusal(UntarError::Refused {
            path: "big".into(),
            rule: Rule::TooManyBytes(1),
        });
        assert_eq!(e.into_response().status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(rule_name(&Rule::TooManyFiles(1)), "limits.max_upload_files");
        assert!(is_tar(Some("application/x-tar")));
        assert!(!is_tar(Some("application/json")));
        assert!(!is_tar(None));
        assert_eq!(
            sweep_every(Duration::from_secs(3600)),
            Duration::from_secs(60)
        );
    }
}
