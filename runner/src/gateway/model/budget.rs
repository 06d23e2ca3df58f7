//! The job's token budget as the gateway sees it: a shared counter of
//! [`UsageTotals::budget_tokens`](crate::usage::UsageTotals::budget_tokens), seeded with what the
//! job spent before, checked before each forwarded request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A token budget shared by the requests of one job (and by the caller, who may read it).
#[derive(Debug)]
pub struct TokenBudget {
    max: Option<u64>,
    used: AtomicU64,
    crossed: AtomicBool,
}

impl TokenBudget {
    /// A budget of `max` tokens (`None`: unlimited, only counted) of which `already_used` are
    /// spent (the job's tokens before this gateway started).
    pub fn new(max: Option<u64>, already_used: u64) -> Self {
        Self {
            max,
            used: AtomicU64::new(already_used),
            crossed: AtomicBool::new(false),
        }
    }

    /// The maximum, if any.
    pub fn max(&self) -> Option<u64> {
        self.max
    }

    /// Tokens counted so far.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// `Some((used, max))` when the budget is spent (`used >= max`).
    pub fn spent(&self) -> Option<(u64, u64)> {
        let max = self.max?;
        let used = self.used();
        (used >= max).then_some((used, max))
    }

    /// Tokens left (`None` when unlimited).
    pub fn remaining(&self) -> Option<u64> {
        self.max.map(|m| m.saturating_sub(self.used()))
    }

    /// Adds `tokens`; returns the new total.
    pub fn add(&self, tokens: u64) -> u64 {
        let mut cur = self.used.load(Ordering::SeqCst);
        loop {
            let next = cur.saturating_add(tokens);
            match self
                .used
                .compare_exchange(cur, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return next,
                Err(actual) => cur = actual,
            }
        }
    }

    /// `Some((used, max))` the first time (only) this is called while the budget is spent:
    /// the moment to tell the sink.
    pub fn take_crossing(&self) -> Option<(u64, u64)> {
        let spent = self.spent()?;
        (!self.crossed.swap(true, Ordering::SeqCst)).then_some(spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crossing_is_reported_once_and_unlimited_never_spends() {
        let b = TokenBudget::new(Some(100), 40);
        assert_eq!(b.spent(), None);
        assert_eq!(b.remaining(), Some(60));
        assert_eq!(b.take_crossing(), None);
        assert_eq!(b.add(70), 110);
        assert_eq!(b.take_crossing(), Some((110, 100)));
        assert_eq!(b.take_crossing(), None);
        assert_eq!(b.spent(), Some((110, 100)));
        let u = TokenBudget::new(None, 5);
        u.add(u64::MAX);
        assert_eq!(u.spent(), None);
        assert_eq!(u.used(), u64::MAX);
    }
}
