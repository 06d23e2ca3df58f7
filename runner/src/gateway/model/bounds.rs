//! Bounds on the gateway as a server, so that a round cannot make the runner (or, under `ralph
//! serve`, the service that runs every job of the host) hold more than a known amount: the bytes
//! of request bodies held at once ([`BytePool`], per gateway and one for the whole process), the
//! connections open at once ([`CappedListener`]), and the rate of free requests
//! ([`FreeRate`]: a model list costs no tokens, so the budget does not bound it).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::serve::Listener;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A pool of bytes that request bodies are read into; a body takes its bytes before it is read.
#[derive(Debug)]
pub struct BytePool {
    sem: Arc<Semaphore>,
    size: usize,
}

impl BytePool {
    /// A pool of `size` bytes.
    pub fn new(size: usize) -> Arc<Self> {
        Arc::new(Self {
            sem: Arc::new(Semaphore::new(size.min(Semaphore::MAX_PERMITS))),
            size,
        })
    }

    /// The pool's size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.sem.available_permits()
    }

    /// Takes `n` bytes, waiting up to `wait`; `None` when they could not be had (or `n` is more
    /// than the pool).
    pub async fn take(&self, n: usize, wait: Duration) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(n).ok().filter(|n| *n as usize <= self.size)?;
        let sem = Arc::clone(&self.sem);
        tokio::time::timeout(wait, sem.acquire_many_owned(n))
            .await
            .ok()?
            .ok()
    }
}

/// Free requests allowed: a bucket of `burst` refilled at `per_second`.
#[derive(Debug)]
pub struct FreeRate {
    burst: f64,
    per_second: f64,
    state: Mutex<(f64, Instant)>,
}

impl FreeRate {
    /// A full bucket.
    pub fn new(burst: u32, per_second: f64) -> Self {
        Self {
            burst: f64::from(burst),
            per_second,
            state: Mutex::new((f64::from(burst), Instant::now())),
        }
    }

    /// Takes one request's token; false when the bucket is empty.
    pub fn take(&self) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return false;
        };
        let now = Instant::now();
        let refill = now.saturating_duration_since(s.1).as_secs_f64() * self.per_second;
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// What a connection over the cap gets before it is closed.
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 57\r\nretry-after: 1\r\n\r\nralph gateway: too many connections open for this round\n";

/// A listener that keeps at most `max` connections open: one over the cap gets a 503 and is
/// closed at once (its request is not read), and `on_refused` is called.
pub struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    on_refused: Box<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for CappedListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CappedListener")
            .field("free", &self.slots.available_permits())
            .finish_non_exhaustive()
    }
}

impl CappedListener {
    /// Caps `inner` at `max` open connections.
    pub fn new(inner: TcpListener, max: usize, on_refused: Box<dyn Fn() + Send + Sync>) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(max)),
            on_refused,
        }
    }
}

/// An accepted connection holding its slot until it is dropped.
#[derive(Debug)]
pub struct Slotted {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
}

impl tokio::io::AsyncRead for Slotted {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Slotted {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Listener for CappedListener {
    type Io = Slotted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(a) => a,
                Err(_) => {
                    // As axum's own listener does: a failed accept (fd limit) is retried
                    // after a pause instead of ending the server.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            // Best effort: a socket that refuses the option still works, only slower (see
            // `serve_model`).
            let _ = stream.set_nodelay(true);
            match Arc::clone(&self.slots).try_acquire_owned() {
                Ok(slot) => {
                    return (
                        Slotted {
                            stream,
                            _slot: slot,
                        },
                        addr,
                    );
                }
                Err(_) => {
                    (self.on_refused)();
                    // Answered and closed off the accept loop; a client that does not read
                    // cannot hold it (the write is bounded in time).
                    tokio::spawn(async move {
                        let mut stream = stream;
                        let _ = tokio::time::timeout(Duration::from_secs(1), async {
                            let _ = stream.write_all(TOO_MANY_CONNECTIONS).await;
                            let _ = stream.shutdown().await;
                        })
                        .await;
                    });
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pool_gives_what_it_has_and_refuses_after_the_wait() {
        let pool = BytePool::new(100);
        let a = pool.take(60, Duration::from_millis(10)).await.unwrap();
        assert!(pool.take(60, Duration::from_millis(10)).await.is_none());
        assert!(pool.take(101, Duration::from_secs(10)).await.is_none());
        drop(a);
        assert!(pool.take(100, Duration::from_millis(10)).await.is_some());
        assert_eq!(pool.available(), 100);
    }

    #[test]
    fn the_free_rate_empties_and_refills() {
        let r = FreeRate::new(3, 0.0);
        assert!(r.take() && r.take() && r.take());
        assert!(!r.take());
        let r = FreeRate::new(1, 1e9);
        assert!(r.take());
        std::thread::sleep(Duration::from_millis(2));
        assert!(r.take());
    }
}
