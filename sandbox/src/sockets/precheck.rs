//! The kept listings of a scan's trees checked on several threads before the scan walks them.
//! A process's first scan of a runner's toolchains stats every directory it kept from the last
//! process (tens of thousands: ~2.5 µs each on a 2-vCPU VM, most of it the kernel's first touch of
//! each directory's dentry and inode), one after the other. Those stats do not depend on each
//! other, so they run on as many threads as the host gives the runner (at most [`THREADS`]):
//! from each tree's root, a directory whose kept listing is current (the same directory, with the
//! same change time) gives its sockets and its subdirectories to look at next, exactly as the
//! scan's walk would reuse it. What is left ([`Checked::rest`]: a directory that changed, or has
//! no kept listing) is walked by the scan as before, from there; each finding is also recorded in
//! the memo ([`super::memo::Checkable`]), so the walk lists a changed directory without
//! statting it again. The walk begins as soon as the check ends: no finding is older than the
//! walk would have made it.
//!
//! The threads share one queue of directories to look at: each works from a stack of its own and
//! hands half of it over when another has run dry.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

use super::memo::Memo;
use super::place::Place;

/// Kept directories below which a check is not worth its threads.
pub const MIN_DIRS: usize = 2_000;

/// Threads a check uses, at most (the scanning thread included).
pub const THREADS: usize = 4;

/// The threads a check of `memo` would use now: none when it keeps fewer directories than its
/// `check_from` ([`MIN_DIRS`]) or the host gives this process one CPU.
pub fn threads(memo: &Memo) -> usize {
    if memo.len() < memo.check_from {
        return 0;
    }
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cpus < 2 { 0 } else { cpus.min(THREADS) }
}

/// What a check found in one tree.
#[derive(Default)]
pub struct Checked {
    /// Sockets in its directories whose kept listings are current.
    pub sockets: Vec<PathBuf>,
    /// Entries of those directories.
    pub entries: usize,
    /// Those directories.
    pub dirs: usize,
    /// Directories below them (or the root) to be walked: changed, or with no kept listing.
    /// Reached by path: there may be thousands (every leaf changed), and a descriptor held for
    /// each could run the runner out of them, which would leave directories unlisted.
    pub rest: Vec<Place>,
}

/// Checks the kept listings of every directory of `trees` reachable through kept listings that
/// are current, on `threads` threads (this one among them), recording each finding under `check`
/// ([`Memo::begin_check`]); one [`Checked`] per tree, in order.
pub fn run(memo: &Memo, check: u64, trees: &[PathBuf], threads: usize) -> Vec<Checked> {
    let queue = Queue {
        state: Mutex::new(Shared {
            places: trees
                .iter()
                .enumerate()
                .map(|(i, t)| (i, Place::root(t.clone()), false))
                .collect(),
            idle: 0,
            done: false,
        }),
        wake: Condvar::new(),
        hungry: AtomicBool::new(false),
        workers: threads.max(1),
    };
    let mut found: Vec<Checked> = trees.iter().map(|_| Checked::default()).collect();
    std::thread::scope(|s| {
        let mut others = Vec::new();
        for _ in 1..queue.workers {
            let spawned = std::thread::Builder::new()
                .name("ralph-scan".into())
                .spawn_scoped(s, || work(memo, check, &queue, trees.len()));
            match spawned {
                Ok(t) => others.push(t),
                // One worker less: the others (this thread at least) still see to every place.
                Err(_) => queue.leave(),
            }
        }
        let mut all = vec![work(memo, check, &queue, trees.len())];
        all.extend(others.into_iter().filter_map(|t| t.join().ok()));
        for part in all {
            for (into, from) in found.iter_mut().zip(part) {
                into.sockets.extend(from.sockets);
                into.entries += from.entries;
                into.dirs += from.dirs;
                into.rest.extend(from.rest);
            }
        }
    });
    found
}

/// The places waiting for a worker.
struct Queue {
    state: Mutex<Shared>,
    wake: Condvar,
    /// Whether a worker waits for places.
    hungry: AtomicBool,
    workers: usize,
}

/// A directory to check: its tree, where it is, and whether a directory above it changed (its
/// findings are then only recorded, for the walk that lists the changed one).
type Item = (usize, Place, bool);

struct Shared {
    places: Vec<Item>,
    /// Workers waiting for places.
    idle: usize,
    /// No place is left anywhere: every worker is idle.
    done: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place to look at, waiting while another worker may still hand some over; `None`
    /// when all are idle with nothing left.
    fn take(&self) -> Option<Item> {
        let mut s = self.lock();
        loop {
            if let Some(p) = s.places.pop() {
                return Some(p);
            }
            if s.done {
                return None;
            }
            s.idle += 1;
            if s.idle == self.workers {
                s.done = true;
                self.wake.notify_all();
                return None;
            }
            self.hungry.store(true, Ordering::Relaxed);
            s = self.wake.wait(s).unwrap_or_else(PoisonError::into_inner);
            s.idle -= 1;
        }
    }

    /// Hands `places` to the waiting workers.
    fn give(&self, places: impl Iterator<Item = Item>) {
        let mut s = self.lock();
        s.places.extend(places);
        self.hungry.store(false, Ordering::Relaxed);
        self.wake.notify_all();
    }

