//! Where a job's files live: one directory per job in the state dir, one per round attempt,
//! always outside the workspace.
//!
//! ```text
//! <state-dir>/jobs/<job-id>/rounds/<round>/<attempt>/
//!     in/prompt.md  in/handoff.json        readable by the agent (+ in/gitconfig)
//!     out/report.json  out/usage.jsonl     the agent's report and usage lines: the round writes
//!                                          a bounded tmpfs at out/, and only these two regular
//!                                          files are copied here after it ([`ReportDir`])
//!     home/  tmp/                          private HOME and TMPDIR (removed after the round)
//!     stdout.log  stderr.log               capped output (runner only)
//!     sandbox-result.json                  the sandbox helper's account (runner only)
//! <state-dir>/jobs/<job-id>/rounds/<round>/verify/
//!     output.log  sandbox-result.json  home/  tmp/  in/gitconfig
//! <state-dir>/jobs/<job-id>/rounds/0/setup/      the set-up, before round 1 (SPEC §12)
//!     output.log  sandbox-result.json  home/  tmp/  in/gitconfig
//! ```

use std::path::{Path, PathBuf};

use ralph_sandbox::{ReportDir, ReportFile};

/// The report file's name in `out/`.
pub const REPORT_FILE: &str = "report.json";

/// The usage file's name in `out/`.
pub const USAGE_FILE: &str = "usage.jsonl";

/// Entries the report directory holds, its own included (`nr_inodes` of its tmpfs): the
/// report and usage files and a few more an agent writes on the way (a temporary file renamed
/// over the report). A round that makes more fails with `report_dir_full`.
pub const REPORT_DIR_ENTRIES: u64 = 64;

/// Bytes the report directory holds beyond its two files' bounds (a temporary copy written
/// before a rename, tmpfs page rounding). A round that fills it fails with `report_dir_full`.
pub const REPORT_DIR_SLACK: u64 = 256 * 1024;

/// The most of `report.json` kept: what the report's decoder reads for a handoff cap of `cap`
/// (`--handoff-cap`), plus one byte to see a longer file as too large.
pub fn report_file_bound(cap: usize) -> u64 {
    crate::report::decode::raw_limit(cap) as u64 + 1
}

/// The most of `usage.jsonl` kept (its reader's bound, plus one byte to see a longer file).
pub const USAGE_FILE_BOUND: u64 = crate::usage::MAX_USAGE_FILE_BYTES as u64 + 1;

fn page_up(n: u64) -> u64 {
    n.div_ceil(4096) * 4096
}

/// The report directory's size for a handoff cap of `cap`: both files at their bounds, and
/// [`REPORT_DIR_SLACK`] (1.4 MiB at the default cap of 16384).
pub fn report_dir_bytes(cap: usize) -> u64 {
    page_up(report_file_bound(cap)) + page_up(USAGE_FILE_BOUND) + REPORT_DIR_SLACK
}

/// The artifact directory of a job.
pub fn job_dir(state_dir: &Path, job_id: &str) -> PathBuf {
    state_dir.join("jobs").join(job_id)
}

/// The job's file (in its directory, never bound into a round) where the sandbox's git check
/// keeps its directory listings between the job's runs (`ExecSpec::listings`).
pub const WALK_LISTINGS: &str = "walk-listings";

/// The job's directory (never bound into a round) where the sandbox keeps the copies of the
/// protected files between the job's runs (`ExecSpec::protected_copies`); removed when the job
/// finishes.
pub const PROTECTED_COPIES: &str = "protected-copies";

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

    /// The directories of the job's set-up run (`rounds/0/setup`: rounds are 1-based, so it
    /// sorts first and is pruned and swept like the rounds).
    pub fn setup(job_dir: &Path) -> Self {
        Self::at(job_dir.join("rounds").join("0").join("setup"))
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
        self.output.join(REPORT_FILE)
    }

    /// Where the agent appends usage lines.
    pub fn usage_file(&self) -> PathBuf {
        self.output.join(USAGE_FILE)
    }

    /// The round's report directory (`out/`) as the sandbox bounds it for a handoff cap of
    /// `cap`: [`report_dir_bytes`] and [`REPORT_DIR_ENTRIES`]; only the report and usage files
    /// come back, each cut at its bound.
    pub fn report_dir(&self, cap: usize) -> ReportDir {
        ReportDir {
            path: self.output.clone(),
            bytes: report_dir_bytes(cap),
            entries: REPORT_DIR_ENTRIES,
            files: vec![
                ReportFile {
                    name: REPORT_FILE.to_owned(),
                    max_bytes: report_file_bound(cap),
                },
                ReportFile {
                    name: USAGE_FILE.to_owned(),
                    max_bytes: USAGE_FILE_BOUND,
                },
            ],
        }
    }

    /// Captured stdout.
    pub fn stdout_log(&self) -> PathBuf {
        self.root.join("stdout.log")
    }

    /// Captured stderr.
    pub fn stderr_log(&self) -> PathBuf {
        self.root.join("stderr.log")
    }

    /// Merged output of a verify or set-up run.
    pub fn output_log(&self) -> PathBuf {
        self.root.join("output.log")
    }

    /// A guard that removes the private HOME and TMPDIR when dropped, however the attempt ends
    /// (a store error that returns early included).
    pub(crate) fn private_scratch(&self) -> PrivateScratch {
        PrivateScratch(self.clone())
    }

    /// Removes the private HOME and TMPDIR (their content is not an artifact), never following a
    /// symlink, whatever their depth ([`ralph_sandbox::beneath::tree::remove_tree`]).
    pub fn remove_private(&self) -> Result<(), ralph_sandbox::beneath::BeneathError> {
        for d in [&self.home, &self.tmp] {
            // Usually empty: one rmdir instead of a directory walk.
            if std::fs::remove_dir(d).is_ok() {
                continue;
            }
            ralph_sandbox::beneath::tree::remove_tree(d)?;
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
