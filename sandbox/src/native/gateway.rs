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
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::step::{StepFailure, restriction};
use crate::spec::{GATEWAY_HOST, MAX_GATEWAY_PORTS};

/// Backlog of each gateway listener (the namespace's `net.core.somaxconn` may lower it; its
/// default is at least 128 on every supported kernel).
pub const BACKLOG: i32 = 1024;

/// A socketpair for the hand-over: (the runner's end, the helper's end), both close-on-exec and
/// numbered above the standard streams (a runner started with one of them closed would otherwise
/// get it, and the helper's stdio set-up would overwrite it).
pub fn channel() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two descriptors into the array we own.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((above_stdio(a)?, above_stdio(b)?))
}

fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: F_DUPFD_CLOEXEC returns a new descriptor (>= 3) or -1; `fd` stays ours and is
    // closed when dropped.
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` was just created and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Makes `fd` survive `execve` (called in the runner's forked child, before the helper is
/// executed: async-signal-safe).
pub fn keep_on_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor number; no memory is involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Takes the helper's end of the hand-over (inherited as `fd`): checks that it is a unix socket
/// and makes it close-on-exec again.
pub fn adopt_inherited(fd: RawFd) -> Result<OwnedFd, String> {
    if fd <= 2 {
        return Err(format!("descriptor {fd} is a standard stream"));
    }
    // SAFETY: fstat fills a stat buffer we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `fd` is only read.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(format!(
            "descriptor {fd} is not open: {}",
            io::Error::last_os_error()
        ));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(format!("descriptor {fd} is not a socket"));
    }
    // SAFETY: fcntl on a descriptor number.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(format!(
            "cannot mark descriptor {fd} close-on-exec: {}",
            io::Error::last_os_error()
        ));
    }
    // SAFETY: the runner handed this descriptor to this process for it alone; nothing else in the
    // helper refers to it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

fn cmsg_space(n: usize) -> usize {
    let bytes = u32::try_from(n * std::mem::size_of::<RawFd>()).unwrap_or(u32::MAX);
    // SAFETY: CMSG_SPACE is arithmetic.
    unsafe { libc::CMSG_SPACE(bytes) as usize }
}

/// Sends `listeners` (one per port of `ports`, same order) to the runner in one message.
pub fn send(chan: &OwnedFd, ports: &[u16], listeners: &[OwnedFd]) -> Result<(), StepFailure> {
    let mut data = payload(ports);
    let fds: Vec<RawFd> = listeners.iter().map(AsRawFd::as_raw_fd).collect();
    let fd_bytes = std::mem::size_of_val(fds.as_slice());
    // u64 elements: the control buffer must be aligned for cmsghdr.
    let mut control = vec![0u64; cmsg_space(fds.len()).div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space(fds.len()) as _;
    // SAFETY: the control buffer holds CMSG_SPACE(fd_bytes) aligned bytes, so the first header
    // and its data fit; every pointer stays valid until sendmsg returns.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(StepFailure::new(
                restriction::GATEWAY,
                "sendmsg",
                "no room for the descriptors in the message",
            ));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fd_bytes);
    }
    // SAFETY: `msg` and everything it points to live until the call returns.
    let sent = unsafe { libc::sendmsg(chan.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(fail(
            "sendmsg(SCM_RIGHTS)",
            "hand the gateway listeners to the runner",
            &io::Error::last_os_error(),
        ));
    }
    if usize::try_from(sent).ok() != Some(data.len()) {
        return Err(StepFailure::new(
            restriction::GATEWAY,
            "sendmsg(SCM_RIGHTS)",
            format!("sent {sent} of {} bytes", data.len()),
        ));
    }
    Ok(())
}

/// Why the runner did not get its listeners.
#[derive(Debug)]
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
    // One byte more than expected, to see a longer payload as truncated.
    let mut data = vec![0u8; 2 * n + 1];
    let space = cmsg_space(n);
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at buffers we own for the duration of the call. MSG_CMSG_CLOEXEC: the
    // descriptors arrive close-on-exec (the runner may be starting other processes right now).
    let got = unsafe {
        libc::recvmsg(
            chan.as_raw_fd(),
            &mut msg,
            libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT,
        )
    };
    if got < 0 {
        return Err(RecvError::Bad(format!(
            "recvmsg on the hand-over failed: {}",
            io::Error::last_os_error()
        )));
    }
    // Own every descriptor that arrived first, so that any refusal below closes them.
    let mut fds: Vec<OwnedFd> = Vec::new();
    // SAFETY: the kernel filled `control` with `msg_controllen` bytes of well-formed headers;
    // CMSG_FIRSTHDR/CMSG_NXTHDR stay within them, and SCM_RIGHTS data is an array of descriptors
    // now owned by this process.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let count = len / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if got == 0 && fds.is_empty() {
        return Err(RecvError::Closed);
    }
    if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
        return Err(RecvError::Bad("the hand-over message was truncated".into()));
    }
    let got = usize::try_from(got).unwrap_or(0);
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
        keep_on_exec(raw).unwrap();
        std::mem::forget(helper);
        let adopted = adopt_inherited(raw).unwrap();
        // SAFETY: fcntl query on a descriptor we own.
        assert!(unsafe { libc::fcntl(adopted.as_raw_fd(), libc::F_GETFD) } & libc::FD_CLOEXEC != 0);
    }
}
