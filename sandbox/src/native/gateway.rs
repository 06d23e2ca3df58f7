//! `--network gateway`: the runner's listeners inside the round's network namespace.
//!
//! ```text
//! runner ── socketpair(SEQPACKET) ──┬─ runner's end (close-on-exec, never leaves the runner)
//!                                   └─ helper's end: inherited by the helper (its number in
//!                                      HelperSpec::gateway_fd), close-on-exec again at once
//! helper (supervisor) ── fork ──▶ init: new network namespace, lo up, then for each port
//!                                   socket(AF_INET) + bind(127.0.0.2:PORT) + listen;
//!                                   one sendmsg(SCM_RIGHTS) of every listener to the runner;
//!                                   listeners and the helper's end closed ── fork ──▶ command
//! ```
//!
//! The supervisor closes its copy of the helper's end right after forking the init, and the init
//! closes its own before the command is forked: no descriptor of the hand-over ever reaches the
//! command (which also closes everything above stderr on exec). The runner therefore sees either
//! one message carrying exactly the listeners it asked for, or end-of-file when the sandbox
//! failed before handing them over — then it reads the helper's result and fails closed.
//!
//! Sockets are not tied to the user namespace of whoever holds them: an unprivileged runner (the
//! helper in a user namespace of its own) receives and accepts on them the same way as root. An
//! accepted connection belongs to the round's namespace, so the runner talks to the command over
//! the round's loopback and the command never sees a host address. The address is
//! [`GATEWAY_HOST`] (`127.0.0.2`), not `127.0.0.1`: `NO_PROXY` names it alone, so a client can
//! reach an allowed mirror on the runner host's `127.0.0.1:PORT` through the egress proxy.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::step::{StepFailure, restriction};
use crate::spec::{GATEWAY_HOST, MAX_GATEWAY_PORTS};

/// Backlog of each gateway listener (the namespace's `net.core.somaxconn` may lower it; its
/// default is at least 128 on every supported kernel).
pub const BACKLOG: i32 = 1024;

/// A socketpair for the hand-over: (the runner's end, the helper's end), both close-on-exec and
/// numbered above the standard streams ([`crate::fd_pass::channel`]).
pub use crate::fd_pass::channel;

/// Takes the helper's end of the hand-over (inherited as `fd`): checks that it is a unix socket
/// and makes it close-on-exec again.
pub fn adopt_inherited(fd: RawFd) -> Result<OwnedFd, String> {
    super::inherit::adopt(fd, super::inherit::Kind::Socket)
}

fn fail(step: &str, what: &str, err: &io::Error) -> StepFailure {
    StepFailure::io(restriction::GATEWAY, step, what, err)
}

/// One listener on [`GATEWAY_HOST`]`:port` in the calling process's network namespace: close-on-exec,
/// non-blocking, listening with [`BACKLOG`]. No `SO_REUSEADDR`/`SO_REUSEPORT`: nothing else in
/// the namespace can bind the port while the runner holds it.
pub fn listen(port: u16) -> Result<OwnedFd, StepFailure> {
    let what = format!("listen on {GATEWAY_HOST}:{port} for the runner's gateway");
    // SAFETY: socket() takes plain integers and returns a new descriptor or -1.
    let raw = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if raw < 0 {
        return Err(fail("socket", &what, &io::Error::last_os_error()));
    }
    // SAFETY: `raw` was just created and is ours.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(GATEWAY_HOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: `addr` is a valid sockaddr_in for the duration of the call, its size given.
    let rc = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            std::ptr::from_ref(&addr).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(fail("bind", &what, &io::Error::last_os_error()));
    }
    // SAFETY: listen on a socket we own.
    if unsafe { libc::listen(sock.as_raw_fd(), BACKLOG) } < 0 {
        return Err(fail("listen", &what, &io::Error::last_os_error()));
    }
    Ok(sock)
}

/// The message's payload: the ports, big-endian, in the order of the descriptors.
fn payload(ports: &[u16]) -> Vec<u8> {
    ports.iter().flat_map(|p| p.to_be_bytes()).collect()
}

/// Sends `listeners` (one per port of `ports`, same order) to the runner in one message.
pub fn send(chan: &OwnedFd, ports: &[u16], listeners: &[OwnedFd]) -> Result<(), StepFailure> {
    let fds: Vec<BorrowedFd<'_>> = listeners.iter().map(AsFd::as_fd).collect();
    crate::fd_pass::send(chan.as_fd(), &payload(ports), &fds).map_err(|e| {
        fail(
            "sendmsg(SCM_RIGHTS)",
            "hand the gateway listeners to the runner",
            &e,
        )
    })
}

