//! What a backend reports back about one run: how it ended, what it used, how much of the
//! requested isolation was actually enforced, and what its git check did ([`git`]).

pub mod git;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::mode::{BackendKind, Mode, Network};

/// How the command's main process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Termination {
    /// It called `exit` with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// A signal killed it.
    Signaled {
        /// The signal number.
        signal: i32,
    },
}

impl Termination {
    /// True for `exit(0)`.
    pub const fn success(self) -> bool {
        matches!(self, Termination::Exited { code: 0 })
    }

    /// The status a shell would show: the exit code, or 128 + the signal number.
    pub const fn shell_code(self) -> i32 {
        match self {
            Termination::Exited { code } => code,
            Termination::Signaled { signal } => 128 + signal,
        }
    }
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Termination::Exited { code } => write!(f, "exit status {code}"),
            Termination::Signaled { signal } => {
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown signal");
                write!(f, "killed by signal {signal} ({name})")
            }
        }
    }
}

/// Why the run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndedBy {
    /// The main process exited on its own.
    Exit,
    /// The wall-clock limit passed and the tree was killed.
    Timeout,
    /// The caller cancelled and the tree was killed.
    Cancel,
    /// The runner that started the run went away and the tree was killed.
    RunnerGone,
    /// The memory limit was hit and the kernel's OOM killer ended a process.
    MemoryLimit,
}

/// Resources used by the whole process tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceUsage {
    /// User CPU time, in milliseconds.
    pub user_cpu_ms: u64,
    /// System CPU time, in milliseconds.
    pub system_cpu_ms: u64,
    /// Largest resident set of any single process, in KiB.
    pub max_rss_kib: u64,
}

/// One restriction the sandbox is responsible for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Restriction {
    /// Which paths may be read and written.
    Filesystem,
    /// Protected paths inside the workspace kept read-only.
    ProtectedPaths,
    /// Secrets under readable directories hidden.
    HiddenSecrets,
    /// Network access.
    Network,
    /// The syscall deny list.
    Syscalls,
    /// Capabilities dropped.
    Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs,
    /// Environment scrubbed to an allowlist.
    Environment,
    /// Inherited descriptors closed.
    Descriptors,
    /// The whole process tree killed at the end.
    ProcessTree,
    /// Memory limit of the tree.
    Memory,
    /// CPU limit of the tree (`--cpus`).
    Cpu,
    /// Process-count limit of the tree.
    Pids,
    /// `RLIMIT_CORE` = 0.
    CoreDumps,
    /// `RLIMIT_FSIZE`.
    FileSize,
    /// `RLIMIT_NOFILE`.
    OpenFiles,
    /// Signals and abstract unix sockets scoped to the sandbox.
    Scoping,
    /// Who the command is on the host (never uid 0 in the confined modes).
    Identity,
    /// The private HOME and TMPDIR bounded in size.
    ScratchSpace,
    /// The report directory bounded in size and entries, only its report files kept.
    ReportDir,
    /// Unix sockets in visible trees masked unless granted.
    UnixSockets,
}

/// How much of one restriction was enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Enforced completely.
    Full,
    /// Enforced in part; the detail says what is missing.
    Partial,
    /// Not requested by this mode or these flags.
    NotRequested,
}

/// One line of the enforcement report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforced {
    /// Which restriction.
    pub restriction: Restriction,
    /// How much of it.
    pub level: Level,
    /// How, in a few words (e.g. "landlock abi 7", "cgroup v1 memory").
    pub detail: String,
}

/// How much of the requested isolation was enforced for one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforcement {
    /// The backend that ran the command.
    pub backend: BackendKind,
    /// The mode it ran under.
    pub mode: Mode,
    /// One line per restriction.
    pub restrictions: Vec<Enforced>,
    /// The network setting when it is more than on/off (`gateway`, with its ports); the
    /// `network` line of [`Enforcement::restrictions`] says the same in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkEnforced>,
}

/// The network a run had, with the runner's gateway ports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkEnforced {
    /// The setting (`gateway`).
    pub network: Network,
    /// The ports of `127.0.0.2` inside the run where the runner's gateway listened.
    pub gateway_ports: Vec<u16>,
}

impl Enforcement {
    /// An empty report for `backend` and `mode`.
    pub fn new(backend: BackendKind, mode: Mode) -> Self {
        Self {
            backend,
            mode,
            restrictions: Vec::new(),
            network: None,
        }
    }

    /// Records one restriction.
    pub fn record(&mut self, restriction: Restriction, level: Level, detail: impl Into<String>) {
        self.restrictions.push(Enforced {
            restriction,
            level,
            detail: detail.into(),
        });
    }

    /// The level recorded for `restriction`, if any.
    pub fn level_of(&self, restriction: Restriction) -> Option<Level> {
        self.restrictions
            .iter()
            .find(|e| e.restriction == restriction)
            .map(|e| e.level)
    }
}

