//! `ralph run`: one job in the foreground, for CI. Progress on stderr, the result object on
//! stdout with `--json`, and the exit code of SPEC §3.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use ralph_runner::engine::{Backends, Cancel, Engine, EngineError, RunnerEnv};
use ralph_runner::job::spec::{DEFAULT_MAX_ROUNDS, DEFAULT_ROUND_RETRIES};
use ralph_runner::job::{AgentSpec, JobKind, JobResult, JobSpec, SandboxSettings};
use ralph_runner::report::DEFAULT_HANDOFF_CAP;
use ralph_runner::store::{Observer, RunnerInfo, Store};
use ralph_runner::util::units::{ByteSize, HumanDuration};

use super::exit::Exit;
use super::progress::Progress;
use super::sandbox_args::SandboxArgs;
use super::{CliError, state_dir};

/// `ralph run` flags (SPEC §6).
#[derive(Args, Debug)]
#[command(args_override_self = true)]
#[command(group = clap::ArgGroup::new("objective_src").required(true).args(["objective", "objective_file"]))]
#[command(group = clap::ArgGroup::new("agent_src").required(true).args(["agent", "agent_cmd"]))]
pub struct RunArgs {
    /// The immutable objective.
    #[arg(long)]
    pub objective: Option<String>,
    /// Read the objective from a file.
    #[arg(long, value_name = "PATH")]
    pub objective_file: Option<PathBuf>,
    /// The shared workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// A preset for a known agent CLI.
    #[arg(long, value_name = "PRESET")]
    pub agent: Option<String>,
    /// A command line run with `/bin/sh -c` in the workspace as each round's process.
    #[arg(long, value_name = "CMD")]
    pub agent_cmd: Option<String>,
    /// loop (the Ralph loop) or task (one process, once).
    #[arg(long, value_enum, default_value = "loop")]
    pub kind: JobKind,
    /// Round budget (1..=256).
    #[arg(long, default_value_t = DEFAULT_MAX_ROUNDS)]
    pub max_rounds: u32,
    /// Largest report, in bytes of compact JSON.
    #[arg(long, value_name = "BYTES", default_value_t = ByteSize(DEFAULT_HANDOFF_CAP as u64))]
    pub handoff_cap: ByteSize,
    /// Retries of a round that produced no valid report.
    #[arg(long, default_value_t = DEFAULT_ROUND_RETRIES)]
    pub round_retries: u32,
    /// First backoff between retries (doubles each retry).
    #[arg(long, value_name = "DUR", default_value = "2s")]
    pub retry_backoff: HumanDuration,
    /// Wall-clock limit of one round.
    #[arg(long, value_name = "DUR", default_value = "1h")]
    pub round_timeout: HumanDuration,
    /// Wall-clock limit of the whole job.
    #[arg(long, value_name = "DUR")]
    pub job_timeout: Option<HumanDuration>,
    /// Time between SIGTERM and SIGKILL when a round is stopped.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    pub kill_grace: HumanDuration,
    /// Token budget (input + output tokens, from the usage file).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Command the runner runs after a `complete` report; only its success completes the job.
    #[arg(long, value_name = "CMD")]
    pub verify: Option<String>,
    #[command(flatten)]
    pub sandbox: SandboxArgs,
    /// Per-stream output cap of a round.
    #[arg(long, value_name = "BYTES", default_value = "8M")]
    pub output_cap: ByteSize,
    /// Pass this variable of the runner's environment to the agent; repeatable.
    #[arg(long = "env", value_name = "NAME")]
    pub env: Vec<String>,
    /// State directory (default: $RALPH_STATE_DIR, $XDG_STATE_HOME/ralph or ~/.local/state/ralph).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the result object as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

fn read_objective(args: &RunArgs) -> Result<String, CliError> {
    match (&args.objective, &args.objective_file) {
        (Some(o), _) => Ok(o.clone()),
        (None, Some(p)) => std::fs::read_to_string(p)
            .map_err(|e| CliError::usage(format!("--objective-file `{}`: {e}", p.display()))),
        (None, None) => Err(CliError::usage(
            "one of --objective or --objective-file is required",
        )),
    }
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Builds the job request from the flags; every problem is a usage error naming the flag.
pub fn build_spec(args: &RunArgs, cwd: &Path) -> Result<JobSpec, CliError> {
    let objective = read_objective(args)?;
    let workspace = args.workspace.clone().unwrap_or_else(|| cwd.to_owned());
    let workspace = super::sandbox_args::resolve_existing("--workspace", &workspace, cwd)?;
    if !workspace.is_dir() {
        return Err(CliError::usage(format!(
            "--workspace `{}` is not a directory",
            workspace.display()
        )));
    }
    let agent = match (&args.agent, &args.agent_cmd) {
        (Some(name), _) => AgentSpec::Preset { name: name.clone() },
        (None, Some(cmd)) => AgentSpec::Command {
            command: cmd.clone(),
        },
        (None, None) => return Err(CliError::usage("one of --agent or --agent-cmd is required")),
    };
    let (read, write) = args.sandbox.resolved_paths(cwd)?;
    let mut spec = JobSpec::new(objective, workspace, agent);
    spec.kind = args.kind;
    spec.max_rounds = args.max_rounds;
    spec.handoff_cap = usize::try_from(args.handoff_cap.0).unwrap_or(usize::MAX);
    spec.round_retries = args.round_retries;
    spec.retry_backoff = args.retry_backoff;
    spec.round_timeout = Some(args.round_timeout);
    spec.job_timeout = args.job_timeout;
    spec.kill_grace = args.kill_grace;
    spec.max_tokens = args.max_tokens;
    spec.verify = args.verify.clone();
    spec.sandbox = SandboxSettings {
        backend: args.sandbox.backend,
        mode: args.sandbox.mode,
        network: args.sandbox.network,
        protect: args.sandbox.protect.clone(),
        read,
        write,
        memory: args.sandbox.memory,
        pids: args.sandbox.pids,
        image: args.sandbox.image.clone(),
        output_cap: args.output_cap,
    };
    spec.env = args.env.clone();
    Ok(spec)
}

fn flag_of(field: &str) -> String {
    format!("--{}", field.replace('_', "-"))
}

/// Runs `ralph run`.
pub fn execute(args: RunArgs) -> Result<Exit, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("failed to read the current directory: {e}")))?;
    let spec = build_spec(&args, &cwd)?;
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => state_dir::default_state_dir()?,
    };
    let state_dir = if state_dir.is_absolute() {
        state_dir
    } else {
        cwd.join(state_dir)
    };
    ralph_runner::store::sqlite::create_private_dir(&state_dir)
        .map_err(|e| CliError::usage(e.to_string()))?;
    let state_dir = std::fs::canonicalize(&state_dir)
        .map_err(|e| CliError::usage(format!("--state-dir `{}`: {e}", state_dir.display())))?;
    if overlaps(&state_dir, &spec.workspace) {
        return Err(CliError::usage(format!(
            "the state directory `{}` and the workspace `{}` overlap: the agent could edit the journal; choose another --state-dir",
            state_dir.display(),
            spec.workspace.display()
        )));
    }
    let store =
        Arc::new(Store::open_sqlite(&state_dir).map_err(|e| CliError::internal(e.to_string()))?);
    let runner = RunnerInfo {
        host: nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_default(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        role: "run".to_owned(),
    };
    let engine = Engine::new(
        store,
        Backends::new("/proc/self/exe", super::sandbox_args::load_policies()?),
        state_dir,
        runner,
        RunnerEnv::capture(),
    );
    let job_id = engine.submit(&spec).map_err(|e| match e {
        EngineError::Spec(s) => CliError::usage(format!("{}: {}", flag_of(s.field), s.message)),
        EngineError::Config { message } => CliError::usage(message),
        other => CliError::internal(other.to_string()),
    })?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("failed to start the runtime: {e}")))?;
    let progress = Arc::new(Progress::new(std::io::stderr().is_terminal()));
    let observers: Vec<Arc<dyn Observer>> = vec![progress.clone()];
    let cancel = Cancel::new();
    let result = rt.block_on(async {
        watch_signals(cancel.clone());
        engine.run(&job_id, cancel, observers).await
    });
    progress.finish();
    let result = result.map_err(|e| CliError::internal(format!("job {job_id}: {e}")))?;
    print_result(&result, args.json)?;
    Ok(Exit::for_result(&result))
}

