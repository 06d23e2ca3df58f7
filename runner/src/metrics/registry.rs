//! The registry and its metrics. [`Metrics::record`] is the only way anything is counted.

use std::collections::BTreeSet;
use std::sync::Mutex;

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use super::MetricsError;
use super::event::{MetricEvent, RoundOutcome, VerifyResult};
use super::names as n;
use crate::agent::retry::RETRY_REASONS;
use crate::gateway::Refusal;
use crate::job::{Outcome, RoundFailure};
use crate::usage::UNKNOWN_MODEL;
use ralph_sandbox::outcome::git::Change;

/// Distinct `model` label values kept; later ones are counted under `other`.
pub const MAX_MODELS: usize = 32;

/// The label value for models past [`MAX_MODELS`].
pub const OTHER_MODEL: &str = "other";

/// All of ralph's metrics.
pub struct Metrics {
    registry: Registry,
    rounds: IntCounterVec,
    round_duration: HistogramVec,
    round_retries: IntCounterVec,
    agent_retries: IntCounterVec,
    tokens: IntCounterVec,
    jobs_started: IntCounter,
    jobs_stalled: IntCounter,
    notifications: IntCounterVec,
    attempts: IntCounterVec,
    jobs_submitted: IntCounterVec,
    jobs_finished: IntCounterVec,
    jobs: IntGaugeVec,
    queue_wait: Histogram,
    handoff: Histogram,
    verify: IntCounterVec,
    setup_runs: IntCounterVec,
    setup: HistogramVec,
    setup_failures: IntCounterVec,
    workspace_sanitized: IntCounterVec,
    model_requests: IntCounterVec,
    model_request_duration: HistogramVec,
    model_refusals: IntCounterVec,
    egress: IntCounterVec,
    cache_lookups: IntCounterVec,
    cache_bytes: prometheus::IntGauge,
    models: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn counter_vec(
    name: &'static str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, MetricsError> {
    IntCounterVec::new(Opts::new(name, help), labels)
        .map_err(|source| MetricsError::Register { name, source })
}

fn histogram_vec(
    name: &'static str,
    help: &str,
    buckets: &[f64],
    labels: &[&str],
) -> Result<HistogramVec, MetricsError> {
    HistogramVec::new(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    )
    .map_err(|source| MetricsError::Register { name, source })
}

fn histogram(name: &'static str, help: &str, buckets: &[f64]) -> Result<Histogram, MetricsError> {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
        .map_err(|source| MetricsError::Register { name, source })
}

impl Metrics {
    /// A registry with every metric, known label values at 0. `process` adds the `process_*`
    /// metrics of this process (for the long-running service; meaningless for a one-shot run).
    pub fn new(process: bool) -> Result<Self, MetricsError> {
        let m = Metrics {
            registry: Registry::new(),
            rounds: counter_vec(
                n::ROUNDS,
                "Round attempts finished, by how they ended.",
                &["outcome"],
            )?,
            round_duration: histogram_vec(
                n::ROUND_DURATION,
                "Wall-clock time of round attempts, from spawn to the end of the process tree.",
                &n::ROUND_DURATION_BUCKETS,
                &["backend"],
            )?,
            round_retries: counter_vec(
                n::ROUND_RETRIES,
                "Failed round attempts that were retried, by why they failed.",
                &["reason"],
            )?,
            agent_retries: counter_vec(
                n::AGENT_RETRIES,
                "API requests the agent CLI itself retried (as its output reports), by reason.",
                &["reason"],
            )?,
            tokens: counter_vec(
                n::TOKENS,
                "Tokens used by agents, by kind (cached_input and cache_write_input are part of input, reasoning part of output) and model.",
                &["kind", "model"],
            )?,
            jobs_started: IntCounter::with_opts(Opts::new(
                n::JOBS_STARTED,
                "Jobs a runner started (a resumed job starts again).",
            ))
            .map_err(|source| MetricsError::Register {
                name: n::JOBS_STARTED,
                source,
            })?,
            jobs_stalled: IntCounter::with_opts(Opts::new(
                n::JOBS_STALLED,
                "Loop jobs ended budget-limited because their last --max-stalled-rounds rounds changed nothing in the workspace.",
            ))
            .map_err(|source| MetricsError::Register {
                name: n::JOBS_STALLED,
                source,
            })?,
            jobs_submitted: counter_vec(
                n::JOBS_SUBMITTED,
                "Jobs submitted to the service's API, by the name of the token that submitted them.",
                &["token"],
            )?,
            jobs_finished: counter_vec(
                n::JOBS_FINISHED,
                "Jobs finished, by outcome.",
                &["outcome"],
            )?,
            jobs: IntGaugeVec::new(
                Opts::new(n::JOBS, "Jobs queued or running now."),
                &["state"],
            )
            .map_err(|source| MetricsError::Register {
                name: n::JOBS,
                source,
            })?,
            queue_wait: histogram(
                n::QUEUE_WAIT,
                "Time from submission to the first start of a job.",
                &n::QUEUE_WAIT_BUCKETS,
            )?,
            handoff: histogram(
                n::HANDOFF,
                "Compact JSON size of valid round reports (the handoff to the next round).",
                &n::HANDOFF_BUCKETS,
            )?,
            verify: counter_vec(
                n::VERIFY,
                "Verify commands run by the runner, by result.",
                &["result"],
            )?,
            attempts: counter_vec(
                n::ATTEMPTS,
                "Attempts of fan-out jobs (--attempts), by outcome; the winner's is complete.",
                &["outcome"],
            )?,
            notifications: counter_vec(
                n::NOTIFICATIONS,
                "Attempts to deliver a job's end to a webhook receiver, by result (delivered, retrying, gave_up).",
                &["result"],
            )?,
            setup_runs: counter_vec(
                n::SETUP_RUNS,
                "Set-up commands run by the runner before a job's first round, by result.",
                &["result"],
            )?,
            setup: histogram_vec(
                n::SETUP,
                "Time the sandbox took to set up before the agent's command started.",
                &n::SETUP_BUCKETS,
                &["backend"],
            )?,
            setup_failures: counter_vec(
                n::SETUP_FAILURES,
                "Rounds whose sandbox could not be set up (nothing ran), by backend and reason.",
                &["backend", "reason"],
            )?,
            workspace_sanitized: counter_vec(
                n::WORKSPACE_SANITIZED,
                "Git repositories in writable trees that a run created, replaced or changed, made safe for the host's git after it (configuration, hooks and pointers replaced), by change.",
                &["change"],
            )?,
            model_requests: counter_vec(
                n::MODEL_REQUESTS,
                "Requests the model gateway answered, by API, model and HTTP status (the gateway's own refusals included).",
                &["api", "model", "status"],
            )?,
            model_request_duration: histogram_vec(
                n::MODEL_REQUEST_DURATION,
                "Time from a model request's arrival at the gateway to the end of its response (streams included).",
                &n::MODEL_REQUEST_BUCKETS,
                &["api"],
            )?,
            model_refusals: counter_vec(
                n::MODEL_REFUSALS,
                "Requests the model gateway refused itself (nothing reached the upstream), by reason.",
                &["reason"],
            )?,
            egress: counter_vec(
                n::EGRESS,
                "Destinations the egress proxy let a round (or a set-up or verify command) reach or refused.",
                &["decision"],
            )?,
            cache_lookups: counter_vec(
                n::CACHE_LOOKUPS,
                "Caches of jobs looked up in this host's store before their set-up, by result.",
                &["result"],
            )?,
            cache_bytes: prometheus::IntGauge::with_opts(Opts::new(
                n::CACHE_BYTES,
                "Bytes this host's caches hold, as of this process's last save of one (0 before).",
            ))
            .map_err(|source| MetricsError::Register {
                name: n::CACHE_BYTES,
                source,
            })?,
            models: Mutex::new(BTreeSet::new()),
        };
        let build_info = IntGaugeVec::new(
            Opts::new(n::BUILD_INFO, "Build information; the value is always 1."),
            &["version"],
        )
        .map_err(|source| MetricsError::Register {
            name: n::BUILD_INFO,
            source,
        })?;
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let collectors: Vec<(&'static str, Box<dyn Collector>)> = vec![
            (n::ROUNDS, Box::new(m.rounds.clone())),
            (n::ROUND_DURATION, Box::new(m.round_duration.clone())),
            (n::ROUND_RETRIES, Box::new(m.round_retries.clone())),
            (n::AGENT_RETRIES, Box::new(m.agent_retries.clone())),
            (n::TOKENS, Box::new(m.tokens.clone())),
            (n::JOBS_STARTED, Box::new(m.jobs_started.clone())),
            (n::JOBS_STALLED, Box::new(m.jobs_stalled.clone())),
            (n::NOTIFICATIONS, Box::new(m.notifications.clone())),
            (n::ATTEMPTS, Box::new(m.attempts.clone())),
            (n::JOBS_SUBMITTED, Box::new(m.jobs_submitted.clone())),
            (n::JOBS_FINISHED, Box::new(m.jobs_finished.clone())),
            (n::JOBS, Box::new(m.jobs.clone())),
            (n::QUEUE_WAIT, Box::new(m.queue_wait.clone())),
            (n::HANDOFF, Box::new(m.handoff.clone())),
            (n::VERIFY, Box::new(m.verify.clone())),
            (n::SETUP_RUNS, Box::new(m.setup_runs.clone())),
            (n::SETUP, Box::new(m.setup.clone())),
            (n::SETUP_FAILURES, Box::new(m.setup_failures.clone())),
            (
                n::WORKSPACE_SANITIZED,
                Box::new(m.workspace_sanitized.clone()),
            ),
            (n::MODEL_REQUESTS, Box::new(m.model_requests.clone())),
            (
                n::MODEL_REQUEST_DURATION,
                Box::new(m.model_request_duration.clone()),
            ),
            (n::MODEL_REFUSALS, Box::new(m.model_refusals.clone())),
            (n::EGRESS, Box::new(m.egress.clone())),
            (n::CACHE_LOOKUPS, Box::new(m.cache_lookups.clone())),
            (n::CACHE_BYTES, Box::new(m.cache_bytes.clone())),
            (n::BUILD_INFO, Box::new(build_info)),
        ];
        for (name, c) in collectors {
            m.registry
                .register(c)
                .map_err(|source| MetricsError::Register { name, source })?;
        }
        if process {
            m.registry
                .register(Box::new(
                    prometheus::process_collector::ProcessCollector::for_self(),
                ))
                .map_err(|source| MetricsError::Register {
                    name: "process_*",
                    source,
                })?;
        }
        m.preinit();
        Ok(m)
    }

