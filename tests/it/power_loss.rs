//! A power loss while a round runs (SPEC §8: "a round's start is journalled before its process
//! is spawned"), asserted on a disk image: the state directory lives on an ext4 mounted from an
//! image through a loop device; while the round's agent runs, the image is copied as the disk
//! holds it (what the filesystem has written to it, without a sync: its page cache, lost in a
//! power cut, is not in the copy). The copy, repaired as a reboot would (`e2fsck` replays the
//! journal) and mounted, must hold the job and its round's start; and the next `ralph run` on it
//! closes that job as `interrupted` without re-running anything. A job `ralph serve` answered
//! `201` for is on the disk from that answer on, before any of it runs.
//!
//! The filesystem is mounted with `commit=300`, so its journal does not flush on a timer behind
//! the test: what the copy holds was flushed by ralph (or by writeback, which only ever adds).
//! Mounting needs root; elsewhere the case skips, saying why.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::server::{Server, job};
use common::{Fixture, complete_report, journal, wait_until};
use ralph_runner::store::{JobState, Store};

/// An ext4 on an image file, loop-mounted for one test (unmounted, with its copies, when
/// dropped).
struct ImageDisk {
    dir: tempfile::TempDir,
    mounted: Vec<PathBuf>,
}

fn sh(what: &str, cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

impl ImageDisk {
    fn new(test: &str) -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("{test}: skipped: mounting a disk image needs root");
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("ralph-power-loss-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(128 << 20)
            .unwrap();
        sh(
            "mkfs.ext4",
            Command::new("mkfs.ext4")
                .args(["-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"])
                .arg(&img),
        );
        let mut disk = Self {
            dir,
            mounted: Vec::new(),
        };
        disk.mount("disk.img", "disk");
        Some(disk)
    }

    /// Mounts the image `name` of the test's directory on the directory `at` (made).
    fn mount(&mut self, name: &str, at: &str) -> PathBuf {
        let to = self.dir.path().join(at);
        std::fs::create_dir_all(&to).unwrap();
        sh(
            "mount",
            Command::new("mount")
                .args(["-o", "loop,commit=300"])
                .arg(self.dir.path().join(name))
                .arg(&to),
        );
        self.mounted.push(to.clone());
        to
    }

    /// Where the disk is mounted.
    fn path(&self) -> PathBuf {
        self.dir.path().join("disk")
    }

    /// The power is cut now: a copy of the image as the disk holds it, repaired as at the next
    /// boot, and mounted; returns where.
    fn cut_power(&mut self) -> PathBuf {
        std::fs::copy(
            self.dir.path().join("disk.img"),
            self.dir.path().join("after.img"),
        )
        .unwrap();
        // 0: clean, 1: errors corrected (the journal replayed counts as one).
        let fsck = Command::new("e2fsck")
            .args(["-f", "-y"])
            .arg(self.dir.path().join("after.img"))
            .output()
            .unwrap();
        assert!(
            matches!(fsck.status.code(), Some(0 | 1)),
            "e2fsck: {}\n{}",
            fsck.status,
            String::from_utf8_lossy(&fsck.stdout)
        );
        self.mount("after.img", "after")
    }
}

impl Drop for ImageDisk {
    fn drop(&mut self) {
        for m in self.mounted.iter().rev() {
            let _ = Command::new("umount").arg(m).status();
        }
    }
}

/// An agent that says it runs, then waits (at most a minute) for the test to have cut the
/// power before it reports.
fn waiting_agent() -> String {
    format!(
        r#"touch "$RALPH_WORKSPACE/running"
i=0; while [ ! -e "$RALPH_WORKSPACE/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
echo '{}' > "$RALPH_REPORT_FILE""#,
        complete_report("done")
    )
}

#[test]
fn a_power_loss_while_a_round_runs_keeps_the_job_and_the_rounds_start() {
    let Some(mut disk) = ImageDisk::new("power_loss") else {
        return;
    };
    let mut f = Fixture::new();
    f.state = disk.path().join("state");
    let agent = f.agent("wait.sh", &waiting_agent());
    let mut child = f.run(&agent).args(["--max-rounds", "2"]).spawn();
    wait_until("the round runs", Duration::from_secs(60), || {
        assert!(child.try_wait().unwrap().is_none(), "ralph run exited");
        f.ws.join("running").exists()
    });
    let after = disk.cut_power();
    std::fs::write(f.ws.join("go"), "").unwrap();
    assert!(child.wait().unwrap().success(), "the run itself completes");

    // What the disk held: the job, running, and its first round's start.
    let state = after.join("state");
    let running = Store::open(&state, None)
        .unwrap()
        .job_ids_in_state(JobState::Running)
        .unwrap();
    assert_eq!(running.len(), 1, "the job is on the disk: {running:?}");
    let id = &running[0];
    let ev = journal(&state, id);
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types.first().copied(),
        Some("job_submitted"),
        "the journal on the disk: {types:?}"
    );
    assert!(
        ev.iter()
            .any(|e| e["type"] == "round_started" && e["round"] == 1),
        "round 1's start is on the disk before its process ran: {types:?}"
    );

    // After the reboot: the next run closes it as interrupted, re-running nothing.
    std::fs::remove_file(f.ws.join("running")).unwrap();
    let mut next = Fixture::new();
    next.state = state.clone();
    let ok = next.agent(
        "ok.sh",
        &format!("echo '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    let done = next.run(&ok).args(["--max-rounds", "1"]).output();
    assert_eq!(done.code, 0, "{}", done.stderr);
    assert!(
        done.stderr
            .contains("closed 1 job(s) whose runner died as interrupted"),
        "{}",
        done.stderr
    );
    let ev = journal(&state, id);
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "job_finished", "{last}");
    assert_eq!(last["outcome"], "interrupted", "{last}");
    assert!(
        !f.ws.join("running").exists(),
        "nothing of the job ran again"
    );
}

#[test]
fn a_submission_the_service_answered_is_on_the_disk_before_it_runs() {
    let Some(mut disk) = ImageDisk::new("power_loss") else {
        return;
    };
    // One job at a time: the first holds the slot, so the second stays queued and nothing but
    // its own submission can have flushed it.
    let server = Server::new_in("max_concurrent_jobs = 1", &disk.path());
    let agent = server.agent("wait.sh", &waiting_agent());
    let (first_ws, queued_ws) = (server.workspace("first"), server.workspace("queued"));
    let one_round = serde_json::json!({ "max_rounds": 1 });
    let first = server.submit(job(&first_ws, &agent, one_round.clone()));
    wait_until("the first job runs", Duration::from_secs(60), || {
        first_ws.join("running").exists()
    });
    let queued = server.submit(job(&queued_ws, &agent, one_round));
    // Cut at once: the answer is all the client has.
    let after = disk.cut_power();
    for ws in [&first_ws, &queued_ws] {
        std::fs::write(ws.join("go"), "").unwrap();
    }
    for id in [&first, &queued] {
        server.wait_finished(id, Duration::from_secs(120));
    }
    let on_disk = server
        .state
        .strip_prefix(disk.path().canonicalize().unwrap())
        .unwrap()
        .to_owned();
    drop(server);

    let ev = journal(&after.join(on_disk), &queued);
    let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        ["job_submitted"],
        "the answered submission is on the disk, queued"
    );
}
