//! The job request: objective, workspace, agent, sandbox and limits. It is journalled once when
//! the job is submitted and never changes afterwards; nothing an agent does can alter it.

use std::collections::BTreeMap;
use std::path::{Component, PathBuf};

use ralph_sandbox::{BackendKind, Mode, Network};
use serde::{Deserialize, Serialize};

use super::model_access::ModelAccess;
use crate::report::{DEFAULT_HANDOFF_CAP, MAX_HANDOFF_CAP};
use crate::util::units::{ByteSize, HumanDuration};

/// Default `max_rounds` (SPEC §3).
pub const DEFAULT_MAX_ROUNDS: u32 = 20;
/// Default deployment ceiling for `max_rounds` (SPEC §3).
pub const DEFAULT_ROUNDS_CEILING: u32 = 256;
/// Default number of retries of a failed round (SPEC §3).
pub const DEFAULT_ROUND_RETRIES: u32 = 1;
/// Default grace between SIGTERM and SIGKILL when a round is stopped (`--kill-grace`).
pub const DEFAULT_KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// Highest number of retries a job may ask for.
pub const MAX_ROUND_RETRIES: u32 = 10;
/// Smallest handoff cap: room for a minimal valid report.
pub const MIN_HANDOFF_CAP: usize = 128;
/// Largest objective, in bytes.
pub const MAX_OBJECTIVE_BYTES: usize = 64 * 1024;
/// Default per-stream output cap of a round.
pub const DEFAULT_OUTPUT_CAP: u64 = 8 << 20;
/// Default time limit of the set-up command (SPEC §12; `--setup-timeout`): long enough for a
/// cold `npm ci` or `cargo fetch` of a large project.
pub const DEFAULT_SETUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Loop or one-shot task (SPEC §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum JobKind {
    /// The Ralph loop: fresh rounds until complete, blocked or out of budget.
    #[default]
    Loop,
    /// One process, once; its exit status is the outcome.
    Task,
}

impl JobKind {
    /// The kind's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            JobKind::Loop => "loop",
            JobKind::Task => "task",
        }
    }
}

/// Which agent runs each round.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum AgentSpec {
    /// A command line run with `/bin/sh -c` in the workspace.
    Command {
        /// The command line.
        command: String,
    },
    /// A named preset for a known agent CLI.
    Preset {
        /// The preset's name.
        name: String,
    },
}

/// The least open-files limit a job may ask for: below it a shell, and the container's init,
/// cannot work.
pub const MIN_NOFILE: u64 = 64;

/// Sandbox settings of a job (SPEC §5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSettings {
    /// Backend.
    pub backend: BackendKind,
    /// Mode.
    pub mode: Mode,
    /// Network (`None`: the mode's default).
    pub network: Option<Network>,
    /// Protected paths, relative to the workspace.
    pub protect: Vec<PathBuf>,
    /// Extra readable paths.
    pub read: Vec<PathBuf>,
    /// Extra writable directories.
    pub write: Vec<PathBuf>,
    /// Unix sockets granted to the agent.
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
    /// Memory limit of a round's tree.
    pub memory: Option<ByteSize>,
    /// Size limit of each of a round's private HOME and TMPDIR (`None`: the policy's).
    #[serde(default)]
    pub tmp_size: Option<ByteSize>,
    /// Process limit of a round's tree.
    pub pids: Option<u64>,
    /// Open-files limit (`RLIMIT_NOFILE`) of each process of a round (`None`: the policy's).
    #[serde(default)]
    pub nofile: Option<u64>,
    /// CPU limit of a round's tree, in CPUs (e.g. 1.5).
    #[serde(default)]
    pub cpus: Option<ralph_sandbox::policy::Cpus>,
    /// Container image (docker backend).
    pub image: Option<String>,
    /// Per-stream output cap of a round.
    pub output_cap: ByteSize,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            backend: BackendKind::Native,
            mode: Mode::WorkspaceWrite,
            network: None,
            protect: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            sockets: Vec::new(),
            memory: None,
            tmp_size: None,
            pids: None,
            nofile: None,
            cpus: None,
            image: None,
            output_cap: ByteSize(DEFAULT_OUTPUT_CAP),
        }
    }
}