    /// Known label values start at 0, so a rate over them never starts from nothing.
    fn preinit(&self) {
        for o in RoundOutcome::ALL {
            self.rounds.with_label_values(&[o.as_str()]);
        }
        for b in n::BACKENDS {
            self.round_duration.with_label_values(&[b]);
            self.setup.with_label_values(&[b]);
        }
        for r in RoundFailure::ALL {
            self.round_retries.with_label_values(&[r.as_str()]);
        }
        for r in RETRY_REASONS {
            self.agent_retries.with_label_values(&[r]);
        }
        // `model` is open: no value of it is known before usage names one (a zero
        // `model="unknown"` series would sit beside the real model in every file).
        for o in Outcome::ALL {
            self.jobs_finished.with_label_values(&[o.as_str()]);
        }
        for s in n::JOB_STATES {
            self.jobs.with_label_values(&[s]);
        }
        for r in VerifyResult::ALL {
            self.verify.with_label_values(&[r.as_str()]);
        }
        for o in Outcome::ALL {
            self.attempts.with_label_values(&[o.as_str()]);
        }
        for r in crate::webhook::DeliveryResult::ALL {
            self.notifications.with_label_values(&[r.as_str()]);
        }
        for r in super::event::SetupResult::ALL {
            self.setup_runs.with_label_values(&[r.as_str()]);
        }
        for b in n::BACKENDS {
            for r in ralph_sandbox::error::SETUP_FAILURE_REASONS {
                self.setup_failures.with_label_values(&[b, r]);
            }
        }
        for c in Change::ALL {
            self.workspace_sanitized.with_label_values(&[c.as_str()]);
        }
        for a in n::MODEL_APIS {
            self.model_request_duration.with_label_values(&[a]);
        }
        for r in Refusal::ALL {
            self.model_refusals.with_label_values(&[r.as_str()]);
        }
        for d in n::EGRESS_DECISIONS {
            self.egress.with_label_values(&[d]);
        }
        for r in n::CACHE_RESULTS {
            self.cache_lookups.with_label_values(&[r]);
        }
    }

