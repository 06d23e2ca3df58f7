//! `ralph run --junit FILE` and `--summary FILE`: the job's CI reports ([`ralph_runner::ci`]),
//! written when the job ends. The JUnit file is replaced atomically (a temporary file beside it,
//! then a rename: a CI step never reads half of one); the summary is appended, as
//! `$GITHUB_STEP_SUMMARY` collects every step's Markdown in one file. The paths are checked
//! before the job starts (exit 64); a write that fails at the end is a warning, never the job's
//! outcome.

use std::io::Write;
use std::path::Path;

use ralph_runner::job::JobResult;
use ralph_runner::store::Store;

use super::CliError;

/// Refuses a path that cannot be written at the end (`flag` names it).
pub fn check(flag: &str, path: &Path) -> Result<(), CliError> {
    ralph_runner::metrics::textfile::check_path(path)
        .map_err(|e| CliError::usage(format!("{flag}: {e}")))
}

/// Writes the requested reports of `result`; failures are warnings on stderr.
pub fn write(store: &Store, result: &JobResult, junit: Option<&Path>, summary: Option<&Path>) {
    if junit.is_none() && summary.is_none() {
        return;
    }
    let events = match store.events(&result.job_id) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("ralph: warning: CI reports not written: failed to read the journal: {e}");
            return;
        }
    };
    if let Some(p) = junit {
        let text = ralph_runner::ci::junit::render(result, &events);
        if let Err(e) = replace(p, &text) {
            eprintln!("ralph: warning: --junit `{}` not written: {e}", p.display());
        }
    }
    if let Some(p) = summary {
        let text = ralph_runner::ci::summary::render(result, &events);
        if let Err(e) = append(p, &text) {
            eprintln!(
                "ralph: warning: --summary `{}` not written: {e}",
                p.display()
            );
        }
    }
}

fn replace(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(text.as_bytes())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The summary is appended: `$GITHUB_STEP_SUMMARY` collects every step's Markdown in one file.
fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")
}
