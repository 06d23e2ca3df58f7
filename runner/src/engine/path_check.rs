//! The job's sandbox-visible paths checked again before its first round and before every spawn
//! (round or verify). They were resolved when the job was made ([`crate::job::paths`]), but a
//! round of this job (or of another one sharing a tree) may since have replaced a directory on
//! one of them with a symlink: `read = WS/cache` becomes `WS/cache -> /etc` in round 1, and
//! round 2's mount would follow it. Walking the stored (real) path again finds such a link — by
//! the rule that needs no memory (not root's: every link a confined round makes) or because it
//! lies in a writable tree the store knows; the job then ends as a configuration error (exit 64)
//! naming it.
//!
//! Only that refusal is decided here: a path that vanished is the sandbox's to report, as before.
//!
//! When the paths hold, the job's writable trees (workspace, `write`) are marked before the run
//! ([`crate::job::tree_mark`]): the record a later job reads whatever store it uses.

use ralph_sandbox::SandboxError;

use super::job_run::JobRun;
use std::path::PathBuf;

use crate::job::paths::{Requested, resolve_paths};
use crate::job::resolve::{ResolveError, WritableTrees};
use crate::job::tree_mark;
use crate::store::trees::Patience;

impl JobRun<'_> {
    /// The writable trees of the engine's store (this job's own are added by the check), looked
    /// up when a walk meets a symlink; an outage is waited out as the job's events' are.
    pub(super) fn known_trees(&self) -> WritableTrees {
        crate::store::trees::writable_trees(self.engine.store(), Patience::OfARunningJob)
    }

    /// Fails when one of the job's paths now runs through a symlink a round could have planted.
    /// When they hold, the job's writable trees are marked for later jobs ([`tree_mark`]) before
    /// the run that may write them.
    pub(super) fn paths_unchanged(&self, known: &WritableTrees) -> Result<(), SandboxError> {
        self.paths_hold(known)?;
        if self.spec.sandbox.mode != ralph_sandbox::Mode::ReadOnly {
            tree_mark::mark_all(
                std::iter::once(self.spec.workspace.as_path())
                    .chain(self.spec.sandbox.write.iter().map(PathBuf::as_path)),
            );
        }
        Ok(())
    }

    fn paths_hold(&self, known: &WritableTrees) -> Result<(), SandboxError> {
        let s = &self.spec.sandbox;
        let req = Requested {
            workspace: &self.spec.workspace,
            read: &s.read,
            write: &s.write,
            protect: &s.protect,
            sockets: &s.sockets,
        };
        match resolve_paths(req, &self.spec.workspace, known) {
            // The store could not say whether a link on the way lies in a tree rounds wrote:
            // the check is not passed (fail closed), and the fault is the runner's, not the job's.
            Err(e) if matches!(e.source, ResolveError::TreesUnknown { .. }) => {
                Err(SandboxError::Helper {
                    message: format!("checking the job's paths again: {e}"),
                })
            }
            Err(e)
                if matches!(
                    e.source,
                    ResolveError::LinkInWritableTree { .. } | ResolveError::UntrustedLink { .. }
                ) =>
            {
                Err(SandboxError::invalid(
                    e.field,
                    format!("{e} (planted since the job was made)"),
                ))
            }
            Ok(_) | Err(_) => Ok(()),
        }
    }
}
