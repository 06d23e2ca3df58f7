//! Metric names, help texts, label sets and buckets: the data of the metrics, in one place.

/// `ralph_rounds_total{outcome}`.
pub const ROUNDS: &str = "ralph_rounds_total";
/// `ralph_round_duration_seconds{backend}`.
pub const ROUND_DURATION: &str = "ralph_round_duration_seconds";
/// `ralph_round_retries_total{reason}`.
pub const ROUND_RETRIES: &str = "ralph_round_retries_total";
/// `ralph_agent_request_retries_total{reason}`.
pub const AGENT_RETRIES: &str = "ralph_agent_request_retries_total";
/// `ralph_tokens_total{kind,model}`.
pub const TOKENS: &str = "ralph_tokens_total";
/// `ralph_jobs_started_total`.
pub const JOBS_STARTED: &str = "ralph_jobs_started_total";
/// `ralph_jobs_stalled_total`: loops ended by `--max-stalled-rounds` (SPEC §3).
pub const JOBS_STALLED: &str = "ralph_jobs_stalled_total";
/// `ralph_attempts_total{outcome}`: attempts of fan-out jobs (SPEC §13), by outcome.
pub const ATTEMPTS: &str = "ralph_attempts_total";
/// `ralph_notifications_total{result}`: webhook delivery attempts (SPEC §13).
pub const NOTIFICATIONS: &str = "ralph_notifications_total";
/// `ralph_jobs_submitted_total{token}`.
pub const JOBS_SUBMITTED: &str = "ralph_jobs_submitted_total";
/// `ralph_jobs_finished_total{outcome}`.
pub const JOBS_FINISHED: &str = "ralph_jobs_finished_total";
/// `ralph_jobs{state}`.
pub const JOBS: &str = "ralph_jobs";
/// `ralph_job_queue_wait_seconds`.
pub const QUEUE_WAIT: &str = "ralph_job_queue_wait_seconds";
/// `ralph_handoff_bytes`.
pub const HANDOFF: &str = "ralph_handoff_bytes";
/// `ralph_verify_total{result}`.
pub const VERIFY: &str = "ralph_verify_total";
/// `ralph_setup_total{result}`: the jobs' set-up commands (SPEC §12).
pub const SETUP_RUNS: &str = "ralph_setup_total";
/// `ralph_sandbox_setup_seconds{backend}`.
pub const SETUP: &str = "ralph_sandbox_setup_seconds";
/// `ralph_sandbox_setup_failures_total{backend,reason}`.
pub const SETUP_FAILURES: &str = "ralph_sandbox_setup_failures_total";
/// `ralph_workspace_sanitized_total{change}`.
pub const WORKSPACE_SANITIZED: &str = "ralph_workspace_sanitized_total";
/// `ralph_model_requests_total{api,model,status}`.
pub const MODEL_REQUESTS: &str = "ralph_model_requests_total";
/// `ralph_model_request_duration_seconds{api}`.
pub const MODEL_REQUEST_DURATION: &str = "ralph_model_request_duration_seconds";
/// `ralph_model_refusals_total{reason}`.
pub const MODEL_REFUSALS: &str = "ralph_model_refusals_total";
/// `ralph_egress_requests_total{decision}`.
pub const EGRESS: &str = "ralph_egress_requests_total";
/// `ralph_cache_lookups_total{result}`: a job's caches looked up (SPEC §12), hit or miss.
pub const CACHE_LOOKUPS: &str = "ralph_cache_lookups_total";
/// `ralph_cache_bytes`: what this host's caches hold after this process's last save.
pub const CACHE_BYTES: &str = "ralph_cache_bytes";
/// The results of a cache lookup.
pub const CACHE_RESULTS: [&str; 2] = ["hit", "miss"];
/// `ralph_build_info{version}`.
pub const BUILD_INFO: &str = "ralph_build_info";

/// Backends, for pre-initialising `backend` labels.
pub const BACKENDS: [&str; 2] = ["native", "docker"];

/// Token kinds (`ralph_tokens_total{kind}`); `cached_input` and `cache_write_input` are parts
/// of `input`, `reasoning` is part of `output`.
pub const TOKEN_KINDS: [&str; 5] = [
    "input",
    "cached_input",
    "cache_write_input",
    "output",
    "reasoning",
];

/// APIs the model gateway tells apart (`api` label): [`crate::gateway::Api::as_str`].
pub const MODEL_APIS: [&str; 6] = [
    "responses",
    "chat",
    "completions",
    "embeddings",
    "messages",
    "other",
];

/// Egress decisions (`decision` label).
pub const EGRESS_DECISIONS: [&str; 2] = ["allowed", "refused"];

/// Model requests: a short completion to a long streamed agent turn.
pub const MODEL_REQUEST_BUCKETS: [f64; 12] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Job states of the `ralph_jobs` gauge.
pub const JOB_STATES: [&str; 2] = ["queued", "running"];

/// Round durations: a fast scripted round to an hour-long agent session.
pub const ROUND_DURATION_BUCKETS: [f64; 13] = [
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0,
];

/// Queue waits.
pub const QUEUE_WAIT_BUCKETS: [f64; 11] = [
    0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
];

/// Sandbox set-up: the native backend takes milliseconds, a container a second or so.
pub const SETUP_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Report sizes up to and past the default handoff cap (16384).
pub const HANDOFF_BUCKETS: [f64; 9] = [
    128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 65536.0,
];
