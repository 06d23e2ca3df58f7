//! Journal events to metric events: the one place that decides what each journalled fact
//! counts as. Metrics therefore say exactly what the journal says, once the event is durable.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use ralph_sandbox::outcome::EndedBy;

use super::Metrics;
use super::event::{MetricEvent, RoundOutcome, VerifyResult};
use crate::store::{AttemptResult, Event, EventKind, JobView, Observer};

/// Updates [`Metrics`] from every journalled event.
#[derive(Clone, Debug)]
pub struct MetricsObserver(pub Arc<Metrics>);

impl Observer for MetricsObserver {
    fn on_event(&self, view: &JobView, event: &Event) {
        for m in metric_events(view, event) {
            self.0.record(&m);
        }
    }

    fn hears_attempts(&self) -> bool {
        true
    }
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s).ok()
}

/// How a runner step (verify, set-up) ended: `ran` when its process ran at all.
fn step_result(passed: bool, ended_by: Option<EndedBy>, ran: bool) -> VerifyResult {
    match (passed, ended_by, ran) {
        (true, _, _) => VerifyResult::Passed,
        (false, Some(EndedBy::Timeout), _) => VerifyResult::Timeout,
        (false, Some(EndedBy::Cancel | EndedBy::RunnerGone), _) => VerifyResult::Cancelled,
        (false, _, false) => VerifyResult::Error,
        (false, _, true) => VerifyResult::Failed,
    }
}

