//! A run through `posix_spawn`: the environment, directory, standard streams and status are
//! the ones given, nothing else is inherited, and the peak memory is read.

use std::ffi::OsString;
use std::io::{Seek, Write};
use std::os::unix::process::ExitStatusExt;

use super::*;

fn sh(script: &str) -> Command {
    Command {
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        env: vec![
            OsString::from("ONLY=this"),
            OsString::from("PATH=/usr/bin:/bin"),
        ],
        cwd: None,
        stdin: None,
        stdout: None,
    }
}

#[test]
fn the_environment_directory_streams_and_status_are_the_ones_given() {
    let d = tempfile::tempdir().unwrap();
    let mut input = tempfile::tempfile().unwrap();
    input.write_all(b"from stdin").unwrap();
    input.rewind().unwrap();
    let mut cmd = sh("env | sort; pwd; cat; echo oops >&2; exit 3");
    cmd.cwd = Some(d.path().to_owned());
    cmd.stdin = Some(input);
    let out = run(cmd).unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // dash adds PWD; nothing of the caller's environment is there.
    assert!(lines.contains(&"ONLY=this"), "{text}");
    assert!(!lines.iter().any(|l| l.starts_with("HOME=")), "{text}");
    assert!(
        text.contains(&format!("{}\n", d.path().display())),
        "{text}"
    );
    assert!(text.ends_with("from stdin"), "{text}");
    assert_eq!(out.stderr, b"oops\n");
    assert!(out.max_rss > 0);
    // No stdin given: /dev/null.
    assert_eq!(run(sh("cat; echo end")).unwrap().stdout, b"end\n");
}

#[test]
fn output_to_a_file_signals_and_a_missing_program_are_told() {
    let mut file = tempfile::tempfile().unwrap();
    let mut cmd = sh("echo to the file; kill -TERM $$");
    cmd.stdout = Some(file.try_clone().unwrap());
    let out = run(cmd).unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
    assert!(out.stdout.is_empty());
    file.rewind().unwrap();
    let mut written = String::new();
    std::io::Read::read_to_string(&mut file, &mut written).unwrap();
    assert_eq!(written, "to the file\n");
    let mut missing = sh("true");
    missing.argv[0] = "/nonexistent/program".into();
    let e = run(missing).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
}

#[test]
fn what_we_open_is_not_inherited() {
    // Rust opens every descriptor close-on-exec: none of ours reaches the child (descriptors
    // the test harness itself inherited without it may).
    // A number far from the ones `ls` opens itself (its own listing of /proc/self/fd).
    let open = std::fs::File::open("/dev/null").unwrap();
    let high = nix::fcntl::fcntl(
        std::os::fd::AsRawFd::as_raw_fd(&open),
        nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(300),
    )
    .unwrap();
    // SAFETY: a descriptor fcntl just made, owned by nothing else.
    let high = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(high) };
    let mine = std::os::fd::AsRawFd::as_raw_fd(&high).to_string();
    assert!(std::os::fd::AsRawFd::as_raw_fd(&high) >= 300);
    let out = run(sh("ls /proc/self/fd")).unwrap();
    let fds: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    for std in ["0", "1", "2"] {
        assert!(fds.iter().any(|f| f == std), "{fds:?}");
    }
    assert!(!fds.contains(&mine), "fd {mine} leaked: {fds:?}");
}

#[test]
fn a_large_stderr_does_not_stop_the_child() {
    let out = run(sh("head -c 1000000 /dev/zero >&2; echo done")).unwrap();
    assert_eq!(out.stderr.len(), 1_000_000);
    assert_eq!(out.stdout, b"done\n");
}
