//! The zygote's runner side against processes that are not a zygote (its failures), and the
//! argument rewriting's guard. The zygote itself, forking real standbys, is checked end to end
//! in `tests/it/standby_helper.rs`.

use super::*;
use crate::native::protocol::ZYGOTE_ENV;

#[test]
fn the_zygote_s_name_and_the_helper_s_are_as_long() {
    assert_eq!(ZYGOTE_ARG.len(), HELPER_ARG.len());
    assert_ne!(ZYGOTE_ARG, HELPER_ARG);
}

#[test]
fn a_zygote_that_never_answers_or_is_gone_fails_the_fork_within_its_wait() {
    // `/bin/true` started as if it were the zygote: it exits at once, without an answer.
    let z = Zygote::start(Path::new("/bin/true"), Duration::from_secs(1)).unwrap();
    let start = Instant::now();
    let err = z.fork().map(|_| ()).unwrap_err();
    assert!(
        start.elapsed() <= ANSWER_WAIT + Duration::from_secs(5),
        "{err}"
    );
}

/// A stand-in zygote (python): takes one request, starts `sleep 600` as its own child, and
/// answers with that child's pid and pidfd only after `delay_ms`, then writes `marker` and waits.
fn late_zygote(dir: &Path, delay_ms: u64, marker: &Path) -> std::path::PathBuf {
    let script = dir.join("late-zygote");
    std::fs::write(
        &script,
        format!(
            r#"#!/usr/bin/env python3
import os, socket, struct, subprocess, time
fd = int(os.environ["{ZYGOTE_ENV}"])
s = socket.socket(fileno=fd)
msg, anc, flags, addr = s.recvmsg(8, socket.CMSG_SPACE(3 * 4))
child = subprocess.Popen(["sleep", "600"])
pidfd = os.pidfd_open(child.pid)
time.sleep({delay})
s.sendmsg([struct.pack("<I", child.pid)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", pidfd))])
open("{marker}", "w").write(str(child.pid))
time.sleep(600)
"#,
            delay = delay_ms as f64 / 1000.0,
            marker = marker.display(),
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[test]
fn an_answer_that_came_too_late_is_not_left_running_when_the_zygote_is_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("answered");
    let exe = late_zygote(dir.path(), 300, &marker);
    let z = Zygote::start(&exe, Duration::from_secs(1)).unwrap();
    // The runner gives up waiting first (here after 50 ms)...
    let err = z
        .fork_within(Duration::from_millis(50))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    // ... the answer comes meanwhile (the test waits for it, with a deadline) ...
    let deadline = Instant::now() + Duration::from_secs(60);
    let pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&marker)
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the stand-in never answered");
        std::thread::sleep(Duration::from_millis(10));
    };
    // ... and stopping the zygote kills what that answer named.
    z.stop();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next().map(str::to_owned))
            });
        if matches!(state.as_deref(), None | Some("Z")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the answered process is still running: {state:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