/// Why the runner did not get its listeners.
#[derive(Debug)]
#[non_exhaustive]
pub enum RecvError {
    /// The other end closed without a message: the sandbox failed (or was killed) before the
    /// hand-over; its result says why.
    Closed,
    /// Nothing came within the limit.
    TimedOut(Duration),
    /// A message came but is not what was asked for, or a syscall failed.
    Bad(String),
}

impl std::fmt::Display for RecvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecvError::Closed => f.write_str("the sandbox closed the hand-over without a message"),
            RecvError::TimedOut(d) => write!(
                f,
                "the sandbox did not hand over the gateway listeners within {} s",
                d.as_secs()
            ),
            RecvError::Bad(m) => f.write_str(m),
        }
    }
}

fn wait_readable(fd: RawFd, deadline: Instant, limit: Duration) -> Result<(), RecvError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RecvError::TimedOut(limit));
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = i32::try_from(left.as_millis().saturating_add(1)).unwrap_or(i32::MAX);
        // SAFETY: one pollfd we own.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(RecvError::Bad(format!("poll on the hand-over failed: {e}")));
        }
        if rc > 0 {
            return Ok(());
        }
    }
}

/// Receives the listeners for `ports` from the sandbox's init (blocking, at most `limit`): each
/// checked to be a listening TCP socket on `127.0.0.2:PORT`, close-on-exec and non-blocking.
pub fn recv(
    chan: &OwnedFd,
    ports: &[u16],
    limit: Duration,
) -> Result<Vec<(u16, TcpListener)>, RecvError> {
    let n = ports.len();
    if n == 0 || n > MAX_GATEWAY_PORTS {
        return Err(RecvError::Bad(format!("{n} gateway ports asked for")));
    }
    wait_readable(chan.as_raw_fd(), Instant::now() + limit, limit)?;
    recv_ready(chan, ports)
}

/// The most text a sandbox's init sends instead of the listeners when it could not make them
/// (`error: <why>`, the docker init; see [`error_message`]).
const ERROR_TEXT_CAP: usize = 1024;

/// The message a sandbox's init sends instead of the listeners when it cannot make them.
pub fn error_message(why: &str) -> Vec<u8> {
    let mut m = format!("error: {why}").into_bytes();
    m.truncate(ERROR_TEXT_CAP);
    m
}

/// [`recv`] of a message that is already there (or end-of-file).
pub fn recv_ready(chan: &OwnedFd, ports: &[u16]) -> Result<Vec<(u16, TcpListener)>, RecvError> {
    let n = ports.len();
    // Room for the longest message (an error's text): a longer payload than the ports' is
    // refused below. Every descriptor that arrived is owned by `got`, so that any refusal below
    // closes them.
    let mut data = vec![0u8; (2 * n + 1).max(ERROR_TEXT_CAP + 1)];
    let got = crate::fd_pass::recv(chan.as_fd(), &mut data, n, libc::MSG_DONTWAIT)
        .map_err(|e| RecvError::Bad(format!("recvmsg on the hand-over failed: {e}")))?;
    let fds = got.fds;
    if got.len == 0 && fds.is_empty() {
        return Err(RecvError::Closed);
    }
    if got.truncated {
        return Err(RecvError::Bad("the hand-over message was truncated".into()));
    }
    let got = got.len;
    if fds.is_empty() {
        if let Some(why) = data[..got].strip_prefix(b"error: ") {
            // Printable ASCII only, whoever wrote it.
            let why: String = why
                .iter()
                .map(|&b| {
                    if (0x20..0x7f).contains(&b) {
                        char::from(b)
                    } else {
                        '?'
                    }
                })
                .collect();
            return Err(RecvError::Bad(why));
        }
    }
    if data[..got] != payload(ports)[..] {
        return Err(RecvError::Bad(format!(
            "the hand-over names other ports than asked for ({} bytes)",
            got
        )));
    }
    if fds.len() != n {
        return Err(RecvError::Bad(format!(
            "{} descriptors handed over for {n} gateway ports",
            fds.len()
        )));
    }
    ports
        .iter()
        .zip(fds)
        .map(|(&port, fd)| check_listener(port, fd).map(|l| (port, l)))
        .collect()
}

