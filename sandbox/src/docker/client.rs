//! The connection to the Docker Engine: one bollard client per backend, its API version
//! negotiated once (engines down to [`MIN_API`] work), every control request bounded in time so
//! that a hung or missing engine is an error, never a hang.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::{ClientVersion, Docker};

use crate::error::SandboxError;

/// The oldest Engine API this backend works with (Debian 12's `docker.io` 20.10).
pub const MIN_API: (usize, usize) = (1, 41);

/// How long the engine may take to answer the version check.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one control request (create, start, inspect, kill, remove) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// bollard's own per-request timeout, in seconds: only the response headers count, and the
/// long requests (attach, wait) answer their headers at once; [`REQUEST_TIMEOUT`] is the real
/// bound of the control requests.
const BOLLARD_TIMEOUT_SECS: u64 = 3600;

/// A connected, version-negotiated engine.
#[derive(Clone, Debug)]
pub struct Engine {
    /// The client.
    pub docker: Docker,
    /// The socket.
    pub socket: PathBuf,
    /// The API version in use (the lower of bollard's and the engine's).
    pub api: (usize, usize),
}

fn unreachable(socket: &Path, why: impl std::fmt::Display) -> SandboxError {
    SandboxError::unavailable(
        "the docker backend (container engine)",
        format!(
            "the Docker Engine at `{}` is not reachable: {why}",
            socket.display()
        ),
    )
}

/// Why `socket` cannot be opened, said so that the fix is plain (bollard's own error names only
/// its HTTP client).
fn open_failure(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => format!(
            "{e}: this user may not open the socket (only root and its group, usually `docker`, may): add the user to that group (the systemd unit: SupplementaryGroups=docker)"
        ),
        std::io::ErrorKind::ConnectionRefused => {
            format!("{e}: no engine listens on it (is the docker service running?)")
        }
        _ => e.to_string(),
    }
}

/// The socket path: `DOCKER_HOST=unix://…`, else `/var/run/docker.sock`.
pub fn socket_path() -> PathBuf {
    std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/var/run/docker.sock"))
}

/// Whether `v` is at least [`MIN_API`].
pub fn supported(v: (usize, usize)) -> bool {
    v >= MIN_API
}

/// Connects to the engine at `socket` and negotiates the API version.
pub async fn connect(socket: &Path) -> Result<Engine, SandboxError> {
    if std::env::var("DOCKER_HOST").is_ok_and(|h| !h.starts_with("unix://")) {
        return Err(SandboxError::unavailable(
            "the docker backend (container engine)",
            "DOCKER_HOST names a non-unix endpoint; only a local unix socket is supported",
        ));
    }
    if let Err(e) = std::fs::symlink_metadata(socket) {
        return Err(unreachable(socket, e));
    }
    // A unix connect answers at once: a refusal is told plainly before bollard tries.
    if let Err(e) = std::os::unix::net::UnixStream::connect(socket) {
        return Err(unreachable(socket, open_failure(&e)));
    }
    let path = socket
        .to_str()
        .ok_or_else(|| unreachable(socket, "the path is not UTF-8"))?;
    let docker =
        Docker::connect_with_unix(path, BOLLARD_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
            .map_err(|e| unreachable(socket, e))?;
    let docker = tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version())
        .await
        .map_err(|_| unreachable(socket, format!("no answer within {CONNECT_TIMEOUT:?}")))?
        .map_err(|e| unreachable(socket, e))?;
    let ClientVersion {
        major_version,
        minor_version,
    } = docker.client_version();
    let api = (major_version, minor_version);
    if !supported(api) {
        return Err(SandboxError::unavailable(
            "the docker backend (container engine)",
            format!(
                "the engine speaks API {}.{}; ralph needs {}.{} or newer",
                api.0, api.1, MIN_API.0, MIN_API.1
            ),
        ));
    }
    Ok(Engine {
        docker,
        socket: socket.to_owned(),
        api,
    })
}

/// Runs one control request with [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(
    action: &'static str,
    fut: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, EngineError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(EngineError::Request { action, source }),
        Err(_) => Err(EngineError::Timeout {
            action,
            after: REQUEST_TIMEOUT,
        }),
    }
}

/// A failed engine request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The engine answered with an error.
    #[error("failed to {action}: {source}")]
    Request {
        /// What was asked.
        action: &'static str,
        /// bollard's error.
        source: bollard::errors::Error,
    },
    /// The engine did not answer in time.
    #[error("failed to {action}: no answer from the engine within {after:?}")]
    Timeout {
        /// What was asked.
        action: &'static str,
        /// The bound.
        after: Duration,
    },
}

impl EngineError {
    /// The HTTP status the engine answered, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            EngineError::Request {
                source: bollard::errors::Error::DockerResponseServerError { status_code, .. },
                ..
            } => Some(*status_code),
            EngineError::Request { .. } | EngineError::Timeout { .. } => None,
        }
    }
}

impl From<EngineError> for SandboxError {
    fn from(e: EngineError) -> Self {
        SandboxError::Engine {
            message: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_this_user_may_not_open_names_the_group() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let why = open_failure(&denied);
        assert!(
            why.contains("docker") && why.contains("SupplementaryGroups"),
            "{why}"
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(open_failure(&refused).contains("no engine listens"));
    }

    /// bollard's default is newer than the oldest engine we support, so the version must be
    /// negotiated (see `tests/it/docker_backend.rs` for the live check against the engine).
    #[test]
    fn bollard_is_newer_than_the_minimum_and_the_minimum_is_pinned() {
        let v = bollard::API_DEFAULT_VERSION;
        assert!(
            supported((v.major_version, v.minor_version)),
            "bollard speaks {}.{}, below the minimum {MIN_API:?}",
            v.major_version,
            v.minor_version
        );
        assert_eq!(MIN_API, (1, 41), "Debian 12's docker.io speaks 1.41");
        // Pinned: a bollard upgrade changes this; then run tests/it/docker_backend.rs against a
        // 1.41 engine (Debian 12's docker.io, as CI does) before moving the pin.
        assert_eq!(
            (v.major_version, v.minor_version),
            (1, 53),
            "bollard's API version changed: check it still negotiates down to 1.41"
        );
        assert!(!supported((1, 40)));
        assert!(supported((1, 41)) && supported((1, 53)) && supported((2, 0)));
    }
}