    /// Counts one event.
    pub fn record(&self, event: &MetricEvent) {
        match event {
            MetricEvent::JobSubmitted { token } => {
                self.jobs_submitted.with_label_values(&[token]).inc();
            }
            MetricEvent::JobStarted { queue_wait } => {
                self.jobs_started.inc();
                if let Some(w) = queue_wait {
                    self.queue_wait.observe(w.as_secs_f64());
                }
            }
            MetricEvent::RoundFinished {
                outcome,
                backend,
                duration,
                handoff_bytes,
                setup,
            } => {
                self.rounds.with_label_values(&[outcome.as_str()]).inc();
                self.round_duration
                    .with_label_values(&[backend.as_str()])
                    .observe(duration.as_secs_f64());
                if let Some(b) = handoff_bytes {
                    self.handoff.observe(*b as f64);
                }
                if let Some(s) = setup {
                    self.setup
                        .with_label_values(&[backend.as_str()])
                        .observe(s.as_secs_f64());
                }
            }
            MetricEvent::SandboxSetupFailed { backend, reason } => {
                let reason =
                    if ralph_sandbox::error::SETUP_FAILURE_REASONS.contains(&reason.as_str()) {
                        reason.as_str()
                    } else {
                        "other"
                    };
                self.setup_failures
                    .with_label_values(&[backend.as_str(), reason])
                    .inc();
            }
            MetricEvent::RoundRetried { reason } => {
                self.round_retries
                    .with_label_values(&[reason.as_str()])
                    .inc();
            }
            MetricEvent::AgentRequestRetries { reason, count } => {
                let reason = if RETRY_REASONS.contains(&reason.as_str()) {
                    reason.as_str()
                } else {
                    "other"
                };
                self.agent_retries
                    .with_label_values(&[reason])
                    .inc_by(*count);
            }
            MetricEvent::Tokens { model, usage } => {
                let model = self.model_label(model);
                for (kind, count) in usage.by_kind() {
                    self.tokens.with_label_values(&[kind, &model]).inc_by(count);
                }
            }
            MetricEvent::Verify { result } => {
                self.verify.with_label_values(&[result.as_str()]).inc();
            }
            MetricEvent::Attempt { outcome } => {
                self.attempts.with_label_values(&[outcome.as_str()]).inc();
            }
            MetricEvent::Notified { result } => {
                self.notifications
                    .with_label_values(&[result.as_str()])
                    .inc();
            }
            MetricEvent::Setup { result } => {
                self.setup_runs.with_label_values(&[result.as_str()]).inc();
            }
            MetricEvent::JobFinished { outcome, stalled } => {
                self.jobs_finished
                    .with_label_values(&[outcome.as_str()])
                    .inc();
                if *stalled {
                    self.jobs_stalled.inc();
                }
            }
            MetricEvent::ModelRequest {
                api,
                model,
                status,
                duration,
            } => {
                let api = if n::MODEL_APIS.contains(&api.as_str()) {
                    api.as_str()
                } else {
                    "other"
                };
                let model = self.model_label(model);
                self.model_requests
                    .with_label_values(&[api, &model, &status.to_string()])
                    .inc();
                self.model_request_duration
                    .with_label_values(&[api])
                    .observe(duration.as_secs_f64());
            }
            MetricEvent::ModelRequests {
                api,
                status,
                reason,
                count,
            } => {
                let api = if n::MODEL_APIS.contains(&api.as_str()) {
                    api.as_str()
                } else {
                    "other"
                };
                self.model_requests
                    .with_label_values(&[api, UNKNOWN_MODEL, &status.to_string()])
                    .inc_by(*count);
                self.model_refusals
                    .with_label_values(&[refusal_label(reason)])
                    .inc_by(*count);
            }
            MetricEvent::ModelRefusal { reason } => {
                self.model_refusals
                    .with_label_values(&[refusal_label(reason)])
                    .inc();
            }
            MetricEvent::CacheLookup { hit } => {
                let r = if *hit { "hit" } else { "miss" };
                self.cache_lookups.with_label_values(&[r]).inc();
            }
            MetricEvent::CacheBytes { total } => {
                self.cache_bytes
                    .set(i64::try_from(*total).unwrap_or(i64::MAX));
            }
            MetricEvent::Egress { allowed } => {
                let d = if *allowed { "allowed" } else { "refused" };
                self.egress.with_label_values(&[d]).inc();
            }
            MetricEvent::WorkspaceSanitized { counts } => {
                for c in Change::ALL {
                    self.workspace_sanitized
                        .with_label_values(&[c.as_str()])
                        .inc_by(u64::from(counts.get(c)));
                }
            }
        }
    }

