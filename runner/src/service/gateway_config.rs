//! The `[gateway]` section of the service's configuration (SPEC §9): the model upstreams jobs
//! may name. A job names an upstream, never a key: the keys are in files (or variables) only the
//! service reads.
//!
//! ```toml
//! [gateway.upstreams.openai]
//! url = "https://api.openai.com/v1"
//! api = "openai"
//! key_file = "/etc/ralph/keys/openai"
//!
//! [gateway.upstreams.local]             # a local vLLM / Ollama / llama.cpp server
//! url = "http://127.0.0.1:11434/v1"
//! api = "openai"
//! no_key = true                         # sends no credential
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::agent::ApiFamily;
use crate::engine::upstream::{KeySource, NamedUpstream, Upstreams};

/// `[gateway]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewayConfig {
    /// `[gateway.upstreams.NAME]`.
    #[serde(default)]
    pub upstreams: BTreeMap<String, UpstreamConfig>,
}

/// The protocol family of an upstream, as written in the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiName {
    /// OpenAI Responses / Chat Completions and compatible servers (vLLM, Ollama, LiteLLM…).
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

/// `[gateway.upstreams.NAME]`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// The API base URL (`https://api.openai.com/v1`, `https://api.anthropic.com`,
    /// `http://127.0.0.1:8000/v1` for a local server).
    pub url: String,
    /// `openai` or `anthropic`.
    pub api: ApiName,
    /// A file holding the key (first line), readable by the service only.
    pub key_file: Option<PathBuf>,
    /// A variable of the service's environment holding the key.
    pub key_env: Option<String>,
    /// `true`: the server takes no key (a local model server); no credential is sent.
    #[serde(default)]
    pub no_key: bool,
}

impl GatewayConfig {
    /// Checks every upstream; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        for (name, u) in &self.upstreams {
            let at = format!("gateway.upstreams.{name}");
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                return Err(format!(
                    "`{at}`: an upstream's name is letters, digits, `-` and `_`"
                ));
            }
            if !(u.url.starts_with("http://") || u.url.starts_with("https://")) {
                return Err(format!(
                    "`{at}.url`: `{}` is not an http:// or https:// URL",
                    u.url
                ));
            }
            match (&u.key_file, &u.key_env) {
                (Some(_), Some(_)) => {
                    return Err(format!("`{at}`: give `key_file` or `key_env`, not both"));
                }
                (Some(_), None) | (None, Some(_)) if u.no_key => {
                    return Err(format!(
                        "`{at}`: `no_key = true` says the server takes no key; remove it or the key setting"
                    ));
                }
                (None, None) if !u.no_key => {
                    return Err(format!(
                        "`{at}`: one of `key_file` or `key_env` is needed (or `no_key = true` for a local server that takes none)"
                    ));
                }
                (Some(p), None) if !p.is_absolute() => {
                    return Err(format!(
                        "`{at}.key_file`: `{}` is not an absolute path",
                        p.display()
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The upstreams as the engine uses them.
    pub fn upstreams(&self) -> Upstreams {
        Upstreams::Named(
            self.upstreams
                .iter()
                .map(|(name, u)| {
                    let key = match (&u.key_file, &u.key_env) {
                        (Some(p), _) => KeySource::File(p.clone()),
                        (None, Some(v)) => KeySource::Env(v.clone()),
                        (None, None) => KeySource::None,
                    };
                    let api = match u.api {
                        ApiName::Openai => ApiFamily::OpenAi,
                        ApiName::Anthropic => ApiFamily::Anthropic,
                    };
                    (
                        name.clone(),
                        NamedUpstream {
                            url: u.url.clone(),
                            api,
                            key,
                        },
                    )
                })
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(), String> {
        let c: GatewayConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate()
    }

    #[test]
    fn an_upstream_names_its_key_or_says_it_takes_none() {
        let base = "[upstreams.local]\nurl = \"http://127.0.0.1:8000/v1\"\napi = \"openai\"\n";
        let e = parse(base).unwrap_err();
        assert!(
            e.contains("gateway.upstreams.local") && e.contains("no_key"),
            "{e}"
        );
        parse(&format!("{base}no_key = true\n")).unwrap();
        parse(&format!("{base}key_env = \"K\"\n")).unwrap();
        let e = parse(&format!("{base}key_env = \"K\"\nno_key = true\n")).unwrap_err();
        assert!(e.contains("no_key"), "{e}");
        let c: GatewayConfig = toml::from_str(&format!("{base}no_key = true\n")).unwrap();
        let Upstreams::Named(named) = c.upstreams() else {
            panic!("named upstreams")
        };
        assert_eq!(named["local"].key, KeySource::None);
    }
}
