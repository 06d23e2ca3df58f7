//! `ralph diff JOB`: a provisioned job's `result.patch` (SPEC §11), from a server
//! (`GET /v1/jobs/{id}/patch`) or a local store (`--state-dir DIR`).
//!
//! The patch is data for `git apply`, but its lines are the agent's: on a terminal, or in a CI
//! log, it is shown for reading ([`terminal::verbatim`]: control characters escaped, no line
//! that CI could run as a command; an ordinary patch reads exactly as it is). Its exact bytes go
//! to a file (`> result.patch`), to a pipe outside CI (`| git apply`), or anywhere with `--raw`.
//! A `partial` patch is written too, with a warning on stderr naming the paths it left out; a
//! patch that could not be built is an error saying why (exit 70); no patch (not a provisioned
//! job, not ended yet, removed) is exit 64 saying which.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use clap::Args;
use ralph_runner::client::ClientError;
use ralph_runner::provision::patch_answer::{self, PatchAnswer, partial_warning};
use ralph_runner::provision::patch_status::{PatchState, PatchStatus};
use ralph_runner::util::ci_log::CiEnv;
use ralph_runner::util::terminal;

use super::CliError;
use super::client_cmds::client_error;
use super::exit::Exit;
use super::job_source::{JobSource, SourceArgs};

/// Flags of `ralph diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The job id (or a unique prefix of it, at least 4 characters).
    #[arg(value_name = "JOB")]
    pub id: String,
    /// Write the patch's exact bytes even to a terminal or a CI log (where it is otherwise
    /// shown escaped): unsafe there, the agent's escape sequences and lines reach it.
    #[arg(long)]
    pub raw: bool,
    #[command(flatten)]
    pub source: SourceArgs,
}

/// What stdout is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stdout {
    Terminal,
    File,
    /// A pipe, a socket, a device.
    Other,
}

/// How the patch is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum View {
    /// Its bytes as they are.
    Exact,
    /// Escaped for reading.
    Shown,
}

/// Exact to a file, with `--raw`, and to a pipe outside CI; shown on a terminal and in a CI log
/// (a CI step's output is a pipe the CI reads).
fn view(raw: bool, out: Stdout, ci: bool) -> View {
    match (raw, out) {
        (true, _) | (false, Stdout::File) => View::Exact,
        (false, Stdout::Terminal) => View::Shown,
        (false, Stdout::Other) if ci => View::Shown,
        (false, Stdout::Other) => View::Exact,
    }
}

fn stdout_kind() -> Stdout {
    let out = std::io::stdout();
    if out.is_terminal() {
        return Stdout::Terminal;
    }
    let is_file = out
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.is_file());
    if is_file { Stdout::File } else { Stdout::Other }
}

/// Runs `ralph diff`.
pub fn execute(args: DiffArgs) -> Result<Exit, CliError> {
    let (id, bytes, status) = match args.source.open()? {
        JobSource::Remote { client, rt } => {
            let bytes = rt.block_on(client.patch(&args.id)).map_err(|e| match e {
                // The runner could not build it: not a usage error.
                ClientError::Api { ref code, .. } if code == "patch_failed" => {
                    CliError::internal(e.to_string())
                }
                e => client_error(e),
            })?;
            // What the patch holds (a partial one is flagged), from the job's result.
            let job = rt.block_on(client.job(&args.id)).map_err(client_error)?;
            let status: Option<PatchStatus> = serde_json::from_value(job["patch"].clone()).ok();
            let id = job["id"].as_str().unwrap_or(&args.id).to_owned();
            (id, bytes, status)
        }
        JobSource::Local { store, state_dir } => {
            let id = store
                .resolve_id(&args.id)
                .map_err(|e| CliError::usage(e.to_string()))?;
            let view = store
                .load(&id)
                .map_err(|e| CliError::internal(e.to_string()))?;
            let job_dir = ralph_runner::engine::job_dir(&state_dir, &id);
            let path = ralph_runner::provision::patch_path(&job_dir);
            let host = nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default();
            let status = match patch_answer::answer(&view, &path, &job_dir, &host) {
                PatchAnswer::NoPatch(message) => return Err(CliError::usage(message)),
                PatchAnswer::Failed(message) => return Err(CliError::internal(message)),
                PatchAnswer::Patch { status } => status,
            };
            let bytes = std::fs::read(&path).map_err(|e| {
                CliError::internal(format!("failed to read `{}`: {e}", path.display()))
            })?;
            (id, bytes, status)
        }
    };
    match view(args.raw, stdout_kind(), CiEnv::current().ci) {
        View::Exact => super::stdout::write_bytes(&bytes),
        View::Shown => {
            let shown = terminal::verbatim(&bytes);
            super::stdout::write(&shown);
            if shown.as_bytes() != bytes.as_slice() {
                eprintln!(
                    "ralph: the patch holds control characters or lines a CI would run: shown escaped, not as bytes to apply (`ralph diff JOB > FILE` or --raw writes them)"
                );
            }
        }
    }
    if let Some(s) = &status {
        if let Some(warning) = partial_warning(&id, s) {
            eprintln!("{}", terminal::line(&format!("ralph: {warning}")));
        } else if s.state == PatchState::Written && s.files == 0 {
            eprintln!(
                "{}",
                terminal::line(&format!(
                    "ralph: job `{id}` changed no files: its result patch is empty"
                ))
            );
        }
    }
    Ok(Exit::Complete)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_bytes_go_to_files_and_programs_a_view_to_terminals_and_ci_logs() {
        assert_eq!(view(false, Stdout::File, true), View::Exact);
        assert_eq!(view(false, Stdout::Other, false), View::Exact);
        assert_eq!(view(false, Stdout::Terminal, false), View::Shown);
        assert_eq!(view(false, Stdout::Other, true), View::Shown);
        assert_eq!(view(true, Stdout::Terminal, true), View::Exact);
    }
}
