//! How a job's agent reaches its model and the outside world (SPEC §9): the upstream it talks to
//! through the runner's model gateway, the runner-side variable holding the key, the model and
//! extra arguments for a preset, and the hosts the egress proxy lets it reach. Part of the
//! immutable [`super::JobSpec`]; the key itself is never in it.

use ralph_sandbox::Network;
use serde::{Deserialize, Serialize};

use super::spec::SpecError;

/// The model and egress settings of a job. All empty by default (a job with a command agent
/// and none of these has no gateway).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelAccess {
    /// `ralph run`: the upstream API's base URL (default: the preset's). `ralph serve`: the name
    /// of an upstream in the service's configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The runner-side variable holding the upstream's key (default: the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// The model a preset asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Extra arguments a preset passes to its CLI, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_args: Vec<String>,
    /// `HOST[:PORT][=private]` entries the egress proxy lets the round reach (`=private`: the
    /// name may resolve to private addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// The built-in agent's model calls per round (`--agent-max-steps`; default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_max_steps: Option<u32>,
}

impl ModelAccess {
    /// True when nothing was asked for.
    pub fn is_empty(&self) -> bool {
        *self == ModelAccess::default()
    }
}

/// Most `--agent-arg`s a job may carry.
pub const MAX_AGENT_ARGS: usize = 64;
/// Largest `--agent-max-steps`.
pub const MAX_AGENT_STEPS: u32 = 10_000;
/// Longest `--agent-arg`, `--model` or `--upstream`, in bytes.
pub const MAX_ACCESS_VALUE: usize = 4096;

fn err(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError {
        field,
        message: message.into(),
    }
}

fn plain(field: &'static str, value: &str) -> Result<(), SpecError> {
    if value.trim().is_empty() {
        return Err(err(field, "must not be empty"));
    }
    if value.len() > MAX_ACCESS_VALUE {
        return Err(err(
            field,
            format!(
                "is {} bytes, over the limit of {MAX_ACCESS_VALUE}",
                value.len()
            ),
        ));
    }
    if value.chars().any(char::is_control) {
        return Err(err(field, "must not contain control characters"));
    }
    Ok(())
}

