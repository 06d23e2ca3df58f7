use super::*;
use crate::job::{AgentSpec, JobSpec};
use crate::store::RunnerInfo;

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
