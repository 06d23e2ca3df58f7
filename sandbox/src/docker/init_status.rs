//! The container init's report to the runner: whether the command could be executed at all,
//! and the CPU time and peak memory of every process it reaped (`getrusage(RUSAGE_CHILDREN)`,
//! as the native supervisor measures them).
//!
//! The channel cannot be forged by the command. The runner listens on a unix socket in the
//! run's control directory, mounted at [`STATUS_PATH`]; the init connects *before* it forks the
//! command, so its connection is the first in the listener's queue, and the runner reads that
//! one only. The init's end is close-on-exec and the init is not dumpable (its `/proc/1/fd` is
//! out of the command's reach): whatever the command writes to the socket, or prints, or exits
//! with, is never read as the init's word.
//!
//! Lines: `exec_failed <errno> <message>` (written by the forked child when `execve` failed,
//! before anything of the command ran) and `usage <user_ms> <system_ms> <max_rss_kib>` (written
//! by the init at the end, after every process of the container is gone). With a report
//! directory, the first message is `report_dir` carrying the descriptor of its tmpfs
//! (`SCM_RIGHTS`), which the runner keeps: it holds the tmpfs after the container is gone, so
//! its report files are copied out then ([`crate::report_dir`]).

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::outcome::ResourceUsage;

/// Where the status socket is mounted in the container.
pub const STATUS_PATH: &str = "/.ralph-status";
/// The status socket's name in the run's control directory.
pub const STATUS_FILE: &str = "container-status.sock";

/// The most the runner reads of the init's report.
const REPORT_CAP: u64 = 64 * 1024;

/// A failure to set up the status socket.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatusError {
    /// A system call on the socket failed.
    #[error("failed to {action} the container's status socket {}: {source}", path.display())]
    Socket {
        /// What was attempted.
        action: &'static str,
        /// The socket.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// The runner's end: the listening socket in the control directory.
#[derive(Debug)]
pub struct StatusListener {
    /// The socket file (mounted read-only at [`STATUS_PATH`]).
    pub path: PathBuf,
    listener: UnixListener,
}

impl StatusListener {
    /// Binds the socket in `control_dir` (replacing a stale one), owned by `uid:gid` with mode
    /// 0600 so only the container's user may connect. Bound through `/proc/self/fd` so a long
    /// control directory does not hit the 108-byte limit of a socket path.
    pub fn bind(control_dir: &Path, uid: u32, gid: u32) -> Result<Self, StatusError> {
        let (path, listener) = bind_private(control_dir, STATUS_FILE, uid, gid)?;
        Ok(Self { path, listener })
    }

    /// The init's report, read once the container is gone: the first connection only (the
    /// init's), to its end. `None` when the init never connected.
    pub fn collect(&self) -> Option<InitReport> {
        self.collect_with_dir().map(|(r, _)| r)
    }

    /// [`StatusListener::collect`], and the report directory's tmpfs when the init handed one
    /// over.
    pub fn collect_with_dir(&self) -> Option<(InitReport, Option<OwnedFd>)> {
        let (stream, _) = self.listener.accept().ok()?;
        Some(read_report(stream))
    }
}

/// A listening unix socket `file` in `control_dir` (replacing a stale one), non-blocking, owned
/// by `uid:gid` with mode 0600 so only the container's user may connect. Bound through
/// `/proc/self/fd` so a long control directory does not hit the 108-byte limit of a socket path.
pub(super) fn bind_private(
    control_dir: &Path,
    file: &str,
    uid: u32,
    gid: u32,
) -> Result<(PathBuf, UnixListener), StatusError> {
    let path = control_dir.join(file);
    let fail = |action, source| StatusError::Socket {
        action,
        path: path.clone(),
        source,
    };
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail("remove", e)),
    }
    let dir = std::fs::File::open(control_dir).map_err(|e| fail("open the directory of", e))?;
    let short = format!("/proc/self/fd/{}/{file}", dir.as_raw_fd());
    let listener = UnixListener::bind(&short).map_err(|e| fail("bind", e))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| fail("configure", e))?;
    std::os::unix::fs::chown(&path, Some(uid), Some(gid)).map_err(|e| fail("hand over", e))?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| fail("restrict", e))?;
    Ok((path, listener))
}

