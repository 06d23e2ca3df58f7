//! The standby slot (one waiting at most, a round waits for one being started, a failed or
//! panicking start leaves the slot usable) and the order as the standby reads it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

/// A standby object whose process is `/bin/true` (it exits at once: only the slot is tested).
fn standby() -> io::Result<Standby> {
    Standby::start(Path::new("/bin/true"), Duration::from_secs(1))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn an_empty_slot_answers_at_once_and_a_full_one_is_not_filled_again() {
    let slot = Arc::new(Slot::default());
    let start = Instant::now();
    assert!(rt().block_on(slot.take(Duration::from_secs(30))).is_none());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "waited on nothing"
    );
    slot.fill(standby);
    let first = slot.waiting_pid().unwrap();
    slot.fill(|| panic!("a second start while one waits"));
    assert_eq!(slot.waiting_pid(), Some(first));
    let taken = rt().block_on(slot.take(Duration::from_secs(30))).unwrap();
    assert_eq!(taken.id(), first);
    assert_eq!(slot.waiting_pid(), None);
}

/// Whether `wait` is still waiting 50 ms on (a negative check: a slow machine can only make
/// it hold for the right reason).
async fn still_waiting<F: std::future::Future>(wait: std::pin::Pin<&mut F>) -> bool {
    tokio::time::timeout(Duration::from_millis(50), wait)
        .await
        .is_err()
}

/// Awaits `wait` (`what` it waits for) on a runtime of its own: checks it is still waiting 50
/// ms on, then calls `release` (which lets the start under way end) and returns its output.
fn waits_then<F: std::future::Future>(wait: F, what: &str, release: impl FnOnce()) -> F::Output {
    rt().block_on(async {
        tokio::pin!(wait);
        assert!(still_waiting(wait.as_mut()).await, "{what}");
        release();
        wait.await
    })
}

/// Asks `slot` for its standby as a round does, checks the round is still waiting 50 ms on,
/// then calls `release` (which lets the start under way end) and returns what the round got.
fn waits_then_takes(slot: &Slot, release: impl FnOnce()) -> Option<Standby> {
    waits_then(
        slot.take(Duration::from_secs(60)),
        "the round did not wait for the start under way",
        release,
    )
}