    /// A worker that could not be started: the rest need not wait for it.
    fn leave(&self) {
        let mut s = self.lock();
        s.idle += 1;
        if s.idle == self.workers {
            s.done = true;
        }
        self.wake.notify_all();
    }
}

/// A worker: what it found, per tree.
fn work(memo: &Memo, check: u64, queue: &Queue, trees: usize) -> Vec<Checked> {
    let mut found: Vec<Checked> = (0..trees).map(|_| Checked::default()).collect();
    let mut mine = Vec::new();
    while let Some((tree, at, under_changed)) = mine.pop().or_else(|| queue.take()) {
        if let Some(into) = found.get_mut(tree) {
            let into = (!under_changed).then_some(into);
            visit(memo, check, (tree, at), into, &mut mine);
        }
        if mine.len() > 1 && queue.hungry.load(Ordering::Relaxed) {
            let half = mine.len() / 2;
            queue.give(mine.drain(..half));
        }
    }
    found
}

/// Checks the kept listing of the directory at `at` (in tree `tree`) and queues the
/// subdirectories it names (relative to its descriptor). A current one gives its sockets to
/// `found`; a changed one (or one with no kept listing) is left to the walk there. Below a
/// changed one (`found`: `None`) findings are only recorded: the walk lists the changed one and
/// reuses, without a stat, what the check found current below it.
fn visit(
    memo: &Memo,
    check: u64,
    (tree, at): (usize, Place),
    found: Option<&mut Checked>,
    next: &mut Vec<Item>,
) {
    let Some(kept) = memo.checkable(&at.dir) else {
        if let Some(found) = found {
            found.rest.push(at.by_path());
        }
        return;
    };
    let Some((now, fd)) = at.stat(!kept.listing.subdirs.is_empty()) else {
        kept.record(check, false);
        if let Some(found) = found {
            found.rest.push(at.by_path());
        }
        return;
    };
    let current = now.identity() == kept.listing.identity();
    kept.record(check, current);
    let l = kept.listing;
    let held = at.hold(fd);
    let below_changed = found.is_none() || !current;
    next.extend(
        l.subdirs
            .iter()
            .map(|n| (tree, at.child(n, held.as_ref()), below_changed)),
    );
    match found {
        Some(found) if current => {
            found.dirs += 1;
            found.entries += l.entries;
            found
                .sockets
                .extend(l.sockets.iter().map(|n| at.dir.join(n)));
        }
        Some(found) => found.rest.push(at.by_path()),
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a check found, in an order that does not depend on the threads.
    fn sorted(found: Vec<Checked>) -> Vec<(Vec<PathBuf>, usize, usize, Vec<PathBuf>)> {
        found
            .into_iter()
            .map(|mut c| {
                c.sockets.sort();
                // Left to the walk by path, holding no descriptor.
                assert!(c.rest.iter().all(|p| p.parent.is_none()));
                let mut rest: Vec<PathBuf> = c.rest.into_iter().map(|p| p.dir).collect();
                rest.sort();
                (c.sockets, c.entries, c.dirs, rest)
            })
            .collect()
    }

    #[test]
    fn any_number_of_threads_finds_the_same_and_every_one_ends() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().canonicalize().unwrap();
        let (wide, narrow) = (root.join("wide"), root.join("narrow"));
        for i in 0..40 {
            std::fs::create_dir_all(wide.join(format!("d{i}/e/f"))).unwrap();
        }
        std::fs::create_dir_all(narrow.join("a/b/c/d")).unwrap();
        let bind = |p: PathBuf| std::os::unix::net::UnixListener::bind(p).unwrap();
        let _s = [
            bind(wide.join("d17/e/f/s.sock")),
            bind(narrow.join("a/b/c/d/s.sock")),
        ];
        // Listings kept as a scan keeps them, once the directories are quiet.
        let memo = std::sync::Mutex::new(Memo::new());
        let margin = std::time::Duration::from_millis(50);
        let quiet = std::time::Instant::now() + margin + margin / 5;
        while std::time::Instant::now() < quiet {
            std::thread::yield_now();
        }
        let off = std::sync::Mutex::new(super::super::watch::State::Off);
        let trees = [wide.clone(), narrow.clone(), root.join("missing")];
        let _ = super::super::scan_with(&trees, &memo, margin, &off);
        // A directory changed since: left to the walk, with what is below it.
        std::fs::create_dir(wide.join("d3/new")).unwrap();
        let mut memo = memo.into_inner().unwrap();
        let by = |threads: usize, memo: &mut Memo| {
            let check = memo.begin_check();
            let found = sorted(run(memo, check, &trees, threads));
            memo.end_check();
            found
        };
        let one = by(1, &mut memo);
        assert_eq!(one[0].0, [wide.join("d17/e/f/s.sock")]);
        // wide, 40 x (d, e, f), less d3 (changed): left to the walk.
        assert_eq!(
            (one[0].2, &one[0].3),
            (1 + 40 * 3 - 3, &vec![wide.join("d3")])
        );
        assert_eq!((one[1].2, one[1].3.len()), (5, 0));
        // A missing tree has no kept listing: left to the walk (which skips it).
        assert_eq!((one[2].2, &one[2].3), (0, &vec![root.join("missing")]));
        for threads in [2, 3, 8] {
            assert_eq!(by(threads, &mut memo), one, "{threads} threads");
        }
    }
}
