//! What to run and under which restrictions: the request a caller hands to a backend.
//!
//! These types are plain data. They travel to the native helper process as JSON, so every
//! decision about *what* is allowed is made before any process is created.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::mode::{Mode, Network};

/// One command to run in a sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecSpec {
    /// The program and its arguments. `argv[0]` is looked up in the `PATH` of [`ExecSpec::env`]
    /// when it has no `/`.
    pub argv: Vec<String>,
    /// Working directory of the command.
    pub cwd: PathBuf,
    /// The command's complete environment. Nothing else is inherited.
    pub env: Vec<(String, String)>,
    /// Where the command's standard input comes from.
    pub stdin: StdinMode,
    /// Whether standard error is kept apart from standard output.
    pub stderr: StderrMode,
    /// Wall-clock limit; the whole process tree is killed when it passes.
    pub timeout: Option<Duration>,
    /// Time between the polite SIGTERM and the SIGKILL when a tree is stopped.
    pub kill_grace: Duration,
    /// The isolation the command runs under.
    pub sandbox: SandboxRequest,
    /// A runner-owned directory (never visible to the command) for the backend's control files.
    pub control_dir: PathBuf,
    /// A runner-owned file (never visible to the command) where the git check keeps its
    /// directory listings between the runs of one job, so that the walks of the next run list
    /// only what changed ([`crate::gitguard::inventory_kept`]). `None`: every run lists
    /// everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listings: Option<PathBuf>,
    /// A runner-owned directory (never visible to the command) where the copies of the
    /// protected files are kept between the runs of one job, so that the next run copies only
    /// what changed ([`crate::snapshot::Snapshot::take_kept`]). `None`: every run copies
    /// everything, and removes its copies after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_copies: Option<PathBuf>,
    /// The workspace is an overlay the runner made on a tree it never writes: the git check's
    /// walks take what the job did not change from that tree's listings
    /// ([`crate::gitguard::inventory_kept`]). `None`: every walk looks at every directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<WorkspaceLayers>,
}

/// A workspace that is an overlay of a tree the runner made and never writes again (its lower
/// layer) and of the job's own upper layer, both on one file system (runner-owned paths).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceLayers {
    /// The overlay's mount point: the workspace.
    pub merged: PathBuf,
    /// Its upper layer.
    pub upper: PathBuf,
    /// The walk listings of its lower layer ([`crate::gitguard::keep_listings`]).
    pub lower_listings: PathBuf,
    /// The lower layer's device (the listings name it).
    pub lower_dev: u64,
}

/// Standard input of the sandboxed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StdinMode {
    /// `/dev/null`.
    Null,
    /// Bytes supplied by the caller through [`crate::ExecIo::stdin`].
    Piped,
    /// The caller's own stdin (in-process runs such as `ralph sandbox exec`).
    Inherit,
}

/// Standard error of the sandboxed command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StderrMode {
    /// Captured by its own sink.
    Separate,
    /// Sent into standard output (interleaved as written).
    MergedIntoStdout,
}

/// The isolation requested for one command (SPEC §5).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxRequest {
    /// Filesystem and network mode.
    pub mode: Mode,
    /// Network access; `None` takes the mode's default. `read-only` never gets `full`
    /// (`gateway` is allowed: see [`Network::Gateway`]).
    pub network: Option<Network>,
    /// The shared workspace (absolute, canonical).
    pub workspace: PathBuf,
    /// Paths kept read-only inside the workspace, relative to it.
    pub protect: Vec<PathBuf>,
    /// Extra readable paths (absolute).
    pub read: Vec<PathBuf>,
    /// Extra writable directories (absolute), honoured in `workspace-write`.
    pub write: Vec<PathBuf>,
    /// Unix sockets (absolute) the command may connect to; every other socket in a visible tree
    /// is masked.
    #[serde(default)]
    pub sockets: Vec<PathBuf>,
    /// The run's private directories.
    pub private: PrivateDirs,
    /// Resource limits.
    pub limits: Limits,
    /// Container image (docker backend only).
    pub image: Option<String>,
    /// Paths that must stay unreadable whatever the policy says (the runner's own state). The
    /// private directories may lie inside them.
    pub forbidden: Vec<PathBuf>,
    /// Who a root runner's command runs as when the workspace is root's (`NAME`, `UID` or
    /// `UID:GID`; `None`: the default agent user, see [`crate::identity`]).
    #[serde(default)]
    pub agent_user: Option<String>,
    /// The loopback ports the runner's gateway listens on inside the round
    /// ([`GATEWAY_HOST`]`:PORT`),
    /// with [`Network::Gateway`] only: each becomes a TCP listener created in the round's network
    /// namespace and handed to the caller ([`crate::Running::take_gateway_listeners`]). At most
    /// [`MAX_GATEWAY_PORTS`], none 0, no duplicates; anything else is refused before a process
    /// is created.
    #[serde(default)]
    pub gateway_ports: Vec<u16>,
}

/// The address of the runner's gateway inside a round: a loopback address of the round's own
/// namespace, but not `127.0.0.1`, so that clients can tell it apart from the runner host's
/// loopback that an `--allow-host 127.0.0.1:PORT` names (a package mirror). `NO_PROXY` names
/// this address; clients match it by host, not port (Python's requests, reqwest, npm, curl).
pub const GATEWAY_HOST: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// Most gateway ports one request may ask for (all their descriptors travel in one message).
pub const MAX_GATEWAY_PORTS: usize = 16;

