use super::*;
use crate::job::{AgentSpec, JobSpec};
use crate::store::RunnerInfo;

fn id(dev_major: u64, dev_minor: u64, ino: u64) -> FileId {
    FileId {
        dev: nix::sys::stat::makedev(dev_major, dev_minor),
        ino,
    }
}

const LOCKS: &str = "\
1: POSIX  ADVISORY  WRITE 900 fd:01:555 0 EOF
2: FLOCK  ADVISORY  WRITE 901 00:2e:777 0 EOF
3: FLOCK  ADVISORY  WRITE 4711 fd:01:555 0 EOF
3: -> FLOCK  ADVISORY  WRITE 4712 fd:01:555 0 EOF
4: OFDLCK ADVISORY  READ  -1 fd:01:556 0 EOF
";

#[test]
fn the_holder_is_the_flock_line_of_the_same_device_and_inode() {
    assert_eq!(holder_pid(LOCKS, id(0xfd, 1, 555)), Some(4711));
    assert_eq!(holder_pid(LOCKS, id(0, 0x2e, 777)), Some(901));
    // POSIX and OFD locks are not workspace locks; nothing else holds inode 556.
    assert_eq!(holder_pid(LOCKS, id(0xfd, 1, 556)), None);
    assert_eq!(holder_pid("", id(0xfd, 1, 555)), None);
}

#[test]
fn an_inode_on_another_device_number_is_taken_only_when_unambiguous() {
    // btrfs: st_dev of a subvolume differs from the superblock device /proc/locks shows.
    assert_eq!(holder_pid(LOCKS, id(0, 0x99, 777)), Some(901));
    let two = "1: FLOCK  ADVISORY  WRITE 10 00:2e:777 0 EOF\n2: FLOCK  ADVISORY  WRITE 11 00:2f:777 0 EOF\n";
    assert_eq!(holder_pid(two, id(0, 0x99, 777)), None);
}

#[test]
fn a_holder_in_another_pid_namespace_is_no_answer() {
    let hidden = "1: FLOCK  ADVISORY  WRITE 0 fd:01:555 0 EOF\n";
    assert_eq!(holder_pid(hidden, id(0xfd, 1, 555)), None);
    let garbled =
        "1: FLOCK  ADVISORY  WRITE x fd:01:555 0 EOF\n2: FLOCK ADVISORY WRITE 5 <none> 0 EOF\n";
    assert_eq!(holder_pid(garbled, id(0xfd, 1, 555)), None);
}

#[test]
fn the_command_line_is_joined_and_bounded() {
    let proc = tempfile::tempdir().unwrap();
    std::fs::create_dir(proc.path().join("42")).unwrap();
    std::fs::write(
        proc.path().join("42/cmdline"),
        b"ralph\0run\0--workspace\0/w\0",
    )
    .unwrap();
    assert_eq!(command_line(proc.path(), 42), "ralph run --workspace /w");
    std::fs::create_dir(proc.path().join("43")).unwrap();
    std::fs::write(proc.path().join("43/cmdline"), "x\0".repeat(1000)).unwrap();
    let long = command_line(proc.path(), 43);
    assert!(long.len() <= COMMAND_BOUND, "{}", long.len());
    assert!(
        long.ends_with(crate::util::text::TRUNCATION_MARKER),
        "{long}"
    );
    assert_eq!(command_line(proc.path(), 44), "");
}

#[test]
fn a_second_lock_in_the_same_process_is_refused_naming_this_process() {
    let dir = tempfile::tempdir().unwrap();
    let first = WorkspaceLock::try_acquire(dir.path()).unwrap();
    assert_eq!(first.path(), dir.path());
    let err = WorkspaceLock::try_acquire(dir.path()).unwrap_err();
    let WorkspaceLockError::Busy { path, holder } = &err else {
        panic!("{err}");
    };
    assert_eq!(path, dir.path());
    match holder {
        Holder::Process { pid, command } => {
            assert_eq!(*pid, std::process::id());
            assert!(!command.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.starts_with(&format!(
            "failed to lock the workspace `{}`: it is in use by pid {}",
            dir.path().display(),
            std::process::id()
        )),
        "{message}"
    );
    drop(first);
    WorkspaceLock::try_acquire(dir.path()).unwrap();
}

#[test]
fn what_is_not_a_directory_cannot_be_locked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path(), &link).unwrap();
    for p in [dir.path().join("missing"), file, link] {
        match WorkspaceLock::try_acquire(&p) {
            Err(e @ WorkspaceLockError::Open { .. }) => {
                assert!(
                    e.to_string().starts_with("failed to open the workspace"),
                    "{e}"
                );
            }
            other => panic!("{}: {other:?}", p.display()),
        }
    }
}

#[test]
fn the_holder_is_named_as_the_job_of_the_store_that_runs_there() {
    let state = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let other_ws = tempfile::tempdir().unwrap();
    let store = Store::open_sqlite(state.path()).unwrap();
    let spec = |ws: &Path| {
        JobSpec::new(
            "objective",
            ws,
            AgentSpec::Command {
                command: "true".into(),
            },
        )
    };
    let me = RunnerInfo::current("run");
    store.submit_started(&spec(other_ws.path()), &me).unwrap();
    let mine = store.submit_started(&spec(ws.path()), &me).unwrap();
    let _held = WorkspaceLock::try_acquire(ws.path()).unwrap();
    let err = WorkspaceLock::try_acquire(ws.path())
        .unwrap_err()
        .in_store(&store);
    let WorkspaceLockError::Busy { holder, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(
        holder,
        &Holder::Job {
            id: mine.clone(),
            role: "run".into(),
            pid: std::process::id()
        }
    );
    assert!(
        err.to_string().contains(&format!(
            "in use by job `{mine}` (`ralph run`, pid {})",
            std::process::id()
        )),
        "{err}"
    );
    // Another process, or a dead runner of the store, is not a job of it.
    let stranger = Holder::Process {
        pid: 1,
        command: "init".into(),
    };
    assert_eq!(stranger.clone().in_store(&store, ws.path()), stranger);
    let unknown_empty = tempfile::tempdir().unwrap();
    let empty = Store::open_sqlite(unknown_empty.path()).unwrap();
    assert_eq!(Holder::Unknown.in_store(&empty, ws.path()), Holder::Unknown);
}

#[test]
fn holders_read_well() {
    let job = Holder::Job {
        id: "j1".into(),
        role: "serve".into(),
        pid: 7,
    };
    assert_eq!(job.to_string(), "job `j1` (`ralph serve`, pid 7)");
    let p = Holder::Process {
        pid: 8,
        command: "flock /w sleep 9".into(),
    };
    assert_eq!(p.to_string(), "pid 8 (`flock /w sleep 9`)");
    let bare = Holder::Process {
        pid: 9,
        command: String::new(),
    };
    assert_eq!(bare.to_string(), "pid 9");
    assert_eq!(
        Holder::Unknown.to_string(),
        "a process not visible from here"
    );
}
