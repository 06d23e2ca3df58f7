//! The sandbox vocabulary of SPEC §5: modes, network settings and backend kinds.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// What a sandboxed process may touch (SPEC §5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// No writes anywhere except the round's private directories; network off.
    ReadOnly,
    /// Writes only inside the workspace (minus protected paths) and the private directories.
    WorkspaceWrite,
    /// No filesystem or network restriction.
    FullAccess,
}

impl Mode {
    /// Every mode, in order of increasing power.
    pub const ALL: [Mode; 3] = [Mode::ReadOnly, Mode::WorkspaceWrite, Mode::FullAccess];

    /// The mode's name as written on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::ReadOnly => "read-only",
            Mode::WorkspaceWrite => "workspace-write",
            Mode::FullAccess => "full-access",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A word that is not one of a closed set of values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} `{found}`: expected one of {expected}")]
pub struct UnknownWord {
    /// What was being parsed (e.g. "mode").
    pub what: &'static str,
    /// The rejected input.
    pub found: String,
    /// The accepted values, comma separated.
    pub expected: &'static str,
}

impl FromStr for Mode {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-only" => Ok(Mode::ReadOnly),
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "full-access" => Ok(Mode::FullAccess),
            _ => Err(UnknownWord {
                what: "mode",
                found: s.to_owned(),
                expected: "read-only, workspace-write, full-access",
            }),
        }
    }
}

/// Network access of a sandboxed process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// No network: only a private loopback and AF_UNIX sockets.
    #[default]
    None,
    /// The runner's gateway and nothing else (SPEC §5, §9): the same private network namespace
    /// with only loopback as [`Network::None`], where AF_INET/AF_INET6 sockets are allowed, plus
    /// one listening TCP socket on `127.0.0.2:PORT` per requested port
    /// ([`crate::spec::SandboxRequest::gateway_ports`]), created inside the namespace before the
    /// command starts and handed to the runner, which accepts on it from the host
    /// ([`crate::Running::take_gateway_listeners`]). No route leaves the namespace: what the
    /// command reaches is loopback inside it, and through those ports, the runner.
    ///
    /// Allowed in every mode: `read-only` forbids writes, not the gateway (still the only way
    /// out); `full-access` with `gateway` keeps the private namespace (only `full` is the host's
    /// network). The docker backend refuses it (exit 69).
    Gateway,
    /// The host's network.
    Full,
}

impl Network {
    /// Every setting, from the most confined.
    pub const ALL: [Network; 3] = [Network::None, Network::Gateway, Network::Full];

    /// Whether the command runs in a private network namespace with only loopback (`none` and
    /// `gateway`; `full` is the host's network).
    pub const fn private_namespace(self) -> bool {
        matches!(self, Network::None | Network::Gateway)
    }

    /// The setting's name as written on the command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Gateway => "gateway",
            Network::Full => "full",
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Network {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Network::None),
            "gateway" => Ok(Network::Gateway),
            "full" => Ok(Network::Full),
            _ => Err(UnknownWord {
                what: "network",
                found: s.to_owned(),
                expected: "none, gateway, full",
            }),
        }
    }
}

/// Which isolation technology runs the process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// Landlock + seccomp + namespaces + rlimits/cgroups, set up by a helper process.
    #[default]
    Native,
    /// A fresh hardened container per run, through the Docker Engine API.
    Docker,
}

impl BackendKind {
    /// The backend's name as written on the command line and in metric labels.
    pub const fn as_str(self) -> &'static str {
        match self {
            BackendKind::Native => "native",
            BackendKind::Docker => "docker",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackendKind {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "native" => Ok(BackendKind::Native),
            "docker" => Ok(BackendKind::Docker),
            _ => Err(UnknownWord {
                what: "backend",
                found: s.to_owned(),
                expected: "native, docker",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip() {
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
        for n in Network::ALL {
            assert_eq!(n.as_str().parse::<Network>().unwrap(), n);
            assert_eq!(
                serde_json::from_value::<Network>(serde_json::json!(n.as_str())).unwrap(),
                n
            );
        }
        assert_eq!("gateway".parse::<Network>().unwrap(), Network::Gateway);
        assert!(Network::Gateway.private_namespace() && !Network::Full.private_namespace());
        assert_eq!(
            "docker".parse::<BackendKind>().unwrap(),
            BackendKind::Docker
        );
    }

    #[test]
    fn unknown_word_names_the_choices() {
        let err = "rw".parse::<Mode>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid mode `rw`: expected one of read-only, workspace-write, full-access"
        );
        let err = "bridge".parse::<Network>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid network `bridge`: expected one of none, gateway, full"
        );
    }
}