impl Drop for StatusListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn read_report(stream: UnixStream) -> (InitReport, Option<OwnedFd>) {
    // The container is gone: its end is closed, so the read ends at once; bounded anyway.
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut bytes = Vec::new();
    let mut dir: Option<OwnedFd> = None;
    let mut buf = vec![0u8; 8192];
    while (bytes.len() as u64) < REPORT_CAP {
        match crate::report_dir::recv_with_fds(stream.as_fd(), &mut buf, 0) {
            Ok((0, _)) | Err(_) => break,
            Ok((n, fds)) => {
                // The first descriptor is the report directory's; any other is closed.
                for fd in fds {
                    dir.get_or_insert(fd);
                }
                bytes.extend_from_slice(&buf[..n]);
            }
        }
    }
    bytes.truncate(usize::try_from(REPORT_CAP).unwrap_or(usize::MAX));
    (parse(&String::from_utf8_lossy(&bytes)), dir)
}

/// What the init said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitReport {
    /// The command could not be executed: why.
    pub exec_failed: Option<String>,
    /// The CPU time and peak memory of every process the init reaped.
    pub usage: Option<ResourceUsage>,
    /// How the command ended, from its wait status (`status exited N` / `status signaled N`):
    /// an exit code of 137 is an exit code, not a SIGKILL.
    pub status: Option<crate::outcome::Termination>,
    /// The container's memory cgroup killed a process for memory (`oom_kills N`, N > 0).
    pub oom_killed: bool,
}

