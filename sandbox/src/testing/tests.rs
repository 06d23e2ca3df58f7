//! The fake itself: recording, lanes, writes, and its wait against timeout and cancel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::*;
use crate::capture::Discard;
use crate::mode::Mode;
use crate::outcome::{EndedBy, Termination};
use crate::spec::{StderrMode, StdinMode};

fn spec(dir: &Path, env: &[(&str, &str)]) -> ExecSpec {
    ExecSpec {
        argv: vec!["sh".into(), "-c".into(), "true".into()],
        cwd: dir.to_owned(),
        env: env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        stdin: StdinMode::Piped,
        stderr: StderrMode::Separate,
        timeout: None,
        kill_grace: Duration::from_millis(10),
        sandbox: SandboxRequest::minimal(
            Mode::WorkspaceWrite,
            dir.to_owned(),
            dir.join("home"),
            dir.join("tmp"),
        ),
        control_dir: dir.join("control"),
        listings: None,
        protected_copies: None,
        layers: None,
    }
}

fn io(stdin: &str) -> ExecIo {
    ExecIo {
        stdin: Some(stdin.as_bytes().to_vec()),
        stdout: Box::new(Discard::default()),
        stderr: Box::new(Discard::default()),
    }
}

#[tokio::test]
async fn each_lane_plays_its_scripts_in_order_and_every_spawn_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSandbox::new()
        .with_lanes(|s| if s.env.is_empty() { "b" } else { "a" })
        .of_kind(BackendKind::Docker);
    fake.script("a", vec![Script::exit(3).printing("out")]);
    fake.script("b", vec![Script::exit(0)]);
    let sb: &dyn Sandbox = &fake;
    let mut report = Vec::new();
    for env in [&[("X", "1")][..], &[], &[("X", "2")]] {
        let s = spec(dir.path(), env);
        let run = sb.spawn(&s, io("hello")).await.unwrap();
        report.push(run.wait(CancellationToken::new()).await.unwrap());
    }
    let codes: Vec<_> = report.iter().map(|r| r.outcome.termination).collect();
    assert_eq!(
        codes,
        [
            Termination::Exited { code: 3 },
            Termination::Exited { code: 0 },
            Termination::Exited { code: 1 },
        ]
    );
    assert_eq!(report[0].stdout.bytes_seen, 3);
    assert_eq!(report[0].outcome.enforcement.backend, BackendKind::Docker);
    let calls = fake.calls();
    let lanes: Vec<_> = calls.iter().map(|c| c.lane).collect();
    assert_eq!(lanes, ["a", "b", "a"]);
    assert_eq!(calls[2].var("X"), Some("2"));
    assert_eq!(calls[0].stdin_text(), "hello");
    assert_eq!(calls[0].argv, ["sh", "-c", "true"]);
    assert_eq!(calls[0].request.mode, Mode::WorkspaceWrite);
}

#[tokio::test]
async fn it_writes_its_files_where_the_working_directory_and_the_environment_say() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let fake = FakeSandbox::new();
    fake.script(
        "",
        vec![
            Script::exit(0)
                .writing("a.txt", "A")
                .writing_at_var("REPORT", "{}")
                .writing_at_var("UNSET", "never"),
        ],
    );
    let s = spec(dir.path(), &[("REPORT", report.to_str().unwrap())]);
    let run = fake.spawn(&s, io("")).await.unwrap();
    run.wait(CancellationToken::new()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "A"
    );
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "{}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[tokio::test]
async fn the_timeout_and_the_cancel_stop_it_and_a_cancel_can_fail_it() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSandbox::new();
    let long = Script::exit(0).taking(Duration::from_secs(600));
    fake.script(
        "",
        vec![long.clone(), long.clone(), long.failing_on_cancel()],
    );
    let mut s = spec(dir.path(), &[]);
    s.timeout = Some(Duration::from_millis(50));
    let r = fake.spawn(&s, io("")).await.unwrap();
    let r = r.wait(CancellationToken::new()).await.unwrap();
    assert_eq!(r.outcome.ended_by, EndedBy::Timeout);
    assert_eq!(r.outcome.termination, Termination::Signaled { signal: 9 });
    s.timeout = None;
    let cancel = CancellationToken::new();
    cancel.cancel();
    let r = fake.spawn(&s, io("")).await.unwrap();
    let r = r.wait(cancel.clone()).await.unwrap();
    assert_eq!(r.outcome.ended_by, EndedBy::Cancel);
    let r = fake.spawn(&s, io("")).await.unwrap();
    let e = r.wait(cancel).await.unwrap_err();
    assert!(matches!(e, SandboxError::Unavailable { .. }), "{e}");
}

#[tokio::test]
async fn gateway_ports_get_listeners_and_what_it_sees_is_one_answer() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeSandbox::new().seeing(false);
    let mut s = spec(dir.path(), &[]);
    s.sandbox.gateway_ports = vec![7, 9];
    assert!(!fake.can_see(&s.sandbox, Path::new("/usr/bin/sh")).unwrap());
    assert!(fake.preflight(&s.sandbox).is_ok());
    let mut run = fake.spawn(&s, io("")).await.unwrap();
    let ports: Vec<u16> = run.take_gateway_listeners().iter().map(|l| l.0).collect();
    assert_eq!(ports, [7, 9]);
    assert!(run.take_gateway_listeners().is_empty());
    assert_eq!(run.pid(), None);
}