/// SIGINT and SIGTERM cancel the job: the round's tree is killed and the journal says why.
fn watch_signals(cancel: Cancel) {
    use tokio::signal::unix::{SignalKind, signal};
    for (kind, name) in [
        (SignalKind::interrupt(), "SIGINT"),
        (SignalKind::terminate(), "SIGTERM"),
        (SignalKind::hangup(), "SIGHUP"),
    ] {
        let Ok(mut s) = signal(kind) else { continue };
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if s.recv().await.is_some() {
                cancel.cancel(name);
            }
        });
    }
}

fn print_result(r: &JobResult, json: bool) -> Result<(), CliError> {
    let mut err = std::io::stderr().lock();
    let verified = match (r.outcome, r.verified) {
        (ralph_runner::job::Outcome::Complete, Some(true)) => " (verified)",
        (ralph_runner::job::Outcome::Complete, _) => " (worker reported completion; not verified)",
        _ => "",
    };
    let _ = writeln!(
        err,
        "ralph: {}{} after {} round(s) in {:.1}s: {}",
        r.outcome,
        verified,
        r.rounds,
        r.duration_ms as f64 / 1000.0,
        r.message
    );
    if !r.usage.is_zero() {
        let u = &r.usage;
        let _ = writeln!(
            err,
            "ralph: tokens: {} input ({} cached), {} output ({} reasoning)",
            u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens
        );
    }
    let _ = writeln!(err, "ralph: artifacts: {}", r.artifacts.display());
    if json {
        let text =
            serde_json::to_string_pretty(r).map_err(|e| CliError::internal(e.to_string()))?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{text}")
            .map_err(|e| CliError::internal(format!("failed to write the result: {e}")))?;
    }
    Ok(())
}
