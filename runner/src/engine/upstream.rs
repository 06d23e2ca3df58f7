//! Which model API a job's gateway forwards to, and with which key (SPEC §9). `ralph run` takes
//! a URL and reads the key from a variable of its own environment; `ralph serve` knows named
//! upstreams from its configuration and reads their keys itself (a job names an upstream, never
//! a key). The key is read when a job starts, so a rotated key file takes effect for the next
//! job.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::agent::{Agent, ApiFamily};
use crate::job::JobSpec;

use super::env::RunnerEnv;

/// Where a key comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// A variable of the runner's environment.
    Env(String),
    /// A file only the service reads (its first line, trimmed).
    File(PathBuf),
    /// No key: a local server that takes none (no credential is sent).
    None,
}

/// An upstream the service's configuration names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedUpstream {
    /// The API base URL.
    pub url: String,
    /// The protocol family.
    pub api: ApiFamily,
    /// Where its key is.
    pub key: KeySource,
}

/// How a runner finds a job's upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Upstreams {
    /// `ralph run`: `upstream` is a URL (default: the preset's), the key is in the runner's
    /// variable `api_key_env` (default: the preset's).
    #[default]
    Local,
    /// `ralph serve`: `upstream` is a name (default: the preset's name).
    Named(BTreeMap<String, NamedUpstream>),
}

/// A job's upstream, with its key.
#[derive(Clone, PartialEq, Eq)]
pub struct ResolvedUpstream {
    /// The API base URL.
    pub url: String,
    /// The protocol family.
    pub api: ApiFamily,
    /// The key (never printed).
    pub key: String,
    /// Where the key came from, for messages (`$OPENAI_API_KEY`, a file path).
    pub key_origin: String,
}

impl std::fmt::Debug for ResolvedUpstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedUpstream")
            .field("url", &self.url)
            .field("api", &self.api)
            .field("key", &"<redacted>")
            .field("key_origin", &self.key_origin)
            .finish()
    }
}

/// A job's upstream cannot be used; the message says how to fix it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UpstreamError {
    /// What is wrong and how to fix it.
    pub message: String,
}

fn fail(message: String) -> UpstreamError {
    UpstreamError { message }
}

/// The family of an upstream URL given without a preset: Anthropic's host speaks Messages,
/// everything else is taken as OpenAI-compatible.
fn family_of_url(url: &str) -> ApiFamily {
    if url.contains("anthropic.com") {
        ApiFamily::Anthropic
    } else {
        ApiFamily::OpenAi
    }
}

fn read_key(source: &KeySource, env: &RunnerEnv) -> Result<(String, String), String> {
    match source {
        KeySource::None => Ok((String::new(), "no key".to_owned())),
        KeySource::Env(name) => match env.get(name).map(str::trim) {
            Some(k) if !k.is_empty() => Ok((k.to_owned(), format!("${name}"))),
            Some(_) => Err(format!("the variable `{name}` is empty")),
            None => Err(format!(
                "the variable `{name}` is not set in the runner's environment"
            )),
        },
        KeySource::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("failed to read the key file `{}`: {e}", path.display()))?;
            let key = text.lines().next().unwrap_or("").trim();
            if key.is_empty() {
                return Err(format!("the key file `{}` is empty", path.display()));
            }
            Ok((key.to_owned(), path.display().to_string()))
        }
    }
}

