//! The helper's spawn against real processes: what it inherits, its group, its end.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

fn sh(script: &str, stdin: Stdin, keep: Vec<RawFd>) -> Spawned {
    spawn(&Spec {
        program: Path::new("/bin/sh"),
        args: vec!["-c".into(), script.into(), "sh".into()],
        env: vec!["ONLY=this".into()],
        stdin,
        keep,
    })
    .unwrap()
}

async fn output(mut s: Spawned) -> (String, String, ExitStatus) {
    let (mut out, mut err) = (String::new(), String::new());
    s.stdout.read_to_string(&mut out).await.unwrap();
    s.stderr.read_to_string(&mut err).await.unwrap();
    let status = s.child.wait().await.unwrap();
    (out, err, status)
}

#[tokio::test]
async fn the_helper_gets_its_streams_its_environment_only_and_its_own_group() {
    let s = sh(
        "echo out; echo err >&2; env | sort; ps -o pgid= -p $$ | tr -d ' '; echo $$; exit 3",
        Stdin::Null,
        Vec::new(),
    );
    let pid = s.child.id();
    let (out, err, status) = output(s).await;
    assert_eq!(err, "err\n");
    assert_eq!(status.code(), Some(3));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "out");
    // sh adds PWD (and may add SHLVL): nothing of the runner's environment.
    assert!(lines.contains(&"ONLY=this"), "{out}");
    assert!(!out.contains("PATH=/"), "{out}");
    let (pgid, me) = (lines[lines.len() - 2], lines[lines.len() - 1]);
    assert_eq!(
        (pgid, me),
        (pid.to_string().as_str(), pid.to_string().as_str())
    );
}

#[tokio::test]
async fn only_the_named_descriptors_are_inherited() {
    let (kept_r, _kept_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (other_r, _other_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    let (k, o) = (kept_r.as_raw_fd(), other_r.as_raw_fd());
    let s = sh(
        &format!(
            "test -e /proc/self/fd/{k} && echo kept; test -e /proc/self/fd/{o} || echo closed"
        ),
        Stdin::Null,
        vec![k],
    );
    let (out, _, status) = output(s).await;
    assert!(status.success());
    assert_eq!(out, "kept\nclosed\n");
    // The runner's copy is still close-on-exec: only the child's lost the flag.
    let flags = nix::fcntl::fcntl(k, nix::fcntl::FcntlArg::F_GETFD).unwrap();
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
}

#[tokio::test]
async fn a_piped_stdin_reaches_the_helper() {
    let mut s = sh("cat", Stdin::Piped, Vec::new());
    let mut w = s.stdin.take().unwrap();
    w.write_all(b"the prompt").await.unwrap();
    drop(w);
    let (out, _, status) = output(s).await;
    assert!(status.success());
    assert_eq!(out, "the prompt");
}

#[tokio::test]
async fn a_killed_helper_reports_its_signal_and_a_dropped_one_is_killed_and_reaped() {
    let mut s = sh("sleep 60", Stdin::Null, Vec::new());
    s.child.start_kill().unwrap();
    let status = s.child.wait().await.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // Waiting again gives the same status; killing a reaped child does nothing.
    assert_eq!(s.child.wait().await.unwrap().signal(), Some(libc::SIGKILL));
    s.child.start_kill().unwrap();

    let s = sh("sleep 60", Stdin::Null, Vec::new());
    let pid = s.child.id();
    drop(s);
    // Gone, not left a zombie: /proc/<pid> disappears once it is reaped.
    let deadline = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "helper {pid} was not reaped");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `pid`'s state letter (`Z`: exited, not reaped); `None` once reaped.
fn state_of(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

#[test]
fn an_unfollowed_child_says_when_it_exited_and_is_killed_and_reaped_when_dropped() {
    // Outside any runtime (as a standby waits): plain descriptors only.
    let spec = Spec {
        program: Path::new("/bin/sleep"),
        args: vec!["600".into()],
        env: Vec::new(),
        stdin: Stdin::Null,
        keep: Vec::new(),
    };
    let started = start(&spec).unwrap();
    let pid = started.child.id();
    assert!(!started.child.exited());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !started.child.exited() {
        assert!(Instant::now() < deadline, "never seen exited");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Seen exited without being reaped.
    assert_eq!(state_of(pid), Some('Z'));
    drop(started);
    let deadline = Instant::now() + Duration::from_secs(30);
    while state_of(pid).is_some() {
        assert!(Instant::now() < deadline, "never reaped");
        std::thread::sleep(Duration::from_millis(5));
    }

    // A live one dropped unfollowed: killed and reaped.
    let started = start(&spec).unwrap();
    let pid = started.child.id();
    drop(started);
    let deadline = Instant::now() + Duration::from_secs(30);
    while state_of(pid).is_some() {
        assert!(Instant::now() < deadline, "a dropped child was left");
        std::thread::sleep(Duration::from_millis(5));
    }
}
