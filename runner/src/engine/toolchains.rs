//! The job's toolchain grant (SPEC §12, [`crate::toolchain`]): detected once per run of the job
//! before round 1, journalled (`toolchain_granted`), then applied to every round and verify
//! ([`JobRun::sandbox_request`], the round's environment). A docker round that could not reach
//! a granted tree goes without it; if a command's program is in it, the job is refused here,
//! naming why, rather than run with another program.

use std::path::PathBuf;

use ralph_sandbox::{BackendKind, Mode};

use super::env::DEFAULT_PATH;
use super::job_run::JobRun;
use crate::job::FinishReason;
use crate::store::EventKind;
use crate::toolchain::{self, ToolchainMode};

impl JobRun<'_> {
    /// Detects, checks and journals the job's grant (nothing with `--toolchain none`).
    pub(super) fn grant_toolchains(&mut self) -> Result<(), (FinishReason, String)> {
        if self.spec.toolchain == ToolchainMode::None {
            return Ok(());
        }
        // What the sandbox shows anyway; full-access sees everything, so the confined modes'
        // trees stand for the system (nothing is bound there, the variables still matter).
        let mode = match self.spec.sandbox.mode {
            Mode::FullAccess => Mode::WorkspaceWrite,
            m => m,
        };
        let shown: Vec<PathBuf> = self
            .engine
            .sandboxes
            .policies()
            .get(mode)
            .map(|p| p.filesystem.read.clone())
            .unwrap_or_default();
        let mut grant = toolchain::for_job(
            &self.spec,
            &self.engine.env,
            &shown,
            std::slice::from_ref(&self.engine.state_dir),
        );
        if self.spec.sandbox.backend == BackendKind::Docker {
            // A container round runs as the workspace's owner, or (a root runner's confined
            // round on a root-owned workspace) as the agent user.
            let uid = ralph_sandbox::docker::plan::command_uid(
                self.spec.sandbox.mode,
                &self.spec.workspace,
                self.engine.agent_user.as_deref(),
                nix::unistd::geteuid().as_raw(),
            )
            .map_err(|e| (FinishReason::Configuration, e.to_string()))?;
            let path = self.engine.env.get("PATH").unwrap_or(DEFAULT_PATH);
            let programs: Vec<PathBuf> = toolchain::job_commands(&self.spec)
                .into_iter()
                .filter_map(toolchain::first_program)
                .filter_map(|p| {
                    toolchain::program::candidates(&toolchain::RealFs, p, path)
                        .into_iter()
                        .next()
                        .map(|(c, _)| c)
                })
                .collect();
            grant = toolchain::for_docker(grant, uid, &programs)
                .map_err(|why| (FinishReason::Configuration, why))?;
        }
        self.journal
            .record(EventKind::ToolchainGranted {
                grant: grant.record(),
            })
            .map_err(|e| (FinishReason::InternalError, e.to_string()))?;
        self.toolchain = grant;
        Ok(())
    }
}
