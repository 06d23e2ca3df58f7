//! Where a job's files live: one directory per job in the state dir, one per round attempt,
//! always outside the workspace.
//!
//! ```text
//! <state-dir>/jobs/<job-id>/rounds/<round>/<attempt>/
//!     in/prompt.md  in/handoff.json        readable by the agent (+ in/gitconfig)
//!     out/report.json  out/usage.jsonl     writable by the agent
//!     home/  tmp/                          private HOME and TMPDIR (removed after the round)
//!     stdout.log  stderr.log               capped output (runner only)
//!     sandbox-result.json                  the sandbox helper's account (runner only)
//! <state-dir>/jobs/<job-id>/rounds/<round>/verify/
//!     output.log  sandbox-result.json  home/  tmp/
//! ```

use std::path::{Path, PathBuf};

/// The artifact directory of a job.
pub fn job_dir(state_dir: &Path, job_id: &str) -> PathBuf {
    state_dir.join("jobs").join(job_id)
}

/// Paths of one round attempt.
#[derive(Clone, Debug)]
pub struct AttemptDirs {
    /// The attempt directory.
    pub root: PathBuf,
    /// Agent-readable inputs.
    pub input: PathBuf,
    /// Agent-writable outputs.
    pub output: PathBuf,
    /// Private HOME.
    pub home: PathBuf,
    /// Private TMPDIR.
    pub tmp: PathBuf,
}

impl AttemptDirs {
    /// The directories of `round`/`attempt` of a job.
    pub fn new(job_dir: &Path, round: u32, attempt: u32) -> Self {
        Self::at(
            job_dir
                .join("rounds")
                .join(round.to_string())
                .join(attempt.to_string()),
        )
    }

    /// The directories of the verify run after `round`.
    pub fn verify(job_dir: &Path, round: u32) -> Self {
        Self::at(
            job_dir
                .join("rounds")
                .join(round.to_string())
                .join("verify"),
        )
    }

    fn at(root: PathBuf) -> Self {
        Self {
            input: root.join("in"),
            output: root.join("out"),
            home: root.join("home"),
            tmp: root.join("tmp"),
            root,
        }
    }

    /// Creates all directories (mode 0700).
    pub fn create(&self) -> std::io::Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true).mode(0o700);
        for d in [&self.root, &self.input, &self.output, &self.home, &self.tmp] {
            b.create(d)?;
        }
        Ok(())
    }

    /// The prompt file.
    pub fn prompt_file(&self) -> PathBuf {
        self.input.join("prompt.md")
    }

    /// git's system configuration of the round (an identity; see `round.rs`).
    pub fn git_system_config(&self) -> PathBuf {
        self.input.join("gitconfig")
    }

    /// The handoff file (absent in round 1).
    pub fn handoff_file(&self) -> PathBuf {
        self.input.join("handoff.json")
    }

    /// Where the agent writes its report.
    pub fn report_file(&self) -> PathBuf {
        self.output.join("report.json")
    }

    /// Where the agent appends usage lines.
    pub fn usage_file(&self) -> PathBuf {
        self.output.join("usage.jsonl")
    }

    /// Captured stdout.
    pub fn stdout_log(&self) -> PathBuf {
        self.root.join("stdout.log")
    }

    /// Captured stderr.
    pub fn stderr_log(&self) -> PathBuf {
        self.root.join("stderr.log")
    }

    /// Merged output of a verify run.
    pub fn output_log(&self) -> PathBuf {
        self.root.join("output.log")
    }

    /// A guard that removes the private HOME and TMPDIR when dropped, however the attempt ends
    /// (a store error that returns early included).
    pub(crate) fn private_scratch(&self) -> PrivateScratch {
        PrivateScratch(self.clone())
    }

    /// Removes the private HOME and TMPDIR (their content is not an artifact).
    pub fn remove_private(&self) -> std::io::Result<()> {
        for d in [&self.home, &self.tmp] {
            // Usually empty: one rmdir instead of a directory walk.
            if std::fs::remove_dir(d).is_ok() {
                continue;
            }
            match std::fs::remove_dir_all(d) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Removes an attempt's private HOME and TMPDIR when dropped (see
/// [`AttemptDirs::private_scratch`]).
pub(crate) struct PrivateScratch(AttemptDirs);

impl Drop for PrivateScratch {
    fn drop(&mut self) {
        let _ = self.0.remove_private();
    }
}