impl SandboxSettings {
    /// The limits a round of this job asks its sandbox for (`None`: the policy's).
    pub fn limits(&self) -> ralph_sandbox::Limits {
        ralph_sandbox::Limits {
            memory_bytes: self.memory.map(|m| m.0),
            pids: self.pids,
            open_files: self.nofile,
            file_size_bytes: None,
            tmp_bytes: self.tmp_size.map(|t| t.0),
            cpu_millis: self.cpus.map(|c| c.0),
        }
    }
}

/// The job's set-up step (SPEC §12): a runner-owned command run once per job, before round 1,
/// in the job's sandbox on the workspace, with the job's egress and the runner's variables that
/// `env` names (those reach the set-up only, never a round or verify).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupSpec {
    /// The command line (`/bin/sh -c`, in the workspace).
    pub command: String,
    /// Names of runner environment variables the set-up (only) gets (`setup_env`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<String>,
    /// Wall-clock limit of the set-up (`setup_timeout`).
    pub timeout: HumanDuration,
}

impl SetupSpec {
    /// A set-up running `command` with the default timeout and no variables of its own.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            env: Vec::new(),
            timeout: HumanDuration(DEFAULT_SETUP_TIMEOUT),
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
/// Most attempts a fan-out job may run.
pub const MAX_ATTEMPTS: u32 = 16;

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Which attempt of which fan-out job a job is (SPEC §13).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttemptOf {
    /// The fan-out job.
    pub job: String,
    /// 1-based.
    pub index: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The full, immutable job request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Loop or task.
    pub kind: JobKind,
    /// The immutable objective.
    pub objective: String,
    /// The shared workspace (absolute).
    pub workspace: PathBuf,
    /// The agent.
    pub agent: AgentSpec,
    /// Round budget.
    pub max_rounds: u32,
    /// Handoff cap in bytes of compact JSON.
    pub handoff_cap: usize,
    /// Retries of a failed round.
    pub round_retries: u32,
    /// Base of the exponential backoff between retries.
    pub retry_backoff: HumanDuration,
    /// Wall-clock limit of one round.
    pub round_timeout: Option<HumanDuration>,
    /// Wall-clock limit of the whole job.
    pub job_timeout: Option<HumanDuration>,
    /// Grace between SIGTERM and SIGKILL when a round is stopped.
    pub kill_grace: HumanDuration,
    /// Token budget (input + output tokens).
    pub max_tokens: Option<u64>,
    /// A loop whose last this many rounds each changed nothing in the workspace ends
    /// `budget-limited`/`stalled` (SPEC §3); 0: off.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_stalled_rounds: u32,
    /// Verification command run by the runner after a `complete` report.
    pub verify: Option<String>,
    /// Independent loops run from the same start, each on its own copy of the workspace; the
    /// first whose verify passes wins (SPEC §13 fan-out); 1: one loop, as always.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub attempts: u32,
    /// The fan-out job this one is an attempt of (set by the runner, never by a submitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_of: Option<AttemptOf>,
    /// The set-up step run once before round 1 (SPEC §12).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupSpec>,
    /// Directories of the round's HOME kept across jobs (SPEC §12, `cache`): written only by a
    /// set-up that passed, copied to each round and verify, whose writes are discarded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<crate::cache::CachePath>,
    /// The caches' key (`cache_key`; default: a digest of the workspace's lock files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Sandbox.
    pub sandbox: SandboxSettings,
    /// Names of runner environment variables passed to the agent.
    pub env: Vec<String>,
    /// Whether the runner's per-user toolchains are granted (SPEC §12; `auto` is left out of
    /// the journalled spec, so older journals read as `auto`).
    #[serde(
        default,
        skip_serializing_if = "crate::toolchain::ToolchainMode::is_default"
    )]
    pub toolchain: crate::toolchain::ToolchainMode,
    /// The model gateway and egress settings (SPEC §9).
    #[serde(default, skip_serializing_if = "ModelAccess::is_empty")]
    pub model_access: ModelAccess,
    /// A name for finding the job again (not unique).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels (key → value) for filtering.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Where the runner provisions the workspace from (SPEC §11); `None`: `workspace` is the
    /// submitter's existing directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<super::source::WorkspaceSource>,
    /// The name of the API token that submitted the job (set by the service, never by a
    /// submitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitted_by: Option<String>,
    /// A webhook receiver of the job's end (SPEC §13; `ralph serve` only, under
    /// `limits.allowed_notify`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify_url: Option<String>,
    /// The batch the job belongs to (SPEC §13: set by the service for a submission of several
    /// jobs and for the retries of its jobs, never by a submitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<String>,
    /// The job this one retries (`ralph batch retry`; set by the service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<String>,
}

