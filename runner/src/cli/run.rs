//! `ralph run`: one job in the foreground, for CI. Progress on stderr, the result object on
//! stdout with `--json`, and the exit code of SPEC §3. The result line quotes the job's message
//! (the blocker, a failure's stderr tail): it is printed through [`terminal::line`], one line
//! whatever the message holds.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use ralph_runner::engine::{Cancel, EngineError, WorkspaceLockError};
use ralph_runner::host::{Host, HostError, HostOptions, Recovery, Role};
use ralph_runner::job::resolve::WritableTrees;
use ralph_runner::job::{JobResult, JobSpec, SpecError};
use ralph_runner::metrics::{Metrics, MetricsObserver, push, textfile};
use ralph_runner::store::Observer;
use ralph_runner::store::postgres::pool::PoolOptions;
use ralph_runner::util::terminal;
use ralph_sandbox::BackendKind;

use super::exit::Exit;
use super::job_args::JobArgs;
use super::live_output::LiveOutput;
use super::progress::Progress;
use super::{CliError, state_dir};

/// `ralph run` flags (SPEC §6).
#[derive(Args, Debug)]
#[command(args_override_self = true)]
#[command(group = clap::ArgGroup::new("objective_src").required(true).args(["objective", "objective_file"]))]
#[command(group = clap::ArgGroup::new("agent_src").required(true).args(["agent", "agent_cmd"]))]
pub struct RunArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// State directory (default: $RALPH_STATE_DIR, $XDG_STATE_HOME/ralph or ~/.local/state/ralph).
    /// The workspaces and --write directories of the jobs in the store (this one, or
    /// --database-url's) count as writable trees: --workspace, --read and --write may not run
    /// through a symlink inside one.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Print the result object as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Print each round's output on stderr while it is written, its lines prefixed
    /// `[round K]` (`[round K stderr]` for stderr, `[round K attempt A]` on a retry; the
    /// set-up's `[setup]`); the agent's escape sequences and control characters are shown
    /// escaped (`\x1b`), never sent.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Write the job's metrics to PATH (node exporter textfile format, atomically; counters add
    /// up across runs writing the same file).
    #[arg(long, value_name = "PATH")]
    pub metrics_textfile: Option<PathBuf>,
    /// Write a JUnit XML report to FILE when the job ends: a testcase per round attempt and per
    /// verify, failures with their reason, reports as output (for CI test views).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Append a Markdown summary to FILE when the job ends: outcome, rounds, verify, tokens and
    /// the last report (e.g. --summary "$GITHUB_STEP_SUMMARY").
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// Push the job's metrics to this Prometheus Pushgateway at the end (a failed push is a
    /// warning). Grouping: URL/metrics/job/ralph/instance/<hostname> unless URL has its own.
    #[arg(long, value_name = "URL")]
    pub pushgateway: Option<String>,
    /// Journal the job in this PostgreSQL store (the one `ralph serve` hosts share; e.g.
    /// postgres://ralph@/ralph?host=/run/postgresql) instead of SQLite in the state directory.
    /// Artifacts stay in the state directory.
    #[arg(
        long,
        value_name = "URL",
        env = "RALPH_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Run as root: the user rounds run as when the workspace is root's (NAME, UID or UID:GID;
    /// default ralph-agent, else nobody). Rounds never hold uid 0 in read-only and
    /// workspace-write; a workspace owned by another user is worked on as that user.
    #[arg(long, value_name = "USER")]
    pub agent_user: Option<String>,
}

fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// A job spec problem, worded with the flag instead of the job-file key.
pub fn spec_error(e: &SpecError) -> CliError {
    CliError::usage(format!("{}: {}", flag_of(e.field), e.message))
}

/// Builds the job request from the flags, its paths resolved against the `known` writable trees
/// (and the job's own); every problem is a usage error naming the flag.
pub fn build_spec(args: &RunArgs, cwd: &Path, known: &WritableTrees) -> Result<JobSpec, CliError> {
    let (spec, _priority) = args
        .job
        .to_request()
        .into_spec(cwd, known)
        .map_err(|e| spec_error(&e))?;
    if spec.notify_url.is_some() {
        return Err(CliError::usage(
            "--notify-url: webhooks are sent by `ralph serve` (submit the job with `ralph submit`); `ralph run` prints its result (--json) and exits with its outcome",
        ));
    }
    Ok(spec)
}

pub fn flag_of(field: &str) -> String {
    if field == "labels" {
        return "--label".into();
    }
    format!("--{}", field.replace('_', "-"))
}

/// A host that cannot be opened, as `ralph run` words it: a directory it cannot make or
/// resolve and a newer store are usage errors naming `--state-dir`; the rest are internal.
fn host_error(e: HostError, state_dir: &Path) -> CliError {
    match e {
        HostError::CreateDir(e) => CliError::usage(e.to_string()),
        HostError::Resolve { source, .. } => {
            CliError::usage(format!("--state-dir `{}`: {source}", state_dir.display()))
        }
        HostError::Open(e) => state_dir::open_error(e),
        other => CliError::internal(other.to_string()),
    }
}