    /// The `model` label for `model`: itself while fewer than [`MAX_MODELS`] are known.
    fn model_label(&self, model: &str) -> String {
        let Ok(mut known) = self.models.lock() else {
            return OTHER_MODEL.to_owned();
        };
        if model == UNKNOWN_MODEL || known.contains(model) {
            return model.to_owned();
        }
        if known.len() < MAX_MODELS {
            known.insert(model.to_owned());
            return model.to_owned();
        }
        OTHER_MODEL.to_owned()
    }

    /// Sets the `ralph_jobs{state}` gauge.
    pub fn set_jobs(&self, queued: u64, running: u64) {
        let set = |s: &str, v: u64| {
            self.jobs
                .with_label_values(&[s])
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set("queued", queued);
        set("running", running);
    }

    /// Every metric family, as collected now.
    pub fn gather(&self) -> Vec<MetricFamily> {
        self.registry.gather()
    }

    /// The text exposition (Prometheus format 0.0.4).
    pub fn encode(&self) -> Result<String, MetricsError> {
        encode(&self.gather())
    }
}

/// Text exposition of `families`.
pub fn encode(families: &[MetricFamily]) -> Result<String, MetricsError> {
    TextEncoder::new()
        .encode_to_string(families)
        .map_err(MetricsError::Encode)
}

/// The `reason` label of a refusal: one of [`Refusal::ALL`]'s (a value from an older or newer
/// journal that is not is counted under `endpoint`, the catch-all of "not forwarded").
fn refusal_label(reason: &str) -> &'static str {
    Refusal::ALL
        .iter()
        .map(|r| r.as_str())
        .find(|r| *r == reason)
        .unwrap_or("endpoint")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ralph_sandbox::BackendKind;

