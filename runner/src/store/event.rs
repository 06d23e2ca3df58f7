//! Journal events (SPEC §8). Each job has an append-only sequence of these; its state is a
//! projection of them ([`super::projection`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use ralph_sandbox::Termination;
use ralph_sandbox::outcome::git::{Counts, Sanitized};
use ralph_sandbox::outcome::{EndedBy, ResourceUsage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use crate::job::RaisedCaps;
use crate::job::{FinishReason, JobSpec, Outcome, RoundFailure};
use crate::provision::patch_status::{PatchFailure, PatchState, SkippedPath};
use crate::usage::{RoundUsage, UsageTotals};

/// Who ran (or is running) a job: enough to tell whether that process still lives.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunnerInfo {
    /// Host name.
    pub host: String,
    /// Process id of the runner.
    pub pid: u32,
    /// `ralph` version.
    pub version: String,
    /// `ralph run` or `ralph serve`.
    pub role: String,
    /// The kernel's boot id when the runner started (a pid means nothing across boots).
    #[serde(default)]
    pub boot_id: String,
    /// The runner's start time in clock ticks since boot (a recycled pid has another one).
    #[serde(default)]
    pub start_ticks: u64,
    /// The state directory of a `ralph serve` (where its job's artifacts and provisioned
    /// workspace are): with the host name, which host of a fleet holds them (SPEC §11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_dir: Option<std::path::PathBuf>,
}

/// The start time of `pid`, in clock ticks since boot (field 22 of `/proc/PID/stat`).
fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl RunnerInfo {
    /// This process, in `role`.
    pub fn current(role: &str) -> Self {
        let pid = std::process::id();
        Self {
            host: nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_default(),
            pid,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            role: role.to_owned(),
            boot_id: boot_id(),
            start_ticks: start_ticks(pid).unwrap_or(0),
            state_dir: None,
        }
    }

    /// This runner, whose artifacts and workspaces are under `state_dir`.
    pub fn with_state_dir(mut self, state_dir: &std::path::Path) -> Self {
        self.state_dir = Some(state_dir.to_owned());
        self
    }

    /// Whether `other` keeps its files where this runner does: the same host and state
    /// directory (another process of the same `ralph serve` counts as the same place).
    /// Unknown (a journal older than the field) when either has no state directory.
    pub fn same_place(&self, other: &RunnerInfo) -> Option<bool> {
        match (&self.state_dir, &other.state_dir) {
            (Some(a), Some(b)) => Some(self.host == other.host && a == b),
            _ => None,
        }
    }

    /// `` `HOST` (state directory `DIR`) ``: where this runner's files are, for messages.
    pub fn place(&self) -> String {
        match &self.state_dir {
            Some(d) => format!("`{}` (state directory `{}`)", self.host, d.display()),
            None => format!("`{}`", self.host),
        }
    }

    /// Whether that runner process is still alive. Only answerable on its own host; `None` for
    /// another host.
    pub fn is_alive(&self) -> Option<bool> {
        let me = Self::current(&self.role);
        if self.host != me.host {
            return None;
        }
        if self.boot_id != me.boot_id {
            return Some(false);
        }
        Some(start_ticks(self.pid).is_some_and(|t| t == self.start_ticks))
    }
}

/// How one round attempt ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttemptResult {
    /// A valid report (stored as JSON; re-validated on every read).
    Reported {
        /// The report.
        report: Value,
    },
    /// No valid report.
    Failed {
        /// Why.
        reason: RoundFailure,
        /// Bounded details.
        message: String,
    },
    /// The process ended without a report, and none was required (task jobs).
    Exited,
    /// The sandbox could not be set up: the agent never ran.
    SandboxFailed {
        /// Bounded details.
        message: String,
        /// A bounded label for why (one of `ralph_sandbox::error::SETUP_FAILURE_REASONS`).
        #[serde(default = "other_reason")]
        reason: String,
    },
    /// Stopped by a cancel.
    Cancelled,
    /// Stopped because the job deadline passed.
    DeadlineReached,
    /// Stopped because the job's token budget was crossed while it ran.
    BudgetSpent,
    /// The runner died while it ran (written on recovery).
    Interrupted,
}

fn other_reason() -> String {
    "other".to_owned()
}

/// A command the runner itself runs in the job's sandbox, outside any round attempt (SPEC §12):
/// what an `egress` event of such a run names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunnerStep {
    /// The set-up command, before round 1 (its events carry round 0).
    Setup,
    /// The verify command after the event's round.
    Verify,
}