#[test]
fn a_round_waits_for_a_standby_being_started() {
    let slot = Arc::new(Slot::default());
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let filler = {
        let slot = slot.clone();
        std::thread::spawn(move || {
            slot.fill(|| {
                // Held until the round is waiting.
                go_rx.recv().unwrap();
                standby()
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !slot.lock().starting {
        assert!(Instant::now() < deadline, "the start never began");
        std::thread::sleep(Duration::from_millis(1));
    }
    // Not there yet: the round waits.
    let got = waits_then_takes(&slot, || go_tx.send(()).unwrap());
    filler.join().unwrap();
    assert!(
        got.is_some(),
        "the round did not get the standby it waited for"
    );
}

#[test]
fn a_failed_or_panicking_start_leaves_the_slot_usable() {
    let slot = Arc::new(Slot::default());
    slot.fill(|| Err(io::Error::other("no")));
    assert_eq!(slot.waiting_pid(), None);
    let s2 = slot.clone();
    let panicked = std::thread::spawn(move || s2.fill(|| panic!("start failed hard"))).join();
    assert!(panicked.is_err());
    // Not left "starting": a round does not wait, and the next fill starts one.
    let start = Instant::now();
    assert!(rt().block_on(slot.take(Duration::from_secs(30))).is_none());
    assert!(start.elapsed() < Duration::from_secs(10));
    slot.fill(standby);
    assert!(slot.waiting_pid().is_some());
}

#[test]
fn a_start_marked_under_way_is_waited_for_before_its_thread_runs() {
    let slot = Arc::new(Slot::default());
    let begun = slot.begin().expect("an empty slot begins a start");
    assert!(
        slot.begin().is_none(),
        "a second start while one is under way"
    );
    // Its thread has not run: the round waits all the same (it used to start its own).
    let mut runner = None;
    let got = waits_then_takes(&slot, || {
        runner = Some(std::thread::spawn(move || begun.run(standby)));
    });
    if let Some(r) = runner {
        r.join().unwrap();
    }
    assert!(
        got.is_some(),
        "the round did not get the standby it waited for"
    );
}

#[test]
fn a_start_dropped_unrun_or_discarded_starts_nothing_and_leaves_the_slot_usable() {
    let slot = Arc::new(Slot::default());
    // Dropped unrun (a runtime shutting down drops the task that held it).
    drop(slot.begin().unwrap());
    let start = Instant::now();
    assert!(rt().block_on(slot.take(Duration::from_secs(30))).is_none());
    assert!(start.elapsed() < Duration::from_secs(10), "left under way");
    // Discarded before its thread runs: the run it was for will not come.
    let begun = slot.begin().unwrap();
    let s2 = slot.clone();
    let discarder = std::thread::spawn(move || s2.discard());
    let deadline = Instant::now() + Duration::from_secs(30);
    while slot.lock().discards == 0 {
        assert!(Instant::now() < deadline, "the discard never came");
        std::thread::sleep(Duration::from_millis(1));
    }
    begun.run(|| panic!("started for a discarded run"));
    discarder.join().unwrap();
    assert_eq!(slot.waiting_pid(), None);
    assert!(!slot.lock().starting);
    slot.fill(standby);
    assert!(slot.waiting_pid().is_some());
}

#[test]
fn a_backend_asked_to_prepare_counts_the_start_before_returning() {
    let backend = crate::native::NativeBackend::new(
        "/bin/true",
        crate::policy::PolicySet::embedded().unwrap(),
    );
    rt().block_on(async {
        crate::Sandbox::prepare(&backend, Duration::from_secs(1));
        // At once, whatever the blocking thread has done yet: a round asking now waits.
        let slot = &backend.standby;
        assert!(slot.lock().starting || slot.waiting_pid().is_some());
        assert!(slot.take(Duration::from_secs(60)).await.is_some());
    });
}

/// The standby's end of a fresh order socket (as a number, as its environment names it) and the
/// runner's end.
fn order_socket() -> (String, OwnedFd) {
    let (runner, standby) = fd_pass::channel().unwrap();
    (standby.into_raw_fd().to_string(), runner)
}

fn null() -> OwnedFd {
    open_null().unwrap()
}

#[test]
fn a_standby_whose_runner_went_without_an_order_ends_quietly() {
    let (fd, runner) = order_socket();
    drop(runner);
    assert_eq!(receive(&fd).map(|s| s.is_some()), Ok(false));
}

#[test]
fn a_malformed_order_is_refused_before_anything_is_put_in_place() {
    // Every refusal comes before the stdin is put in place (this process's descriptor 0 stays).
    let cases: Vec<(&str, Vec<u8>, usize)> = vec![
        ("empty", Vec::new(), 1),
        ("unknown flags", b"\x08{}".to_vec(), 1),
        ("too few descriptors", b"\x01{}".to_vec(), 1),
        ("no hand-back descriptor", b"\x04{}".to_vec(), 1),
        (
            "hold and hand-back, one descriptor short",
            b"\x06{}".to_vec(),
            2,
        ),
        ("too many descriptors", b"\x00{}".to_vec(), 2),
        ("not a spec", b"\x00{\"exec\":1}".to_vec(), 1),
    ];
    for (what, payload, n) in cases {
        let (fd, runner) = order_socket();
        let fds: Vec<OwnedFd> = (0..n).map(|_| null()).collect();
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(AsFd::as_fd).collect();
        fd_pass::send(runner.as_fd(), &payload, &borrowed).unwrap();
        let got = receive(&fd);
        assert!(got.is_err(), "{what}: {:?}", got.map(|s| s.is_some()));
    }
    assert!(receive("x").is_err(), "not a number");
    assert!(receive("1").is_err(), "a standard stream");
}

#[test]
fn settling_waits_for_a_start_under_way_takes_nothing_and_is_bounded() {
    let slot = Arc::new(Slot::default());
    // Nothing under way: at once.
    let start = Instant::now();
    rt().block_on(slot.settled(Duration::from_secs(30)));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "waited on nothing"
    );
    // A start under way (begun, not yet run): settling waits for it, and leaves its standby.
    let begun = slot.begin().expect("nothing waits or starts");
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let runner = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        begun.run(standby);
    });
    waits_then(
        slot.settled(Duration::from_secs(60)),
        "settled while the start was under way",
        || go_tx.send(()).unwrap(),
    );
    runner.join().unwrap();
    assert!(slot.waiting_pid().is_some(), "settling took the standby");
    // A start that never ends: settling gives up at its limit.
    let _ = rt().block_on(slot.take(Duration::from_secs(30)));
    let stuck = slot.begin().expect("the slot is empty again");
    let start = Instant::now();
    rt().block_on(slot.settled(Duration::from_millis(100)));
    assert!(
        start.elapsed() >= Duration::from_millis(100),
        "gave up early"
    );
    drop(stuck);
}

#[test]
fn zygotes_that_cannot_fork_leave_standbys_to_posix_spawn() {
    // `/bin/true` as the zygote: it exits without answering. The standby is then started as
    // before (here `/bin/true` again); after a few such zygotes in a row, none is tried again.
    let slot = Arc::new(Slot::default());
    for tried in 1..=ZYGOTE_TRIES + 2 {
        let standby = slot
            .start_standby(Path::new("/bin/true"), Duration::from_secs(1))
            .unwrap();
        assert_eq!(slot.zygote_pid(), None);
        assert_eq!(slot.zygotes().failed_fresh, tried.min(ZYGOTE_TRIES));
        standby.stop();
    }
}
