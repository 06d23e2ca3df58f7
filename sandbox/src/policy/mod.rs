//! Mode policies as data (`policies/*.toml` at the repository root): what each mode may read and
//! write, which paths stay protected or hidden, the network default, the syscall deny list and
//! default limits. The three files are embedded; a config directory can replace any of them.

pub mod admit;
pub mod allow_list;
pub mod guards;
pub mod host_share;
pub mod kernel_paths;
pub mod network;
pub mod syscall_table;
pub mod syscalls;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::Deserialize;

use crate::mode::{Mode, Network};
use crate::units::ByteSize;

// The sources of the embedded policies (their JSON is what runs; a test checks they agree).
#[cfg(test)]
const READ_ONLY: &str = include_str!("../../../policies/read-only.toml");
#[cfg(test)]
const WORKSPACE_WRITE: &str = include_str!("../../../policies/workspace-write.toml");
#[cfg(test)]
const FULL_ACCESS: &str = include_str!("../../../policies/full-access.toml");

/// One mode's policy.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Filesystem view.
    pub filesystem: FilesystemPolicy,
    /// Read-only paths inside the workspace.
    pub protect: ProtectPolicy,
    /// Network.
    pub network: NetworkPolicy,
    /// Syscall filter.
    pub syscalls: SyscallPolicy,
    /// Default limits.
    pub limits: LimitDefaults,
}

/// Whether the workspace is writable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkspaceAccess {
    /// Read and execute only.
    Read,
    /// Read and write.
    Write,
}

/// `[filesystem]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemPolicy {
    /// No filesystem restriction at all (full-access).
    #[serde(default)]
    pub unrestricted: bool,
    /// Readable trees (skipped when absent on the host).
    pub read: Vec<PathBuf>,
    /// Paths under readable trees that stay unreadable.
    pub hidden: Vec<PathBuf>,
    /// Device files readable and writable.
    pub devices: Vec<PathBuf>,
    /// Workspace access.
    pub workspace: WorkspaceAccess,
    /// Whether `--write` is honoured.
    pub extra_write: bool,
    /// Readable trees walked for unix sockets before each run (besides the job's own trees).
    #[serde(default)]
    pub scan_sockets: Vec<PathBuf>,
}

/// `[protect]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProtectPolicy {
    /// Paths relative to the workspace.
    pub paths: Vec<PathBuf>,
    /// Paths relative to the workspace that must not be created (removed after a run).
    #[serde(default)]
    pub absent: Vec<PathBuf>,
}

/// `[network]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    /// The network when the job does not choose.
    pub default: Network,
    /// Whether `--network full` is allowed.
    pub allow_full: bool,
}

/// `[syscalls]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyscallPolicy {
    /// Only the syscalls of `policies/syscalls-allowed.toml` allowed ([`allow_list`]); anything
    /// else answers ENOSYS. `false`: every syscall not refused below is allowed.
    pub allow_list: bool,
    /// Syscalls refused with EPERM.
    pub deny: Vec<String>,
    /// personality(2) limited to querying/setting PER_LINUX.
    pub restrict_personality: bool,
    /// clone(2) with namespace flags refused; clone3(2) answers ENOSYS.
    pub deny_namespace_clone: bool,
    /// No set-user-ID/set-group-ID bits and no device nodes on files the command makes
    /// ([`guards`]).
    pub deny_setid: bool,
    /// `ioctl(TIOCSTI)` and `ioctl(TIOCLINUX)` refused.
    pub deny_tty_injection: bool,
    /// The sandbox's init out of reach: no `prlimit64` on another process, no signal to pid 1.
    pub protect_init: bool,
}