impl ModelAccess {
    /// Checks the settings against the job's agent (`preset`: its name, when it is one) and
    /// network (`network` is the job's resolved setting, see [`super::JobSpec::network`]).
    pub fn validate(&self, preset: Option<&str>, network: Network) -> Result<(), SpecError> {
        if let Some(u) = &self.upstream {
            plain("upstream", u)?;
            if u.contains("://") && !(u.starts_with("http://") || u.starts_with("https://")) {
                return Err(err(
                    "upstream",
                    format!("`{u}` must be an http:// or https:// URL (or an upstream's name)"),
                ));
            }
        }
        if let Some(k) = &self.api_key_env {
            if !super::spec::valid_env_name(k) {
                return Err(err(
                    "api_key_env",
                    format!("`{k}` is not a variable name the runner can read a key from"),
                ));
            }
        }
        if let Some(m) = &self.model {
            plain("model", m)?;
        }
        if self.agent_args.len() > MAX_AGENT_ARGS {
            return Err(err(
                "agent_arg",
                format!(
                    "{} arguments, over the limit of {MAX_AGENT_ARGS}",
                    self.agent_args.len()
                ),
            ));
        }
        for a in &self.agent_args {
            if a.len() > MAX_ACCESS_VALUE || a.contains('\0') {
                return Err(err(
                    "agent_arg",
                    format!("an argument must be at most {MAX_ACCESS_VALUE} bytes, without NUL"),
                ));
            }
        }
        if let Some(n) = self.agent_max_steps {
            if preset != Some(crate::agent::builtin::NAME) {
                return Err(err(
                    "agent_max_steps",
                    "only applies to the built-in agent (`agent = \"builtin\"`)",
                ));
            }
            if n == 0 || n > MAX_AGENT_STEPS {
                return Err(err(
                    "agent_max_steps",
                    format!("must be between 1 and {MAX_AGENT_STEPS}, not {n}"),
                ));
            }
        }
        if preset.is_none() {
            for (field, given) in [
                ("model", self.model.is_some()),
                ("agent_arg", !self.agent_args.is_empty()),
            ] {
                if given {
                    return Err(err(
                        field,
                        "only applies to a preset (`agent`); an `agent_cmd` takes its own arguments",
                    ));
                }
            }
        }
        for h in &self.allow_hosts {
            h.parse::<crate::gateway::AllowHost>()
                .map_err(|e| err("allow_host", e.to_string()))?;
        }
        if network != Network::Gateway {
            for (field, given) in [
                ("upstream", self.upstream.is_some()),
                ("api_key_env", self.api_key_env.is_some()),
                ("allow_host", !self.allow_hosts.is_empty()),
            ] {
                if given {
                    return Err(err(
                        "network",
                        format!(
                            "`{field}` works through the runner's gateway: use `network = \"gateway\"` (the default when `{field}` is given), not `{network}`"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> ModelAccess {
        ModelAccess::default()
    }

    #[test]
    fn settings_are_checked_with_the_field_named() {
        let field = |a: ModelAccess, preset: Option<&str>, n: Network| {
            a.validate(preset, n).unwrap_err().field
        };
        assert_eq!(
            field(
                ModelAccess {
                    upstream: Some("ftp://x".into()),
                    ..access()
                },
                Some("codex"),
                Network::Gateway
            ),
            "upstream"
        );
        assert_eq!(
            field(
                ModelAccess {
                    api_key_env: Some("A-B".into()),
                    ..access()
                },
                Some("codex"),
                Network::Gateway
            ),
            "api_key_env"
        );
        assert_eq!(
            field(
                ModelAccess {
                    model: Some("m".into()),
                    ..access()
                },
                None,
                Network::Gateway
            ),
            "model"
        );
        assert_eq!(
            field(
                ModelAccess {
                    agent_args: vec!["-x".into()],
                    ..access()
                },
                None,
                Network::Gateway
            ),
            "agent_arg"
        );
        assert_eq!(
            field(
                ModelAccess {
                    allow_hosts: vec!["a b".into()],
                    ..access()
                },
                None,
                Network::Gateway
            ),
            "allow_host"
        );
        // Gateway settings with another network: the network is what is wrong.
        for n in [Network::None, Network::Full] {
            assert_eq!(
                field(
                    ModelAccess {
                        allow_hosts: vec!["pypi.org".into()],
                        ..access()
                    },
                    None,
                    n
                ),
                "network"
            );
            assert_eq!(
                field(
                    ModelAccess {
                        upstream: Some("http://127.0.0.1:1/v1".into()),
                        ..access()
                    },
                    None,
                    n
                ),
                "network"
            );
        }
        ModelAccess {
            upstream: Some("http://127.0.0.1:8000/v1".into()),
            api_key_env: Some("LOCAL_KEY".into()),
            model: Some("qwen".into()),
            agent_args: vec!["-c".into(), "x=1".into()],
            allow_hosts: vec![
                "pypi.org".into(),
                "[::1]:8080".into(),
                "pypi.corp:3141=private".into(),
            ],
            agent_max_steps: None,
        }
        .validate(Some("codex"), Network::Gateway)
        .unwrap();
    }

    #[test]
    fn a_malformed_private_opt_in_names_the_field_and_the_entry() {
        for bad in ["pypi.corp=privat", "10.1.2.3:3141=private"] {
            let e = ModelAccess {
                allow_hosts: vec![bad.into()],
                ..access()
            }
            .validate(None, Network::Gateway)
            .unwrap_err();
            assert_eq!(e.field, "allow_host");
            assert!(
                e.message.contains(&format!("`{bad}`")) && e.message.contains("=private"),
                "{e:?}"
            );
        }
    }

    #[test]
    fn the_step_bound_is_the_builtin_agents_and_bounded() {
        let steps = |n: u32| ModelAccess {
            agent_max_steps: Some(n),
            ..access()
        };
        let e = steps(5)
            .validate(Some("codex"), Network::Gateway)
            .unwrap_err();
        assert_eq!(e.field, "agent_max_steps");
        assert!(e.message.contains("builtin"), "{e:?}");
        for bad in [0, MAX_AGENT_STEPS + 1] {
            let e = steps(bad)
                .validate(Some("builtin"), Network::Gateway)
                .unwrap_err();
            assert_eq!(e.field, "agent_max_steps");
        }
        steps(3)
            .validate(Some("builtin"), Network::Gateway)
            .unwrap();
    }
}