/// What `event` (already applied to `view`) counts as.
pub fn metric_events(view: &JobView, event: &Event) -> Vec<MetricEvent> {
    let backend = view.spec.sandbox.backend;
    match &event.kind {
        EventKind::JobStarted { .. } => {
            // Only the first start has a meaningful wait (a resumed job was not re-submitted).
            let first = view.rounds_started == 0 && view.attempts == 0;
            let queue_wait = first
                .then(|| {
                    let at = parse_time(&event.at)?;
                    let submitted = parse_time(&view.submitted_at)?;
                    Some(at.duration_since(submitted).unwrap_or(Duration::ZERO))
                })
                .flatten();
            vec![MetricEvent::JobStarted { queue_wait }]
        }
        EventKind::RoundFinished {
            result,
            exit,
            duration_ms,
            usage,
            sandbox_setup_ms,
            agent_retries,
            ..
        } => {
            let mut out = Vec::new();
            let (outcome, handoff_bytes) = match result {
                AttemptResult::Reported { report } => {
                    let status = report.get("status").and_then(serde_json::Value::as_str);
                    let outcome = match status {
                        Some("complete") => RoundOutcome::Complete,
                        Some("blocked") => RoundOutcome::Blocked,
                        _ => RoundOutcome::Continue,
                    };
                    (outcome, serde_json::to_string(report).ok().map(|s| s.len()))
                }
                AttemptResult::Exited => {
                    // Only task jobs end a round without a report: their exit status decides.
                    let outcome = if exit.is_some_and(|t| t.success()) {
                        RoundOutcome::Complete
                    } else {
                        RoundOutcome::Failed
                    };
                    (outcome, None)
                }
                AttemptResult::Failed { .. } => (RoundOutcome::Failed, None),
                AttemptResult::SandboxFailed { reason, .. } => {
                    out.push(MetricEvent::SandboxSetupFailed {
                        backend,
                        reason: reason.clone(),
                    });
                    (RoundOutcome::Failed, None)
                }
                AttemptResult::Cancelled => (RoundOutcome::Cancelled, None),
                AttemptResult::DeadlineReached
                | AttemptResult::BudgetSpent
                | AttemptResult::Interrupted => (RoundOutcome::Interrupted, None),
            };
            out.push(MetricEvent::RoundFinished {
                outcome,
                backend,
                duration: Duration::from_millis(*duration_ms),
                handoff_bytes,
                setup: sandbox_setup_ms.map(Duration::from_millis),
            });
            for (model, u) in &usage.by_model {
                if !u.is_zero() {
                    out.push(MetricEvent::Tokens {
                        model: model.clone(),
                        usage: *u,
                    });
                }
            }
            for (reason, count) in agent_retries {
                out.push(MetricEvent::AgentRequestRetries {
                    reason: reason.clone(),
                    count: *count,
                });
            }
            out
        }
        EventKind::RoundRetried { reason, .. } => {
            vec![MetricEvent::RoundRetried { reason: *reason }]
        }
        EventKind::VerifyFinished {
            passed,
            exit,
            ended_by,
            ..
        } => vec![MetricEvent::Verify {
            result: step_result(*passed, *ended_by, exit.is_some()),
        }],
        EventKind::SetupFinished {
            passed,
            exit,
            ended_by,
            ..
        } => vec![MetricEvent::Setup {
            result: step_result(*passed, *ended_by, exit.is_some()),
        }],
        // An attempt of a fan-out job is counted as an attempt, not as a job of its own.
        EventKind::JobFinished { .. } if view.spec.attempt_of.is_some() => Vec::new(),
        EventKind::JobFinished {
            outcome, reason, ..
        } => vec![MetricEvent::JobFinished {
            outcome: *outcome,
            stalled: *reason == crate::job::FinishReason::Stalled,
        }],
        EventKind::AttemptFinished { outcome, .. } => {
            vec![MetricEvent::Attempt { outcome: *outcome }]
        }
        EventKind::AttemptsStarted { .. } | EventKind::AttemptChosen { .. } => Vec::new(),
        EventKind::WorkspaceSanitized { counts, .. } => {
            vec![MetricEvent::WorkspaceSanitized { counts: *counts }]
        }
        EventKind::ModelRequest {
            api,
            model,
            status,
            duration_ms,
            refusal,
            ..
        } => {
            let mut out = vec![MetricEvent::ModelRequest {
                api: api.clone(),
                model: model.clone(),
                status: *status,
                duration: Duration::from_millis(*duration_ms),
            }];
            if let Some(reason) = refusal {
                out.push(MetricEvent::ModelRefusal {
                    reason: reason.clone(),
                });
            }
            out
        }
        EventKind::ModelRefusals { by, .. } => by
            .iter()
            .map(|c| MetricEvent::ModelRequests {
                api: c.api.clone(),
                status: c.status,
                reason: c.reason.clone(),
                count: c.count,
            })
            .collect(),
        EventKind::Egress { allowed, .. } => vec![MetricEvent::Egress { allowed: *allowed }],
        EventKind::CacheLookup { hit, .. } => vec![MetricEvent::CacheLookup { hit: *hit }],
        EventKind::Notified { result, .. } => vec![MetricEvent::Notified { result: *result }],
        EventKind::CacheSaved { total_bytes, .. } => vec![MetricEvent::CacheBytes {
            total: *total_bytes,
        }],
        // Submissions through the API, by the token that made them (`ralph run`'s own job has
        // none; an attempt of a fan-out job is not a submission).
        EventKind::JobSubmitted { .. } if view.spec.attempt_of.is_none() => view
            .spec
            .submitted_by
            .iter()
            .map(|token| MetricEvent::JobSubmitted {
                token: token.clone(),
            })
            .collect(),
        EventKind::JobSubmitted { .. }
        | EventKind::UsageMismatch { .. }
        | EventKind::RoundStarted { .. }
        | EventKind::RoundSpawned { .. }
        | EventKind::UsageSkipped { .. }
        | EventKind::VerifyStarted { .. }
        | EventKind::SetupStarted { .. }
        | EventKind::CancelRequested { .. }
        | EventKind::Interrupted { .. }
        | EventKind::Resumed { .. }
        | EventKind::WorkspaceProvisioned { .. }
        | EventKind::ToolchainGranted { .. }
        | EventKind::ResultWritten { .. } => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobSpec;

    fn submitted(spec: JobSpec) -> (JobView, Event) {
        let event = Event {
            job_id: "j".into(),
            seq: 1,
            at: "2026-12-05T00:00:00Z".into(),
            kind: EventKind::JobSubmitted {
                spec: Box::new(spec),
            },
        };
        (JobView::submitted(&event).unwrap(), event)
    }

    fn spec() -> JobSpec {
        JobSpec::new(
            "o",
            "/w",
            crate::job::AgentSpec::Command {
                command: "true".into(),
            },
        )
    }

    #[test]
    fn a_submission_counts_by_the_token_that_made_it_and_only_then() {
        let mut by_token = spec();
        by_token.submitted_by = Some("ci".into());
        let (view, event) = submitted(by_token);
        let m = metric_events(&view, &event);
        assert!(
            matches!(m.as_slice(), [MetricEvent::JobSubmitted { token }] if token == "ci"),
            "{m:?}"
        );
        // `ralph run`'s own job was not submitted through the API.
        let (view, event) = submitted(spec());
        assert!(metric_events(&view, &event).is_empty());
    }
}
