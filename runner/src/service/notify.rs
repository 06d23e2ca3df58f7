//! `sd_notify(3)` without libsystemd: READY, STOPPING, STATUS and WATCHDOG datagrams to
//! `$NOTIFY_SOCKET` when the service runs under systemd (a no-op otherwise).

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// Sends `state` (e.g. "READY=1") to systemd, if it is listening.
pub fn notify(state: &str) {
    if let Some(path) = std::env::var_os("NOTIFY_SOCKET") {
        notify_to(&path, state);
    }
}

/// Sends `state` to the notification socket `path` (`@name` is an abstract socket).
pub fn notify_to(path: &std::ffi::OsStr, state: &str) {
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        if let Ok(addr) = std::os::unix::net::SocketAddr::from_abstract_name(name) {
            let _ = sock.send_to_addr(state.as_bytes(), &addr);
        }
    } else {
        let _ = sock.send_to(state.as_bytes(), std::path::Path::new(&path));
    }
}

/// The watchdog interval systemd asked for (`$WATCHDOG_USEC`), if any.
pub fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("notify");
        let listener = UnixDatagram::bind(&p).unwrap();
        notify_to(p.as_os_str(), "READY=1");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