fn sockopt_int(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `v`.
    let rc =
        unsafe { libc::getsockopt(fd, level, name, std::ptr::from_mut(&mut v).cast(), &mut len) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(v)
}

/// `fd` is a listening TCP socket bound to [`GATEWAY_HOST`]`:port`; made non-blocking.
fn check_listener(port: u16, fd: OwnedFd) -> Result<TcpListener, RecvError> {
    let bad = |m: String| RecvError::Bad(format!("the listener for port {port}: {m}"));
    let raw = fd.as_raw_fd();
    let ty = sockopt_int(raw, libc::SOL_SOCKET, libc::SO_TYPE).map_err(|e| bad(e.to_string()))?;
    let listening =
        sockopt_int(raw, libc::SOL_SOCKET, libc::SO_ACCEPTCONN).map_err(|e| bad(e.to_string()))?;
    if ty != libc::SOCK_STREAM || listening != 1 {
        return Err(bad("not a listening stream socket".into()));
    }
    let listener = TcpListener::from(fd);
    let addr = listener.local_addr().map_err(|e| bad(e.to_string()))?;
    if addr != SocketAddr::from((GATEWAY_HOST, port)) {
        return Err(bad(format!("bound to {addr}, not {GATEWAY_HOST}:{port}")));
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| bad(e.to_string()))?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port free on the gateway's address of this (the host's) namespace, where the test
    /// binds: one free on 127.0.0.1 may be held there (TIME_WAIT of an earlier run).
    fn free_port() -> u16 {
        TcpListener::bind((GATEWAY_HOST, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn listeners_travel_over_the_channel_and_are_checked() {
        let (runner, helper) = channel().unwrap();
        let ports = [free_port(), free_port()];
        let ls: Vec<OwnedFd> = ports.iter().map(|p| listen(*p).unwrap()).collect();
        send(&helper, &ports, &ls).unwrap();
        drop(ls);
        let got = recv(&runner, &ports, Duration::from_secs(5)).unwrap();
        assert_eq!(got.iter().map(|(p, _)| *p).collect::<Vec<_>>(), ports);
        for (port, l) in &got {
            assert_eq!(l.local_addr().unwrap().port(), *port);
            // Close-on-exec and non-blocking.
            let fd = l.as_raw_fd();
            // SAFETY: fcntl queries on a descriptor we own.
            let (fdfl, fl) = unsafe {
                (
                    libc::fcntl(fd, libc::F_GETFD),
                    libc::fcntl(fd, libc::F_GETFL),
                )
            };
            assert!(fdfl & libc::FD_CLOEXEC != 0);
            assert!(fl & libc::O_NONBLOCK != 0);
            let mut c = std::net::TcpStream::connect((GATEWAY_HOST, *port)).unwrap();
            std::io::Write::write_all(&mut c, b"hi").unwrap();
            l.set_nonblocking(false).unwrap();
            let (mut s, _) = l.accept().unwrap();
            let mut buf = [0u8; 2];
            std::io::Read::read_exact(&mut s, &mut buf).unwrap();
            assert_eq!(&buf, b"hi");
        }
        // The helper's end gone: end-of-file.
        drop(helper);
        assert!(matches!(
            recv(&runner, &ports, Duration::from_secs(5)),
            Err(RecvError::Closed)
        ));
    }

    #[test]
    fn a_wrong_hand_over_is_refused() {
        // Other ports than asked for.
        let (runner, helper) = channel().unwrap();
        let p = free_port();
        let l = listen(p).unwrap();
        send(&helper, &[p], &[l]).unwrap();
        let e = recv(&runner, &[p.wrapping_add(1).max(1)], Duration::from_secs(5)).unwrap_err();
        assert!(e.to_string().contains("other ports"), "{e}");
        // A socket that is not listening.
        let (runner, helper) = channel().unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        send(&helper, &[port], &[OwnedFd::from(udp)]).unwrap();
        let e = recv(&runner, &[port], Duration::from_secs(5)).unwrap_err();
        assert!(
            e.to_string().contains("not a listening stream socket"),
            "{e}"
        );
        // Nothing within the limit.
        let (runner, _helper) = channel().unwrap();
        assert!(matches!(
            recv(&runner, &[p], Duration::from_millis(50)),
            Err(RecvError::TimedOut(_))
        ));
    }

    #[test]
    fn an_inherited_end_must_be_a_socket() {
        let f = std::fs::File::open("/dev/null").unwrap();
        let e = adopt_inherited(f.as_raw_fd()).unwrap_err();
        assert!(e.contains("not a socket"), "{e}");
        assert!(adopt_inherited(1).is_err());
        let (_runner, helper) = channel().unwrap();
        let raw = helper.as_raw_fd();
        // As the spawn leaves it in the helper: inheritable.
        // SAFETY: fcntl on a descriptor we own.
        assert_eq!(unsafe { libc::fcntl(raw, libc::F_SETFD, 0) }, 0);
        std::mem::forget(helper);
        let adopted = adopt_inherited(raw).unwrap();
        // SAFETY: fcntl query on a descriptor we own.
        assert!(unsafe { libc::fcntl(adopted.as_raw_fd(), libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
    }
}