impl RunnerStep {
    /// The step's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            RunnerStep::Setup => "setup",
            RunnerStep::Verify => "verify",
        }
    }
}

/// One event of a job's journal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The job was accepted with this immutable request.
    JobSubmitted {
        /// The request.
        spec: Box<JobSpec>,
    },
    /// A runner took the job.
    JobStarted {
        /// Who.
        runner: RunnerInfo,
    },
    /// A round attempt is about to spawn its process (journalled before the spawn).
    RoundStarted {
        /// 1-based round.
        round: u32,
        /// 1-based attempt within the round.
        attempt: u32,
        /// The attempt's artifact directory.
        dir: PathBuf,
    },
    /// The attempt's process exists.
    RoundSpawned {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// Host pid of the process supervising the round.
        pid: Option<u32>,
    },
    /// The attempt ended.
    RoundFinished {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// How.
        result: AttemptResult,
        /// The agent process's termination, when it ran.
        exit: Option<Termination>,
        /// Why the process ended.
        ended_by: Option<EndedBy>,
        /// Wall-clock time.
        duration_ms: u64,
        /// Tokens used.
        usage: RoundUsage,
        /// Resources used.
        resources: Option<ResourceUsage>,
        /// What the sandbox had to undo after the process (e.g. a forbidden file removed).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        sandbox_violations: Vec<String>,
        /// Time the sandbox took to set up before the agent started, when the backend knows.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sandbox_setup_ms: Option<u64>,
        /// Requests the agent CLI itself retried (e.g. rate limited), by reason; read by presets.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        agent_retries: BTreeMap<String, u64>,
    },
    /// After an attempt or a verify run, the sandbox made git repositories of the writable trees
    /// safe for the host's git: ones the run created, replaced or changed had their
    /// configuration, hooks and pointers replaced (journalled before the run's
    /// `round_finished` or `verify_finished`).
    WorkspaceSanitized {
        /// Round.
        round: u32,
        /// The attempt; `None` for the verify command run after the round.
        attempt: Option<u32>,
        /// The repositories (at most 64; `counts` covers all of them). Their paths below the
        /// tree are escaped: they are the agent's bytes.
        repositories: Vec<Sanitized>,
        /// How many were made safe, by change.
        counts: Counts,
        /// What could not be checked, if anything.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unchecked: Option<String>,
    },
    /// A usage line was malformed and skipped.
    UsageSkipped {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// Line number (0 = the whole file).
        line: u32,
        /// Why.
        message: String,
    },
    /// The model gateway answered one request of a round (forwarded, or refused by the gateway
    /// itself: then `refusal` says why; past the first refusals of an attempt they are summed
    /// into `model_refusals` instead).
    ModelRequest {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// Which API (`responses`, `chat`, `messages`, `other`).
        api: String,
        /// The model, as the response (or request) named it; escaped and bounded.
        model: String,
        /// The HTTP status the agent got.
        status: u16,
        /// Tokens the upstream reported for it.
        usage: UsageTotals,
        /// From the request's arrival to the end of the response.
        duration_ms: u64,
        /// Why it failed, when the gateway itself answered (budget spent, upstream unreachable).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The refusal's reason (a `ralph_model_refusals_total` label: `endpoint`,
        /// `not_canonical`, `budget`, …) when the gateway refused it: nothing reached the upstream.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
    },
    /// Refusals of the model gateway summed: after the first ones of an attempt, refusals are
    /// journalled at a bounded rate (one of these per batch), each still counted.
    ModelRefusals {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// How many refusals this event stands for.
        count: u64,
        /// By API, status and reason.
        by: Vec<RefusalCount>,
    },
    /// The egress proxy let a round (or the set-up or verify command) reach a destination, or
    /// refused it.
    Egress {
        /// Round (0 for the set-up).
        round: u32,
        /// Attempt (0 for the set-up and verify, which `step` names).
        attempt: u32,
        /// The runner's step whose request it was; absent for a round attempt's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<RunnerStep>,
        /// The host the round asked for (escaped and bounded: the agent's bytes).
        host: String,
        /// The port.
        port: u16,
        /// `CONNECT` or the HTTP method.
        method: String,
        /// Whether it was let through.
        allowed: bool,
        /// Why it was refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The gateway's token count of an attempt (the job's count) and the agent's own differ.
    UsageMismatch {
        /// Round.
        round: u32,
        /// Attempt.
        attempt: u32,
        /// What the model API reported through the gateway.
        gateway: UsageTotals,
        /// What the preset or the usage file reported.
        agent: UsageTotals,
    },
    /// A failed attempt will be retried.
    RoundRetried {
        /// Round.
        round: u32,
        /// The attempt that failed.
        attempt: u32,
        /// Why it failed.
        reason: RoundFailure,
        /// Delay before the next attempt.
        backoff_ms: u64,
    },
    /// The runner started the job's set-up command (SPEC §12), before round 1; journalled
    /// before its process is spawned.
    SetupStarted {
        /// The command.
        command: String,
    },
    /// The set-up command ended.
    SetupFinished {
        /// True when it exited 0 (and left nothing the sandbox forbids).
        passed: bool,
        /// How it ended (`None`: it never ran; the tail says why).
        exit: Option<Termination>,
        /// Why it ended (timeout, cancel...).
        ended_by: Option<EndedBy>,
        /// Bounded tail of its output.
        output_tail: String,
        /// Wall-clock time.
        duration_ms: u64,
    },
    /// The runner started its verify command.
    VerifyStarted {
        /// After this round's complete report.
        round: u32,
    },
    /// The verify command ended.
    VerifyFinished {
        /// Round.
        round: u32,
        /// True when it exited 0.
        passed: bool,
        /// The command.
        command: String,
        /// How it ended.
        exit: Option<Termination>,
        /// Why it ended (timeout, cancel...).
        ended_by: Option<EndedBy>,
        /// Bounded tail of its output.
        output_tail: String,
        /// Wall-clock time.
        duration_ms: u64,
    },
    /// A user or signal asked to cancel.
    CancelRequested {
        /// Who ("SIGINT", "api", ...).
        by: String,
    },
    /// Recovery closed an open round whose runner died.
    Interrupted {
        /// Bounded explanation.
        message: String,
    },
    /// The job was re-armed to run again with its remaining budget, or (a `budget-limited`
    /// job) with the raised caps it records (SPEC §3).
    Resumed {
        /// Bounded explanation.
        message: String,
        /// The name of the API token that asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// The caps raised for the rest of the job (empty: none).
        #[serde(default, skip_serializing_if = "RaisedCaps::is_empty")]
        caps: RaisedCaps,
    },
    /// The runner provisioned the job's workspace (SPEC §11): the base commit the result is
    /// measured from.
    WorkspaceProvisioned {
        /// The repository, for a clone.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        repo: Option<String>,
        /// The ref asked for (`HEAD` when none was).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_ref: Option<String>,
        /// The base commit.
        commit: String,
        /// Wall-clock time the provisioning took.
        duration_ms: u64,
        /// How the workspace was made: `overlay` (of a shared base tree) or `clone` (a
        /// repository's), `copy` (an upload's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        layout: Option<String>,
    },
    /// What the job's rounds and verify are granted of the runner's toolchains (SPEC §12),
    /// journalled once per run of the job before its first round (`--toolchain auto`).
    ToolchainGranted {
        /// The toolchains, read-only trees and variables (bounded; no secret values).
        #[serde(flatten)]
        grant: crate::toolchain::GrantRecord,
    },
    /// A cache of the job was looked up in this host's store (SPEC §12), once per run of the
    /// job, before its set-up or first round.
    CacheLookup {
        /// The path in the round's HOME (`~/.npm`).
        path: String,
        /// The entry's key hash.
        key_hash: String,
        /// Where the key came from.
        key_source: crate::cache::KeySource,
        /// Whether the store had it.
        hit: bool,
        /// Its bytes (0 on a miss).
        bytes: u64,
    },
    /// After a set-up that passed, a cache was kept (or could not be: `error`).
    CacheSaved {
        /// The path in the round's HOME.
        path: String,
        /// The entry's key hash.
        key_hash: String,
        /// Bytes kept.
        bytes: u64,
        /// Files (and links) kept.
        files: u64,
        /// Why it was not kept, if it was not.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Bytes all of this host's caches hold after it (and its budget's pruning).
        total_bytes: u64,
    },
    /// The job's result was written as `result.patch` (and pushed, if asked and allowed), in
    /// part (paths skipped), or could not be (SPEC §11).
    ResultWritten {
        /// Bytes of the patch (0 when it could not be written).
        bytes: u64,
        /// Files it changes.
        files: u64,
        /// The branch and commit pushed, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pushed: Option<String>,
        /// What failed, if the patch or the push did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// What the patch holds: `written`, `partial` (paths skipped) or `failed`; absent in
        /// older journals (then `failed` when `error` is set and no file was written).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        patch: Option<PatchState>,
        /// Why the patch could not be built (`failed`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<PatchFailure>,
        /// The first paths left out of the patch (escaped, bounded), with their reasons.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        skipped: Vec<SkippedPath>,
        /// How many paths were left out in all.
        #[serde(default, skip_serializing_if = "is_zero")]
        skipped_total: u64,
        /// The highest peak resident memory of the runner's git while it built the patch, in
        /// bytes (under its memory bound).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        git_max_rss: Option<u64>,
    },
    /// A fan-out job's attempts were made (SPEC §13): each a job of its own on its own copy of
    /// the workspace, started at once.
    AttemptsStarted {
        /// The attempts, in order.
        attempts: Vec<AttemptCopy>,
    },
    /// One attempt of a fan-out job ended.
    AttemptFinished {
        /// The attempt's job.
        job: String,
        /// 1-based.
        index: u32,
        /// Its outcome.
        outcome: Outcome,
        /// Why.
        reason: FinishReason,
        /// Its message (bounded).
        message: String,
        /// Rounds it started.
        rounds: u32,
        /// Whether its last verify passed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verified: Option<bool>,
        /// Its last valid report (re-validated on every read).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        report: Option<Value>,
        /// Its tokens (the job's usage is the sum of its attempts').
        usage: UsageTotals,
    },
    /// The attempt whose result is the fan-out job's: the first verified (`won`), or the best
    /// when none was; with what its changes did to the workspace.
    AttemptChosen {
        /// The attempt's job.
        job: String,
        /// 1-based.
        index: u32,
        /// It passed its verify first.
        won: bool,
        /// The winner's changes applied to the job's workspace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        applied: Option<AppliedChanges>,
    },
    /// One attempt to deliver the job's end to a webhook receiver (SPEC §13), recorded after
    /// the `job_finished` it reports by the host that wrote that.
    Notified {
        /// The delivery's id (`X-Ralph-Delivery`), the same on every attempt of it.
        delivery: String,
        /// Whose URL: the service's `[notify] url` or the job's `notify_url`.
        receiver: crate::webhook::Receiver,
        /// The receiver's origin (scheme, host, port; a URL's path may hold a secret).
        to: String,
        /// 1 for the first attempt.
        attempt: u32,
        /// The HTTP status of the answer, if one came.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// Delivered, retrying or given up.
        result: crate::webhook::DeliveryResult,
        /// Why it failed, when no answer came (bounded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The job ended.
    JobFinished {
        /// Outcome.
        outcome: Outcome,
        /// Why.
        reason: FinishReason,
        /// Bounded explanation.
        message: String,
        /// A task's exit code.
        exit_code: Option<i32>,
        /// Monotonic milliseconds this run of the job ran (the runner's clock, or the last
        /// heartbeat of a dead runner's hold); absent in older journals, where the time between
        /// `job_started` and this event counts instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ran_ms: Option<u64>,
    },
}

/// How soon an event must be on stable storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Flushed (fsync) before `append` returns: the event must survive a power loss, because
    /// something irreversible follows it (a process spawn) or a caller relies on it (the outcome).
    Immediate,
    /// Committed so that no process crash can lose it — ralph's or, on PostgreSQL, the
    /// database server's (a server crash while ralph lives must not take back an event ralph
    /// announced) — but on SQLite flushed only with the next immediate event. Only for events
    /// whose loss on power failure of ralph's own machine is harmless or repaired by recovery.
    Deferred,
}