/// Runs `ralph run`.
pub fn execute(args: RunArgs) -> Result<Exit, CliError> {
    // The first round's helper starts now, while the store opens and the job is journalled
    // (a run whose grace differs from what the job ends up with does not use it).
    let standby = early_standby(&args);
    // What this host can enforce, probed meanwhile: the dead runners' sweep and the first
    // round's plan both read it.
    ralph_sandbox::host::probe_ahead();
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("failed to read the current directory: {e}")))?;
    let state_dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => state_dir::default_state_dir()?,
    };
    let state_dir = if state_dir.is_absolute() {
        state_dir
    } else {
        cwd.join(state_dir)
    };
    if let Some(p) = &args.metrics_textfile {
        textfile::check_path(p).map_err(|e| CliError::usage(format!("--metrics-textfile: {e}")))?;
    }
    if let Some(p) = &args.junit {
        super::ci_files::check("--junit", p)?;
    }
    if let Some(p) = &args.summary {
        super::ci_files::check("--summary", p)?;
    }
    let metrics = Arc::new(Metrics::new(false).map_err(|e| CliError::internal(e.to_string()))?);
    let host = Host::open(&HostOptions {
        state_dir: &state_dir,
        database_url: args.database_url.as_deref().filter(|u| !u.is_empty()),
        pool: PoolOptions::default(),
        role: Role::Run,
        // PostgreSQL: this run's lease, which its job names while it runs (SPEC §8).
        lease_timeout: ralph_runner::store::lease::DEFAULT_LEASE_TIMEOUT,
    })
    .map_err(|e| host_error(e, &state_dir))?;
    let push_url = match &args.pushgateway {
        Some(u) => Some(
            push::group_url(u, &host.runner.host)
                .map_err(|e| CliError::usage(format!("--pushgateway: {e}")))?,
        ),
        None => None,
    };
    let state_dir = host.state_dir.clone();
    // The socket scans' listings of the last run of this state directory, read while the job
    // is set up and journalled: the first scan stats the toolchains' directories instead of
    // listing them (`ralph_sandbox::sockets::memo`).
    let listings = state_dir.join(ralph_sandbox::sockets::LISTINGS_FILE);
    let loading = ralph_sandbox::sockets::load_listings_ahead(listings.clone());
    let store = host.store.clone();
    // The job's paths are resolved once the store says where earlier rounds could write.
    let known = ralph_runner::store::trees::writable_trees(
        &store,
        ralph_runner::store::trees::Patience::None,
    );
    // A path refused because the store could not answer is the store's fault (exit 70), not
    // the user's: the message (which names the link and the store's error) stays.
    let spec = build_spec(&args, &cwd, &known).map_err(|e| match known.lookup_failure() {
        Some(_) => CliError::internal(e.message),
        None => e,
    })?;
    if overlaps(&state_dir, &spec.workspace) {
        return Err(CliError::usage(format!(
            "the state directory `{}` and the workspace `{}` overlap: the agent could edit the journal; choose another --state-dir",
            state_dir.display(),
            spec.workspace.display()
        )));
    }
    let policies = super::sandbox_args::load_policies()?;
    // Jobs of this store whose runner died are closed as interrupted first (SPEC §8), and
    // their scratch and fan-out attempts removed.
    match host.recover(Recovery::Jobs, &[]) {
        Ok(r) if !r.interrupted.is_empty() => warn(&format!(
            "closed {} job(s) whose runner died as interrupted: {}",
            r.interrupted.len(),
            r.interrupted.join(", ")
        )),
        Ok(_) => {}
        Err(e) => warn(&format!(
            "warning: failed to close the jobs of dead runners: {e}"
        )),
    }
    let (engine, _holds) = host.into_engine_with_standby(policies, standby);
    let engine = engine.with_agent_user(args.agent_user.clone());
    // The workspace first: a job that cannot have it is refused before it is journalled, so
    // it leaves no record (and certainly no `running` job) behind.
    let workspace = engine
        .lock_workspace(&spec.workspace)
        .map_err(|e| lock_error(&e))?;
    // Journalled as started at once, under its run hold: a service sharing the store never
    // takes this job, and nobody closes it while this process lives.
    let (job_id, hold) = engine.submit_started_held(&spec).map_err(|e| match e {
        EngineError::Spec(s) => spec_error(&s),
        EngineError::Config { message } => CliError::usage(message),
        other => CliError::internal(other.to_string()),
    })?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("failed to start the runtime: {e}")))?;
    let progress = Arc::new(Progress::new(
        super::progress::live_terminal(),
        engine.job_dir(&job_id),
    ));
    let mut observers: Vec<Arc<dyn Observer>> = Vec::new();
    if args.follow {
        // Before the progress: a round's output is drained before its summary line.
        observers.push(Arc::new(LiveOutput::new(
            progress.clone(),
            engine.job_dir(&job_id),
        )));
    }
    observers.extend([
        progress.clone() as Arc<dyn Observer>,
        Arc::new(MetricsObserver(metrics.clone())),
        hold.observer(),
    ]);
    let cancel = Cancel::new();
    loading.wait();
    let result = rt.block_on(async {
        watch_signals(cancel.clone());
        let r = engine.run(&job_id, workspace, cancel, observers).await;
        publish_metrics(
            &metrics,
            args.metrics_textfile.as_deref(),
            push_url.as_deref(),
        )
        .await;
        r
    });
    progress.finish();
    drop(hold);
    if let Err(e) = ralph_sandbox::sockets::save_listings(&listings) {
        warn(&format!(
            "warning: failed to keep the socket scans' listings in `{}`: {e}",
            listings.display()
        ));
    }
    let result = result.map_err(|e| CliError::internal(format!("job {job_id}: {e}")))?;
    super::ci_files::write(
        engine.store(),
        &result,
        args.junit.as_deref(),
        args.summary.as_deref(),
    );
    print_result(&result, args.json);
    Ok(Exit::for_result(&result))
}

