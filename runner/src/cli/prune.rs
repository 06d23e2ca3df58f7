//! `ralph prune`: removes the artifacts of jobs that finished more than `--older-than` ago from
//! a state directory; the journal keeps their events (see `ralph_runner::engine::prune`). With
//! `--caches`, it removes the host's job caches instead (`ralph_runner::cache::store`).

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
    /// Prune jobs that finished more than this long ago (e.g. 30d, 12h, 0s); with --caches,
    /// caches no job used for this long.
    #[arg(long, value_name = "DUR", required_unless_present = "caches")]
    pub older_than: Option<HumanDuration>,
    /// Remove the host's job caches (`<state-dir>/caches`, SPEC §12) instead of artifacts:
    /// those idle for more than --older-than, then the least recently used over
    /// --cache-budget; every one when neither is given. A cache a job is copying is left.
    #[arg(long)]
    pub caches: bool,
    /// With --caches: keep at most this many bytes of caches (e.g. 5G).
    #[arg(long, value_name = "BYTES", requires = "caches")]
    pub cache_budget: Option<ralph_runner::util::units::ByteSize>,
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
    if args.caches {
        return prune_caches(&args, &dir);
    }
    let Some(older_than) = args.older_than else {
        return Err(CliError::usage("--older-than is required (or --caches)"));
    };
    let database_url = args.database_url.as_deref().filter(|u| !u.is_empty());
    let store = Store::open(&dir, database_url).map_err(super::state_dir::open_error)?;
    let report = prune(&store, &dir, older_than.0, args.dry_run)
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

/// `ralph prune --caches`.
fn prune_caches(args: &PruneArgs, dir: &std::path::Path) -> Result<Exit, CliError> {
    let store = ralph_runner::cache::CacheStore::new(dir);
    let older = match (args.older_than, args.cache_budget) {
        (Some(t), _) => Some(t.0),
        (None, None) => Some(std::time::Duration::ZERO),
        (None, Some(_)) => None,
    };
    let r = store
        .prune(older, args.cache_budget.map(|b| b.0), args.dry_run)
        .map_err(|e| CliError::internal(e.to_string()))?;
    for s in &r.skipped {
        eprintln!("ralph prune: skipped cache {s}");
    }
    if args.json {
        let text =
            serde_json::to_string_pretty(&r).map_err(|e| CliError::internal(e.to_string()))?;
        outln!("{text}");
        return Ok(Exit::Complete);
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for e in &r.removed {
        outln!(
            "cache {}: {verb} {} bytes (unused for {}s)",
            e.hash,
            e.bytes,
            e.idle_secs
        );
    }
    outln!(
        "{verb} {} cache(s), {} bytes; {} bytes kept",
        r.removed.len(),
        r.bytes,
        r.kept_bytes
    );
    Ok(Exit::Complete)
}