/// Parses the init's lines (module doc); unknown or malformed lines are ignored.
pub fn parse(text: &str) -> InitReport {
    let mut out = InitReport::default();
    for line in text.lines() {
        let mut words = line.splitn(2, ' ');
        match (words.next(), words.next()) {
            (Some("exec_failed"), Some(rest)) => {
                let message = rest.split_once(' ').map_or(rest, |(_, m)| m);
                out.exec_failed = Some(message.to_owned());
            }
            (Some("status"), Some(rest)) => {
                let mut w = rest.split_whitespace();
                out.status = match (w.next(), w.next().and_then(|n| n.parse::<i32>().ok())) {
                    (Some("exited"), Some(code)) => {
                        Some(crate::outcome::Termination::Exited { code })
                    }
                    (Some("signaled"), Some(signal)) if signal > 0 => {
                        Some(crate::outcome::Termination::Signaled { signal })
                    }
                    _ => out.status,
                };
            }
            (Some("oom_kills"), Some(rest)) => {
                out.oom_killed = rest.trim().parse::<u64>().is_ok_and(|n| n > 0);
            }
            (Some("usage"), Some(rest)) => {
                let n: Vec<u64> = rest
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
                if let [user, system, rss] = n[..] {
                    out.usage = Some(ResourceUsage {
                        user_cpu_ms: user,
                        system_cpu_ms: system,
                        max_rss_kib: rss,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// The `exec_failed` line.
pub fn exec_failed_line(errno: i32, message: &str) -> String {
    format!("exec_failed {errno} {}\n", message.replace('\n', " "))
}

/// The `status` line for the command's raw wait status.
pub fn status_line(raw: i32) -> String {
    if libc::WIFSIGNALED(raw) {
        format!("status signaled {}\n", libc::WTERMSIG(raw))
    } else {
        format!("status exited {}\n", libc::WEXITSTATUS(raw))
    }
}

/// The `oom_kills` line: the memory cgroup's count of processes killed for memory.
pub fn oom_kills_line(count: u64) -> String {
    format!("oom_kills {count}\n")
}

/// The count of processes the container's memory cgroup killed for memory, as the container
/// sees its own cgroup: cgroup v1 `memory.oom_control` (`oom_kill N`) or v2 `memory.events`
/// (`oom_kill N`). `None` when neither is readable.
pub fn oom_kills(cgroup_root: &Path) -> Option<u64> {
    ["memory/memory.oom_control", "memory.events"]
        .iter()
        .find_map(|f| std::fs::read_to_string(cgroup_root.join(f)).ok())
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("oom_kill ")
                    .and_then(|n| n.trim().parse::<u64>().ok())
            })
        })
}

/// The `usage` line from `getrusage(RUSAGE_CHILDREN)`.
pub fn usage_line(usage: &libc::rusage) -> String {
    let ms = |tv: libc::timeval| {
        u64::try_from(tv.tv_sec).unwrap_or(0) * 1000 + u64::try_from(tv.tv_usec).unwrap_or(0) / 1000
    };
    format!(
        "usage {} {} {}\n",
        ms(usage.ru_utime),
        ms(usage.ru_stime),
        u64::try_from(usage.ru_maxrss).unwrap_or(0)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lines_round_trip() {
        // SAFETY: rusage is plain data; all zeroes is a valid value.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        u.ru_utime.tv_sec = 1;
        u.ru_utime.tv_usec = 250_000;
        u.ru_stime.tv_usec = 40_000;
        u.ru_maxrss = 70_000;
        let text = format!(
            "{}{}",
            exec_failed_line(
                2,
                "failed to run /no/such: ENOENT: No such file\nor directory"
            ),
            usage_line(&u)
        );
        let r = parse(&text);
        assert_eq!(
            r.exec_failed.as_deref(),
            Some("failed to run /no/such: ENOENT: No such file or directory")
        );
        assert_eq!(
            r.usage,
            Some(ResourceUsage {
                user_cpu_ms: 1250,
                system_cpu_ms: 40,
                max_rss_kib: 70_000
            })
        );
    }

    #[test]
    fn the_status_is_the_commands_word_an_exit_of_137_included() {
        use crate::outcome::Termination;
        let exited = |code: i32| code << 8;
        let r = parse(&(status_line(exited(137)) + &oom_kills_line(0)));
        assert_eq!(r.status, Some(Termination::Exited { code: 137 }));
        assert!(!r.oom_killed);
        let r = parse(&(status_line(libc::SIGKILL) + &oom_kills_line(2)));
        assert_eq!(r.status, Some(Termination::Signaled { signal: 9 }));
        assert!(r.oom_killed);
        assert_eq!(parse("status signaled 0\nstatus odd 3\n").status, None);
    }

    #[test]
    fn the_oom_count_is_read_from_either_cgroup_version() {
        let v1 = tempfile::tempdir().unwrap();
        std::fs::create_dir(v1.path().join("memory")).unwrap();
        std::fs::write(
            v1.path().join("memory/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        )
        .unwrap();
        assert_eq!(oom_kills(v1.path()), Some(3));
        let v2 = tempfile::tempdir().unwrap();
        std::fs::write(
            v2.path().join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
        )
        .unwrap();
        assert_eq!(oom_kills(v2.path()), Some(1));
        assert_eq!(oom_kills(&v2.path().join("none")), None);
    }

    #[test]
    fn nothing_or_garbage_is_unknown() {
        assert_eq!(parse(""), InitReport::default());
        assert_eq!(
            parse("usage 1 2\nexec_failed\nhello"),
            InitReport::default()
        );
    }

    #[test]
    fn only_the_first_connection_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let uid = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let l = StatusListener::bind(dir.path(), uid, gid).unwrap();
        assert!(l.collect().is_none(), "nobody connected yet");
        let mut first = UnixStream::connect(&l.path).unwrap();
        let mut second = UnixStream::connect(&l.path).unwrap();
        std::io::Write::write_all(&mut second, b"exec_failed 2 forged\n").unwrap();
        std::io::Write::write_all(&mut first, b"usage 5 6 7\n").unwrap();
        drop((first, second));
        let r = l.collect().unwrap();
        assert_eq!(r.exec_failed, None);
        assert_eq!(r.usage.map(|u| u.max_rss_kib), Some(7));
        let path = l.path.clone();
        drop(l);
        assert!(!path.exists());
    }
}
