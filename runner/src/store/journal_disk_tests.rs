//! A journal on a full disk, on a real SQLite store in a small tmpfs (needs root to mount; it
//! skips, saying why, elsewhere): the first write that finds no room frees the reserve; a later
//! one waits for room to come back, up to [`super::journal::DISK_FULL_PATIENCE`]; a disk that
//! stays full fails the write within it, and the writes after that fail at once.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::journal::{DISK_FULL_PATIENCE, Journal};
use super::{EventKind, RunnerInfo, Store};
use crate::job::{AgentSpec, JobSpec};

struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().unwrap();
        match nix::mount::mount(
            Some("tmpfs"),
            dir.path(),
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={size}").as_str()),
        ) {
            Ok(()) => Some(Self { dir }),
            Err(e) => {
                assert!(!nix::unistd::geteuid().is_root(), "root cannot mount: {e}");
                eprintln!("skipped: mounting a tmpfs needs root ({e})");
                None
            }
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Fills the disk of `dir` with the file `name` until it takes no more.
fn fill(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    while f.write_all(&chunk).is_ok() {}
    while f.write_all(&chunk[..512]).is_ok() {}
    p
}

fn spawned(pid: u32) -> EventKind {
    EventKind::RoundSpawned {
        round: 1,
        attempt: 1,
        pid: Some(pid),
    }
}

#[test]
fn a_journal_on_a_full_disk_frees_the_reserve_then_waits_a_bounded_time_for_room() {
    let Some(disk) = SmallDisk::mount("16m") else {
        return;
    };
    let state = disk.path().join("state");
    let store = Arc::new(Store::open_sqlite(&state).unwrap());
    assert!(state.join(super::reserve::RESERVE_FILE).exists());
    let id = store
        .submit(&JobSpec::new(
            "objective",
            "/tmp/ws",
            AgentSpec::Command {
                command: "true".into(),
            },
        ))
        .unwrap();
    assert!(store.claim(&id, &RunnerInfo::current("test")).unwrap());
    let mut j = Journal::open(store.clone(), &id, vec![]).unwrap();
    j.record(EventKind::RoundStarted {
        round: 1,
        attempt: 1,
        dir: "/tmp/x".into(),
    })
    .unwrap();

    // Full: the reserve's room takes the events (and the disk is marked full).
    fill(disk.path(), "fill-1");
    let mut pid = 1;
    while state.join(super::reserve::RESERVE_FILE).exists() {
        j.record(spawned(pid)).unwrap();
        pid += 1;
        assert!(pid < 10_000, "the journal never found the disk full");
    }
    assert!(store.disk_full().is_some());

    // Full again, without a reserve: a write waits until room comes back.
    let second = fill(disk.path(), "fill-2");
    let began = Instant::now();
    let removed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let freer = std::thread::spawn({
        let removed = removed.clone();
        move || {
            std::thread::sleep(Duration::from_millis(1500));
            std::fs::remove_file(second).unwrap();
            removed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    // Writes that still fit in pages SQLite already has return at once; the first that needs
    // a new one waits for the room, and succeeds. The writing stops there: more writes would
    // only fill the little room that came back (on a fast machine, within the patience).
    let mut longest = Duration::ZERO;
    loop {
        let t = Instant::now();
        j.record(spawned(pid)).unwrap();
        longest = longest.max(t.elapsed());
        pid += 1;
        if removed.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        assert!(
            began.elapsed() < DISK_FULL_PATIENCE,
            "the room never came back"
        );
    }
    freer.join().unwrap();
    assert!(
        longest >= Duration::from_millis(300),
        "no write waited: {longest:?}"
    );

    // A disk that stays full: the write fails within the patience (with the disk-full error)...
    fill(disk.path(), "fill-3");
    let began = Instant::now();
    let failed = loop {
        match j.record(spawned(pid)) {
            Ok(_) => pid += 1,
            Err(e) => break e,
        }
        assert!(
            began.elapsed() < 3 * DISK_FULL_PATIENCE,
            "the journal never found the disk full again"
        );
    };
    let waited = began.elapsed();
    assert!(failed.is_disk_full(), "{failed}");
    assert!(
        waited >= DISK_FULL_PATIENCE - Duration::from_millis(100)
            && waited < DISK_FULL_PATIENCE + Duration::from_secs(5),
        "{waited:?}"
    );
    // ... and the next fails at once (the job's close is not delayed again).
    let began = Instant::now();
    assert!(j.record(spawned(pid)).is_err());
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );

    // Room again: the journal goes on.
    for f in ["fill-1", "fill-3"] {
        std::fs::remove_file(disk.path().join(f)).unwrap();
    }
    j.record(spawned(pid)).unwrap();
}