/// `[limits]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitDefaults {
    /// Default process limit.
    pub pids: Option<u64>,
    /// Default memory limit: a size or a share of the host's memory ([`host_share`]).
    pub memory: Option<host_share::MemoryDefault>,
    /// `RLIMIT_NOFILE` (capped at the host's hard limit).
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`.
    pub file_size: Option<ByteSize>,
    /// CPU limit in CPUs (e.g. 1.5) or a share of the host's: cgroup `cpu` quota (native),
    /// `NanoCpus` (docker).
    #[serde(default)]
    pub cpus: Option<host_share::CpusDefault>,
    /// Size of each of the private HOME and TMPDIR (tmpfs) when the job sets none.
    pub tmp_size: Option<ByteSize>,
}

/// A CPU limit, kept in thousandths of a CPU; written as a number of CPUs (`2`, `1.5`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpus(pub u64);

impl<'de> Deserialize<'de> for Cpus {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if !(0.001..=4096.0).contains(&v) {
            return Err(serde::de::Error::custom(format!(
                "`cpus` must be within 0.001..=4096, not {v}"
            )));
        }
        // In range, so the product fits.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Cpus((v * 1000.0).round() as u64))
    }
}

impl serde::Serialize for Cpus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[allow(clippy::cast_precision_loss)]
        s.serialize_f64(self.0 as f64 / 1000.0)
    }
}

impl std::fmt::Display for Cpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (whole, frac) = (self.0 / 1000, self.0 % 1000);
        if frac == 0 {
            write!(f, "{whole}")
        } else {
            let frac = format!("{frac:03}");
            write!(f, "{whole}.{}", frac.trim_end_matches('0'))
        }
    }
}

impl std::str::FromStr for Cpus {
    type Err = String;

    /// A decimal number of CPUs over 0 (`2`, `0.5`, `1.25`), to a thousandth.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("expected a number of CPUs over 0 such as 2 or 1.5, not `{s}`");
        let t = s.trim();
        if t.is_empty() || !t.chars().all(|c| c.is_ascii_digit() || c == '.') {
            return Err(bad());
        }
        let v: f64 = t.parse().map_err(|_| bad())?;
        if !(0.001..=4096.0).contains(&v) {
            return Err(format!(
                "expected a number of CPUs within 0.001..=4096, not `{s}`"
            ));
        }
        // In range, so the product fits.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(Cpus((v * 1000.0).round() as u64))
    }
}

/// The CPUs this host has online (`None` when unknown).
pub fn host_cpus() -> Option<u64> {
    nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .and_then(|n| u64::try_from(n).ok())
}

/// A policy file that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid sandbox policy `{source_name}`: {message}")]
pub struct PolicyError {
    /// The file (or "embedded read-only.toml").
    pub source_name: String,
    /// What is wrong, naming the key.
    pub message: String,
}

impl Policy {
    /// Parses and validates a policy file's text.
    pub fn parse(text: &str, source_name: &str) -> Result<Self, PolicyError> {
        Self::validated(
            toml::from_str(text).map_err(|e| e.to_string().trim_end().replace('\n', " ")),
            source_name,
        )
    }

    /// Like [`Policy::parse`], from the JSON the build made of an embedded policy file.
    fn parse_json(text: &str, source_name: &str) -> Result<Self, PolicyError> {
        Self::validated(
            serde_json::from_str(text).map_err(|e| e.to_string()),
            source_name,
        )
    }

    /// A parsed policy once validated, or either failure named after `source_name`.
    fn validated(parsed: Result<Self, String>, source_name: &str) -> Result<Self, PolicyError> {
        let err = |message: String| PolicyError {
            source_name: source_name.to_owned(),
            message,
        };
        let policy = parsed.map_err(err)?;
        policy.validate().map_err(err)?;
        Ok(policy)
    }

    fn validate(&self) -> Result<(), String> {
        let fs = &self.filesystem;
        for (key, paths) in [
            ("filesystem.read", &fs.read),
            ("filesystem.hidden", &fs.hidden),
            ("filesystem.devices", &fs.devices),
        ] {
            if let Some(p) = paths.iter().find(|p| !p.is_absolute()) {
                return Err(format!(
                    "`{key}`: `{}` is not an absolute path",
                    p.display()
                ));
            }
        }
        if let Some(p) = self.protect.paths.iter().find(|p| {
            p.is_absolute()
                || p.components()
                    .any(|c| matches!(c, std::path::Component::ParentDir))
        }) {
            return Err(format!(
                "`protect.paths`: `{}` must be relative to the workspace, without `..`",
                p.display()
            ));
        }
        if fs.unrestricted && !self.protect.paths.is_empty() {
            return Err(
                "`protect.paths` must be empty when `filesystem.unrestricted` is true".into(),
            );
        }
        if let Some(name) = self
            .syscalls
            .deny
            .iter()
            .find(|n| syscalls::number(n).is_none())
        {
            let known: Vec<&str> = syscalls::SYSCALLS.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "`syscalls.deny`: unknown syscall `{name}` (known: {})",
                known.join(", ")
            ));
        }
        if self.network.default == Network::Full && !self.network.allow_full {
            return Err("`network.default` is \"full\" but `network.allow_full` is false".into());
        }
        if self.limits.pids == Some(0) {
            return Err("`limits.pids` must be at least 1".into());
        }
        Ok(())
    }
}

/// The policies of the three modes, each parsed on first use.
#[derive(Debug)]
pub struct PolicySet {
    dir: Option<PathBuf>,
    slots: [OnceLock<Result<(Policy, String), PolicyError>>; 3],
}

/// The file name of a mode's policy.
pub fn file_name(mode: Mode) -> String {
    format!("{}.toml", mode.as_str())
}

/// The embedded policy of `mode` as JSON, converted from its TOML at build time (`build.rs`).
fn embedded_json(mode: Mode) -> &'static str {
    match mode {
        Mode::ReadOnly => include_str!(concat!(env!("OUT_DIR"), "/read-only.json")),
        Mode::WorkspaceWrite => include_str!(concat!(env!("OUT_DIR"), "/workspace-write.json")),
        Mode::FullAccess => include_str!(concat!(env!("OUT_DIR"), "/full-access.json")),
    }
}

fn slot(mode: Mode) -> usize {
    match mode {
        Mode::ReadOnly => 0,
        Mode::WorkspaceWrite => 1,
        Mode::FullAccess => 2,
    }
}

fn read_policy(dir: Option<&Path>, mode: Mode) -> Result<(Policy, String), PolicyError> {
    let name = file_name(mode);
    if let Some(dir) = dir {
        let path = dir.join("policies").join(&name);
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let label = path.display().to_string();
                return Policy::parse(&text, &label).map(|p| (p, label));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(PolicyError {
                    source_name: path.display().to_string(),
                    message: format!("failed to read: {e}"),
                });
            }
        }
    }
    let label = format!("embedded {name}");
    Policy::parse_json(embedded_json(mode), &label).map(|p| (p, label))
}

impl PolicySet {
    /// The embedded defaults, all parsed now.
    pub fn embedded() -> Result<Self, PolicyError> {
        Self::load(None)
    }

    /// The embedded defaults, each replaced by `<config_dir>/policies/<mode>.toml` if that file
    /// exists; all three are parsed and validated now.
    pub fn load(config_dir: Option<&Path>) -> Result<Self, PolicyError> {
        let set = Self::lazy(config_dir);
        for mode in Mode::ALL {
            set.get(mode)?;
        }
        Ok(set)
    }

    /// Like [`PolicySet::load`], but each mode's file is read on first use (one-shot commands
    /// that need a single mode).
    pub fn lazy(config_dir: Option<&Path>) -> Self {
        Self {
            dir: config_dir.map(Path::to_path_buf),
            slots: [OnceLock::new(), OnceLock::new(), OnceLock::new()],
        }
    }

    /// The policy of `mode`.
    pub fn get(&self, mode: Mode) -> Result<&Policy, PolicyError> {
        match self.slots[slot(mode)].get_or_init(|| read_policy(self.dir.as_deref(), mode)) {
            Ok((p, _)) => Ok(p),
            Err(e) => Err(e.clone()),
        }
    }

    /// The policy of a request's `mode`; one that cannot be loaded is the request's refusal
    /// (field `policy`), as each backend reports it.
    pub fn for_request(&self, mode: Mode) -> Result<&Policy, crate::error::SandboxError> {
        self.get(mode)
            .map_err(|e| crate::error::SandboxError::invalid("policy", e.to_string()))
    }

    /// Where each loaded policy came from.
    pub fn sources(&self) -> Vec<(Mode, String)> {
        Mode::ALL
            .iter()
            .filter_map(|m| match self.slots[slot(*m)].get() {
                Some(Ok((_, label))) => Some((*m, label.clone())),
                Some(Err(_)) | None => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON the build embeds parses to exactly what each TOML file does.
    #[test]
    fn the_embedded_json_is_the_toml() {
        for (mode, toml_text) in [
            (Mode::ReadOnly, READ_ONLY),
            (Mode::WorkspaceWrite, WORKSPACE_WRITE),
            (Mode::FullAccess, FULL_ACCESS),
        ] {
            assert_eq!(
                Policy::parse_json(embedded_json(mode), "json").unwrap(),
                Policy::parse(toml_text, "toml").unwrap(),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn embedded_policies_parse() {
        let set = PolicySet::embedded().unwrap();
        assert_eq!(
            set.get(Mode::ReadOnly).unwrap().filesystem.workspace,
            WorkspaceAccess::Read
        );
        assert_eq!(
            set.get(Mode::WorkspaceWrite).unwrap().filesystem.workspace,
            WorkspaceAccess::Write
        );
        assert!(set.get(Mode::FullAccess).unwrap().filesystem.unrestricted);
        assert!(!set.get(Mode::ReadOnly).unwrap().network.allow_full);
        assert!(
            set.get(Mode::WorkspaceWrite)
                .unwrap()
                .syscalls
                .deny
                .iter()
                .any(|s| s == "io_uring_setup")
        );
    }

    #[test]
    fn an_unknown_key_is_named() {
        let text = WORKSPACE_WRITE.replace("[network]", "[network]\nproxy = \"x\"");
        let e = Policy::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("unknown field `proxy`"), "{e}");
        assert!(e.contains("t.toml"), "{e}");
    }

    #[test]
    fn an_unknown_syscall_is_named() {
        let text = WORKSPACE_WRITE.replace("\"ptrace\",", "\"ptrace\", \"frobnicate\",");
        let e = Policy::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(e.contains("unknown syscall `frobnicate`"), "{e}");
    }

    #[test]
    fn relative_read_paths_are_refused() {
        let text = WORKSPACE_WRITE.replace("\"/opt\",", "\"opt\",");
        let e = Policy::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(
            e.contains("`filesystem.read`: `opt` is not an absolute path"),
            "{e}"
        );
    }

    #[test]
    fn a_config_dir_replaces_one_mode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("policies")).unwrap();
        let custom = WORKSPACE_WRITE.replace("pids = 4096", "pids = 77");
        std::fs::write(dir.path().join("policies/workspace-write.toml"), custom).unwrap();
        let set = PolicySet::load(Some(dir.path())).unwrap();
        assert_eq!(set.get(Mode::WorkspaceWrite).unwrap().limits.pids, Some(77));
        assert_eq!(set.get(Mode::ReadOnly).unwrap().limits.pids, Some(4096));
        assert!(set.sources().iter().any(|(m, s)| *m == Mode::WorkspaceWrite
            && s.ends_with("workspace-write.toml")
            && !s.starts_with("embedded")));
        std::fs::write(
            dir.path().join("policies/read-only.toml"),
            "[filesystem]\nbogus = 1\n",
        )
        .unwrap();
        let e = PolicySet::load(Some(dir.path())).unwrap_err().to_string();
        assert!(e.contains("read-only.toml") && e.contains("bogus"), "{e}");
        // A lazy set only reads what it is asked for.
        let lazy = PolicySet::lazy(Some(dir.path()));
        assert_eq!(
            lazy.get(Mode::WorkspaceWrite).unwrap().limits.pids,
            Some(77)
        );
        assert!(lazy.get(Mode::ReadOnly).is_err());
    }
}