    use super::*;
    use crate::usage::UsageTotals;

    #[test]
    fn known_labels_start_at_zero() {
        let m = Metrics::new(false).unwrap();
        let text = m.encode().unwrap();
        for line in [
            "ralph_rounds_total{outcome=\"continue\"} 0",
            "ralph_rounds_total{outcome=\"cancelled\"} 0",
            "ralph_round_retries_total{reason=\"no_report\"} 0",
            "ralph_agent_request_retries_total{reason=\"rate_limit\"} 0",
            "ralph_jobs_finished_total{outcome=\"budget-limited\"} 0",
            "ralph_jobs{state=\"queued\"} 0",
            "ralph_verify_total{result=\"passed\"} 0",
            "ralph_setup_total{result=\"passed\"} 0",
            "ralph_setup_total{result=\"failed\"} 0",
            "ralph_round_duration_seconds_count{backend=\"native\"} 0",
            "ralph_sandbox_setup_failures_total{backend=\"docker\",reason=\"landlock\"} 0",
            "ralph_jobs_started_total 0",
            "ralph_jobs_stalled_total 0",
            "ralph_notifications_total{result=\"gave_up\"} 0",
            "ralph_workspace_sanitized_total{change=\"new\"} 0",
            "ralph_workspace_sanitized_total{change=\"changed\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
        assert!(text.contains("ralph_build_info{version=\""));
        assert!(!text.contains("process_"));
        // Issue 26: the open `model` label has no pre-initialised value.
        assert!(!text.contains("ralph_tokens_total"), "{text}");
    }

    #[test]
    fn events_count_with_their_labels() {
        let m = Metrics::new(false).unwrap();
        m.record(&MetricEvent::RoundFinished {
            outcome: RoundOutcome::Continue,
            backend: BackendKind::Native,
            duration: Duration::from_millis(1500),
            handoff_bytes: Some(300),
            setup: Some(Duration::from_millis(3)),
        });
        m.record(&MetricEvent::Tokens {
            model: "m1".into(),
            usage: UsageTotals {
                input_tokens: 10,
                cached_input_tokens: 4,
                output_tokens: 3,
                reasoning_tokens: 1,
                cache_write_input_tokens: 0,
            },
        });
        m.record(&MetricEvent::AgentRequestRetries {
            reason: "made up".into(),
            count: 2,
        });
        m.record(&MetricEvent::WorkspaceSanitized {
            counts: ralph_sandbox::outcome::git::Counts {
                new: 2,
                replaced: 0,
                changed: 1,
            },
        });
        let text = m.encode().unwrap();
        for line in [
            "ralph_rounds_total{outcome=\"continue\"} 1",
            "ralph_round_duration_seconds_sum{backend=\"native\"} 1.5",
            "ralph_round_duration_seconds_bucket{backend=\"native\",le=\"1\"} 0",
            "ralph_round_duration_seconds_bucket{backend=\"native\",le=\"5\"} 1",
            "ralph_handoff_bytes_bucket{le=\"512\"} 1",
            "ralph_sandbox_setup_seconds_bucket{backend=\"native\",le=\"0.005\"} 1",
            "ralph_tokens_total{kind=\"input\",model=\"m1\"} 10",
            "ralph_tokens_total{kind=\"cached_input\",model=\"m1\"} 4",
            "ralph_agent_request_retries_total{reason=\"other\"} 2",
            "ralph_workspace_sanitized_total{change=\"new\"} 2",
            "ralph_workspace_sanitized_total{change=\"replaced\"} 0",
            "ralph_workspace_sanitized_total{change=\"changed\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing `{line}` in\n{text}"
            );
        }
    }

