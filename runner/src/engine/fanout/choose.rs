//! Which attempt's result is a fan-out job's (SPEC §13), as a pure rule: the first that ended
//! `complete` (its verify passed), else the best outcome among them — `blocked` (the agent says
//! why it cannot go on), `budget-limited`, `failed`, `round-failed`, `error`, `interrupted`,
//! `cancelled`, in that order — the earliest attempt among equals.

use crate::job::{FinishReason, Outcome};
use crate::usage::UsageTotals;

/// How one attempt ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Ended {
    /// Its job.
    pub job: String,
    /// 1-based.
    pub index: u32,
    /// Its outcome.
    pub outcome: Outcome,
    /// Why.
    pub reason: FinishReason,
    /// Its message.
    pub message: String,
    /// Rounds it started.
    pub rounds: u32,
    /// Whether its last verify passed.
    pub verified: Option<bool>,
    /// Its last valid report (as JSON).
    pub report: Option<serde_json::Value>,
    /// Its tokens.
    pub usage: UsageTotals,
    /// A task's exit status (none for loops).
    pub exit_code: Option<i32>,
}

/// The rank of an outcome when no attempt won (lower is better).
fn rank(o: Outcome) -> u8 {
    match o {
        Outcome::Complete => 0,
        Outcome::Blocked => 1,
        Outcome::BudgetLimited => 2,
        Outcome::Failed => 3,
        Outcome::RoundFailed => 4,
        Outcome::Error => 5,
        Outcome::Interrupted => 6,
        Outcome::Cancelled => 7,
    }
}

/// The chosen attempt among `ended` (in the order they ended), if any ended.
pub fn choose(ended: &[Ended]) -> Option<&Ended> {
    if let Some(first) = ended.iter().find(|e| e.outcome == Outcome::Complete) {
        return Some(first);
    }
    ended.iter().min_by_key(|e| (rank(e.outcome), e.index))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u32, outcome: Outcome) -> Ended {
        Ended {
            job: format!("j{index}"),
            index,
            outcome,
            reason: FinishReason::Reported,
            message: String::new(),
            rounds: 1,
            verified: None,
            report: None,
            usage: UsageTotals::default(),
            exit_code: None,
        }
    }

    #[test]
    fn the_first_complete_wins_else_the_best_outcome_then_the_earliest() {
        // In the order they ended: attempt 3 completed before attempt 1 did.
        let ended = [
            e(2, Outcome::RoundFailed),
            e(3, Outcome::Complete),
            e(1, Outcome::Complete),
        ];
        assert_eq!(choose(&ended).unwrap().index, 3);
        let ended = [
            e(2, Outcome::Cancelled),
            e(3, Outcome::RoundFailed),
            e(1, Outcome::BudgetLimited),
            e(4, Outcome::BudgetLimited),
        ];
        assert_eq!(choose(&ended).unwrap().index, 1);
        let ended = [e(2, Outcome::Error), e(1, Outcome::Blocked)];
        assert_eq!(choose(&ended).unwrap().index, 1);
        assert!(choose(&[]).is_none());
    }
}
