//! `ralph prune`: removes the artifacts of jobs that finished more than `--older-than` ago from
//! a state directory; the journal keeps their events (see `ralph_runner::engine::prune`).

use std::path::PathBuf;

use clap::Args;
use ralph_runner::engine::prune::{PruneReport, prune};
use ralph_runner::store::Store;
use ralph_runner::util::units::HumanDuration;

use super::exit::Exit;
use super::stdout::outln;
use super::{CliError, state_dir};

/// `ralph prune` flags.
#[derive(Args, Debug)]
pub struct PruneArgs {
    /// Prune jobs that finished more than this long ago (e.g. 30d, 12h, 0s).
    #[arg(long, value_name = "DUR")]
    pub older_than: HumanDuration,
    /// State directory (default: $RALPH_STATE_DIR, $XDG_STATE_HOME/ralph or ~/.local/state/ralph;
    /// the service's is /var/lib/ralph).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// The PostgreSQL store the jobs are journalled in (instead of SQLite in the state
    /// directory); only this host's artifacts are pruned.
    #[arg(
        long,
        value_name = "URL",
        env = "RALPH_DATABASE_URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,
    /// Say what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn print_text(r: &PruneReport) {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for j in &r.pruned {
        outln!(
            "job {}: {verb} {} file(s), {} bytes (finished {})",
            j.id,
            j.files,
            j.bytes,
            j.finished_at
        );
    }
    outln!(
        "{verb} the artifacts of {} job(s): {} file(s), {} bytes",
        r.pruned.len(),
        r.files,
        r.bytes
    );
}

/// Runs `ralph prune`.
pub fn execute(args: PruneArgs) -> Result<Exit, CliError> {
    let dir = match &args.state_dir {
        Some(d) => d.clone(),
        None => state_dir::default_state_dir()?,
    };
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| CliError::usage(format!("--state-dir `{}`: {e}", dir.display())))?;
    let database_url = args.database_url.as_deref().filter(|u| !u.is_empty());
    let store = Store::open(&dir, database_url).map_err(super::state_dir::open_error)?;
    let report = prune(&store, &dir, args.older_than.0, args.dry_run)
        .map_err(|e| CliError::internal(e.to_string()))?;
    for s in &report.skipped {
        eprintln!("ralph prune: skipped {s}");
    }
    if args.json {
        let text =
            serde_json::to_string_pretty(&report).map_err(|e| CliError::internal(e.to_string()))?;
        outln!("{text}");
    } else {
        print_text(&report);
    }
    Ok(Exit::Complete)
}
