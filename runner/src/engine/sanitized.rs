//! What the sandbox's git check did after an attempt or a verify run, journalled
//! (`workspace_sanitized`) before that run's end, so the next attempt's prompt, the progress
//! view and the metrics all say it.

use ralph_sandbox::outcome::git::GitCheck;

use super::EngineError;
use super::job_run::JobRun;
use crate::store::EventKind;

impl JobRun<'_> {
    /// Journals `git` (when it did or found anything) for `round` / `attempt` (`None`: the
    /// verify run after the round).
    pub(super) fn record_git_check(
        &mut self,
        round: u32,
        attempt: Option<u32>,
        git: &GitCheck,
    ) -> Result<(), EngineError> {
        if git.is_empty() {
            return Ok(());
        }
        self.journal.record(EventKind::WorkspaceSanitized {
            round,
            attempt,
            repositories: git.sanitized.clone(),
            counts: git.counts,
            unchecked: git.unchecked.clone(),
        })?;
        Ok(())
    }
}