impl JobSpec {
    /// A loop job with the documented defaults.
    pub fn new(
        objective: impl Into<String>,
        workspace: impl Into<PathBuf>,
        agent: AgentSpec,
    ) -> Self {
        Self {
            kind: JobKind::Loop,
            objective: objective.into(),
            workspace: workspace.into(),
            agent,
            max_rounds: DEFAULT_MAX_ROUNDS,
            handoff_cap: DEFAULT_HANDOFF_CAP,
            round_retries: DEFAULT_ROUND_RETRIES,
            retry_backoff: HumanDuration(std::time::Duration::from_secs(2)),
            round_timeout: Some(HumanDuration(std::time::Duration::from_secs(3600))),
            job_timeout: None,
            kill_grace: HumanDuration(DEFAULT_KILL_GRACE),
            max_tokens: None,
            max_stalled_rounds: 0,
            verify: None,
            attempts: 1,
            attempt_of: None,
            setup: None,
            cache: Vec::new(),
            cache_key: None,
            sandbox: SandboxSettings::default(),
            env: Vec::new(),
            toolchain: crate::toolchain::ToolchainMode::default(),
            model_access: ModelAccess::default(),
            name: None,
            labels: BTreeMap::new(),
            source: None,
            submitted_by: None,
            notify_url: None,
            batch: None,
            retry_of: None,
        }
    }
}

/// Deployment bounds a job must stay within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ceilings {
    /// Highest `max_rounds`.
    pub max_rounds: u32,
    /// Highest `handoff_cap`.
    pub handoff_cap: usize,
}

impl Default for Ceilings {
    fn default() -> Self {
        Self {
            max_rounds: DEFAULT_ROUNDS_CEILING,
            handoff_cap: MAX_HANDOFF_CAP,
        }
    }
}

/// A job request that breaks a rule; `field` is the job-file key (the flag is `--` + the key with
/// `-` for `_`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid `{field}`: {message}")]
pub struct SpecError {
    /// The offending key.
    pub field: &'static str,
    /// What was expected.
    pub message: String,
}

fn err(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError {
        field,
        message: message.into(),
    }
}

/// Environment variables the runner sets itself; `--env` may not override them.
pub const RESERVED_ENV: [&str; 5] = ["PATH", "HOME", "TMPDIR", "LANG", "TERM"];

/// Variables the runner sets for its own steps (set-up, verify) besides [`RESERVED_ENV`] and
/// `RALPH_*`: the proxy's (`--allow-host`) and git's system configuration. `--setup-env` may
/// not name them (compared without case: `https_proxy` is read too).
pub const STEP_ENV: [&str; 6] = [
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
];

