//! `ralph-sandbox` runs one command the way a ralph round runs: in a fresh process tree, with a
//! cleared environment, capped output, a timeout, and a kill of the whole tree at the end.
//!
//! - [`spec`]: what to run and under which restrictions (plain data).
//! - [`backend`]: the interface every backend implements, object-safe ([`Sandbox`],
//!   [`Running`]); [`testing`] (feature `testing`): a recording fake of it for callers' tests.
//! - [`native`]: the native backend (a helper process supervises the command).
//! - [`docker`]: the docker backend (a fresh hardened container per run).
//! - [`capture`]: bounded output capture.
//! - [`outcome`]: how a run ended, what it used, and how much isolation was enforced.
//! - [`protect`], [`gitguard`], [`beneath`]: the host boundary inside writable trees (protected
//!   paths, git repositories a run leaves, host-side file operations that never follow a
//!   symlink; [`beneath::tree`]: whole trees removed with bounded descriptors), all on
//!   [`fsat`], the descriptor-relative calls that never follow a symlink.
//! - [`report_dir`]: the run's report directory, a bounded tmpfs whose report files only are
//!   copied to the host after the run.
//!
//! # Test strategy
//!
//! Pure pieces (capture, words, spec validation) have unit tests here. Anything that changes a
//! process irreversibly runs in a throwaway process: the end-to-end tests in the repository's
//! `tests/` drive the `ralph` binary, which hosts the helper.

pub mod backend;
pub mod beneath;
pub mod capture;
pub mod docker;
pub mod doctor;
pub mod error;
pub mod fd_pass;
pub mod fsat;
pub mod gitguard;
pub mod host;
pub mod identity;
pub mod init_loop;
pub(crate) mod kept_file;
pub mod mode;
pub mod native;
pub mod outcome;
pub mod plan;
pub mod policy;
pub mod posix_spawn;
pub mod protect;
pub mod report_dir;
pub mod snapshot;
pub mod sockets;
pub mod spec;
pub mod sys;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod units;

pub use backend::{ExecIo, Running, Sandbox, SettleFuture, SpawnFuture, WaitFuture};
pub use error::{ErrorClass, SandboxError};
pub use mode::{BackendKind, Mode, Network};
pub use outcome::{EndedBy, Enforcement, ExecOutcome, ExecReport, Termination};
pub use spec::{
    ExecSpec, Limits, PrivateDirs, ReportDir, ReportFile, SandboxRequest, StderrMode, StdinMode,
};