/// What the supervisor learned about one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutcome {
    /// How the main process ended.
    pub termination: Termination,
    /// Why the run ended.
    pub ended_by: EndedBy,
    /// Wall-clock time from spawn to the end of the main process.
    pub wall: Duration,
    /// Time the backend took to put the sandbox in place before the command started (native:
    /// from the helper's first set-up step to the command's `execve`). `None` when unknown.
    #[serde(default)]
    pub setup: Option<Duration>,
    /// Resources of the whole tree; `None` when the backend could not read them (a docker
    /// container whose init could not report them).
    #[serde(default)]
    pub resources: Option<ResourceUsage>,
    /// Processes still alive after the main process ended, which the supervisor killed.
    pub leftovers_killed: u32,
    /// Set when the command could not be executed at all (not found, not executable).
    pub exec_error: Option<String>,
    /// What the run left that the sandbox's rules forbid, found and undone after it (a symlink
    /// planted where a protected path should be, a `.git/commondir` created).
    #[serde(default)]
    pub violations: Vec<Violation>,
    /// Git repositories in the writable trees that the run created, replaced or changed, and
    /// what of them was replaced so the host's git cannot be turned against the host (not a
    /// violation: a legitimate `git init` leads here too).
    #[serde(default)]
    pub git: git::GitCheck,
    /// What became of the run's report directory (`None`: it had none).
    #[serde(default)]
    pub report_dir: Option<Box<ReportDirEnd>>,
    /// How much isolation was enforced.
    pub enforcement: Enforcement,
}

/// What became of a run's report directory ([`crate::spec::ReportDir`]) once the run ended.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportDirEnd {
    /// The host directory that received the files.
    pub path: PathBuf,
    /// Its bound in bytes.
    pub bytes: u64,
    /// Its bound in entries.
    pub entries: u64,
    /// Bytes left free at the end (`None`: unknown).
    pub free_bytes: Option<u64>,
    /// Entries left free at the end (`None`: unknown).
    pub free_entries: Option<u64>,
    /// The files copied to the host.
    pub kept: Vec<KeptFile>,
    /// Files to keep that the run left as something else (a symlink, a FIFO, a directory):
    /// not kept.
    #[serde(default)]
    pub refused: Vec<RefusedFile>,
    /// What else went wrong (a copy that failed, the directory not handed over), in words.
    pub problems: Vec<String>,
    /// A copy failed for lack of room on the host.
    #[serde(default)]
    pub no_space: bool,
}

impl ReportDirEnd {
    /// Whether the run filled it: no byte or no entry left at its end.
    pub fn full(&self) -> bool {
        self.free_bytes == Some(0) || self.free_entries == Some(0)
    }

    /// Why the file `name` was not kept, when the run left it as something else.
    pub fn refused(&self, name: &str) -> Option<&str> {
        self.refused
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.why.as_str())
    }
}

/// A file a report directory should have kept, left as something else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedFile {
    /// Its name.
    pub name: String,
    /// What it was, in words ("a symlink; symlinks are refused").
    pub why: String,
}

/// One file kept from a report directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptFile {
    /// Its name.
    pub name: String,
    /// Bytes copied.
    pub bytes: u64,
    /// It was longer than its bound and cut there.
    pub truncated: bool,
}

/// What kind of rule a run broke on the host side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// A symlink where a protected path or one of its parents must be a real path.
    Symlink,
    /// A path that must stay absent (e.g. `.git/commondir`) was created.
    CreatedAbsent,
    /// A protected path could not be checked after the run.
    Uncheckable,
    /// A protected path (or something below it) changed, appeared or disappeared.
    ProtectedChanged,
    /// A git repository the run created or changed could not be made safe.
    GitNotSanitized,
}

/// One thing a run left in a writable tree against the rules, and what was done about it. Any
/// violation fails a round (`workspace_tampered`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// What rule.
    pub kind: ViolationKind,
    /// The host path.
    pub path: PathBuf,
    /// What was found and done, in words (agent-controlled parts quoted and bounded).
    pub detail: String,
    /// Whether it was undone (removed).
    pub undone: bool,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`: {}", self.path.display(), self.detail)
    }
}

/// What a capture sink kept of one output stream.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureSummary {
    /// Where the kept bytes are, if they went to a file.
    pub path: Option<PathBuf>,
    /// Bytes the command wrote.
    pub bytes_seen: u64,
    /// Bytes kept (including the truncation marker).
    pub bytes_kept: u64,
    /// True when output was cut at the cap.
    pub truncated: bool,
    /// True when the stream's reader had not finished draining within the limit after the
    /// process ended: what was kept may be cut short or empty (see
    /// [`crate::capture::UNDRAINED_MARKER`]).
    #[serde(default)]
    pub undrained: bool,
    /// Set when the file stopped taking output (a write to it failed: a full disk, an I/O
    /// error). The rest of the stream was still read, counted and discarded, so the command
    /// never blocked on its output (see [`crate::capture::dropped_marker`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped: Option<CaptureDrop>,
}

/// Why and where a capture stopped writing its file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureDrop {
    /// Bytes of the stream seen before the failed write.
    pub after: u64,
    /// Whether the write failed for lack of room (ENOSPC, EDQUOT).
    pub no_space: bool,
    /// The error, in words.
    pub error: String,
}

/// Everything known about one finished run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecReport {
    /// The supervisor's account.
    pub outcome: ExecOutcome,
    /// Standard output capture.
    pub stdout: CaptureSummary,
    /// Standard error capture (empty when merged into stdout).
    pub stderr: CaptureSummary,
}
