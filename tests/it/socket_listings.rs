//! The socket scans' listings that a `ralph run` keeps in its state directory
//! (`socket-listings`) for the next run: they spare the next run a listing of every directory,
//! never a look. A socket made between two runs, deep in a `--read` tree whose directories the
//! first run listed and kept, is masked in the second: no connection reaches the host's listener.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::Fixture;

fn probe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ralph-probe"))
}

/// Waits (with a deadline) until `dir` has been quiet for `quiet`: the clock is past its change
/// time by that much (a listing is kept only for a directory quiet for a second).
fn wait_quiet(dir: &Path, quiet: Duration) {
    let ctime = std::fs::metadata(dir).unwrap();
    let changed = Duration::new(ctime.ctime() as u64, ctime.ctime_nsec() as u32);
    let deadline = Instant::now() + Duration::from_secs(20);
    while SystemTime::now().duration_since(UNIX_EPOCH).unwrap() < changed + quiet {
        assert!(Instant::now() < deadline, "the clock did not move on");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_socket_made_between_two_runs_in_a_kept_directory_is_masked_in_the_second() {
    let f = Fixture::new();
    let shared = f.root.path().canonicalize().unwrap().join("shared");
    let deep = shared.join("a/b/c");
    std::fs::create_dir_all(&deep).unwrap();
    for d in [&shared, &shared.join("a"), &shared.join("a/b"), &deep] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    wait_quiet(&deep, Duration::from_millis(1500));
    let agent = f.agent(
        "connect.sh",
        r#""$1" unix-connect "$2" > "$RALPH_WORKSPACE/connect.txt" 2>&1
printf '{"status":"continue","summary":"s","evidence":[],"nextSteps":["n"],"blocker":""}' > "$RALPH_REPORT_FILE""#,
    );
    let run = |target: &Path| {
        f.run_cmd(&format!(
            "{} {} {}",
            agent.display(),
            probe().display(),
            target.display()
        ))
        .args(["--max-rounds", "1", "--toolchain", "none"])
        .arg("--read")
        .arg(&shared)
        .arg("--read")
        .arg(probe().parent().unwrap())
        .output()
    };
    // The first run lists the tree (nothing to mask) and keeps the listings.
    run(&deep.join("none.sock")).expect_code(2);
    let kept = f.state.join("socket-listings");
    assert!(
        std::fs::metadata(&kept).is_ok_and(|m| m.len() > 0),
        "no listings kept in {}",
        kept.display()
    );
    // A host process's socket, made since in a directory the first run kept.
    let late = deep.join("late.sock");
    let listener = UnixListener::bind(&late).unwrap();
    listener.set_nonblocking(true).unwrap();
    // Connectable by the round's user, were it not masked.
    std::fs::set_permissions(&late, std::fs::Permissions::from_mode(0o777)).unwrap();
    run(&late).expect_code(2);
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Ok(_) => panic!(
            "the second run's agent connected to the host's socket {}",
            late.display()
        ),
        Err(e) => panic!("accept: {e}"),
    }
    let said = f.read_ws("connect.txt");
    assert!(!said.is_empty() && !said.contains("\"ok\":true"), "{said}");
}