/// Why `name` cannot be a `--setup-env` variable, if it cannot.
fn setup_env_refusal(name: &str, passed_to_rounds: &[String]) -> Option<String> {
    if !valid_env_name(name) {
        return Some(format!("`{name}` is not a valid variable name"));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED_ENV.contains(&name)
        || name.starts_with("RALPH_")
        || STEP_ENV.contains(&upper.as_str())
    {
        return Some(format!(
            "`{name}` is set by the runner and cannot be passed through"
        ));
    }
    if passed_to_rounds.iter().any(|n| n == name) {
        return Some(format!(
            "`{name}` is also named by `env`, which passes it to every round: a set-up variable never reaches a round; drop it from one of them"
        ));
    }
    None
}

pub(crate) fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl JobSpec {
    /// The network a round gets: the one asked for, else `gateway` when the job uses the model
    /// gateway or the egress proxy (a preset, `upstream` or `allow_host`), else the mode's
    /// default (SPEC §5).
    pub fn network(&self) -> Network {
        if let Some(n) = self.sandbox.network {
            return n;
        }
        let a = &self.model_access;
        if matches!(self.agent, AgentSpec::Preset { .. })
            || a.upstream.is_some()
            || !a.allow_hosts.is_empty()
        {
            return Network::Gateway;
        }
        match self.sandbox.mode {
            Mode::FullAccess => Network::Full,
            Mode::ReadOnly | Mode::WorkspaceWrite => Network::None,
        }
    }

    /// Checks every rule; a request over a ceiling is rejected, never clamped.
    pub fn validate(&self, ceilings: &Ceilings) -> Result<(), SpecError> {
        super::labels::validate(self.name.as_deref(), &self.labels)?;
        if let Some(source) = &self.source {
            source.validate()?;
        }
        if self.objective.trim().is_empty() {
            return Err(err("objective", "must not be empty"));
        }
        if self.objective.len() > MAX_OBJECTIVE_BYTES {
            return Err(err(
                "objective",
                format!(
                    "is {} bytes, over the limit of {MAX_OBJECTIVE_BYTES}",
                    self.objective.len()
                ),
            ));
        }
        if !self.workspace.is_absolute() {
            return Err(err(
                "workspace",
                format!("`{}` must be an absolute path", self.workspace.display()),
            ));
        }
        match &self.agent {
            AgentSpec::Command { command } if command.trim().is_empty() => {
                return Err(err("agent_cmd", "must not be empty"));
            }
            AgentSpec::Preset { name } if name.trim().is_empty() => {
                return Err(err("agent", "must not be empty"));
            }
            _ => {}
        }
        if self.max_rounds == 0 || self.max_rounds > ceilings.max_rounds {
            return Err(err(
                "max_rounds",
                format!(
                    "{} is outside 1..={} (the deployment ceiling)",
                    self.max_rounds, ceilings.max_rounds
                ),
            ));
        }
        if self.max_stalled_rounds > 0 && self.kind == JobKind::Task {
            return Err(err(
                "max_stalled_rounds",
                "is for loop jobs (a task job runs once)",
            ));
        }
        if self.attempts == 0 || self.attempts > MAX_ATTEMPTS {
            return Err(err(
                "attempts",
                format!("{} is outside 1..={MAX_ATTEMPTS}", self.attempts),
            ));
        }
        if self.attempts > 1 {
            if self.kind == JobKind::Task {
                return Err(err("attempts", "is for loop jobs (a task job runs once)"));
            }
            if self.verify.is_none() {
                return Err(err(
                    "attempts",
                    "needs `verify`: the attempt whose verify passes first wins",
                ));
            }
            if self.source.is_some() {
                return Err(err(
                    "attempts",
                    "is for an existing-directory workspace (not `repo` or `upload`)",
                ));
            }
        }
        if self.max_stalled_rounds > self.max_rounds {
            return Err(err(
                "max_stalled_rounds",
                format!(
                    "{} is more than max_rounds ({}): it could never end the loop",
                    self.max_stalled_rounds, self.max_rounds
                ),
            ));
        }
        if self.handoff_cap < MIN_HANDOFF_CAP || self.handoff_cap > ceilings.handoff_cap {
            return Err(err(
                "handoff_cap",
                format!(
                    "{} is outside {MIN_HANDOFF_CAP}..={} bytes",
                    self.handoff_cap, ceilings.handoff_cap
                ),
            ));
        }
        if self.round_retries > MAX_ROUND_RETRIES {
            return Err(err(
                "round_retries",
                format!(
                    "{} is over the limit of {MAX_ROUND_RETRIES}",
                    self.round_retries
                ),
            ));
        }
        for (field, d) in [
            ("round_timeout", self.round_timeout),
            ("job_timeout", self.job_timeout),
        ] {
            if d.is_some_and(|d| d.0.is_zero()) {
                return Err(err(field, "must be longer than 0s"));
            }
        }
        if self.max_tokens == Some(0) {
            return Err(err("max_tokens", "must be at least 1"));
        }
        if self.verify.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(err("verify", "must not be empty"));
        }
        // A command line with a NUL byte cannot be passed to a process; refused now, not as an
        // infrastructure error at the first round.
        for (field, text) in [
            ("objective", Some(self.objective.as_str())),
            ("verify", self.verify.as_deref()),
            (
                "agent_cmd",
                match &self.agent {
                    AgentSpec::Command { command } => Some(command.as_str()),
                    AgentSpec::Preset { .. } => None,
                },
            ),
        ] {
            if text.is_some_and(|t| t.contains('\0')) {
                return Err(err(field, "must not contain a NUL byte"));
            }
        }
        if let Some(setup) = &self.setup {
            if setup.command.trim().is_empty() {
                return Err(err("setup", "must not be empty"));
            }
            if setup.command.contains('\0') {
                return Err(err("setup", "must not contain a NUL byte"));
            }
            if let Some(why) = setup
                .env
                .iter()
                .find_map(|n| setup_env_refusal(n, &self.env))
            {
                return Err(err("setup_env", why));
            }
            if setup.timeout.0.is_zero() {
                return Err(err("setup_timeout", "must be longer than 0s"));
            }
        }
        crate::cache::validate(&self.cache, self.cache_key.as_deref())
            .map_err(|(field, m)| err(field, m))?;
        for name in &self.env {
            if !valid_env_name(name) {
                return Err(err("env", format!("`{name}` is not a valid variable name")));
            }
            if RESERVED_ENV.contains(&name.as_str()) || name.starts_with("RALPH_") {
                return Err(err(
                    "env",
                    format!("`{name}` is set by the runner and cannot be passed through"),
                ));
            }
        }
        for p in &self.sandbox.protect {
            let escapes = p
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir));
            if escapes || p.as_os_str().is_empty() {
                return Err(err(
                    "protect",
                    format!(
                        "`{}` must be a relative path inside the workspace, without `..`",
                        p.display()
                    ),
                ));
            }
        }
        for (field, paths) in [("read", &self.sandbox.read), ("write", &self.sandbox.write)] {
            if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
                return Err(err(
                    field,
                    format!("`{}` must be an absolute path", p.display()),
                ));
            }
        }
        if self.sandbox.output_cap.0 < 1024 {
            return Err(err("output_cap", "must be at least 1K"));
        }
        if self.sandbox.pids == Some(0) {
            return Err(err("pids", "must be at least 1"));
        }
        if self.sandbox.nofile.is_some_and(|n| n < MIN_NOFILE) {
            return Err(err("nofile", format!("must be at least {MIN_NOFILE}")));
        }
        if self.sandbox.tmp_size.is_some_and(|m| m.0 < (1 << 20)) {
            return Err(err("tmp_size", "must be at least 1M"));
        }
        if self.sandbox.memory.is_some_and(|m| m.0 < (1 << 20)) {
            return Err(err("memory", "must be at least 1M"));
        }
        if let (Some(c), Some(host)) = (self.sandbox.cpus, ralph_sandbox::policy::host_cpus()) {
            if c.0 > host.saturating_mul(1000) {
                return Err(err(
                    "cpus",
                    format!("{c} is more than this host's {host} CPUs"),
                ));
            }
        }
        self.model_access.validate(
            match &self.agent {
                AgentSpec::Preset { name } => Some(name.as_str()),
                AgentSpec::Command { .. } => None,
            },
            self.network(),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec::new(
            "fix it",
            "/tmp/ws",
            AgentSpec::Command {
                command: "true".into(),
            },
        )
    }

    #[test]
    fn defaults_are_valid() {
        spec().validate(&Ceilings::default()).unwrap();
    }

    #[test]
    fn max_rounds_over_the_ceiling_is_rejected_not_clamped() {
        let mut s = spec();
        s.max_rounds = 257;
        let e = s.validate(&Ceilings::default()).unwrap_err();
        assert_eq!(e.field, "max_rounds");
        assert!(e.message.contains("1..=256"), "{e}");
        s.max_rounds = 256;
        s.validate(&Ceilings::default()).unwrap();
        s.max_rounds = 0;
        assert_eq!(
            s.validate(&Ceilings::default()).unwrap_err().field,
            "max_rounds"
        );
    }

    #[test]
    fn an_open_files_limit_below_the_least_that_works_is_refused() {
        let mut s = spec();
        s.sandbox.nofile = Some(MIN_NOFILE - 1);
        let e = s.validate(&Ceilings::default()).unwrap_err();
        assert_eq!(
            (e.field, e.message.as_str()),
            ("nofile", "must be at least 64")
        );
        s.sandbox.nofile = Some(MIN_NOFILE);
        s.validate(&Ceilings::default()).unwrap();
        assert_eq!(s.sandbox.limits().open_files, Some(MIN_NOFILE));
        // None asks for nothing: the policy's applies.
        assert_eq!(spec().sandbox.limits().open_files, None);
    }

    #[test]
    fn nul_bytes_are_refused_with_the_field_named() {
        let mut s = spec();
        s.verify = Some("make\0test".into());
        assert_eq!(
            s.validate(&Ceilings::default()).unwrap_err().field,
            "verify"
        );
        let mut s = spec();
        s.agent = AgentSpec::Command {
            command: "run\0me".into(),
        };
        assert_eq!(
            s.validate(&Ceilings::default()).unwrap_err().field,
            "agent_cmd"
        );
    }

    #[test]
    fn env_names_are_checked() {
        for (name, ok) in [
            ("OPENAI_API_KEY", true),
            ("1X", false),
            ("HOME", false),
            ("RALPH_ROUND", false),
            ("A-B", false),
        ] {
            let mut s = spec();
            s.env = vec![name.into()];
            assert_eq!(s.validate(&Ceilings::default()).is_ok(), ok, "{name}");
        }
    }

    #[test]
    fn setup_env_names_are_checked_and_never_shared_with_rounds() {
        for (name, env, ok) in [
            ("NPM_TOKEN", vec![], true),
            ("PATH", vec![], false),
            ("RALPH_ROUND", vec![], false),
            ("https_proxy", vec![], false),
            ("GIT_CONFIG_SYSTEM", vec![], false),
            ("1X", vec![], false),
            ("NPM_TOKEN", vec!["NPM_TOKEN".to_owned()], false),
        ] {
            let mut s = spec();
            s.env = env;
            let mut setup = SetupSpec::new("npm ci");
            setup.env = vec![name.into()];
            s.setup = Some(setup);
            let r = s.validate(&Ceilings::default());
            assert_eq!(r.is_ok(), ok, "{name}: {r:?}");
            if let Err(e) = r {
                assert_eq!(e.field, "setup_env", "{e}");
            }
        }
        let mut s = spec();
        s.setup = Some(SetupSpec::new("  "));
        assert_eq!(s.validate(&Ceilings::default()).unwrap_err().field, "setup");
        let mut setup = SetupSpec::new("make deps");
        setup.timeout = HumanDuration(std::time::Duration::ZERO);
        s.setup = Some(setup);
        assert_eq!(
            s.validate(&Ceilings::default()).unwrap_err().field,
            "setup_timeout"
        );
    }

    #[test]
    fn protected_paths_stay_inside_the_workspace() {
        for (p, ok) in [
            ("tests", true),
            (".git/hooks", true),
            ("../x", false),
            ("/etc", false),
            ("a/../../b", false),
        ] {
            let mut s = spec();
            s.sandbox.protect = vec![p.into()];
            assert_eq!(s.validate(&Ceilings::default()).is_ok(), ok, "{p}");
        }
    }

    #[test]
    fn spec_round_trips_through_json_and_rejects_unknown_keys() {
        let s = spec();
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(serde_json::from_value::<JobSpec>(v.clone()).unwrap(), s);
        let mut bad = v;
        bad["surprise"] = serde_json::json!(1);
        let e = serde_json::from_value::<JobSpec>(bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("surprise"), "{e}");
    }
}
