//! Refusals journalled at a bounded rate: HTTP/1.1 lets one connection pipeline thousands of
//! requests the gateway refuses in microseconds, and one journal event each would let a round
//! grow the journal without bound. Every refusal is still counted (the summaries carry the
//! counts, and the metrics are made from them); what is bounded is the number of events.
//!
//! The first [`INDIVIDUAL`] refusals of a gateway are journalled one by one (what a person
//! reading the journal needs to see why); after that they are held and summed, and one
//! summary is emitted when the held count reaches a threshold that doubles each time (32, 64,
//! 128, …), when [`INTERVAL`] has passed since the last one (checked at the next refusal), and
//! when the gateway stops. So `n` refusals make at most `32 + log2(n / 32) + 1` events, plus one
//! per interval: 20,000 pipelined refusals make 42.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::gateway::sink::{Api, ModelRequest, Refusal, RefusalCount, RefusalSummary};

/// Refusals journalled one by one before summing starts.
pub const INDIVIDUAL: u64 = 32;
/// Longest a held refusal waits for its summary while refusals keep coming.
pub const INTERVAL: Duration = Duration::from_secs(60);

/// What to do with one refusal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Journal it as its own `model_request`.
    Journal,
    /// Held; nothing to journal now.
    Held,
    /// Held, and these held refusals (it included) are due as one summary.
    Summary(RefusalSummary),
}

/// The per-gateway state.
#[derive(Debug)]
pub struct RefusalLog {
    seen: u64,
    held: BTreeMap<(u16, Refusal, &'static str), (Api, u64)>,
    held_count: u64,
    threshold: u64,
    last: Instant,
}

impl RefusalLog {
    /// A log that starts now.
    pub fn new(now: Instant) -> Self {
        Self {
            seen: 0,
            held: BTreeMap::new(),
            held_count: 0,
            threshold: INDIVIDUAL,
            last: now,
        }
    }

    /// Takes the refusal `r` (its `refusal` is set) at `now`.
    pub fn refused(&mut self, r: &ModelRequest, reason: Refusal, now: Instant) -> Disposition {
        self.seen += 1;
        if self.seen <= INDIVIDUAL {
            self.last = now;
            return Disposition::Journal;
        }
        let e = self
            .held
            .entry((r.status, reason, r.api.as_str()))
            .or_insert((r.api, 0));
        e.1 += 1;
        self.held_count += 1;
        let due = self.held_count >= self.threshold
            || now.saturating_duration_since(self.last) >= INTERVAL;
        if !due {
            return Disposition::Held;
        }
        if self.held_count >= self.threshold {
            self.threshold = self.threshold.saturating_mul(2);
        }
        self.last = now;
        self.flush().map_or(Disposition::Held, Disposition::Summary)
    }

    /// The held refusals as one summary (`None`: none held).
    pub fn flush(&mut self) -> Option<RefusalSummary> {
        if self.held_count == 0 {
            return None;
        }
        let by = std::mem::take(&mut self.held)
            .into_iter()
            .map(|((status, reason, _), (api, count))| RefusalCount {
                api,
                status,
                reason,
                count,
            })
            .collect();
        let count = std::mem::take(&mut self.held_count);
        Some(RefusalSummary { count, by })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::UsageTotals;

    fn refused(status: u16) -> ModelRequest {
        ModelRequest {
            api: Api::Other,
            model: "unknown".into(),
            status,
            usage: UsageTotals::default(),
            duration: Duration::ZERO,
            streamed: false,
            error: Some("x".into()),
            refusal: Some(Refusal::Endpoint),
        }
    }

    #[test]
    fn twenty_thousand_refusals_make_a_logarithmic_number_of_events_and_lose_no_count() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        let (mut events, mut counted) = (0u64, 0u64);
        for i in 0..20_000u64 {
            let (status, reason) = if i % 2 == 0 {
                (403, Refusal::Endpoint)
            } else {
                (400, Refusal::NotCanonical)
            };
            match log.refused(&refused(status), reason, t0) {
                Disposition::Journal => {
                    events += 1;
                    counted += 1;
                }
                Disposition::Held => {}
                Disposition::Summary(s) => {
                    events += 1;
                    assert_eq!(s.by.iter().map(|c| c.count).sum::<u64>(), s.count);
                    counted += s.count;
                }
            }
        }
        if let Some(s) = log.flush() {
            events += 1;
            counted += s.count;
        }
        assert_eq!(counted, 20_000);
        assert!(events <= 32 + 15 + 1, "{events} events");
        assert_eq!(log.flush(), None);
    }

    #[test]
    fn a_held_refusal_is_summarised_after_the_interval() {
        let t0 = Instant::now();
        let mut log = RefusalLog::new(t0);
        for _ in 0..INDIVIDUAL {
            assert_eq!(
                log.refused(&refused(403), Refusal::Endpoint, t0),
                Disposition::Journal
            );
        }
        assert_eq!(
            log.refused(&refused(403), Refusal::Endpoint, t0),
            Disposition::Held
        );
        let later = t0 + INTERVAL;
        let Disposition::Summary(s) = log.refused(&refused(405), Refusal::Method, later) else {
            panic!("no summary after the interval");
        };
        assert_eq!(s.count, 2);
        assert_eq!(s.by.len(), 2);
    }
}