/// The native backend's first helper, started ahead on a thread of its own with the kill grace
/// the job will have (none for a job the docker backend runs).
fn early_standby(args: &RunArgs) -> Option<Arc<ralph_sandbox::native::standby::Slot>> {
    if matches!(args.job.sandbox.backend, Some(BackendKind::Docker)) {
        return None;
    }
    let grace = args
        .job
        .kill_grace
        .map_or(ralph_runner::job::DEFAULT_KILL_GRACE, |g| g.0);
    Some(ralph_sandbox::native::standby::Slot::start_early(
        Path::new("/proc/self/exe"),
        grace,
    ))
}

/// A workspace that cannot be locked: in use (SPEC §5) or not openable is a usage error (64);
/// a filesystem that refuses the lock is one of configuration (64) too.
fn lock_error(e: &WorkspaceLockError) -> CliError {
    match e {
        WorkspaceLockError::Busy { .. }
        | WorkspaceLockError::Open { .. }
        | WorkspaceLockError::Lock { .. } => CliError::usage(e.to_string()),
    }
}

/// Writes the textfile and pushes to the gateway; failures are warnings, never a failed job.
async fn publish_metrics(metrics: &Metrics, textfile_path: Option<&Path>, push_url: Option<&str>) {
    metrics.set_jobs(0, 0);
    if let Some(p) = textfile_path
        && let Err(e) = textfile::write(p, metrics.gather())
    {
        warn(&format!("warning: metrics not written: {e}"));
    }
    if let Some(url) = push_url {
        let pushed = match metrics.encode() {
            Ok(body) => push::push(url, body).await,
            Err(e) => Err(e),
        };
        if let Err(e) = pushed {
            warn(&format!("warning: {e}"));
        }
    }
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

/// A `ralph: …` line on stderr, made safe.
fn warn(text: &str) {
    eprintln!("{}", terminal::line(&format!("ralph: {text}")));
}

/// The lines `ralph run` ends with on stderr: the result (with the job's message: a blocker,
/// a failure), the tokens, the artifacts; each one line, made safe.
pub fn result_lines(r: &JobResult) -> Vec<String> {
    let task = r.kind == ralph_runner::job::JobKind::Task;
    let verified = match (r.outcome, r.verified) {
        (ralph_runner::job::Outcome::Complete, Some(true)) => " (verified)",
        (ralph_runner::job::Outcome::Complete, _) if task => " (not verified)",
        (ralph_runner::job::Outcome::Complete, _) => " (worker reported completion; not verified)",
        _ => "",
    };
    // A task job runs once: no rounds to count.
    let rounds = if task {
        String::new()
    } else {
        format!(" after {} round(s)", r.rounds)
    };
    let mut lines = vec![format!(
        "ralph: {}{}{} in {:.1}s: {}",
        r.outcome,
        verified,
        rounds,
        r.duration_ms as f64 / 1000.0,
        r.message
    )];
    if !r.usage.is_zero() {
        let u = &r.usage;
        lines.push(format!(
            "ralph: tokens: {} input ({} cached), {} output ({} reasoning)",
            u.input_tokens, u.cached_input_tokens, u.output_tokens, u.reasoning_tokens
        ));
    }
    lines.push(format!("ralph: artifacts: {}", r.artifacts.display()));
    lines.iter().map(|l| terminal::line(l)).collect()
}

fn print_result(r: &JobResult, json: bool) {
    {
        let mut err = std::io::stderr().lock();
        for l in result_lines(r) {
            let _ = writeln!(err, "{l}");
        }
    }
    if json {
        super::stdout::line(format_args!("{}", terminal::json(r, true)));
    }
}
