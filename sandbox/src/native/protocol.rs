//! The contract between the runner and its native helper process: how the request travels in,
//! and how the result comes back.
//!
//! The runner starts its own executable with [`HELPER_ARG`] and a cleared environment holding only
//! [`SPEC_ENV`] (a JSON [`HelperSpec`]). The environment is used rather than `argv` because
//! `/proc/PID/cmdline` is world-readable while `/proc/PID/environ` is not. The helper writes a
//! JSON [`HelperResult`] to `result_path` (atomically) before it exits.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::outcome::ExecOutcome;
use crate::plan::SandboxPlan;
use crate::spec::ExecSpec;

/// `argv[1]` that turns the `ralph` binary into the sandbox helper.
pub const HELPER_ARG: &str = "__sandbox-helper";

/// `argv[2]` of the helper: `--kill-grace-ms=N`, the round's grace in milliseconds. The spec
/// travels in the environment, which only the helper's user can read; this one number is in the
/// command line so that whoever finds the helper orphaned (a `ralph serve` start-up on the same
/// host) knows how long the round it is stopping may take, and never cuts that short
/// ([`super::leftovers`]). The init of the round, a fork of the helper, shows the same.
pub const GRACE_ARG_PREFIX: &str = "--kill-grace-ms=";

/// The environment variable carrying the [`HelperSpec`].
pub const SPEC_ENV: &str = "RALPH_SANDBOX_SPEC";

/// The environment variable of a helper started ahead of its round ([`super::standby`]): the
/// number of the inherited socket on which its one order comes (instead of [`SPEC_ENV`]).
pub const STANDBY_ENV: &str = "RALPH_SANDBOX_STANDBY";

/// `argv[1]` that turns the `ralph` binary into the standbys' zygote ([`super::zygote`]); as long
/// as [`HELPER_ARG`], which a standby forked from it writes over it.
pub const ZYGOTE_ARG: &str = "__sandbox-zygote";

/// The environment variable of the zygote: the number of the inherited socket on which the runner
/// asks it for standbys.
pub const ZYGOTE_ENV: &str = "RALPH_SANDBOX_ZYGOTE";

/// Largest encoded spec accepted (an environment string may not exceed 128 KiB on Linux).
pub const MAX_SPEC_BYTES: usize = 120 * 1024;

/// Name of the result file inside the spec's control directory.
pub const RESULT_FILE: &str = "sandbox-result.json";

/// Everything the helper needs.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelperSpec {
    /// The command and its sandbox request.
    pub exec: ExecSpec,
    /// What the helper must set up (resolved by the runner).
    pub plan: SandboxPlan,
    /// Where to write the [`HelperResult`].
    pub result_path: PathBuf,
    /// The runner's pid; when it dies, the helper kills the tree and exits.
    pub parent_pid: Option<i32>,
    /// `--network gateway` with ports: the inherited descriptor of the helper's end of the
    /// hand-over ([`super::gateway`]), on which the sandbox's init sends the listeners.
    #[serde(default)]
    pub gateway_fd: Option<i32>,
    /// A held run ([`crate::Sandbox::spawn_held`]): the inherited read end of the pipe on which
    /// the runner releases the command ([`super::hold`]).
    #[serde(default)]
    pub hold_fd: Option<i32>,
    /// The inherited helper end of the socket on which the supervisor sends the run's view back
    /// at its end ([`super::handback`]); without it the view goes with its last process.
    #[serde(default)]
    pub handback_fd: Option<i32>,
}

/// A restriction that could not be put in place; nothing ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetupFailure {
    /// The restriction (e.g. "filesystem isolation (landlock)").
    pub restriction: String,
    /// The failing step, naming the syscall where there is one.
    pub step: String,
    /// Why, in the kernel's or host's terms.
    pub reason: String,
}

/// The helper's answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum HelperResult {
    /// The command ran (it may have failed on its own).
    Ran {
        /// What happened.
        outcome: ExecOutcome,
    },
    /// The sandbox could not be set up; the command never ran.
    SetupFailed {
        /// What could not be enforced.
        failure: SetupFailure,
    },
    /// The helper itself failed.
    Internal {
        /// What went wrong.
        message: String,
    },
}
