use std::path::Path;

use super::*;

fn runner() -> RunnerInfo {
    RunnerInfo::current("run")
}

fn wait_for(mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "condition not reached in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_beat(dir: &Path, id: &str) -> Option<Heartbeat> {
    serde_json::from_slice(&std::fs::read(hold_path(dir, id)).ok()?).ok()
}

#[test]
fn a_held_job_is_busy_for_another_holder_and_probes_as_held() {
    let dir = tempfile::tempdir().unwrap();
    let hold = RunHold::try_file(dir.path(), "j1", &runner()).unwrap();
    let e = RunHold::try_file(dir.path(), "j1", &runner()).unwrap_err();
    let HoldError::Busy { what, holder } = &e else {
        panic!("{e}")
    };
    assert!(what.contains("j1"), "{what}");
    assert!(holder.contains(&std::process::id().to_string()), "{holder}");
    assert!(matches!(
        probe_file(dir.path(), "j1").unwrap(),
        Probe::Held { .. }
    ));
    drop(hold);
    assert!(matches!(
        probe_file(dir.path(), "j1").unwrap(),
        Probe::Free { .. }
    ));
}

#[test]
fn a_job_without_a_hold_file_is_missing_and_no_file_is_made() {
    let dir = tempfile::tempdir().unwrap();
    assert!(matches!(
        probe_file(dir.path(), "never").unwrap(),
        Probe::Missing
    ));
    assert!(!hold_path(dir.path(), "never").exists());
}

#[test]
fn two_probers_of_a_free_hold_take_it_once() {
    let dir = tempfile::tempdir().unwrap();
    drop(RunHold::try_file(dir.path(), "j2", &runner()).unwrap());
    let first = probe_file(dir.path(), "j2").unwrap();
    assert!(matches!(first, Probe::Free { .. }));
    assert!(matches!(
        probe_file(dir.path(), "j2").unwrap(),
        Probe::Held { .. }
    ));
    drop(first);
    assert!(matches!(
        probe_file(dir.path(), "j2").unwrap(),
        Probe::Free { .. }
    ));
}

#[test]
fn the_heartbeat_carries_the_monotonic_ran_time_and_the_open_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let hold = RunHold::try_file(dir.path(), "j3", &runner()).unwrap();
    let follow = |e: &Event| {
        assert!(hold.beat.follow(e));
        hold.sink.write(&hold.beat.now());
    };
    let ev = |kind| Event {
        job_id: "j3".into(),
        seq: 3,
        // A wall clock far in the past: heartbeats do not read it.
        at: "1990-01-01T00:00:00.000Z".into(),
        kind,
    };
    follow(&ev(EventKind::RoundStarted {
        round: 1,
        attempt: 1,
        dir: "/x".into(),
    }));
    let b = read_beat(dir.path(), "j3").unwrap();
    assert_eq!(b.attempt.map(|(r, a, _)| (r, a)), Some((1, 1)));
    assert_eq!(b.pid, std::process::id());
    wait_for(|| {
        read_beat(dir.path(), "j3")
            .is_some_and(|b| b.ran_ms >= 1000 && b.attempt.is_some_and(|(_, _, ms)| ms >= 1000))
    });
    drop(hold);
    // The last heartbeat stays for recovery; a probe reads it.
    let Probe::Free { last, who, .. } = probe_file(dir.path(), "j3").unwrap() else {
        panic!("not free")
    };
    assert!(last.unwrap().ran_ms >= 1000);
    assert!(who.contains(&std::process::id().to_string()), "{who}");
}

#[test]
fn a_second_exclusive_file_is_refused_naming_the_holder_pid_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("serve.lock");
    let first = ExclusiveFile::try_acquire(&p, "the state directory").unwrap();
    let e = ExclusiveFile::try_acquire(&p, "the state directory").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    drop(first);
    let again = ExclusiveFile::try_acquire(&p, "the state directory").unwrap();
    assert_eq!(again.path(), p);
}

#[test]
fn the_hold_is_released_when_its_holder_process_dies() {
    let dir = tempfile::tempdir().unwrap();
    let path = hold_path(dir.path(), "j4");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // A child process takes the lock with flock(1) and is killed.
    let file = std::fs::File::create(&path).unwrap();
    let mut child = std::process::Command::new("flock")
        .args(["-x", "-o"])
        .arg(path.to_str().unwrap())
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    drop(file);
    wait_for(|| matches!(probe_file(dir.path(), "j4").unwrap(), Probe::Held { .. }));
    child.kill().unwrap();
    child.wait().unwrap();
    wait_for(|| matches!(probe_file(dir.path(), "j4").unwrap(), Probe::Free { .. }));
}

#[test]
fn a_lock_whose_recorded_holder_died_is_waited_for_while_its_child_still_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("serve.lock");
    let released = dir.path().join("released");
    // `flock` locks the shell's descriptor and exits; the shell leaves a child holding a copy
    // of it for a moment, then exits too: /proc/locks names a dead pid while the lock is held.
    let status = std::process::Command::new("/bin/sh")
        .arg("-c")
        .arg(r#"exec 9>"$1"; flock -x 9; (sleep 0.3; : > "$2") & exit 0"#)
        .arg("sh")
        .arg(&p)
        .arg(&released)
        .status()
        .unwrap();
    assert!(status.success());
    let lock = ExclusiveFile::try_acquire(&p, "the state directory").unwrap();
    assert!(
        released.exists(),
        "taken before the child let go of its copy"
    );
    // A live holder is still refused at once.
    let e = ExclusiveFile::try_acquire(&p, "the state directory").unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("pid {}", std::process::id())),
        "{e}"
    );
    drop(lock);
}

/// A lock `/proc/locks` names no holder for (let go between the failed `flock` and the read, or
/// held from another pid namespace) is retried until `DEAD_HOLDER_WAIT`, like a dead holder's;
/// a live holder of this host is refused at once.
#[test]
fn an_unnamed_holder_is_retried_and_a_live_one_is_not() {
    use crate::util::flock_holder::Holder;
    assert!(holder_gone(&Holder::Unknown));
    assert!(!holder_gone(&Holder::Process {
        pid: std::process::id(),
        command: String::new(),
    }));
}
