//! The job flags shared by `ralph run` and `ralph submit` (SPEC §6). They only collect what was
//! given; defaults and validation live in the library (`JobRequest::into_spec`, `JobSpec::validate`).

use std::path::PathBuf;

use clap::Args;
use ralph_runner::job::JobKind;
use ralph_runner::job::request::JobRequest;
use ralph_runner::util::units::{ByteSize, HumanDuration};

use super::sandbox_args::SandboxArgs;

/// Job flags.
#[derive(Args, Debug, Clone, Default)]
pub struct JobArgs {
    /// The immutable objective.
    #[arg(long)]
    pub objective: Option<String>,
    /// Read the objective from a file.
    #[arg(long, value_name = "PATH")]
    pub objective_file: Option<PathBuf>,
    /// The shared workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A git repository the server clones into a fresh workspace (`ralph submit`; instead of
    /// --workspace). The result is `ralph diff JOB`.
    #[arg(long, value_name = "URL", conflicts_with = "workspace")]
    pub repo: Option<String>,
    /// With --repo: the branch, tag or commit (default: the remote's HEAD).
    #[arg(long = "ref", value_name = "REF", requires = "repo")]
    pub git_ref: Option<String>,
    /// With --repo: push the result to this branch (where the server allows it).
    #[arg(long, value_name = "BRANCH", requires = "repo")]
    pub push: Option<String>,
    /// A preset for a known agent CLI.
    #[arg(long, value_name = "PRESET")]
    pub agent: Option<String>,
    /// A command line run with `/bin/sh -c` in the workspace as each round's process.
    #[arg(long, value_name = "CMD")]
    pub agent_cmd: Option<String>,
    /// loop (the Ralph loop, default) or task (one process, once).
    #[arg(long, value_enum)]
    pub kind: Option<JobKind>,
    /// Round budget (default 20; at most the deployment ceiling, 256).
    #[arg(long, value_name = "N")]
    pub max_rounds: Option<u32>,
    /// Largest report, in bytes of compact JSON (default 16384).
    #[arg(long, value_name = "BYTES")]
    pub handoff_cap: Option<ByteSize>,
    /// Retries of a round that produced no valid report (default 1).
    #[arg(long, value_name = "N")]
    pub round_retries: Option<u32>,
    /// First backoff between retries, doubling each retry (default 2s).
    #[arg(long, value_name = "DUR")]
    pub retry_backoff: Option<HumanDuration>,
    /// Wall-clock limit of one round (default 1h).
    #[arg(long, value_name = "DUR")]
    pub round_timeout: Option<HumanDuration>,
    /// Wall-clock limit of the whole job.
    #[arg(long, value_name = "DUR")]
    pub job_timeout: Option<HumanDuration>,
    /// Time between SIGTERM and SIGKILL when a round is stopped (default 5s).
    #[arg(long, value_name = "DUR")]
    pub kill_grace: Option<HumanDuration>,
    /// Token budget (input + output tokens, from the usage file).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// End the loop `budget-limited` (reason `stalled`) when its last N rounds each changed
    /// nothing in the workspace (content, modes, entries); default 0: off.
    #[arg(long, value_name = "N")]
    pub max_stalled_rounds: Option<u32>,
    /// Run N independent loops from the same workspace state, each on its own copy; the
    /// first whose --verify passes wins, the others are cancelled, and only the winner's
    /// changes reach the workspace, at the end (needs --verify; at most 16).
    #[arg(long, value_name = "N")]
    pub attempts: Option<u32>,
    /// Command the runner runs after a `complete` report; only its success completes the job.
    #[arg(long, value_name = "CMD")]
    pub verify: Option<String>,
    /// A command the runner runs once before round 1, in the job's sandbox on the workspace,
    /// with the job's egress (--allow-host) and the --setup-env variables (e.g. `npm ci`,
    /// `pip install -r requirements.txt -t deps`); its failure ends the job (exit 5). A resumed
    /// job does not run it again.
    #[arg(long, value_name = "CMD")]
    pub setup: Option<String>,
    /// Pass this variable of the runner's environment to the set-up only (a registry's token):
    /// never to a round or verify; repeatable.
    #[arg(long = "setup-env", value_name = "NAME", requires = "setup")]
    pub setup_env: Vec<String>,
    /// Wall-clock limit of the set-up (default 30m).
    #[arg(long, value_name = "DUR", requires = "setup")]
    pub setup_timeout: Option<HumanDuration>,
    /// A directory of the round's HOME kept across jobs (e.g. `~/.cache/pip`, `~/.npm`,
    /// `~/.cargo/registry`): only the set-up's writes are kept; rounds and verify get a copy
    /// whose writes are discarded; repeatable (docs/toolchains.md).
    #[arg(long = "cache", value_name = "PATH")]
    pub cache: Vec<String>,
    /// The caches' key (default: the path and a digest of the workspace's lock files).
    #[arg(long, value_name = "TEXT", requires = "cache")]
    pub cache_key: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Per-stream output cap of a round (default 8M).
    #[arg(long, value_name = "BYTES")]
    pub output_cap: Option<ByteSize>,
    /// Pass this variable of the runner's environment to the agent; repeatable.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// auto (default): the per-user toolchains on the runner's PATH (rustup, pyenv, a
    /// virtualenv, nvm, Go, asdf/mise) are shown read-only with their variables; none: nothing
    /// (docs/toolchains.md).
    #[arg(long, value_enum, value_name = "MODE", overrides_with = "toolchain")]
    pub toolchain: Option<ralph_runner::toolchain::ToolchainMode>,
    /// The model API's base URL, reached through the runner's model gateway (default: the
    /// preset's, e.g. https://api.openai.com/v1 for codex); with `ralph submit`, the name of an
    /// upstream in the server's configuration.
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The runner's variable holding the upstream's key; it never enters the sandbox (default:
    /// the preset's, e.g. OPENAI_API_KEY).
    #[arg(long, value_name = "NAME")]
    pub api_key_env: Option<String>,
    /// The model a preset asks for.
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// An extra argument for a preset's CLI; repeatable, passed in order.
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub agent_arg: Vec<String>,
    /// The built-in agent's model calls per round (`--agent builtin`; default 50): a round
    /// that uses them all without a final answer fails, saying so.
    #[arg(long, value_name = "N")]
    pub agent_max_steps: Option<u32>,
    /// A name for finding the job again (`ralph jobs --name`).
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// A label for filtering (`ralph jobs --label`); repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
    /// `ralph submit`: a webhook receiver of the job's end, under the server's
    /// `limits.allowed_notify` (SPEC §13); `ralph run` refuses it.
    #[arg(long, value_name = "URL")]
    pub notify_url: Option<String>,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    ralph_runner::job::labels::parse_label(s)
}

impl JobArgs {
    /// The request these flags make.
    pub fn to_request(&self) -> JobRequest {
        JobRequest {
            objective: self.objective.clone(),
            objective_file: self.objective_file.clone(),
            workspace: self.workspace.clone(),
            repo: self.repo.clone(),
            r#ref: self.git_ref.clone(),
            push: self.push.clone(),
            upload: None,
            agent: self.agent.clone(),
            agent_cmd: self.agent_cmd.clone(),
            kind: self.kind,
            max_rounds: self.max_rounds,
            handoff_cap: self.handoff_cap,
            round_retries: self.round_retries,
            retry_backoff: self.retry_backoff,
            round_timeout: self.round_timeout,
            job_timeout: self.job_timeout,
            kill_grace: self.kill_grace,
            max_tokens: self.max_tokens,
            max_stalled_rounds: self.max_stalled_rounds,
            attempts: self.attempts,
            verify: self.verify.clone(),
            setup: self.setup.clone(),
            setup_env: self.setup_env.clone(),
            setup_timeout: self.setup_timeout,
            cache: self.cache.clone(),
            cache_key: self.cache_key.clone(),
            output_cap: self.output_cap,
            env: self.env.clone(),
            toolchain: self.toolchain,
            priority: None,
            upstream: self.upstream.clone(),
            api_key_env: self.api_key_env.clone(),
            model: self.model.clone(),
            agent_arg: self.agent_arg.clone(),
            agent_max_steps: self.agent_max_steps,
            name: self.name.clone(),
            labels: self.label.iter().cloned().collect(),
            notify_url: self.notify_url.clone(),
            ..self.sandbox.request()
        }
    }

    /// True when no job flag was given (so a job file must be).
    pub fn is_empty(&self) -> bool {
        self.to_request() == JobRequest::default()
    }
}
