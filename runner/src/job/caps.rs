//! Raised caps of a resumed `budget-limited` job (SPEC §3): `ralph resume JOB --max-rounds N
//! --max-tokens N --job-timeout DUR`. Each one given must exceed what the job has used (a cap
//! that is not raised is refused, naming it); `max_rounds` stays within the deployment ceiling,
//! as at submission. The `resumed` event records them and the projection applies them to the
//! job's spec, so every runner of the job, and every answer about it, sees the same caps.

use serde::{Deserialize, Serialize};

use super::spec::{Ceilings, JobSpec, SpecError};
use crate::util::units::HumanDuration;

/// The caps a resume raises; `None`: unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RaisedCaps {
    /// The new round budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
    /// The new token budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// The new job deadline (time it ran, as at submission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_timeout: Option<HumanDuration>,
}

/// What a job has used of its caps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Used {
    /// Rounds started.
    pub rounds: u32,
    /// Tokens that count against the budget.
    pub tokens: u64,
    /// Milliseconds the job ran.
    pub ran_ms: u64,
}

impl RaisedCaps {
    /// Whether no cap is raised.
    pub fn is_empty(&self) -> bool {
        self == &RaisedCaps::default()
    }

    /// Checks each given cap against what the job used and the ceilings: a refusal names the
    /// cap (`max_rounds`, `max_tokens`, `job_timeout`) and what it must exceed.
    pub fn check(&self, used: Used, ceilings: &Ceilings) -> Result<(), SpecError> {
        let err = |field: &'static str, message: String| SpecError { field, message };
        if let Some(n) = self.max_rounds {
            if n <= used.rounds {
                return Err(err(
                    "max_rounds",
                    format!(
                        "{n} is not above the {} round(s) the job has started",
                        used.rounds
                    ),
                ));
            }
            if n > ceilings.max_rounds {
                return Err(err(
                    "max_rounds",
                    format!(
                        "{n} is outside 1..={} (the deployment ceiling)",
                        ceilings.max_rounds
                    ),
                ));
            }
        }
        if let Some(n) = self.max_tokens {
            if n <= used.tokens {
                return Err(err(
                    "max_tokens",
                    format!(
                        "{n} is not above the {} token(s) the job has used",
                        used.tokens
                    ),
                ));
            }
        }
        if let Some(t) = self.job_timeout {
            if t.0.as_millis() <= u128::from(used.ran_ms) {
                return Err(err(
                    "job_timeout",
                    format!(
                        "{t} is not above the {} the job has run",
                        HumanDuration(std::time::Duration::from_millis(used.ran_ms))
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `spec` with these caps in place.
    pub fn apply(&self, spec: &mut JobSpec) {
        if let Some(n) = self.max_rounds {
            spec.max_rounds = n;
        }
        if let Some(n) = self.max_tokens {
            spec.max_tokens = Some(n);
        }
        if let Some(t) = self.job_timeout {
            spec.job_timeout = Some(t);
        }
    }

    /// The caps in words (`max_rounds 12, max_tokens 50000`), for messages and the prompt.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(n) = self.max_rounds {
            parts.push(format!("max_rounds {n}"));
        }
        if let Some(n) = self.max_tokens {
            parts.push(format!("max_tokens {n}"));
        }
        if let Some(t) = self.job_timeout {
            parts.push(format!("job_timeout {t}"));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn used() -> Used {
        Used {
            rounds: 5,
            tokens: 1000,
            ran_ms: 60_000,
        }
    }

    #[test]
    fn each_cap_must_exceed_what_was_used_and_stay_under_the_ceiling() {
        let c = Ceilings::default();
        let caps = |r: Option<u32>, t: Option<u64>, d: Option<u64>| RaisedCaps {
            max_rounds: r,
            max_tokens: t,
            job_timeout: d.map(|s| HumanDuration(std::time::Duration::from_secs(s))),
        };
        caps(Some(6), Some(1001), Some(61))
            .check(used(), &c)
            .unwrap();
        let field = |x: RaisedCaps| x.check(used(), &c).unwrap_err().field;
        assert_eq!(field(caps(Some(5), None, None)), "max_rounds");
        assert_eq!(field(caps(Some(257), None, None)), "max_rounds");
        assert_eq!(field(caps(None, Some(1000), None)), "max_tokens");
        assert_eq!(field(caps(None, None, Some(60))), "job_timeout");
        let e = caps(None, Some(10), None).check(used(), &c).unwrap_err();
        assert!(
            e.message.contains("not above the 1000 token(s)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn caps_apply_to_the_spec_and_read_well() {
        let mut spec = JobSpec::new(
            "o",
            "/w",
            crate::job::AgentSpec::Command {
                command: "a".into(),
            },
        );
        let caps = RaisedCaps {
            max_rounds: Some(30),
            max_tokens: Some(5000),
            job_timeout: None,
        };
        caps.apply(&mut spec);
        assert_eq!((spec.max_rounds, spec.max_tokens), (30, Some(5000)));
        assert_eq!(caps.describe(), "max_rounds 30, max_tokens 5000");
        assert!(RaisedCaps::default().is_empty());
        let json = serde_json::to_string(&caps).unwrap();
        assert_eq!(json, r#"{"max_rounds":30,"max_tokens":5000}"#);
    }
}