impl EventKind {
    /// How durable this event must be before the runner moves on.
    pub fn durability(&self) -> Durability {
        match self {
            EventKind::JobSubmitted { .. }
            | EventKind::RoundStarted { .. }
            | EventKind::SetupStarted { .. }
            | EventKind::CancelRequested { .. }
            | EventKind::Interrupted { .. }
            | EventKind::Resumed { .. }
            | EventKind::WorkspaceProvisioned { .. }
            | EventKind::ResultWritten { .. }
            | EventKind::JobFinished { .. } => Durability::Immediate,
            EventKind::JobStarted { .. }
            | EventKind::RoundSpawned { .. }
            | EventKind::RoundFinished { .. }
            | EventKind::WorkspaceSanitized { .. }
            | EventKind::ToolchainGranted { .. }
            | EventKind::CacheLookup { .. }
            | EventKind::CacheSaved { .. }
            | EventKind::UsageSkipped { .. }
            | EventKind::ModelRequest { .. }
            | EventKind::ModelRefusals { .. }
            | EventKind::Egress { .. }
            | EventKind::UsageMismatch { .. }
            | EventKind::RoundRetried { .. }
            | EventKind::SetupFinished { .. }
            | EventKind::VerifyStarted { .. }
            | EventKind::VerifyFinished { .. }
            | EventKind::AttemptsStarted { .. }
            | EventKind::AttemptFinished { .. }
            | EventKind::Notified { .. } => Durability::Deferred,
            // The workspace changed on its strength.
            EventKind::AttemptChosen { .. } => Durability::Immediate,
        }
    }

