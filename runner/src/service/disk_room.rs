//! Whether the service's state store can write now, for `/readyz`, a submission (507) and the
//! scheduler (queued jobs wait), and the log of a full disk at a bounded rate.
//!
//! The state disk has room when the runner could start a round there: the reserve in place and
//! its margin free besides ([`crate::store::Store::room`]). While it has none, `/readyz` says
//! not ready with the reason, a submission is answered 507 `disk_full`, and queued jobs stay
//! queued (their claim would journal on a disk without room). The service logs the disk found
//! full once, then at most once per [`LOG_EVERY`] with how many times it was found so since, and
//! once when the room is back; then the scheduler starts the queued jobs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time between two logs of the same full disk.
pub const LOG_EVERY: Duration = Duration::from_secs(30);

/// A bounded-rate log gate for one recurring condition.
#[derive(Debug, Default)]
pub struct LogGate {
    inner: Mutex<Gate>,
}

impl LogGate {
    /// A gate that has logged nothing yet.
    pub const fn new() -> Self {
        Self {
            inner: Mutex::new(Gate {
                logged: None,
                quiet: 0,
            }),
        }
    }
}

#[derive(Debug, Default)]
struct Gate {
    /// When the condition was last logged, while it holds.
    logged: Option<Instant>,
    /// Times it was seen since then without a log.
    quiet: u64,
}

impl LogGate {
    /// The condition holds now: `Some(n)` when it is to be logged (`n` times it was seen since
    /// the last log without one), `None` when it was logged less than `every` ago.
    pub fn seen(&self, every: Duration) -> Option<u64> {
        let mut g = self.inner.lock().ok()?;
        match g.logged {
            Some(at) if at.elapsed() < every => {
                g.quiet += 1;
                None
            }
            _ => {
                g.logged = Some(Instant::now());
                Some(std::mem::take(&mut g.quiet))
            }
        }
    }

    /// The condition no longer holds: whether it held (then its end is to be logged).
    pub fn cleared(&self) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        g.quiet = 0;
        g.logged.take().is_some()
    }
}

impl super::Service {
    /// `Err` with the reason while the state disk has no room for the store's writes (module
    /// doc); each finding is logged at a bounded rate, and the room's return once.
    pub(super) fn state_room(&self) -> Result<(), String> {
        let engine = self.engine();
        let room = crate::store::journal::blocking(|| engine.store().room(engine.state_dir()));
        match &room {
            Ok(()) => {
                if self.disk_log.cleared() {
                    tracing::info!(
                        state_dir = %engine.state_dir().display(),
                        "the state dir's disk has room again: queued jobs start"
                    );
                }
            }
            Err(why) => self.log_disk_full(why),
        }
        room
    }

    /// Logs that the store could not write for lack of room (`why`), at a bounded rate.
    pub(super) fn log_disk_full(&self, why: &str) {
        if let Some(quiet) = self.disk_log.seen(LOG_EVERY) {
            tracing::error!(
                state_dir = %self.engine().state_dir().display(),
                reason = %why,
                also_since_last_log = quiet,
                "the state dir's disk is full: submissions are refused (507), queued jobs wait, /readyz is not ready: {why}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recurring_condition_is_logged_once_per_interval_with_the_count_between() {
        let g = LogGate::default();
        assert_eq!(g.seen(Duration::from_secs(3600)), Some(0));
        for _ in 0..5 {
            assert_eq!(g.seen(Duration::from_secs(3600)), None);
        }
        // Past the interval: logged again, with the five quiet ones.
        assert_eq!(g.seen(Duration::ZERO), Some(5));
        assert!(g.cleared());
        assert!(!g.cleared(), "its end is logged once");
        assert_eq!(g.seen(Duration::from_secs(3600)), Some(0));
    }
}
