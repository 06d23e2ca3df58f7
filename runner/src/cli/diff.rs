//! `ralph diff JOB`: a provisioned job's `result.patch` (SPEC §11), from a server
//! (`GET /v1/jobs/{id}/patch`) or a local store (`--state-dir DIR`), written to stdout as it is
//! (ready for `git apply`).

use clap::Args;

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
    let bytes = match args.source.open()? {
        JobSource::Remote { client, rt } => {
            rt.block_on(client.patch(&args.id)).map_err(client_error)?
        }
        JobSource::Local { store, state_dir } => {
            let id = store
                .resolve_id(&args.id)
                .map_err(|e| CliError::usage(e.to_string()))?;
            let view = store
                .load(&id)
                .map_err(|e| CliError::internal(e.to_string()))?;
            if view.spec.source.is_none() {
                return Err(CliError::usage(format!(
                    "job `{id}` ran in an existing workspace: only a provisioned job (`repo` or `upload`) has a patch"
                )));
            }
            let path = ralph_runner::provision::patch_path(&ralph_runner::engine::job_dir(
                &state_dir, &id,
            ));
            std::fs::read(&path).map_err(|e| {
                CliError::usage(format!(
                    "failed to read `{}`: {e} (a job's result.patch is written when it ends)",
                    path.display()
                ))
            })?
        }
    };
    super::stdout::write_bytes(&bytes);
    Ok(Exit::Complete)
}
