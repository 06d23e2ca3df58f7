//! Where `ralph run` keeps its state when `--state-dir` is not given.
//!
//! Order: `$RALPH_STATE_DIR`, then `$XDG_STATE_HOME/ralph`, then `$HOME/.local/state/ralph`.
//! (`ralph serve` defaults to `/var/lib/ralph`, the systemd `StateDirectory`.)

use std::path::PathBuf;

use super::CliError;

/// A store that could not be opened: one written by a newer ralph is a configuration error
/// (64: run that ralph), anything else internal (70).
pub fn open_error(e: ralph_runner::store::StoreError) -> CliError {
    match e {
        ralph_runner::store::StoreError::NewerSchema { .. }
        | ralph_runner::store::StoreError::StateDirNotText { .. } => CliError::usage(e.to_string()),
        other => CliError::internal(other.to_string()),
    }
}

/// The default state directory of foreground runs.
pub fn default_state_dir() -> Result<PathBuf, CliError> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(d) = var("RALPH_STATE_DIR") {
        return Ok(d);
    }
    if let Some(d) = var("XDG_STATE_HOME") {
        return Ok(d.join("ralph"));
    }
    if let Some(h) = var("HOME") {
        return Ok(h.join(".local/state/ralph"));
    }
    Err(CliError::usage(
        "no state directory: set --state-dir, RALPH_STATE_DIR or HOME",
    ))
}
