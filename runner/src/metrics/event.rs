//! The typed metric events: everything the metrics count, as data.

use std::time::Duration;

use ralph_sandbox::BackendKind;
use ralph_sandbox::outcome::git::Counts;

use crate::job::{Outcome, RoundFailure};
use crate::usage::UsageTotals;

/// How one round attempt ended (`ralph_rounds_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundOutcome {
    /// A valid report with status `continue`.
    Continue,
    /// A valid report with status `complete` (or a task's command exited 0).
    Complete,
    /// A valid report with status `blocked`.
    Blocked,
    /// No valid report, the agent failed, or the sandbox could not be set up.
    Failed,
    /// Stopped from outside before it could finish: the runner died, or the job deadline passed.
    Interrupted,
    /// Stopped by a cancel.
    Cancelled,
}

impl RoundOutcome {
    /// Every value, for pre-initialisation.
    pub const ALL: [RoundOutcome; 6] = [
        RoundOutcome::Continue,
        RoundOutcome::Complete,
        RoundOutcome::Blocked,
        RoundOutcome::Failed,
        RoundOutcome::Interrupted,
        RoundOutcome::Cancelled,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            RoundOutcome::Continue => "continue",
            RoundOutcome::Complete => "complete",
            RoundOutcome::Blocked => "blocked",
            RoundOutcome::Failed => "failed",
            RoundOutcome::Interrupted => "interrupted",
            RoundOutcome::Cancelled => "cancelled",
        }
    }
}

/// How a verify command ended (`ralph_verify_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerifyResult {
    /// Exit status 0.
    Passed,
    /// Any other exit.
    Failed,
    /// Killed at its timeout.
    Timeout,
    /// Stopped by a cancel.
    Cancelled,
    /// It could not run (sandbox set-up failed).
    Error,
}

impl VerifyResult {
    /// Every value, for pre-initialisation.
    pub const ALL: [VerifyResult; 5] = [
        VerifyResult::Passed,
        VerifyResult::Failed,
        VerifyResult::Timeout,
        VerifyResult::Cancelled,
        VerifyResult::Error,
    ];

    /// The label value.
    pub const fn as_str(self) -> &'static str {
        match self {
            VerifyResult::Passed => "passed",
            VerifyResult::Failed => "failed",
            VerifyResult::Timeout => "timeout",
            VerifyResult::Cancelled => "cancelled",
            VerifyResult::Error => "error",
        }
    }
}

/// How a job's set-up command ended (`ralph_setup_total{result}`): the same results as a
/// verify command's.
pub type SetupResult = VerifyResult;

/// Something the metrics count.
#[derive(Clone, Debug, PartialEq)]
pub enum MetricEvent {
    /// A runner took a job; the wait since it was queued, when known.
    JobStarted {
        /// Time in the queue (first start only).
        queue_wait: Option<Duration>,
    },
    /// A round attempt ended.
    RoundFinished {
        /// How.
        outcome: RoundOutcome,
        /// On which backend.
        backend: BackendKind,
        /// Wall-clock time of the attempt.
        duration: Duration,
        /// Compact size of its valid report.
        handoff_bytes: Option<usize>,
        /// Sandbox set-up time, when the backend measured it.
        setup: Option<Duration>,
    },
    /// The sandbox could not be set up for a round.
    SandboxSetupFailed {
        /// Backend.
        backend: BackendKind,
        /// Bounded reason label.
        reason: String,
    },
    /// A failed round attempt will be retried.
    RoundRetried {
        /// Why it failed.
        reason: RoundFailure,
    },
    /// The agent CLI retried its own requests.
    AgentRequestRetries {
        /// Bounded reason label.
        reason: String,
        /// How many.
        count: u64,
    },
    /// Tokens a round used with one model.
    Tokens {
        /// Model name.
        model: String,
        /// Counts.
        usage: UsageTotals,
    },
    /// A verify command ended.
    Verify {
        /// How.
        result: VerifyResult,
    },
    /// A job's set-up command ended.
    Setup {
        /// How.
        result: SetupResult,
    },
    /// Git repositories of the writable trees made safe after an attempt or verify run.
    WorkspaceSanitized {
        /// How many, by how they differed from before the run.
        counts: Counts,
    },
    /// The model gateway answered a request.
    ModelRequest {
        /// `responses`, `chat`, `messages` or `other`.
        api: String,
        /// The model.
        model: String,
        /// HTTP status.
        status: u16,
        /// From arrival to the end of the response.
        duration: Duration,
    },
    /// Requests the model gateway refused, counted together (a `model_refusals` summary):
    /// counted in the requests and refusals, not in the duration histogram.
    ModelRequests {
        /// The API label.
        api: String,
        /// HTTP status.
        status: u16,
        /// The refusal's reason.
        reason: String,
        /// How many.
        count: u64,
    },
    /// One refusal of the model gateway (its request is counted by [`MetricEvent::ModelRequest`]).
    ModelRefusal {
        /// The refusal's reason.
        reason: String,
    },
    /// The egress proxy decided on a destination.
    Egress {
        /// Let through or refused.
        allowed: bool,
    },
    /// A job's cache was looked up.
    CacheLookup {
        /// Whether the store had it.
        hit: bool,
    },
    /// A set-up's cache was kept: what the host's caches hold now.
    CacheBytes {
        /// Bytes.
        total: u64,
    },
    /// A job was submitted through the API (`ralph_jobs_submitted_total{token}`).
    JobSubmitted {
        /// The name of the token that submitted it (token names are few: the operator makes
        /// them).
        token: String,
    },
    /// A job ended.
    JobFinished {
        /// Its outcome.
        outcome: Outcome,
        /// Ended by `--max-stalled-rounds`.
        stalled: bool,
    },
    /// One attempt of a fan-out job ended (SPEC §13).
    Attempt {
        /// Its outcome.
        outcome: Outcome,
    },
    /// One attempt to deliver a job's end to a webhook receiver (SPEC §13).
    Notified {
        /// How it ended.
        result: crate::webhook::DeliveryResult,
    },
}