    /// The event's type name as stored.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::JobSubmitted { .. } => "job_submitted",
            EventKind::JobStarted { .. } => "job_started",
            EventKind::RoundStarted { .. } => "round_started",
            EventKind::RoundSpawned { .. } => "round_spawned",
            EventKind::RoundFinished { .. } => "round_finished",
            EventKind::WorkspaceSanitized { .. } => "workspace_sanitized",
            EventKind::UsageSkipped { .. } => "usage_skipped",
            EventKind::ModelRequest { .. } => "model_request",
            EventKind::ModelRefusals { .. } => "model_refusals",
            EventKind::Egress { .. } => "egress",
            EventKind::UsageMismatch { .. } => "usage_mismatch",
            EventKind::RoundRetried { .. } => "round_retried",
            EventKind::SetupStarted { .. } => "setup_started",
            EventKind::SetupFinished { .. } => "setup_finished",
            EventKind::VerifyStarted { .. } => "verify_started",
            EventKind::VerifyFinished { .. } => "verify_finished",
            EventKind::CancelRequested { .. } => "cancel_requested",
            EventKind::Interrupted { .. } => "interrupted",
            EventKind::Resumed { .. } => "resumed",
            EventKind::WorkspaceProvisioned { .. } => "workspace_provisioned",
            EventKind::ToolchainGranted { .. } => "toolchain_granted",
            EventKind::CacheLookup { .. } => "cache_lookup",
            EventKind::CacheSaved { .. } => "cache_saved",
            EventKind::ResultWritten { .. } => "result_written",
            EventKind::JobFinished { .. } => "job_finished",
            EventKind::Notified { .. } => "notified",
            EventKind::AttemptsStarted { .. } => "attempts_started",
            EventKind::AttemptFinished { .. } => "attempt_finished",
            EventKind::AttemptChosen { .. } => "attempt_chosen",
        }
    }
}

