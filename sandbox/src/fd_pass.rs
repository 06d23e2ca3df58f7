//! Descriptors handed between the sandbox's trusted processes over unix sockets
//! (`SCM_RIGHTS`): the socketpair they travel on, one `sendmsg` of a payload with descriptors,
//! one `recvmsg` that owns whatever descriptors arrived. Used by the gateway listeners' hand-over
//! ([`crate::native::gateway`]) and the report directory's ([`crate::report_dir`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A socketpair for a hand-over (`SOCK_SEQPACKET`: one message stays one message), both ends
/// close-on-exec and numbered above the standard streams (a process started with one of them
/// closed would otherwise get it, and a later stdio set-up would overwrite it).
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

fn cmsg_space(n: usize) -> usize {
    let bytes = u32::try_from(n * std::mem::size_of::<RawFd>()).unwrap_or(u32::MAX);
    // SAFETY: CMSG_SPACE is arithmetic.
    unsafe { libc::CMSG_SPACE(bytes) as usize }
}

/// Sends `payload` with `fds` (at least one) in one message on the unix socket `chan`; an error
/// when not all of the payload was sent.
pub fn send(chan: BorrowedFd<'_>, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut data = payload.to_vec();
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let fd_bytes = std::mem::size_of_val(raw.as_slice());
    let space = cmsg_space(raw.len());
    // u64 elements: the control buffer must be aligned for cmsghdr.
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
    // SAFETY: the control buffer holds CMSG_SPACE(fd_bytes) aligned bytes, so the first header
    // and its data fit; every pointer stays valid until sendmsg returns.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if raw.is_empty() || cmsg.is_null() {
            return Err(io::Error::other(
                "no room for the descriptors in the message",
            ));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
        std::ptr::copy_nonoverlapping(raw.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), fd_bytes);
    }
    // SAFETY: `msg` and everything it points to live until the call returns.
    let sent = unsafe { libc::sendmsg(chan.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if usize::try_from(sent).ok() != Some(data.len()) {
        return Err(io::Error::other(format!(
            "sent {sent} of {} bytes",
            data.len()
        )));
    }
    Ok(())
}

/// What one [`recv`] got.
#[derive(Debug)]
pub struct Received {
    /// Bytes of the payload read into the buffer (0 at end-of-file).
    pub len: usize,
    /// The descriptors that came with it (close-on-exec), now owned here.
    pub fds: Vec<OwnedFd>,
    /// The payload or the descriptors did not fit (`MSG_TRUNC`/`MSG_CTRUNC`).
    pub truncated: bool,
}

/// One `recvmsg` on `chan` into `buf`, with room for `max_fds` descriptors (any that came are
/// owned by the answer, so a refusal by the caller closes them). `flags` are `recvmsg`'s
/// (`MSG_DONTWAIT`); `MSG_CMSG_CLOEXEC` is always added (the process may be starting others).
pub fn recv(
    chan: BorrowedFd<'_>,
    buf: &mut [u8],
    max_fds: usize,
    flags: i32,
) -> io::Result<Received> {
    let space = cmsg_space(max_fds.max(1));
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is plain old data; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at buffers we own, of the sizes given, alive for the call.
    let n = unsafe { libc::recvmsg(chan.as_raw_fd(), &mut msg, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg.msg_control` up to `msg_controllen` with well-formed
    // headers; the CMSG macros walk it within those bounds, and each SCM_RIGHTS payload holds
    // whole descriptors the kernel installed in this process, now ours.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize)
                    / std::mem::size_of::<RawFd>();
                for i in 0..count {
                    let raw = std::ptr::read_unaligned(data.add(i));
                    if raw >= 0 {
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len: usize::try_from(n).unwrap_or(0),
        fds,
        truncated: msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_payload_and_its_descriptors_arrive_together_and_are_owned() {
        let (a, b) = channel().unwrap();
        assert!(a.as_raw_fd() > 2 && b.as_raw_fd() > 2);
        let (x, y) = channel().unwrap();
        send(a.as_fd(), b"two", &[x.as_fd(), y.as_fd()]).unwrap();
        let mut buf = [0u8; 8];
        let got = recv(b.as_fd(), &mut buf, 4, libc::MSG_DONTWAIT).unwrap();
        assert_eq!(
            (&buf[..got.len], got.fds.len(), got.truncated),
            (&b"two"[..], 2, false)
        );
        // Too little room: truncated, and what did arrive is still owned (closed on drop).
        send(a.as_fd(), b"three", &[x.as_fd(), y.as_fd()]).unwrap();
        let got = recv(b.as_fd(), &mut buf[..2], 1, libc::MSG_DONTWAIT).unwrap();
        assert!(got.truncated);
        assert!(send(a.as_fd(), b"none", &[]).is_err());
        drop(a);
        let end = recv(b.as_fd(), &mut buf, 1, libc::MSG_DONTWAIT).unwrap();
        assert_eq!((end.len, end.fds.len()), (0, 0));
    }
}
