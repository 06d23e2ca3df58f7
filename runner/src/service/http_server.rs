//! The HTTP/1.1 server under the API: accepts connections on a TCP or unix listener, serves each
//! with hyper and a header read timeout (a client that does not finish its request head in time
//! gets `408` in the API's JSON error shape and the connection is closed), and shuts down
//! gracefully when told. The body read timeout is the API's (`api::read_body`). With TLS
//! ([`serve_tls`]) each connection's handshake runs in its own task, within the header read
//! timeout; a client speaking plain HTTP to the TLS port is answered `400` in clear and closed.

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
    let body = super::api_error::error_body(
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
    let peer = peer_of(&io);
    let result = http1(io, router, peer, header_timeout, stop).await;
    if let (Err(e), Some(fd)) = (result, raw) {
        if e.is_timeout() {
            use std::io::Write;
            // Best effort: the socket may be full or gone; the connection is closed either way.
            let _ = std::fs::File::from(fd).write_all(&header_timeout_answer());
        }
    }
}

/// HTTP/1.1 on one connection (plain or TLS) until it ends or `stop` asks for a graceful end.
async fn http1<I>(
    io: I,
    router: Router,
    peer: String,
    header_timeout: Duration,
    stop: CancellationToken,
) -> Result<(), hyper::Error>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let router = router.layer(axum::Extension(super::refusal_log::Peer(peer)));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    }
}

/// The answer to plain HTTP sent to the TLS port.
fn plain_on_tls_answer() -> Vec<u8> {
    let body = super::api_error::error_body(
        "tls_required",
        "this port speaks HTTPS: use an https:// server address",
    );
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// One TLS connection: the handshake (within `header_timeout`), then HTTP/1.1.
async fn tls_connection(
    tcp: tokio::net::TcpStream,
    tls: std::sync::Arc<super::tls::Reloadable>,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    use tokio::io::AsyncWriteExt;
    let peer = tcp
        .peer_addr()
        .map_or_else(|_| "local".to_owned(), |a| a.to_string());
    let mut first = [0u8; 1];
    match tokio::time::timeout(header_timeout, tcp.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE => {}
        Ok(Ok(1)) => {
            use tokio::io::AsyncReadExt;
            let mut tcp = tcp;
            let _ = tcp.write_all(&plain_on_tls_answer()).await;
            let _ = tcp.shutdown().await;
            // Read what the client sent (a close with unread data would reset the connection
            // before the client reads the answer), for a moment at most.
            let mut sink = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
            return;
        }
        _ => return,
    }
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
    let stream = match tokio::time::timeout(header_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::info!(peer = %peer, error = %e, "TLS handshake with {peer} failed: {e}");
            return;
        }
        Err(_) => return,
    };
    let _ = http1(stream, router, peer, header_timeout, stop).await;
}

/// Like [`serve`] on a TCP listener, every connection in TLS with the configuration `tls` holds
/// when it is accepted.
pub async fn serve_tls(
    listener: tokio::net::TcpListener,
    tls: std::sync::Arc<super::tls::Reloadable>,
    router: Router,
    header_timeout: Duration,
    stop: CancellationToken,
) {
    let mut open = JoinSet::new();
    loop {
        let tcp = tokio::select! {
            () = stop.cancelled() => break,
            accepted = listener.next() => match accepted {
                Ok(io) => io,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        while open.try_join_next().is_some() {}
        open.spawn(tls_connection(
            tcp,
            tls.clone(),
            router.clone(),
            header_timeout,
            stop.clone(),
        ));
    }
    while open.join_next().await.is_some() {}
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
