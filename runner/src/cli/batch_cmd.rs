//! `ralph batch show|retry ID` (SPEC §13): a batch's summary — counts per state and outcome,
//! tokens, wall time, the slowest jobs and those that did not complete — and a retry of the jobs
//! that ended with the outcomes named (default: all but `complete`), as new jobs in the batch.

use clap::{Args, Subcommand};
use serde_json::Value;

use super::CliError;
use super::client_cmds::{ServerArgs, client_error, print_json, runtime};
use super::exit::Exit;
use super::stdout::outln;
use ralph_runner::util::terminal;

/// `ralph batch ...`
#[derive(Subcommand, Debug)]
pub enum BatchCommand {
    /// Counts per state and outcome, tokens, wall time, the slowest and the failed jobs.
    Show(ShowArgs),
    /// Submit a new job (same batch, `retry_of` set) for each job that ended so.
    Retry(RetryArgs),
}

/// `ralph batch show` flags.
#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The batch id (`ralph submit` of several jobs prints it).
    #[arg(value_name = "ID")]
    pub id: String,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `ralph batch retry` flags.
#[derive(Args, Debug)]
pub struct RetryArgs {
    /// The batch id.
    #[arg(value_name = "ID")]
    pub id: String,
    /// Only jobs that ended with these outcomes (comma-separated; default: all but complete).
    #[arg(long, value_name = "OUTCOME", value_delimiter = ',')]
    pub outcome: Vec<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// Runs `ralph batch`.
pub fn execute(cmd: BatchCommand) -> Result<Exit, CliError> {
    let rt = runtime()?;
    match cmd {
        BatchCommand::Show(a) => {
            let client = a.server.client()?;
            let r = rt.block_on(client.batch(&a.id)).map_err(client_error)?;
            if a.server.json {
                print_json(&r)?;
            } else {
                for l in describe(&r) {
                    outln!("{}", terminal::line(&l));
                }
            }
        }
        BatchCommand::Retry(a) => {
            for o in &a.outcome {
                if !ralph_runner::job::Outcome::ALL
                    .iter()
                    .any(|x| x.as_str() == o)
                {
                    return Err(CliError::usage(format!(
                        "--outcome: `{o}` is not an outcome"
                    )));
                }
            }
            let client = a.server.client()?;
            let r = rt
                .block_on(client.batch_retry(&a.id, &a.outcome))
                .map_err(client_error)?;
            if a.server.json {
                print_json(&r)?;
            } else {
                let jobs = r["jobs"].as_array().cloned().unwrap_or_default();
                for j in &jobs {
                    outln!("{}", terminal::line(j["id"].as_str().unwrap_or("")));
                }
                eprintln!(
                    "{}",
                    terminal::line(&format!(
                        "batch {}: {} job(s) submitted again",
                        a.id,
                        jobs.len()
                    ))
                );
            }
        }
    }
    Ok(Exit::Complete)
}

fn counts(v: &Value) -> String {
    let parts: Vec<String> = v
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    if parts.is_empty() {
        "none".to_owned()
    } else {
        parts.join(", ")
    }
}

fn seconds(ms: &Value) -> String {
    format!("{:.1}s", ms.as_u64().unwrap_or(0) as f64 / 1000.0)
}

/// The summary in lines of text (each made safe by the caller).
fn describe(r: &Value) -> Vec<String> {
    let mut out = vec![
        format!(
            "batch {}: {} job(s), {} retried",
            r["batch"].as_str().unwrap_or("?"),
            r["jobs"],
            r["retried"]
        ),
        format!("  states:   {}", counts(&r["states"])),
        format!("  outcomes: {}", counts(&r["outcomes"])),
        format!(
            "  tokens:   {}   wall time: {}   run time: {}",
            r["tokens"],
            seconds(&r["wall_ms"]),
            seconds(&r["run_ms"])
        ),
    ];
    let job = |j: &Value| {
        format!(
            "{} {} {} {}",
            j["id"].as_str().unwrap_or("?"),
            j["outcome"]
                .as_str()
                .unwrap_or(j["state"].as_str().unwrap_or("?")),
            seconds(&j["elapsed_ms"]),
            j["name"].as_str().unwrap_or("")
        )
    };
    let slowest = r["slowest"].as_array().cloned().unwrap_or_default();
    if !slowest.is_empty() {
        out.push("  slowest:".to_owned());
        out.extend(slowest.iter().map(|j| format!("    {}", job(j))));
    }
    let failed = r["not_complete"].as_array().cloned().unwrap_or_default();
    if !failed.is_empty() {
        out.push("  not complete:".to_owned());
        for j in &failed {
            out.push(format!("    {}", job(j)));
            if let Some(m) = j["message"].as_str() {
                out.push(format!("      {m}"));
            }
        }
    }
    out
}
