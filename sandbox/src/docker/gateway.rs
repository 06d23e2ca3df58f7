//! `--network gateway` in a container: the runner's listeners inside the container's own,
//! loopback-only network namespace (network mode `none`), made by ralph's init and handed to the
//! runner before the command exists — the native design ([`crate::native::gateway`]) over the
//! container's walls.
//!
//! ```text
//! runner: unix socket <control>/container-gateway.sock (0600, the container's user), mounted
//!         read-only at /.ralph-gateway
//! init (pid 1, in the container's netns): connect, then for each port socket(AF_INET) +
//!         bind(127.0.0.2:PORT) + listen; one sendmsg(SCM_RIGHTS) of every listener (or
//!         `error: <why>` when one cannot be made); listeners and the connection closed ── fork
//!         ──▶ command
//! runner: accepts the first connection only, receives and checks the listeners
//!         ([`crate::native::gateway::recv_ready`]), then closes and removes the socket
//! ```
//!
//! The command cannot forge the hand-over: it does not exist before the init's connection is
//! queued, the runner reads that connection only and closes the socket once it has the
//! listeners (a later connect is refused), and the init's ends are closed before the fork. An
//! accepted connection belongs to the container's namespace: the runner talks to the command
//! over the container's loopback, and the command reaches nothing else (no interface but `lo`).

use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::native::gateway::{self as native_gateway, RecvError};

/// Where the hand-over socket is mounted in the container.
pub const GATEWAY_PATH: &str = "/.ralph-gateway";
/// The hand-over socket's name in the run's control directory.
pub const GATEWAY_FILE: &str = "container-gateway.sock";

/// The runner's end of the hand-over.
#[derive(Debug)]
pub struct GatewayHandover {
    /// The socket file (mounted read-only at [`GATEWAY_PATH`]).
    pub path: PathBuf,
    listener: UnixListener,
}

impl GatewayHandover {
    /// Binds the hand-over socket in `control_dir` for the container's user `uid:gid`.
    pub fn bind(
        control_dir: &Path,
        uid: u32,
        gid: u32,
    ) -> Result<Self, super::init_status::StatusError> {
        let (path, listener) =
            super::init_status::bind_private(control_dir, GATEWAY_FILE, uid, gid)?;
        Ok(Self { path, listener })
    }

    /// Waits (blocking, at most `limit`, or until `given_up` is set: the container ended) for
    /// the init's connection and its message: the listeners for `ports`, each checked as
    /// natively. The socket is closed and removed whatever the result, so nothing can connect
    /// to it afterwards.
    pub fn receive(
        self,
        ports: &[u16],
        limit: Duration,
        given_up: &AtomicBool,
    ) -> Result<Vec<(u16, TcpListener)>, RecvError> {
        let wait = Wait {
            deadline: Instant::now() + limit,
            limit,
            given_up,
        };
        let stream = self.accept_first(&wait)?;
        drop(self);
        wait.readable(stream.as_fd())?;
        native_gateway::recv_ready(&OwnedFd::from(stream), ports)
    }

    fn accept_first(&self, wait: &Wait<'_>) -> Result<UnixStream, RecvError> {
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(true)
                        .map_err(|e| RecvError::Bad(format!("the hand-over connection: {e}")))?;
                    return Ok(s);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    wait.readable(self.listener.as_fd())?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(RecvError::Bad(format!(
                        "accepting the init's hand-over failed: {e}"
                    )));
                }
            }
        }
    }
}

/// How long a hand-over may take.
struct Wait<'a> {
    deadline: Instant,
    limit: Duration,
    given_up: &'a AtomicBool,
}

impl Wait<'_> {
    /// Until `fd` is readable; [`RecvError::Closed`] once the caller gave up, a time-out past
    /// the deadline.
    fn readable(&self, fd: BorrowedFd<'_>) -> Result<(), RecvError> {
        loop {
            // What already arrived counts, also once the caller gave up.
            let given_up = self.given_up.load(Ordering::SeqCst);
            let left = self.deadline.saturating_duration_since(Instant::now());
            let slice = if given_up {
                Duration::ZERO
            } else {
                left.min(GIVE_UP_CHECK)
            };
            let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
            let ms = u16::try_from(slice.as_millis()).unwrap_or(u16::MAX);
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => {}
                Ok(_) => return Ok(()),
                Err(e) => {
                    return Err(RecvError::Bad(format!("poll on the hand-over failed: {e}")));
                }
            }
            if given_up {
                return Err(RecvError::Closed);
            }
            if left.is_zero() {
                return Err(RecvError::TimedOut(self.limit));
            }
        }
    }
}