impl Upstreams {
    /// The upstream of `spec`, if the job has one: a preset always does; a command agent when
    /// it names `upstream`. Fails when the key cannot be read.
    pub fn resolve(
        &self,
        spec: &JobSpec,
        agent: &Agent,
        env: &RunnerEnv,
    ) -> Result<Option<ResolvedUpstream>, UpstreamError> {
        let access = &spec.model_access;
        let preset = agent.preset();
        if preset.is_none() && access.upstream.is_none() {
            return Ok(None);
        }
        match self {
            Upstreams::Local => {
                let defaults = preset.map(|p| p.upstream());
                let url = access
                    .upstream
                    .clone()
                    .or_else(|| defaults.map(|d| d.url.to_owned()))
                    .unwrap_or_default();
                let api = defaults.map_or_else(|| family_of_url(&url), |d| d.api);
                let key_env = access
                    .api_key_env
                    .clone()
                    .or_else(|| defaults.map(|d| d.key_env.to_owned()))
                    .unwrap_or_else(|| match api {
                        ApiFamily::OpenAi => "OPENAI_API_KEY".to_owned(),
                        ApiFamily::Anthropic => "ANTHROPIC_API_KEY".to_owned(),
                    });
                // A preset that may run keyless sends no key to an upstream the job chose
                // unless the job names the variable: a local server needs none, and the
                // default variable's key must not go to a server it was not meant for.
                let keyless = preset.is_some_and(|p| p.key_optional())
                    && access.upstream.is_some()
                    && access.api_key_env.is_none();
                let source = if keyless {
                    KeySource::None
                } else {
                    KeySource::Env(key_env.clone())
                };
                let (key, key_origin) = read_key(&source, env)
                    .map_err(|why| {
                        fail(format!(
                            "{}: the model gateway needs the key of `{url}` and {why}: export {key_env}=… before `ralph run`, or name the variable that holds it with --api-key-env (the key never enters the sandbox)",
                            who(agent)
                        ))
                    })?;
                Ok(Some(ResolvedUpstream {
                    url,
                    api,
                    key,
                    key_origin,
                }))
            }
            Upstreams::Named(known) => {
                let name = access
                    .upstream
                    .clone()
                    .or_else(|| preset.map(|p| p.name().to_owned()))
                    .unwrap_or_default();
                let u = known.get(&name).ok_or_else(|| {
                    fail(format!(
                        "{}: no upstream `{name}` in the service's configuration (configured: {}); name one with `upstream`, or add [gateway.upstreams.{name}]",
                        who(agent),
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.keys().cloned().collect::<Vec<_>>().join(", ")
                        }
                    ))
                })?;
                let (key, key_origin) = read_key(&u.key, env).map_err(|why| {
                    fail(format!(
                        "the upstream `{name}` of the service's configuration has no usable key: {why}"
                    ))
                })?;
                Ok(Some(ResolvedUpstream {
                    url: u.url.clone(),
                    api: u.api,
                    key,
                    key_origin,
                }))
            }
        }
    }
}

fn who(agent: &Agent) -> String {
    match agent.preset() {
        Some(p) => format!("the `{}` preset", p.name()),
        None => "the agent command".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::AgentSpec;

    fn job(agent: AgentSpec) -> (JobSpec, Agent) {
        let a = Agent::resolve(&agent).unwrap();
        (JobSpec::new("x", "/tmp", agent), a)
    }

    #[test]
    fn a_preset_takes_its_defaults_and_the_key_from_the_runner() {
        let (spec, agent) = job(AgentSpec::Preset {
            name: "codex".into(),
        });
        let env = RunnerEnv::from_pairs([("OPENAI_API_KEY".into(), "sk-real\n".into())]);
        let u = Upstreams::Local
            .resolve(&spec, &agent, &env)
            .unwrap()
            .unwrap();
        assert_eq!(u.url, "https://api.openai.com/v1");
        assert_eq!(u.key, "sk-real");
        assert!(!format!("{u:?}").contains("sk-real"));
        let e = Upstreams::Local
            .resolve(&spec, &agent, &RunnerEnv::default())
            .unwrap_err();
        assert!(e.message.contains("OPENAI_API_KEY"), "{e}");
        assert!(e.message.contains("--api-key-env"), "{e}");
    }

    #[test]
    fn a_command_agent_has_an_upstream_only_when_it_names_one() {
        let (mut spec, agent) = job(AgentSpec::Command {
            command: "true".into(),
        });
        assert_eq!(
            Upstreams::Local
                .resolve(&spec, &agent, &RunnerEnv::default())
                .unwrap(),
            None
        );
        spec.model_access.upstream = Some("http://127.0.0.1:9/v1".into());
        spec.model_access.api_key_env = Some("K".into());
        let env = RunnerEnv::from_pairs([("K".into(), "v".into())]);
        let u = Upstreams::Local
            .resolve(&spec, &agent, &env)
            .unwrap()
            .unwrap();
        assert_eq!(u.api, ApiFamily::OpenAi);
        assert_eq!(u.key_origin, "$K");
    }

    #[test]
    fn the_service_reads_named_upstreams_and_their_key_files() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("key");
        std::fs::write(&key, "sk-file\n").unwrap();
        let ups = Upstreams::Named(BTreeMap::from([(
            "claude".to_owned(),
            NamedUpstream {
                url: "https://api.anthropic.com".into(),
                api: ApiFamily::Anthropic,
                key: KeySource::File(key),
            },
        )]));
        let (mut spec, agent) = job(AgentSpec::Preset {
            name: "claude".into(),
        });
        let u = ups
            .resolve(&spec, &agent, &RunnerEnv::default())
            .unwrap()
            .unwrap();
        assert_eq!(u.key, "sk-file");
        spec.model_access.upstream = Some("other".into());
        let e = ups
            .resolve(&spec, &agent, &RunnerEnv::default())
            .unwrap_err();
        assert!(e.message.contains("configured: claude"), "{e}");
    }
}
