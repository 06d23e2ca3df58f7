//! The HTTP/1.1 server under the API: accepts connections on a TCP or unix listener, serves each
//! with hyper and a header read timeout (a client that does not finish its request head in time
//! gets `408` in the API's JSON error shape and the connection is closed), and shuts down
//! gracefully when told. The body read timeout is the API's (`api::read_body`).

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// A listener the server accepts connections from.
pub trait Listen: Send + 'static {
    /// A connection.
    type Io: AsyncRead + AsyncWrite + AsFd + Unpin + Send + 'static;
    /// The next connection.
    fn next(&self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
}

impl Listen for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn next(&self) -> std::io::Result<Self::Io> {
        let (s, _) = self.accept().await?;
        // Small answers go out at once (no Nagle delay against the client's delayed ACK).
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

impl Listen for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn next(&self) -> std::io::Result<Self::Io> {
        self.accept().await.map(|(s, _)| s)
    }
}

/// The answer to a request head that did not arrive within the header read timeout.
fn header_timeout_answer() -> Vec<u8> {
    let body = super::api::error_body(
        "request_timeout",
        "the request head did not arrive within the server's `header_read_timeout`",
    );
    format!(
        "HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The peer address of a connection: `ip:port` for TCP, `local` otherwise (a unix socket).
fn peer_of(io: &impl AsFd) -> String {
    // A duplicate of the descriptor, read as a TCP socket; closing it leaves the connection.
    io.as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| std::net::TcpStream::from(fd).peer_addr().ok())
        .map_or_else(|| "local".to_owned(), |a| a.to_string())
}

/// Serves one connection until it ends or `stop` asks for a graceful end.
async fn connection<I>(io: I, router: Router, header_timeout: Duration, stop: CancellationToken)
where
    I: AsyncRead + AsyncWrite + AsFd + Unpin + Send + 'static,
{
    // A second handle on the socket: hyper closes a connection whose head timed out without a
    // word, and the client is owed a 408.
    let raw: Option<OwnedFd> = io.as_fd().try_clone_to_owned().ok();
    let router = router.layer(axum::Extension(super::refusal_log::Peer(peer_of(&io))));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let (Err(e), Some(fd)) = (result, raw) {
        if e.is_timeout() {
            use std::io::Write;
            // Best effort: the socket may be full or gone; the connection is closed either way.
            let _ = std::fs::File::from(fd).write_all(&header_timeout_answer());
        }
    }
}

/// Accepts connections on `listener` and serves them with `router` until `stop` is cancelled;
/// then lets the open connections finish their request and returns.
pub async fn serve<L: Listen>(
    listener: L,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let mut open = JoinSet::new();
    loop {
        let io = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.next() => match accepted {
                Ok(io) => io,
                // Out of descriptors or a connection reset before accept: go on.
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        while open.try_join_next().is_some() {}
        open.spawn(connection(io, router.clone(), header_timeout, stop.clone()));
    }
    while open.join_next().await.is_some() {}
}