/// How often a waiting hand-over looks whether the caller gave up.
const GIVE_UP_CHECK: Duration = Duration::from_millis(50);

impl Drop for GatewayHandover {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The init's side (in the container, before the command exists): connects to `socket`, makes
/// a listener on `127.0.0.2:PORT` for each of `ports` in the container's network namespace and
/// sends them in one message; when one cannot be made, sends why instead. Every descriptor of
/// the hand-over is closed when this returns.
pub fn hand_over(socket: &Path, ports: &[u16]) -> Result<(), String> {
    let chan = UnixStream::connect(socket).map_err(|e| {
        format!(
            "failed to connect to the runner's gateway hand-over socket {}: {e}",
            socket.display()
        )
    })?;
    let listeners: Result<Vec<OwnedFd>, _> =
        ports.iter().map(|&p| native_gateway::listen(p)).collect();
    match listeners {
        Ok(listeners) => {
            native_gateway::send(&OwnedFd::from(chan), ports, &listeners).map_err(|f| describe(&f))
        }
        Err(failure) => {
            let why = describe(&failure);
            let _ = std::io::Write::write_all(&mut &chan, &native_gateway::error_message(&why));
            Err(why)
        }
    }
}

fn describe(f: &crate::native::step::StepFailure) -> String {
    format!("{}: {}", f.step, f.reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::GATEWAY_HOST;

    fn free_port() -> u16 {
        TcpListener::bind((GATEWAY_HOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    fn me() -> (u32, u32) {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    }

    #[test]
    fn the_inits_listeners_reach_the_runner_and_the_socket_is_gone_after() {
        let dir = tempfile::tempdir().unwrap();
        let (uid, gid) = me();
        let h = GatewayHandover::bind(dir.path(), uid, gid).unwrap();
        let path = h.path.clone();
        let ports = [free_port(), free_port()];
        let init = {
            let path = path.clone();
            std::thread::spawn(move || hand_over(&path, &ports))
        };
        let got = h
            .receive(&ports, Duration::from_secs(10), &AtomicBool::new(false))
            .unwrap();
        init.join().unwrap().unwrap();
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), ports);
        for (port, l) in &got {
            let mut c = std::net::TcpStream::connect((GATEWAY_HOST, *port)).unwrap();
            std::io::Write::write_all(&mut c, b"hi").unwrap();
            l.set_nonblocking(false).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 2];
            std::io::Read::read_exact(&mut s, &mut buf).unwrap();
            assert_eq!(&buf, b"hi");
        }
        // Nothing can connect once the runner has its listeners.
        assert!(!path.exists());
        assert!(UnixStream::connect(&path).is_err());
    }

    #[test]
    fn only_the_first_connection_counts_and_an_inits_failure_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (uid, gid) = me();
        // A port already taken: the init says why instead of handing anything over.
        let taken = TcpListener::bind((GATEWAY_HOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let h = GatewayHandover::bind(dir.path(), uid, gid).unwrap();
        let e = hand_over(&h.path, &[port]).unwrap_err();
        assert!(e.contains("bind"), "{e}");
        // A second, forged connection with a valid-looking message is never read.
        let forged = UnixStream::connect(&h.path).unwrap();
        let other = free_port();
        let l = native_gateway::listen(other).unwrap();
        native_gateway::send(&OwnedFd::from(forged), &[port], &[l]).unwrap();
        let err = h
            .receive(&[port], Duration::from_secs(5), &AtomicBool::new(false))
            .unwrap_err();
        assert!(
            err.to_string().contains("bind") && err.to_string().contains(&port.to_string()),
            "{err}"
        );
    }

    #[test]
    fn no_connection_times_out_and_a_closed_one_is_closed() {
        let dir = tempfile::tempdir().unwrap();
        let (uid, gid) = me();
        let h = GatewayHandover::bind(dir.path(), uid, gid).unwrap();
        let no = AtomicBool::new(false);
        assert!(matches!(
            h.receive(&[free_port()], Duration::from_millis(100), &no),
            Err(RecvError::TimedOut(_))
        ));
        let h = GatewayHandover::bind(dir.path(), uid, gid).unwrap();
        drop(UnixStream::connect(&h.path).unwrap());
        assert!(matches!(
            h.receive(&[free_port()], Duration::from_secs(5), &no),
            Err(RecvError::Closed)
        ));
        // The caller gives up (the container ended): the wait ends at once, not at the limit.
        let h = GatewayHandover::bind(dir.path(), uid, gid).unwrap();
        let started = Instant::now();
        assert!(matches!(
            h.receive(
                &[free_port()],
                Duration::from_secs(60),
                &AtomicBool::new(true)
            ),
            Err(RecvError::Closed)
        ));
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