    #[test]
    fn refusals_count_one_by_one_and_in_summaries() {
        let m = Metrics::new(false).unwrap();
        m.record(&MetricEvent::ModelRequest {
            api: "other".into(),
            model: UNKNOWN_MODEL.into(),
            status: 403,
            duration: std::time::Duration::from_millis(1),
        });
        m.record(&MetricEvent::ModelRefusal {
            reason: "endpoint".into(),
        });
        m.record(&MetricEvent::ModelRequests {
            api: "other".into(),
            status: 403,
            reason: "endpoint".into(),
            count: 19_999,
        });
        m.record(&MetricEvent::ModelRequests {
            api: "completions".into(),
            status: 400,
            reason: "budget".into(),
            count: 2,
        });
        let text = m.encode().unwrap();
        for line in [
            "ralph_model_refusals_total{reason=\"endpoint\"} 20000",
            "ralph_model_refusals_total{reason=\"budget\"} 2",
            "ralph_model_refusals_total{reason=\"connections\"} 0",
            "ralph_model_requests_total{api=\"other\",model=\"unknown\",status=\"403\"} 20000",
            "ralph_model_requests_total{api=\"completions\",model=\"unknown\",status=\"400\"} 2",
            "ralph_model_request_duration_seconds_count{api=\"embeddings\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in\n{text}");
        }
    }

    #[test]
    fn model_labels_are_capped() {
        let m = Metrics::new(false).unwrap();
        for i in 0..MAX_MODELS + 5 {
            m.record(&MetricEvent::Tokens {
                model: format!("model-{i}"),
                usage: UsageTotals {
                    input_tokens: 1,
                    ..UsageTotals::default()
                },
            });
        }
        let text = m.encode().unwrap();
        assert!(text.contains("ralph_tokens_total{kind=\"input\",model=\"other\"} 5"));
        let models: BTreeSet<&str> = text
            .lines()
            .filter(|l| l.starts_with("ralph_tokens_total{kind=\"input\""))
            .collect();
        assert_eq!(models.len(), MAX_MODELS + 1, "capped models + other");
    }

    #[test]
    fn the_service_registry_has_process_metrics() {
        let text = Metrics::new(true).unwrap().encode().unwrap();
        assert!(text.contains("process_resident_memory_bytes"), "{text}");
    }
}
