//! `ralph diff JOB`: a provisioned job's `result.patch` (SPEC §11), from a server
//! (`GET /v1/jobs/{id}/patch`) or a local store (`--state-dir DIR`), written to stdout as it is
//! (ready for `git apply`). A `partial` patch is written too, with a warning on stderr naming
//! the paths it left out; a patch that could not be built is an error saying why (exit 70);
//! no patch (not a provisioned job, not ended yet, removed) is exit 64 saying which.

use clap::Args;
use ralph_runner::client::ClientError;
use ralph_runner::provision::patch_answer::{self, PatchAnswer, partial_warning};
use ralph_runner::provision::patch_status::{PatchState, PatchStatus};

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
    #[command(flatten)]
    pub source: SourceArgs,
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
    super::stdout::write_bytes(&bytes);
    if let Some(s) = &status {
        if let Some(warning) = partial_warning(&id, s) {
            eprintln!("ralph: {warning}");
        } else if s.state == PatchState::Written && s.files == 0 {
            eprintln!("ralph: job `{id}` changed no files: its result patch is empty");
        }
    }
    Ok(Exit::Complete)
}