impl SandboxRequest {
    /// The least a request can be: `mode` on `workspace` with the run's private `HOME` and
    /// `TMPDIR`, and nothing else granted, limited or forbidden (the rest filled in with
    /// struct-update syntax where more is wanted).
    pub fn minimal(mode: Mode, workspace: PathBuf, home: PathBuf, tmp: PathBuf) -> Self {
        Self {
            mode,
            network: None,
            workspace,
            protect: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            sockets: Vec::new(),
            private: PrivateDirs {
                home,
                tmp,
                readable: Vec::new(),
                writable: Vec::new(),
                report: None,
            },
            limits: Limits::default(),
            image: None,
            forbidden: Vec::new(),
            agent_user: None,
            gateway_ports: Vec::new(),
        }
    }

    /// Checks [`SandboxRequest::gateway_ports`] against the resolved `network`: ports only with
    /// `gateway`, none 0, no duplicates, at most [`MAX_GATEWAY_PORTS`]. The error names the
    /// field (a usage error).
    pub fn check_gateway_ports(&self, network: Network) -> Result<(), crate::SandboxError> {
        let ports = &self.gateway_ports;
        let invalid = |m: String| Err(crate::SandboxError::invalid("gateway_ports", m));
        if ports.is_empty() {
            return Ok(());
        }
        if network != Network::Gateway {
            return invalid(format!(
                "ports {} are only allowed with `--network gateway`, not `--network {network}`",
                port_list(ports)
            ));
        }
        if ports.len() > MAX_GATEWAY_PORTS {
            return invalid(format!(
                "{} ports requested, at most {MAX_GATEWAY_PORTS}",
                ports.len()
            ));
        }
        if ports.contains(&0) {
            return invalid("port 0 is not a port the gateway can listen on".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(dup) = ports.iter().find(|p| !seen.insert(**p)) {
            return invalid(format!("port {dup} is listed twice"));
        }
        Ok(())
    }
}

/// `8080, 8081`.
pub(crate) fn port_list(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Directories that belong to one run and nobody else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivateDirs {
    /// The private `HOME` (writable).
    pub home: PathBuf,
    /// The private `TMPDIR` (writable).
    pub tmp: PathBuf,
    /// Further run-owned paths the command may read (e.g. the prompt and handoff files).
    pub readable: Vec<PathBuf>,
    /// Further run-owned directories the command may write.
    pub writable: Vec<PathBuf>,
    /// The run's report directory, bounded (`None`: it has none).
    #[serde(default)]
    pub report: Option<ReportDir>,
}

/// A run's report directory (a round's `out/`, where `RALPH_REPORT_FILE` and
/// `RALPH_USAGE_FILE` live). The command writes a small tmpfs of its own at [`ReportDir::path`],
/// never the host directory: once the run's processes are gone, the trusted side copies only
/// the [`ReportDir::files`] that are regular files (no link followed), each cut at its bound, to
/// the host directory. The host thus never receives more than the files' bounds, whatever the
/// command wrote ([`crate::report_dir`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportDir {
    /// The host directory (run-owned, empty) that receives the files; the command sees its
    /// tmpfs at the same path.
    pub path: PathBuf,
    /// The tmpfs's size, in bytes.
    pub bytes: u64,
    /// The tmpfs's entries (inodes), its own root included.
    pub entries: u64,
    /// The files kept.
    pub files: Vec<ReportFile>,
}

/// One file kept from a report directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportFile {
    /// Its name (one plain path component).
    pub name: String,
    /// The most bytes of it copied to the host.
    pub max_bytes: u64,
}

/// Most files one report directory may keep.
pub const MAX_REPORT_FILES: usize = 8;

impl ReportDir {
    /// Checks the request: an absolute path, a size of at least a page, room for the files'
    /// entries, at most [`MAX_REPORT_FILES`] plain, distinct names. The error names the field.
    pub fn check(&self) -> Result<(), crate::SandboxError> {
        let invalid = |m: String| Err(crate::SandboxError::invalid("report_dir", m));
        if !self.path.is_absolute() {
            return invalid(format!("`{}` is not absolute", self.path.display()));
        }
        if self.bytes < 4096 {
            return invalid(format!("{} bytes is less than a page", self.bytes));
        }
        if self.files.len() > MAX_REPORT_FILES {
            return invalid(format!(
                "{} files to keep, at most {MAX_REPORT_FILES}",
                self.files.len()
            ));
        }
        if self.entries <= self.files.len() as u64 {
            return invalid(format!(
                "{} entries leave no room for {} file(s) and the directory itself",
                self.entries,
                self.files.len()
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for f in &self.files {
            let plain = !f.name.is_empty()
                && f.name != "."
                && f.name != ".."
                && !f.name.contains('/')
                && !f.name.contains('\0');
            if !plain {
                return invalid(format!("{:?} is not a plain file name", f.name));
            }
            if !seen.insert(&f.name) {
                return invalid(format!("{:?} is listed twice", f.name));
            }
        }
        Ok(())
    }
}

/// Resource limits of one run. `None` means "no limit requested".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Memory of the whole tree, in bytes (cgroup).
    pub memory_bytes: Option<u64>,
    /// Number of processes/threads of the whole tree (cgroup).
    pub pids: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`, in bytes.
    pub file_size_bytes: Option<u64>,
    /// Size of each of the private HOME and TMPDIR (tmpfs), in bytes (`None`: the policy's).
    #[serde(default)]
    pub tmp_bytes: Option<u64>,
    /// CPU time of the whole tree, in thousandths of a CPU (`1500`: one and a half CPUs;
    /// cgroup `cpu` quota on native, `NanoCpus` on docker). `None`: the policy's, if any.
    #[serde(default)]
    pub cpu_millis: Option<u64>,
}
