//! The client commands of `ralph serve`: `submit`, `jobs`, `show`, `logs`, `cancel`, `resume`,
//! `wait`. Server from `--server`/`RALPH_SERVER`, token from `--token-file`/`RALPH_TOKEN`;
//! `jobs`, `show`, `logs` and `wait` read a local store instead with `--state-dir DIR`
//! ([`super::job_source`]).
//!
//! Exit codes: 0 done; 64 usage, a refused request or a wrong token; 70 the server unreachable
//! or another failure; `wait` exits with the job's outcome code (SPEC §3).
//!
//! Every text line they print goes through [`terminal`] (agent text escaped, never starting a
//! line); `--json` prints [`terminal::json`] (the API's value exactly).

use super::stdout::outln;
use std::path::{Path, PathBuf};

use clap::Args;
use ralph_runner::client::{Client, ClientError, DEFAULT_SERVER};
use ralph_runner::job::request::{Format, JobRequest, parse_job_file};
use ralph_runner::job::{FinishReason, Outcome};
use ralph_runner::store::{AttemptResult, Event, EventKind};
use ralph_runner::util::terminal;
use serde_json::{Value, json};

use super::CliError;
use super::exit::Exit;
use super::job_args::JobArgs;
use super::job_source::{Followed, ListRequest, SourceArgs};
use super::round_view::RoundView;
use ralph_runner::util::units::HumanDuration;

/// Where the server is and how to authenticate.
#[derive(Args, Debug, Clone)]
pub struct ServerArgs {
    /// Server address [default: http://127.0.0.1:7979].
    #[arg(long, env = "RALPH_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// File holding the API token (else $RALPH_TOKEN, else /var/lib/ralph/token).
    #[arg(long, env = "RALPH_TOKEN_FILE", value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(flatten)]
    pub tls: TlsArgs,
}

/// How to check an `https://` server and prove who the client is.
#[derive(Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// Trust the CA certificate(s) in this PEM file for an https:// server (a private CA).
    #[arg(long, env = "RALPH_CA_FILE", value_name = "PATH")]
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for a server that requires one (mutual TLS).
    #[arg(long, env = "RALPH_CLIENT_CERT", value_name = "PATH")]
    pub client_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM), if not in --client-cert's file.
    #[arg(
        long,
        env = "RALPH_CLIENT_KEY",
        value_name = "PATH",
        requires = "client_cert"
    )]
    pub client_key: Option<PathBuf>,
}

impl TlsArgs {
    /// The client's TLS options.
    pub fn options(&self) -> ralph_runner::client::TlsOptions {
        ralph_runner::client::TlsOptions {
            ca_file: self.ca_file.clone(),
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        }
    }
}

impl ServerArgs {
    pub(super) fn client(&self) -> Result<Client, CliError> {
        let token = match &self.token_file {
            Some(p) => std::fs::read_to_string(p).map_err(|e| CliError::usage(format!("--token-file `{}`: {e}", p.display())))?,
            None => match std::env::var("RALPH_TOKEN") {
                Ok(t) if !t.trim().is_empty() => t,
                _ => std::fs::read_to_string("/var/lib/ralph/token")
                    .map_err(|_| CliError::usage("no API token: give --token-file PATH or set RALPH_TOKEN (the server writes it to <state-dir>/token)"))?,
            },
        };
        Client::with_tls(
            self.server.as_deref().unwrap_or(DEFAULT_SERVER),
            token.trim(),
            &self.tls.options(),
        )
        .map_err(client_error)
    }
}

pub(super) fn client_error(e: ClientError) -> CliError {
    let exit = match &e {
        // The server could not do it now (503: draining, unavailable): try again later.
        ClientError::Api { status: 503, .. } => Exit::Interrupted,
        // The server failed (507: its disk is full; 500: internal): not the caller's usage.
        ClientError::Api {
            status: 500..=599, ..
        } => Exit::Internal,
        ClientError::Unauthorized { .. } | ClientError::Api { .. } => Exit::Usage,
        ClientError::TlsFile { .. } | ClientError::Pack { .. } => Exit::Usage,
        ClientError::Unreachable { .. } | ClientError::Decode(_) | ClientError::Tls { .. } => {
            Exit::Internal
        }
    };
    CliError {
        exit,
        message: e.to_string(),
    }
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::internal(format!("failed to start the runtime: {e}")))
}