/// One attempt of a fan-out job as made: its job and its copy of the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptCopy {
    /// The attempt's job.
    pub job: String,
    /// 1-based.
    pub index: u32,
    /// `overlay` (a mount on the workspace) or `copy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<String>,
    /// Files and links copied (none for an overlay).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// How long the copy took.
    pub copy_ms: u64,
}

/// The winner's changes as applied to a fan-out job's workspace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedChanges {
    /// Files, links and directories written (new or changed).
    pub written: u64,
    /// Entries removed.
    pub removed: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// Whether a count is zero (left out of an event when it is).
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One line of a `model_refusals` event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusalCount {
    /// `responses`, `chat`, …, `other`.
    pub api: String,
    /// The status the agent got.
    pub status: u16,
    /// The refusal's reason.
    pub reason: String,
    /// How many.
    pub count: u64,
}

/// A journalled event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The job.
    pub job_id: String,
    /// 1-based position in the job's journal.
    pub seq: u64,
    /// RFC 3339 UTC timestamp with milliseconds.
    pub at: String,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The journal's last `job_finished` or `resumed` event, whichever came later: a journal is over
/// when it is a `job_finished`, and goes on after a `resumed`.
pub fn last_end_or_resume(events: &[Event]) -> Option<&Event> {
    events.iter().rev().find(|e| {
        matches!(
            e.kind,
            EventKind::JobFinished { .. } | EventKind::Resumed { .. }
        )
    })
}
