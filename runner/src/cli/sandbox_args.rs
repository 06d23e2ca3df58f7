//! The sandbox flags shared by `ralph run` and `ralph sandbox exec` (SPEC §5).

use std::path::{Path, PathBuf};

use clap::Args;
use ralph_runner::job::paths::{Requested, SandboxPaths, resolve_paths};
use ralph_runner::job::request::JobRequest;
use ralph_runner::job::resolve::WritableTrees;
use ralph_runner::job::spec::{MIN_NOFILE, SandboxSettings};
use ralph_runner::util::units::ByteSize;
use ralph_sandbox::{BackendKind, Mode, Network};

use super::CliError;

/// Sandbox flags.
#[derive(Args, Debug, Clone, Default)]
pub struct SandboxArgs {
    /// Isolation backend: native (Landlock, seccomp, namespaces; default) or docker.
    #[arg(long, value_parser = parse_word::<BackendKind>)]
    pub backend: Option<BackendKind>,
    /// Sandbox mode: read-only, workspace-write (default) or full-access.
    #[arg(long, value_parser = parse_word::<Mode>)]
    pub mode: Option<Mode>,
    /// Keep PATH (relative to the workspace) read-only; repeatable.
    #[arg(long = "protect", value_name = "PATH")]
    pub protect: Vec<PathBuf>,
    /// Make PATH readable; repeatable. A symlink on its way is refused (give the resolved path)
    /// unless root owns it and every directory above it, outside the workspace and the --write
    /// directories.
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// Make directory PATH writable (workspace-write); repeatable. Symlinks on its way: as for
    /// --read.
    #[arg(long = "write", value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// Let the command connect to the unix socket PATH (every other socket in a visible tree
    /// is masked); repeatable.
    #[arg(long = "socket", value_name = "PATH")]
    pub socket: Vec<PathBuf>,
    /// Network access: none, gateway (only the runner's model gateway and egress proxy) or
    /// full (default: gateway with --agent, --upstream or --allow-host; else the mode's: none
    /// except in full-access).
    #[arg(long, value_parser = parse_word::<Network>)]
    pub network: Option<Network>,
    /// Let the command reach HOST (ports 80 and 443; HOST:PORT for another port) through the
    /// runner's egress proxy (HTTP and CONNECT; HTTP_PROXY/HTTPS_PROXY are set inside);
    /// repeatable. Every other destination is refused and journalled. A name may resolve to
    /// public addresses only; append =private for an internal host on a private network
    /// (pypi.corp:443=private). Never to this host's own addresses, loopback or link-local:
    /// name such an address itself (127.0.0.1:3141).
    #[arg(long = "allow-host", value_name = "HOST[:PORT][=private]")]
    pub allow_host: Vec<String>,
    /// Memory limit of the process tree, e.g. 2G.
    #[arg(long, value_name = "BYTES")]
    pub memory: Option<ByteSize>,
    /// Size limit of each of the private HOME and TMPDIR (tmpfs in RAM), e.g. 512M (default:
    /// the policy's, 1G).
    #[arg(long, value_name = "BYTES")]
    pub tmp_size: Option<ByteSize>,
    /// Process limit of the process tree.
    #[arg(long, value_name = "N")]
    pub pids: Option<u64>,
    /// Open-files limit (RLIMIT_NOFILE) of each process of the tree, at least 64 (default: the
    /// policy's, 65536; at most this host's hard limit).
    #[arg(long, value_name = "N", value_parser = parse_nofile)]
    pub nofile: Option<u64>,
    /// CPU limit of the process tree in CPUs, e.g. 1.5 (over 0, at most this host's CPUs).
    #[arg(long, value_name = "N", value_parser = parse_cpus)]
    pub cpus: Option<ralph_sandbox::policy::Cpus>,
    /// Container image (docker backend).
    #[arg(long, value_name = "IMG")]
    pub image: Option<String>,
}

/// The configuration directory: `$RALPH_CONFIG_DIR`, default `/etc/ralph`.
pub fn config_dir() -> PathBuf {
    std::env::var_os("RALPH_CONFIG_DIR").map_or_else(|| PathBuf::from("/etc/ralph"), PathBuf::from)
}

/// The policies: embedded, overridden by `<config dir>/policies/`; all three checked now.
pub fn load_policies() -> Result<ralph_sandbox::policy::PolicySet, CliError> {
    ralph_sandbox::policy::PolicySet::load(Some(&config_dir()))
        .map_err(|e| CliError::usage(e.to_string()))
}

fn parse_cpus(s: &str) -> Result<ralph_sandbox::policy::Cpus, String> {
    let c: ralph_sandbox::policy::Cpus = s.parse()?;
    match ralph_sandbox::policy::host_cpus() {
        Some(host) if c.0 > host.saturating_mul(1000) => {
            Err(format!("{c} is more than this host's {host} CPUs"))
        }
        _ => Ok(c),
    }
}

fn parse_nofile(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if n >= MIN_NOFILE => Ok(n),
        Ok(_) => Err(format!("must be at least {MIN_NOFILE}")),
        Err(_) => Err(format!(
            "expected a whole number of files, at least {MIN_NOFILE}"
        )),
    }
}

fn parse_word<T: std::str::FromStr>(s: &str) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    s.parse::<T>().map_err(|e| e.to_string())
}

impl SandboxArgs {
    /// The limits these flags ask for (`ralph sandbox exec`; `None`: the policy's), mapped as
    /// a job's are ([`SandboxSettings::limits`]).
    pub fn limits(&self) -> ralph_sandbox::Limits {
        SandboxSettings {
            memory: self.memory,
            tmp_size: self.tmp_size,
            pids: self.pids,
            nofile: self.nofile,
            cpus: self.cpus,
            ..SandboxSettings::default()
        }
        .limits()
    }

    /// The part of a job request these flags make (`ralph run`, `ralph submit`).
    pub fn request(&self) -> JobRequest {
        JobRequest {
            backend: self.backend,
            mode: self.mode,
            protect: self.protect.clone(),
            read: self.read.clone(),
            write: self.write.clone(),
            socket: self.socket.clone(),
            network: self.network,
            memory: self.memory,
            tmp_size: self.tmp_size,
            pids: self.pids,
            nofile: self.nofile,
            cpus: self.cpus,
            image: self.image.clone(),
            allow_host: self.allow_host.clone(),
            ..JobRequest::default()
        }
    }

    /// The workspace (`--workspace`), `--read`, `--write` and `--socket` paths, made absolute
    /// against `cwd` and resolved together: they must exist, and no symlink a round could have
    /// planted is followed on the way — one not root's (or in a directory someone else can
    /// change), or one inside the workspace or a `--write` directory (`ralph sandbox exec` keeps
    /// no record of other runs, so these are the only trees it knows a command could have
    /// written; the first rule needs no record).
    pub fn resolved_paths(&self, workspace: &Path, cwd: &Path) -> Result<SandboxPaths, CliError> {
        let req = Requested {
            workspace,
            read: &self.read,
            write: &self.write,
            protect: &self.protect,
            sockets: &self.socket,
        };
        resolve_paths(req, cwd, &WritableTrees::none())
            .map_err(|e| CliError::usage(format!("{}: {e}", super::run::flag_of(e.field))))
    }
}