pub(super) fn print_json(v: &Value) -> Result<(), CliError> {
    outln!("{}", terminal::json(v, true));
    Ok(())
}

/// `ralph submit` flags.
#[derive(Args, Debug)]
#[command(args_override_self = true)]
pub struct SubmitArgs {
    /// A job file (TOML, or JSON when named *.json) with one or more `[[job]]` tables.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobArgs,
    /// Queue priority (higher first).
    #[arg(long, value_name = "N")]
    pub priority: Option<i32>,
    /// Upload this directory (its `.git` too) as the workspace of every job of the submission:
    /// each job gets its own copy on the server (instead of --workspace or --repo). The result
    /// is `ralph diff JOB`.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["workspace", "repo"])]
    pub upload: Option<PathBuf>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Makes a request's paths absolute (against `base`) and inlines its objective file, so the
/// server gets everything it needs and reads nothing on the submitter's behalf. The paths are
/// not resolved here: the server resolves them, against the trees its rounds could have written
/// (resolving them here would follow a symlink a round planted and send the server its target).
fn localize(mut r: JobRequest, base: &Path, index: usize) -> Result<JobRequest, CliError> {
    let at = |f: &str| format!("job[{index}].{f}");
    if let Some(p) = r.objective_file.take() {
        let path = super::abs_path::absolute(base, &p);
        r.objective = Some(std::fs::read_to_string(&path).map_err(|e| {
            CliError::usage(format!(
                "{}: `{}`: {e}",
                at("objective_file"),
                path.display()
            ))
        })?);
    }
    let absolute = |p: &Path| super::abs_path::absolute(base, p);
    // A job the runner provisions a workspace for (`repo`, `upload`) names none.
    if r.repo.is_none() && r.upload.is_none() {
        r.workspace = Some(absolute(r.workspace.as_deref().unwrap_or(Path::new("."))));
    }
    r.read = r.read.iter().map(|p| absolute(p)).collect();
    r.write = r.write.iter().map(|p| absolute(p)).collect();
    Ok(r)
}

/// Runs `ralph submit`.
pub fn submit(args: SubmitArgs) -> Result<Exit, CliError> {
    let cwd = std::env::current_dir()
        .map_err(|e| CliError::internal(format!("failed to read the current directory: {e}")))?;
    let mut requests = match &args.file {
        Some(file) => {
            if !args.job.is_empty() {
                return Err(CliError::usage("give a job file or job flags, not both"));
            }
            let text = std::fs::read_to_string(file)
                .map_err(|e| CliError::usage(format!("`{}`: {e}", file.display())))?;
            let jobs = parse_job_file(&text, Format::of_path(file))
                .map_err(|e| CliError::usage(format!("`{}`: {}", file.display(), e.message)))?;
            let base = file
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .map_or(cwd.clone(), |p| cwd.join(p));
            (jobs, base)
        }
        None => {
            let mut r = args.job.to_request();
            r.priority = args.priority;
            (vec![r], cwd.clone())
        }
    };
    let client = args.server.client()?;
    let uploaded = match &args.upload {
        Some(dir) => Some(super::upload::upload(&client, dir, &cwd, &mut requests.0)?),
        None => None,
    };
    let (requests, base) = requests;
    let requests = requests
        .into_iter()
        .enumerate()
        .map(|(i, r)| localize(r, &base, i))
        .collect::<Result<Vec<_>, _>>()?;
    let body = json!({ "job": requests });
    let created = runtime()?
        .block_on(client.submit(&body))
        .map_err(client_error)?;
    if args.server.json {
        let mut created = created;
        if let Some(u) = uploaded {
            created["upload"] = u;
        }
        print_json(&created)?;
    } else {
        for j in created["jobs"].as_array().into_iter().flatten() {
            outln!("{}", terminal::line(j["id"].as_str().unwrap_or("")));
        }
        // Standard output stays one id per line (for scripts); the batch goes to stderr.
        if let Some(b) = created["batch"].as_str() {
            eprintln!(
                "{}",
                terminal::line(&format!("batch {b}: `ralph batch show {b}`"))
            );
        }
    }
    Ok(Exit::Complete)
}

/// `ralph jobs` flags.
#[derive(Args, Debug)]
pub struct JobsArgs {
    /// Only jobs in this state (queued, running, finished).
    #[arg(long)]
    pub state: Option<String>,
    /// Only jobs with this outcome.
    #[arg(long)]
    pub outcome: Option<String>,
    /// At most this many (newest first).
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Only jobs older than this id (the next page).
    #[arg(long, value_name = "ID")]
    pub before: Option<String>,
    /// Only jobs with this name.
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Only jobs with this label; repeatable (all must match).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
    /// Only the jobs of this batch (`ralph batch show ID` sums them up).
    #[arg(long, value_name = "ID")]
    pub batch: Option<String>,
    #[command(flatten)]
    pub source: SourceArgs,
}

fn parse_label(s: &str) -> Result<(String, String), String> {
    ralph_runner::job::labels::parse_label(s)
}

/// Runs `ralph jobs`.
pub fn jobs(args: JobsArgs) -> Result<Exit, CliError> {
    let list = args.source.open()?.list(&ListRequest {
        state: args.state,
        outcome: args.outcome,
        limit: args.limit,
        before: args.before,
        name: args.name,
        labels: args.label,
        batch: args.batch,
    })?;
    if args.source.server.json {
        return print_json(&list).map(|()| Exit::Complete);
    }
    outln!(
        "{:<38} {:<9} {:<15} {:<5} {:>6}  {:<24}  NAME",
        "ID",
        "STATE",
        "OUTCOME",
        "KIND",
        "ROUNDS",
        "CREATED"
    );
    for j in list["jobs"].as_array().into_iter().flatten() {
        let row = format!(
            "{:<38} {:<9} {:<15} {:<5} {:>6}  {:<24}  {}",
            j["id"].as_str().unwrap_or(""),
            j["state"].as_str().unwrap_or(""),
            j["outcome"].as_str().unwrap_or("-"),
            j["kind"].as_str().unwrap_or(""),
            // Rendered first: a JSON value's Display ignores the column width.
            j["rounds"].to_string(),
            j["created_at"].as_str().unwrap_or(""),
            j["name"].as_str().unwrap_or("-")
        );
        outln!("{}", terminal::line(&row));
    }
    if let Some(next) = list["next"].as_str() {
        outln!("{}", terminal::line(&format!("(more: --before {next})")));
    }
    Ok(Exit::Complete)
}

/// Flags of `ralph show`.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The job id (or a unique prefix of it, at least 4 characters).
    #[arg(value_name = "JOB")]
    pub id: String,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Flags of `ralph wait`.
#[derive(Args, Debug)]
pub struct WaitArgs {
    /// The job id (or a unique prefix of it, at least 4 characters).
    #[arg(value_name = "JOB")]
    pub id: String,
    /// Give up after this long (e.g. 30s, 5m): exit 124, the job left running.
    #[arg(long, value_name = "DUR")]
    pub timeout: Option<HumanDuration>,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Flags of the commands that take one job.
#[derive(Args, Debug)]
pub struct JobRef {
    /// The job id (or a unique prefix of it, at least 4 characters).
    #[arg(value_name = "JOB")]
    pub id: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `ralph show`'s text: one line about the job, then indented `key: value` lines; each line
/// made safe by [`terminal::line`] (the message, the report's summary, names and paths may be
/// the agent's or a client's).
pub fn describe_job(j: &Value) -> String {
    let mut head = format!(
        "job {}: {} {}",
        j["id"].as_str().unwrap_or(""),
        j["kind"].as_str().unwrap_or(""),
        j["state"].as_str().unwrap_or("")
    );
    if let Some(o) = j["outcome"].as_str() {
        head.push_str(&format!(" — {o} ({})", j["reason"].as_str().unwrap_or("")));
    }
    let mut lines = vec![head];
    if let Some(n) = j["name"].as_str() {
        lines.push(format!("  name: {n}"));
    }
    if let Some(l) = j["labels"].as_object().filter(|l| !l.is_empty()) {
        let pairs: Vec<String> = l
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        lines.push(format!("  labels: {}", pairs.join(", ")));
    }
    for (key, label) in [
        ("submitted_by", "submitted by"),
        ("cancelled_by", "cancelled by"),
        ("resumed_by", "resumed by"),
        ("batch", "batch"),
        ("retry_of", "retry of"),
    ] {
        if let Some(who) = j[key].as_str() {
            lines.push(format!("  {label}: {who}"));
        }
    }
    if let Some(of) = j["attempt_of"].as_object() {
        lines.push(format!(
            "  attempt {} of job {}",
            of.get("index").unwrap_or(&Value::Null),
            of.get("job").and_then(Value::as_str).unwrap_or("?")
        ));
    }
    for a in j["attempts"].as_array().into_iter().flatten() {
        let mark = if a["won"].as_bool() == Some(true) {
            " (won)"
        } else if a["chosen"].as_bool() == Some(true) {
            " (chosen)"
        } else {
            ""
        };
        lines.push(format!(
            "  attempt {} {}: {}{mark}, {} round(s), {} tokens",
            a["index"],
            a["job"].as_str().unwrap_or("?"),
            a["outcome"].as_str().unwrap_or("running"),
            a["rounds"],
            a["tokens"]
        ));
    }
    if j["kind"].as_str() == Some("task") {
        // A task job runs its command once: no round budget to count against.
        lines.push(format!(
            "  runs: {}, retries: {}",
            j["rounds"], j["retries"]
        ));
    } else {
        lines.push(format!(
            "  rounds: {} of {}, retries: {}",
            j["rounds"], j["max_rounds"], j["retries"]
        ));
    }
    // The set-up step (SPEC §12): not_run, running, passed, failed or interrupted.
    if let Some(s) = j["setup"].as_str() {
        lines.push(format!("  set-up: {}", s.replace('_', " ")));
    }
    if let Some(m) = j["message"].as_str() {
        lines.push(format!("  message: {m}"));
    }
    if let Some(r) = j["report"].as_object() {
        lines.push(format!(
            "  last report: {} — {}",
            r["status"].as_str().unwrap_or(""),
            r["summary"].as_str().unwrap_or("")
        ));
    }
    let u = &j["usage"];
    lines.push(format!(
        "  tokens: {} input ({} cached), {} output ({} reasoning)",
        u["input_tokens"], u["cached_input_tokens"], u["output_tokens"], u["reasoning_tokens"]
    ));
    lines.push(format!(
        "  workspace: {}",
        j["spec"]["workspace"].as_str().unwrap_or("")
    ));
    lines.push(match j["artifacts_pruned"]["pruned_at"].as_str() {
        Some(at) => format!("  artifacts: pruned at {at} (the journal remains: ralph logs)"),
        None => format!("  artifacts: {}", j["artifacts"].as_str().unwrap_or("")),
    });
    lines
        .iter()
        .map(|l| terminal::line(l))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `ralph show`.
pub fn show(args: ShowArgs) -> Result<Exit, CliError> {
    let j = args.source.open()?.job(&args.id)?;
    if args.source.server.json {
        print_json(&j)?;
    } else {
        outln!("{}", describe_job(&j));
    }
    Ok(Exit::Complete)
}

/// The runner step a round-0 or attempt-less event belongs to: `set-up` (round 0) or `verify
/// after round R`.
fn step_name(round: u32, step: Option<ralph_runner::store::event::RunnerStep>) -> String {
    use ralph_runner::store::event::RunnerStep;
    match step {
        Some(RunnerStep::Setup) => "set-up".to_owned(),
        Some(RunnerStep::Verify) => format!("verify after round {round}"),
        None if round == 0 => "set-up".to_owned(),
        None => format!("verify after round {round}"),
    }
}

/// One journal event as a line of text, made safe by [`terminal::line`].
pub fn describe_event(ev: &Event) -> String {
    terminal::line(&event_text(ev))
}

/// One journal event in words, unescaped (a printer makes it safe).
pub fn describe_event_text(ev: &Event) -> String {
    event_text(ev)
}

/// One journal event in words, as it was recorded: the agent's text in it unescaped.
fn event_text(ev: &Event) -> String {
    let body = match &ev.kind {
        EventKind::JobSubmitted { spec } => format!(
            "submitted: {} job, up to {} rounds",
            spec.kind.as_str(),
            spec.max_rounds
        ),
        EventKind::JobStarted { runner } => format!(
            "started by `ralph {}` (pid {} on {})",
            runner.role, runner.pid, runner.host
        ),
        EventKind::RoundStarted { round, attempt, .. } => {
            format!("round {round} attempt {attempt} started")
        }
        EventKind::RoundSpawned { round, pid, .. } => format!(
            "round {round}: process {}",
            pid.map_or_else(|| "-".into(), |p| p.to_string())
        ),
        EventKind::RoundFinished {
            round,
            attempt,
            result,
            duration_ms,
            ..
        } => {
            let what = match result {
                AttemptResult::Reported { report } => format!(
                    "{}: {}",
                    report["status"].as_str().unwrap_or(""),
                    report["summary"].as_str().unwrap_or("")
                ),
                AttemptResult::Failed { reason, message } => format!("failed: {reason}: {message}"),
                AttemptResult::Exited => "ended".into(),
                AttemptResult::SandboxFailed { message, .. } => {
                    format!("sandbox failed: {message}")
                }
                AttemptResult::Cancelled => "cancelled".into(),
                AttemptResult::DeadlineReached => "stopped by the job timeout".into(),
                AttemptResult::BudgetSpent => "stopped: the token budget is spent".into(),
                AttemptResult::Interrupted => "interrupted (the runner died)".into(),
            };
            format!(
                "round {round} attempt {attempt} ({:.1}s) {what}",
                *duration_ms as f64 / 1000.0
            )
        }
        EventKind::WorkspaceSanitized {
            round,
            attempt,
            repositories,
            counts,
            unchecked,
        } => {
            let after = match attempt {
                Some(a) => format!("round {round} attempt {a}"),
                None => step_name(*round, None),
            };
            let paths: Vec<String> = repositories
                .iter()
                .map(|s| format!("\"{}\" ({})", s.path(), s.change))
                .collect();
            let mut text = format!(
                "{after}: {} git repositor{} made safe: {}",
                counts.total(),
                if counts.total() == 1 { "y" } else { "ies" },
                paths.join(", ")
            );
            if let Some(u) = unchecked {
                text.push_str(&format!("; {u}"));
            }
            ralph_runner::util::text::bounded(&text, 2048)
        }
        EventKind::UsageSkipped {
            round,
            line,
            message,
            ..
        } => format!("round {round}: usage line {line} skipped: {message}"),
        EventKind::ModelRequest {
            round,
            api,
            model,
            status,
            usage,
            duration_ms,
            error,
            ..
        } => format!(
            "round {round}: model request {api} {model}: {status}, {} tokens, {duration_ms} ms{}",
            usage.budget_tokens(),
            error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        ),
        EventKind::ModelRefusals { round, count, .. } => {
            format!("round {round}: {count} more model requests refused by the gateway")
        }
        EventKind::Egress {
            round,
            step,
            host,
            port,
            method,
            allowed,
            reason,
            ..
        } => format!(
            "{}: egress {} {method} {host}:{port}{}",
            match step {
                Some(_) => step_name(*round, *step),
                None => format!("round {round}"),
            },
            if *allowed { "allowed" } else { "refused" },
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        EventKind::UsageMismatch {
            round,
            gateway,
            agent,
            ..
        } => format!(
            "round {round}: the agent reported {} tokens, the model API {} (the API's count is used)",
            agent.budget_tokens(),
            gateway.budget_tokens()
        ),
        EventKind::RoundRetried {
            round,
            reason,
            backoff_ms,
            ..
        } => format!("round {round} retried after {reason} (backoff {backoff_ms} ms)"),
        EventKind::SetupStarted { command } => format!("set-up started: `{command}`"),
        EventKind::SetupFinished {
            passed,
            exit,
            ended_by,
            duration_ms,
            ..
        } => {
            let took = *duration_ms as f64 / 1000.0;
            if *passed {
                format!("set-up passed ({took:.1}s)")
            } else {
                format!(
                    "set-up failed ({took:.1}s): {}",
                    ralph_runner::ci::verify_how(*exit, *ended_by)
                )
            }
        }
        EventKind::VerifyStarted { round } => format!("verify after round {round}"),
        EventKind::VerifyFinished { passed, exit, .. } => {
            if *passed {
                "verify passed".into()
            } else {
                format!(
                    "verify failed: {}",
                    exit.map_or_else(|| "did not finish".into(), |e| e.to_string())
                )
            }
        }
        EventKind::CancelRequested { by } => match by.strip_prefix("token:") {
            Some(name) => format!("cancel requested by token `{name}`"),
            None => format!("cancel requested by {by}"),
        },
        EventKind::Interrupted { message } => format!("interrupted: {message}"),
        EventKind::Resumed { message, by, .. } => match by {
            Some(by) => format!("resumed by token `{by}`: {message}"),
            None => format!("resumed: {message}"),
        },
        EventKind::WorkspaceProvisioned {
            repo,
            git_ref,
            commit,
            duration_ms,
            layout,
        } => {
            let from = match repo {
                Some(repo) => format!("{repo} at {}", git_ref.as_deref().unwrap_or("HEAD")),
                None => "an upload".to_owned(),
            };
            format!(
                "workspace provisioned from {from} = {commit} ({:.1}s{})",
                *duration_ms as f64 / 1000.0,
                layout
                    .as_deref()
                    .map_or_else(String::new, |l| format!(", {l}"))
            )
        }
        EventKind::ToolchainGranted { grant } => {
            format!("toolchains granted: {}", grant.lines().join("; "))
        }
        EventKind::CacheLookup {
            path,
            key_hash,
            hit,
            bytes,
            ..
        } => match hit {
            true => format!("cache {path}: hit ({key_hash}, {bytes} bytes)"),
            false => format!("cache {path}: miss ({key_hash})"),
        },
        EventKind::AttemptsStarted { attempts } => format!(
            "{} attempts started, each on its own copy of the workspace ({} file(s) each)",
            attempts.len(),
            attempts.first().map_or(0, |a| a.files)
        ),
        EventKind::AttemptFinished {
            index,
            outcome,
            reason,
            rounds,
            usage,
            job,
            ..
        } => format!(
            "attempt {index} ({job}): {outcome} ({}), {rounds} round(s), {} tokens",
            reason.as_str(),
            usage.budget_tokens()
        ),
        EventKind::AttemptChosen {
            index,
            won,
            applied,
            ..
        } => match (won, applied) {
            (true, Some(a)) => format!(
                "attempt {index} won: its changes applied to the workspace ({} written, {} removed, {} bytes)",
                a.written, a.removed, a.bytes
            ),
            (true, None) => format!("attempt {index} won"),
            (false, _) => format!(
                "no attempt passed its verify: attempt {index}'s result is the job's (the workspace is unchanged)"
            ),
        },
        EventKind::Notified {
            to,
            attempt,
            status,
            result,
            error,
            ..
        } => {
            let answer = match (status, error) {
                (Some(s), _) => format!("HTTP {s}"),
                (None, Some(e)) => e.clone(),
                (None, None) => "no answer".to_owned(),
            };
            format!(
                "notified {to}: attempt {attempt}, {answer}: {}",
                result.as_str()
            )
        }
        EventKind::CacheSaved {
            path,
            bytes,
            files,
            error,
            ..
        } => match error {
            Some(e) => format!("cache {path}: not kept: {e}"),
            None => format!("cache {path}: kept {files} file(s), {bytes} bytes"),
        },
        EventKind::ResultWritten {
            bytes,
            files,
            pushed,
            error,
            patch,
            skipped,
            skipped_total,
            ..
        } => {
            use ralph_runner::provision::patch_status::{PatchState, skipped_list};
            let mut line = match patch {
                Some(PatchState::Failed) => "result.patch not written".to_owned(),
                Some(PatchState::Partial) => format!(
                    "result.patch written in part ({files} file(s), {bytes} bytes; {skipped_total} path(s) skipped: {})",
                    skipped_list(skipped, *skipped_total)
                ),
                _ => format!("result.patch written ({files} file(s), {bytes} bytes)"),
            };
            if let Some(p) = pushed {
                line.push_str(&format!("; pushed {p}"));
            }
            if let Some(e) = error {
                line.push_str(&format!("; {e}"));
            }
            line
        }
        EventKind::JobFinished {
            outcome,
            reason,
            message,
            ..
        } => format!("finished: {outcome} ({}): {message}", reason.as_str()),
    };
    format!("{} #{} {body}", ev.at, ev.seq)
}

/// `ralph logs` flags.
#[derive(Args, Debug)]
pub struct LogsArgs {
    /// The job id.
    #[arg(value_name = "JOB")]
    pub id: String,
    /// Keep following until the job finishes; with --round, print the round's output as it is
    /// written until that attempt ends (waiting for it to start).
    #[arg(long, short)]
    pub follow: bool,
    /// Print this round's captured output instead of the journal (`--stream setup`: the
    /// set-up's, round 0, implied).
    #[arg(long, value_name = "K")]
    pub round: Option<u32>,
    /// The round's attempt.
    #[arg(long, default_value_t = 1)]
    pub attempt: u32,
    /// stdout, stderr, verify (the verify command's output after that round) or setup (the
    /// job's set-up command's output, before round 1).
    #[arg(long, default_value = "stdout")]
    pub stream: String,
    /// With --round: print the captured bytes as they are, for a file or a program (`> out.log`).
    /// Unsafe on a terminal or in a CI log: the agent's escape sequences and lines reach it.
    /// Without it each line is printed behind the round's label (`[round K] `), escaped.
    #[arg(long, requires = "round")]
    pub raw: bool,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// Runs `ralph logs`.
pub fn logs(args: LogsArgs) -> Result<Exit, CliError> {
    let source = args.source.open()?;
    let round = match (args.round, args.stream.as_str()) {
        (None, "setup") => Some(0),
        (round, _) => round,
    };
    if let Some(round) = round {
        let mut view = RoundView::new(args.raw, round, args.attempt, &args.stream);
        if args.follow {
            source.follow_round_log(&args.id, round, args.attempt, &args.stream, &mut |c| {
                view.push(c);
            })?;
        } else {
            view.push(&source.round_log(&args.id, round, args.attempt, &args.stream)?);
        }
        view.finish();
        return Ok(Exit::Complete);
    }
    let json = args.source.server.json;
    source.events(&args.id, args.follow, None, |ev| {
        if json {
            outln!("{}", terminal::json(&ev, false));
        } else {
            outln!("{}", describe_event(&ev));
        }
    })?;
    Ok(Exit::Complete)
}

/// Runs `ralph cancel`.
pub fn cancel(args: JobRef) -> Result<Exit, CliError> {
    let client = args.server.client()?;
    let r = runtime()?
        .block_on(client.cancel(&args.id))
        .map_err(client_error)?;
    if args.server.json {
        print_json(&r)?;
    } else if r["outcome"].as_str() == Some("cancelled") {
        outln!(
            "{}",
            terminal::line(&format!("job {}: cancelled before it started", args.id))
        );
    } else {
        outln!(
            "{}",
            terminal::line(&format!(
                "job {}: cancel requested; its round's processes are being stopped",
                args.id
            ))
        );
    }
    Ok(Exit::Complete)
}

/// `ralph resume JOB [--max-rounds N] [--max-tokens N] [--job-timeout DUR]`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    pub job: JobRef,
    /// A new round budget, above the rounds the job has started (a `budget-limited` job that
    /// ran out of rounds is resumed only with it).
    #[arg(long, value_name = "N")]
    pub max_rounds: Option<u32>,
    /// A new token budget, above the tokens the job has used.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// A new job deadline (the time it runs), above the time it has run.
    #[arg(long, value_name = "DUR")]
    pub job_timeout: Option<ralph_runner::util::units::HumanDuration>,
}

/// Runs `ralph resume`.
pub fn resume(args: ResumeArgs) -> Result<Exit, CliError> {
    let caps = ralph_runner::job::RaisedCaps {
        max_rounds: args.max_rounds,
        max_tokens: args.max_tokens,
        job_timeout: args.job_timeout,
    };
    let args_job = args.job;
    let client = args_job.server.client()?;
    let r = runtime()?
        .block_on(client.resume(&args_job.id, &caps))
        .map_err(client_error)?;
    if args_job.server.json {
        print_json(&r)?;
    } else {
        let how = if caps.is_empty() {
            "with its remaining budget".to_owned()
        } else {
            format!("with raised caps ({})", caps.describe())
        };
        outln!(
            "{}",
            terminal::line(&format!("job {}: queued again {how}", args_job.id))
        );
    }
    Ok(Exit::Complete)
}

/// Runs `ralph wait`: follows the job until it finishes and exits with its outcome code.
pub fn wait(args: WaitArgs) -> Result<Exit, CliError> {
    let source = args.source.open()?;
    let json = args.source.server.json;
    let deadline = args.timeout.map(|t| std::time::Instant::now() + t.0);
    let followed = source.events(&args.id, true, deadline, |ev| {
        if !json
            && matches!(
                ev.kind,
                EventKind::RoundFinished { .. }
                    | EventKind::SetupFinished { .. }
                    | EventKind::VerifyFinished { .. }
                    | EventKind::JobFinished { .. }
            )
        {
            eprintln!("{}", terminal::line(&format!("ralph: {}", event_text(&ev))));
        }
    })?;
    let j = source.job(&args.id)?;
    // On a timeout the error is the one JSON document (`--json`), naming the state.
    if json && !matches!(followed, Followed::TimedOut) {
        print_json(&j)?;
    }
    if matches!(followed, Followed::TimedOut) {
        return Err(CliError {
            exit: Exit::Timeout,
            message: format!(
                "job {} is still {} (round {}) after --timeout {}; it was left as it is",
                j["id"].as_str().unwrap_or(&args.id),
                j["state"].as_str().unwrap_or("unfinished"),
                j["rounds"],
                args.timeout.map(|t| t.to_string()).unwrap_or_default()
            ),
        });
    }
    let outcome: Option<Outcome> = serde_json::from_value(j["outcome"].clone()).ok();
    let reason: Option<FinishReason> = serde_json::from_value(j["reason"].clone()).ok();
    match (outcome, reason) {
        (Some(o), Some(r)) => Ok(Exit::for_outcome(o, r)),
        _ => Err(CliError::internal(format!(
            "job {} did not finish (state {})",
            args.id, j["state"]
        ))),
    }
}

#[cfg(test)]
mod exit_tests {
    use super::*;

    fn api(status: u16) -> ClientError {
        ClientError::Api {
            status,
            code: "x".into(),
            message: "m".into(),
            field: None,
            rule: None,
        }
    }

    #[test]
    fn refusals_are_usage_a_busy_server_is_temporary_and_a_failed_one_internal() {
        assert_eq!(client_error(api(400)).exit, Exit::Usage);
        assert_eq!(client_error(api(403)).exit, Exit::Usage);
        assert_eq!(client_error(api(503)).exit, Exit::Interrupted);
        assert_eq!(client_error(api(507)).exit, Exit::Internal);
        assert_eq!(client_error(api(500)).exit, Exit::Internal);
    }
}
