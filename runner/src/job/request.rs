//! A job as submitted: the shape of a job file (`[[job]]` tables in TOML, or `{"job": [...]}` in
//! JSON) and of the API's request body. Keys are the long flags of `ralph run` with `_` for `-`
//! (SPEC §6); unknown keys are refused with the key named. `ralph run`'s flags become one of these
//! too, so every way in ends in the same [`JobRequest::into_spec`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ralph_sandbox::{BackendKind, Mode, Network};
use serde::{Deserialize, Serialize};

use super::model_access::ModelAccess;
use super::paths::{PathError, Requested, SandboxPaths, resolve_paths};
use super::resolve::WritableTrees;
use super::source::WorkspaceSource;
use super::spec::{AgentSpec, JobKind, JobSpec, SandboxSettings, SpecError};
use crate::util::units::{ByteSize, HumanDuration};

/// One job request. Absent keys take the documented defaults.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// The immutable objective.
    pub objective: Option<String>,
    /// A file holding the objective (read where the request is made).
    pub objective_file: Option<PathBuf>,
    /// The workspace.
    pub workspace: Option<PathBuf>,
    /// A git repository the runner clones into a fresh workspace (instead of `workspace`).
    pub repo: Option<String>,
    /// The branch, tag or commit of `repo` (default: the remote's HEAD).
    pub r#ref: Option<String>,
    /// A branch of `repo` the runner pushes the result to (where the server allows it).
    pub push: Option<String>,
    /// An upload id the server returned (`ralph submit --upload DIR` sets it).
    pub upload: Option<String>,
    /// A preset.
    pub agent: Option<String>,
    /// A command line.
    pub agent_cmd: Option<String>,
    /// loop or task.
    pub kind: Option<JobKind>,
    /// Round budget.
    pub max_rounds: Option<u32>,
    /// Handoff cap.
    pub handoff_cap: Option<ByteSize>,
    /// Retries of a failed round.
    pub round_retries: Option<u32>,
    /// First backoff between retries.
    pub retry_backoff: Option<HumanDuration>,
    /// Wall-clock limit of one round.
    pub round_timeout: Option<HumanDuration>,
    /// Wall-clock limit of the job.
    pub job_timeout: Option<HumanDuration>,
    /// Grace between SIGTERM and SIGKILL.
    pub kill_grace: Option<HumanDuration>,
    /// Token budget.
    pub max_tokens: Option<u64>,
    /// Rounds in a row without a change in the workspace that end the loop (0: off).
    pub max_stalled_rounds: Option<u32>,
    /// Verify command.
    pub verify: Option<String>,
    /// Independent loops from the same start; the first verified wins (needs `verify`).
    pub attempts: Option<u32>,
    /// Set-up command, run once before round 1 (SPEC §12).
    pub setup: Option<String>,
    /// Runner environment variables the set-up (only) gets.
    #[serde(default)]
    pub setup_env: Vec<String>,
    /// Wall-clock limit of the set-up (default 30m).
    pub setup_timeout: Option<HumanDuration>,
    /// Directories of the round's HOME kept across jobs (`~/.cache/pip`; SPEC §12).
    #[serde(default)]
    pub cache: Vec<String>,
    /// The caches' key (default: a digest of the workspace's lock files).
    pub cache_key: Option<String>,
    /// Backend.
    pub backend: Option<BackendKind>,
    /// Mode.
    pub mode: Option<Mode>,
    /// Protected paths.
    #[serde(default)]
    pub protect: Vec<PathBuf>,
    /// Extra readable paths.
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Extra writable directories.
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// Unix sockets the agent may connect to (every other socket in a visible tree is masked).
    #[serde(default)]
    pub socket: Vec<PathBuf>,
    /// Network.
    pub network: Option<Network>,
    /// Memory limit.
    pub memory: Option<ByteSize>,
    /// Size limit of each private HOME and TMPDIR.
    pub tmp_size: Option<ByteSize>,
    /// Process limit.
    pub pids: Option<u64>,
    /// Open-files limit of each process.
    pub nofile: Option<u64>,
    /// CPU limit, in CPUs.
    #[serde(default)]
    pub cpus: Option<ralph_sandbox::policy::Cpus>,
    /// Container image.
    pub image: Option<String>,
    /// Per-stream output cap.
    pub output_cap: Option<ByteSize>,
    /// Environment variables to pass.
    #[serde(default)]
    pub env: Vec<String>,
    /// `auto` (default) or `none`: whether the runner's per-user toolchains are granted.
    pub toolchain: Option<crate::toolchain::ToolchainMode>,
    /// Queue priority (higher first; default 0). Service only.
    pub priority: Option<i32>,
    /// The model API's base URL (`ralph run`) or a configured upstream's name (service).
    pub upstream: Option<String>,
    /// The runner-side variable holding the upstream's key (`ralph run` only).
    pub api_key_env: Option<String>,
    /// The model a preset asks for.
    pub model: Option<String>,
    /// Extra arguments for a preset's CLI.
    #[serde(default)]
    pub agent_arg: Vec<String>,
    /// The built-in agent's model calls per round.
    pub agent_max_steps: Option<u32>,
    /// Hosts the egress proxy lets the round reach (`HOST[:PORT][=private]`).
    #[serde(default)]
    pub allow_host: Vec<String>,
    /// A name for finding the job again.
    pub name: Option<String>,
    /// Labels (key → value) for filtering.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A webhook receiver of the job's end (SPEC §13; `ralph serve` only).
    pub notify_url: Option<String>,
}

/// A job file: one or many jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobFile {
    /// The jobs, in order.
    #[serde(default)]
    pub job: Vec<JobRequest>,
}

/// How a job file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl Format {
    /// The format of a file name (`.json` is JSON, anything else TOML).
    pub fn of_path(p: &Path) -> Format {
        if p.extension().is_some_and(|e| e == "json") {
            Format::Json
        } else {
            Format::Toml
        }
    }
}

/// A job file that cannot be read. The message names the key (and, for TOML, the line).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct JobFileError {
    /// What is wrong.
    pub message: String,
    /// The offending key, when known.
    pub field: Option<String>,
}

/// The name between the backticks that follow `marker` in `message` (serde: "unknown field
/// `x`, expected …", "missing field `x`").
fn named_after(message: &str, marker: &str) -> Option<String> {
    let start = message.find(marker)? + marker.len();
    let end = start + message[start..].find('`')?;
    Some(message[start..end].to_owned())
}

/// The key an error is about, from where the deserializer was when it failed: a key of a job is
/// named as written in the job (`max_rounds`, `protect[1]`) and the job's index is returned
/// beside it; a top-level key (`job`, or an unknown one) as it is. The value is never taken for
/// the key (an unknown variant `loopy` of `kind` names `kind`).
fn field_of(
    segments: &[serde_path_to_error::Segment],
    message: &str,
) -> (Option<String>, Option<usize>) {
    use serde_path_to_error::Segment;
    let (index, rest) = match segments {
        [Segment::Map { key }, Segment::Seq { index }, rest @ ..] if key == "job" => {
            (Some(*index), rest)
        }
        all => (None, all),
    };
    let mut field = String::new();
    for s in rest {
        match s {
            Segment::Map { key } if field.is_empty() => field.push_str(key),
            Segment::Map { key } => {
                field.push('.');
                field.push_str(key);
            }
            Segment::Seq { index } => field.push_str(&format!("[{index}]")),
            Segment::Enum { .. } | Segment::Unknown => {}
        }
    }
    // A missing key (and an unknown one, for some deserializers) is not on the path: the message
    // names it.
    let named =
        named_after(message, "unknown field `").or_else(|| named_after(message, "missing field `"));
    let field = match (field.is_empty(), named) {
        (true, Some(n)) => Some(n),
        (false, _) => Some(field),
        (true, None) if index.is_some() => Some("job".to_owned()),
        (true, None) => None,
    };
    (field, index)
}

/// A job file that does not deserialize: where the deserializer was, and why.
type Failure = (Vec<serde_path_to_error::Segment>, String);

fn failure<E: std::fmt::Display>(e: serde_path_to_error::Error<E>) -> Failure {
    (
        e.path().iter().cloned().collect(),
        e.into_inner().to_string(),
    )
}

/// Deserializes a job file, keeping the path to the key an error is about.
fn deserialize(text: &str, format: Format) -> Result<JobFile, Failure> {
    match format {
        Format::Toml => {
            serde_path_to_error::deserialize(toml::Deserializer::new(text)).map_err(failure)
        }
        Format::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            let file = serde_path_to_error::deserialize(&mut de).map_err(failure)?;
            de.end().map_err(|e| (Vec::new(), e.to_string()))?;
            Ok(file)
        }
    }
}

/// Parses a job file.
pub fn parse_job_file(text: &str, format: Format) -> Result<Vec<JobRequest>, JobFileError> {
    let file = deserialize(text, format).map_err(|(path, message)| {
        // TOML's message is a snippet of the file with a caret under the offending text: kept
        // on its lines, it shows the user where to look.
        let message = message.trim_end().to_owned();
        let (field, index) = field_of(&path, &message);
        JobFileError {
            message: match index {
                Some(i) => format!("job[{i}]: {message}"),
                None => message,
            },
            field,
        }
    })?;
    if file.job.is_empty() {
        return Err(JobFileError {
            message: "the file holds no `[[job]]` table".into(),
            field: Some("job".into()),
        });
    }
    Ok(file.job)
}

fn err(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError {
        field,
        message: message.into(),
    }
}

impl From<PathError> for SpecError {
    fn from(e: PathError) -> Self {
        err(e.field, e.to_string())
    }
}

impl JobRequest {
    /// The provisioned workspace's source this request asks for, if any: `workspace`, `repo`
    /// and `upload` exclude each other, and `ref`/`push` need `repo`.
    pub fn source(&self) -> Result<Option<WorkspaceSource>, SpecError> {
        let given = [
            self.workspace.is_some(),
            self.repo.is_some(),
            self.upload.is_some(),
        ];
        if given.iter().filter(|g| **g).count() > 1 {
            let field = if self.repo.is_some() {
                "repo"
            } else {
                "upload"
            };
            return Err(err(
                field,
                "give one of `workspace`, `repo` or `upload`, not several",
            ));
        }
        if self.repo.is_none() {
            if self.r#ref.is_some() {
                return Err(err("ref", "`ref` needs `repo`"));
            }
            if self.push.is_some() {
                return Err(err("push", "`push` needs `repo`"));
            }
        }
        let source = match (&self.repo, &self.upload) {
            (Some(repo), _) => Some(WorkspaceSource::Repo {
                repo: repo.clone(),
                git_ref: self.r#ref.clone(),
                push: self.push.clone(),
            }),
            (None, Some(upload)) => Some(WorkspaceSource::Upload {
                upload: upload.clone(),
            }),
            (None, None) => None,
        };
        if let Some(s) = &source {
            s.validate()?;
        }
        Ok(source)
    }

    /// Turns the request into a job spec: defaults applied, paths made absolute against `base`
    /// and resolved (they must exist; no symlink inside `known` writable trees or the job's own
    /// is followed, see [`resolve_paths`]), the objective read from its file if given. The spec
    /// is not yet validated against ceilings ([`JobSpec::validate`]).
    pub fn into_spec(
        self,
        base: &Path,
        known: &WritableTrees,
    ) -> Result<(JobSpec, i32), SpecError> {
        self.into_spec_at(base, known, None)
    }

    /// [`JobRequest::into_spec`] for a runner that provisions workspaces: a request with a
    /// source (`repo`, `upload`) gets `provisioned`, the fresh directory the runner made for
    /// it, as its workspace. Without `provisioned` such a request is refused.
    pub fn into_spec_at(
        self,
        base: &Path,
        known: &WritableTrees,
        provisioned: Option<&Path>,
    ) -> Result<(JobSpec, i32), SpecError> {
        let source = self.source()?;
        let workspace_asked: &Path = match (&source, provisioned) {
            (Some(s), None) => {
                let field = if s.repo().is_some() { "repo" } else { "upload" };
                return Err(err(
                    field,
                    "this command runs in an existing workspace: `repo` and `upload` are for a server (`ralph submit`)",
                ));
            }
            (Some(_), Some(p)) => p,
            (None, _) => self.workspace.as_deref().unwrap_or(Path::new(".")),
        };
        let objective = match (self.objective, self.objective_file) {
            (Some(_), Some(_)) => {
                return Err(err(
                    "objective",
                    "give `objective` or `objective_file`, not both",
                ));
            }
            (Some(o), None) => o,
            (None, Some(p)) => {
                let path = if p.is_absolute() { p } else { base.join(p) };
                std::fs::read_to_string(&path)
                    .map_err(|e| err("objective_file", format!("`{}`: {e}", path.display())))?
            }
            (None, None) => {
                return Err(err(
                    "objective",
                    "one of `objective` or `objective_file` is required",
                ));
            }
        };
        let agent = match (self.agent, self.agent_cmd) {
            (Some(_), Some(_)) => {
                return Err(err("agent", "give `agent` or `agent_cmd`, not both"));
            }
            (Some(name), None) => AgentSpec::Preset { name },
            (None, Some(command)) => AgentSpec::Command { command },
            (None, None) => {
                return Err(err(
                    "agent_cmd",
                    "one of `agent` or `agent_cmd` is required",
                ));
            }
        };
        let SandboxPaths {
            workspace,
            read,
            write,
            sockets,
        } = resolve_paths(
            Requested {
                workspace: workspace_asked,
                read: &self.read,
                write: &self.write,
                protect: &self.protect,
                sockets: &self.socket,
            },
            base,
            known,
        )?;
        if !workspace.is_dir() {
            return Err(err(
                "workspace",
                format!("`{}` is not a directory", workspace.display()),
            ));
        }
        if workspace.to_str().is_none() {
            return Err(err(
                "workspace",
                format!(
                    "{workspace:?} is not UTF-8: the agent is told its workspace as text (in its prompt and RALPH_WORKSPACE), which cannot name this path; rename it"
                ),
            ));
        }
        let mut spec = JobSpec::new(objective, workspace, agent);
        let d = &mut spec;
        d.kind = self.kind.unwrap_or_default();
        if let Some(v) = self.max_rounds {
            d.max_rounds = v;
        }
        if let Some(v) = self.handoff_cap {
            d.handoff_cap = usize::try_from(v.0).unwrap_or(usize::MAX);
        }
        if let Some(v) = self.round_retries {
            d.round_retries = v;
        }
        if let Some(v) = self.retry_backoff {
            d.retry_backoff = v;
        }
        if let Some(v) = self.round_timeout {
            d.round_timeout = Some(v);
        }
        d.job_timeout = self.job_timeout;
        if let Some(v) = self.kill_grace {
            d.kill_grace = v;
        }
        d.max_tokens = self.max_tokens;
        d.max_stalled_rounds = self.max_stalled_rounds.unwrap_or(0);
        d.verify = self.verify;
        d.attempts = self.attempts.unwrap_or(1);
        d.setup = match (self.setup, self.setup_env.is_empty(), self.setup_timeout) {
            (Some(command), _, timeout) => Some(super::spec::SetupSpec {
                command,
                env: self.setup_env,
                timeout: timeout.unwrap_or(HumanDuration(super::spec::DEFAULT_SETUP_TIMEOUT)),
            }),
            (None, false, _) => return Err(err("setup_env", "`setup_env` needs `setup`")),
            (None, true, Some(_)) => {
                return Err(err("setup_timeout", "`setup_timeout` needs `setup`"));
            }
            (None, true, None) => None,
        };
        d.cache = self
            .cache
            .iter()
            .map(|p| crate::cache::CachePath::parse(p).map_err(|e| err("cache", e.to_string())))
            .collect::<Result<_, _>>()?;
        d.cache_key = self.cache_key;
        let defaults = SandboxSettings::default();
        d.sandbox = SandboxSettings {
            backend: self.backend.unwrap_or(defaults.backend),
            mode: self.mode.unwrap_or(defaults.mode),
            network: self.network,
            protect: self.protect,
            read,
            write,
            sockets,
            memory: self.memory,
            tmp_size: self.tmp_size,
            pids: self.pids,
            nofile: self.nofile,
            cpus: self.cpus,
            image: self.image,
            output_cap: self.output_cap.unwrap_or(defaults.output_cap),
        };
        d.env = self.env;
        d.toolchain = self.toolchain.unwrap_or_default();
        d.model_access = ModelAccess {
            upstream: self.upstream,
            api_key_env: self.api_key_env,
            model: self.model,
            agent_args: self.agent_arg,
            allow_hosts: self.allow_host,
            agent_max_steps: self.agent_max_steps,
        };
        d.name = self.name;
        d.labels = self.labels;
        d.notify_url = self.notify_url;
        d.source = source;
        Ok((spec, self.priority.unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_json_have_the_same_shape() {
        let toml = "[[job]]\nobjective = \"a\"\nagent_cmd = \"x\"\nmax_rounds = 3\nprotect = [\"tests\"]\nround_timeout = \"5m\"\n\n[[job]]\nobjective = \"b\"\nagent_cmd = \"y\"\nkind = \"task\"\n";
        let json = r#"{"job":[{"objective":"a","agent_cmd":"x","max_rounds":3,"protect":["tests"],"round_timeout":"5m"},{"objective":"b","agent_cmd":"y","kind":"task"}]}"#;
        let a = parse_job_file(toml, Format::Toml).unwrap();
        let b = parse_job_file(json, Format::Json).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].kind, Some(JobKind::Task));
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse_job_file("[[job]]\nobjective = \"a\"\nmax_round = 3\n", Format::Toml)
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("max_round"), "{e}");
        let e = parse_job_file(r#"{"job":[{"objective":"a","maxRounds":3}]}"#, Format::Json)
            .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("maxRounds"), "{e}");
        let e = parse_job_file(r#"{"jobs":[]}"#, Format::Json).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("jobs"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        let e = parse_job_file("[[job]]\nround_timeout = \"soon\"\n", Format::Toml).unwrap_err();
        assert!(e.message.contains("soon"), "{e}");
        let e = parse_job_file("[[job]]\nmode = \"rw\"\n", Format::Toml).unwrap_err();
        assert!(e.message.contains("rw"), "{e}");
        assert!(parse_job_file("", Format::Toml).is_err());
    }

    #[test]
    fn type_errors_name_the_key_never_the_value() {
        // (body, expected field, the job index the message names)
        let json_cases = [
            (r#"{"job":[{"max_rounds":"x"}]}"#, "max_rounds", Some(0)),
            (
                r#"{"job":[{"objective":"a"},{"kind":"loopy"}]}"#,
                "kind",
                Some(1),
            ),
            (r#"{"job":[{"mode":"rw"}]}"#, "mode", Some(0)),
            (
                r#"{"job":[{"round_timeout":"soon"}]}"#,
                "round_timeout",
                Some(0),
            ),
            (r#"{"job":[{"memory":"lots"}]}"#, "memory", Some(0)),
            (r#"{"job":[{"protect":["a",1]}]}"#, "protect[1]", Some(0)),
            (r#"{"job":[{"env":"X"}]}"#, "env", Some(0)),
            (r#"{"job":[{"priority":1.5}]}"#, "priority", Some(0)),
            (r#"{"job":[{"max_tokens":-1}]}"#, "max_tokens", Some(0)),
            (r#"{"job":[{"network":{"a":1}}]}"#, "network", Some(0)),
            (r#"{"job":[{"backend":5}]}"#, "backend", Some(0)),
            (r#"{"job":[5]}"#, "job", Some(0)),
            (r#"{"job":5}"#, "job", None),
            (
                r#"{"job":[{"objective":"a","max_round":3}]}"#,
                "max_round",
                Some(0),
            ),
        ];
        for (body, field, index) in json_cases {
            let e = parse_job_file(body, Format::Json).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{body}: {e}");
            if let Some(i) = index {
                assert!(e.message.starts_with(&format!("job[{i}]: ")), "{body}: {e}");
            }
        }
        let toml_cases = [
            ("[[job]]\nmax_rounds = \"x\"\n", "max_rounds"),
            ("[[job]]\nkind = \"loopy\"\n", "kind"),
            ("[[job]]\nprotect = [\"a\", 1]\n", "protect[1]"),
            (
                "[[job]]\nobjective = \"a\"\n[[job]]\nmemory = true\n",
                "memory",
            ),
        ];
        for (body, field) in toml_cases {
            let e = parse_job_file(body, Format::Toml).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{body}: {e}");
        }
        // Broken syntax: the key being read when it broke, or none.
        let e = parse_job_file("{\"job\": [", Format::Json).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("job"), "{e}");
        let e = parse_job_file("{\"job\": []} x", Format::Json).unwrap_err();
        assert_eq!(e.field, None, "{e}");
    }

    /// The job-file reference (`docs/job-file.md`) has a row for every key and none for a key
    /// that does not exist, and its examples are valid job files.
    #[test]
    fn the_job_file_reference_lists_every_key_and_its_examples_parse() {
        let doc = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/job-file.md"));
        let keys: std::collections::BTreeSet<String> =
            match serde_json::to_value(JobRequest::default()).unwrap() {
                serde_json::Value::Object(m) => m.keys().cloned().collect(),
                other => panic!("{other}"),
            };
        let rows: std::collections::BTreeSet<String> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split('`').next())
            .map(str::to_owned)
            .collect();
        let missing: Vec<_> = keys.difference(&rows).collect();
        let stale: Vec<_> = rows.difference(&keys).collect();
        assert!(missing.is_empty(), "keys without a row: {missing:?}");
        assert!(stale.is_empty(), "rows for no key: {stale:?}");
        let block = |fence: &str| {
            let start = doc.find(fence).unwrap() + fence.len();
            let end = start + doc[start..].find("\n```").unwrap();
            doc[start..end].to_owned()
        };
        let jobs = parse_job_file(&block("```toml\n"), Format::Toml).unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[1].kind, Some(JobKind::Task));
        let jobs = parse_job_file(&block("```json\n"), Format::Json).unwrap();
        assert_eq!(jobs.len(), 1);
    }

    #[test]
    fn a_toml_error_keeps_its_snippet_and_caret_on_their_lines() {
        let e = parse_job_file(
            "[[job]]\nobjective = \"a\"\n[[job]]\nmemory = true\n",
            Format::Toml,
        )
        .unwrap_err();
        let lines: Vec<&str> = e.message.lines().collect();
        assert!(lines[0].starts_with("job[1]: "), "{}", e.message);
        assert!(e.message.contains("line 4"), "{}", e.message);
        let code = lines.iter().position(|l| l.contains("memory = true"));
        let caret = lines
            .iter()
            .position(|l| l.trim_start().starts_with("|") && l.contains('^'));
        assert!(
            matches!((code, caret), (Some(c), Some(k)) if k == c + 1),
            "{}",
            e.message
        );
        let e =
            parse_job_file("[[job]]\nobjective = \"a\nmax_rounds = 3\n", Format::Toml).unwrap_err();
        assert!(e.message.lines().any(|l| l.contains('^')), "{}", e.message);
    }

    #[test]
    fn into_spec_refuses_a_path_through_a_link_in_a_writable_tree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let (ws, ws2, host) = (root.join("ws"), root.join("ws2"), root.join("host"));
        for d in [&ws, &ws2, &host] {
            std::fs::create_dir(d).unwrap();
        }
        std::os::unix::fs::symlink(&host, ws.join("cache")).unwrap();
        let r = JobRequest {
            objective: Some("x".into()),
            agent_cmd: Some("true".into()),
            workspace: Some(ws2.clone()),
            read: vec![ws.join("cache")],
            ..Default::default()
        };
        // Unknown to this job, `ws` is someone's directory and the link (trusted here like a
        // link of root's) is followed...
        let me = nix::unistd::geteuid().as_raw();
        let trusted = WritableTrees::none().trusting(&[0, me]);
        let (spec, _) = r.clone().into_spec(&root, &trusted).unwrap();
        assert_eq!(spec.sandbox.read, vec![host.clone()]);
        // ...known as a writable tree, it is refused, the path and the link named.
        let e = r
            .into_spec(&root, &WritableTrees::new([ws.clone()]))
            .unwrap_err();
        assert_eq!(e.field, "read", "{e}");
        assert!(
            e.message.starts_with(&format!(
                "`{}`: `{}` is a symlink (to `{}`) inside the writable tree `{}`",
                ws.join("cache").display(),
                ws.join("cache").display(),
                host.display(),
                ws.display()
            )),
            "{e}"
        );
    }

    /// Issue 26: `cache` and `cache_key` are job-file keys; a bad path or a docker job's cache
    /// is refused with the key named.
    #[test]
    fn caches_are_job_file_keys_checked_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let text = "[[job]]\nobjective = \"x\"\nagent_cmd = \"true\"\nworkspace = \".\"\ncache = [\"~/.npm\", \"~/.cache/pip\"]\ncache_key = \"deps-v1\"\n";
        let r = parse_job_file(text, Format::Toml).unwrap().remove(0);
        let (spec, _) = r
            .clone()
            .into_spec(dir.path(), &WritableTrees::none())
            .unwrap();
        assert_eq!(
            spec.cache
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            vec!["~/.npm", "~/.cache/pip"]
        );
        assert_eq!(spec.cache_key.as_deref(), Some("deps-v1"));
        spec.validate(&super::super::spec::Ceilings::default())
            .unwrap();
        // Caches work on docker too (the copy bound at its path in the container's HOME).
        let mut docker = spec.clone();
        docker.sandbox.backend = BackendKind::Docker;
        docker.validate(&Default::default()).unwrap();
        let bad = JobRequest {
            cache: vec!["/var/cache".into()],
            ..r
        };
        let e = bad
            .into_spec(dir.path(), &WritableTrees::none())
            .unwrap_err();
        assert_eq!(e.field, "cache", "{e}");
        assert!(e.message.contains("must start with `~/`"), "{e}");
        let e = parse_job_file(&text.replace("cache_key", "cache_keys"), Format::Toml).unwrap_err();
        assert!(e.message.contains("cache_keys"), "{}", e.message);
    }

    #[test]
    fn into_spec_resolves_paths_and_applies_defaults() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("obj.md"), "do it").unwrap();
        let r = JobRequest {
            objective_file: Some("obj.md".into()),
            agent_cmd: Some("true".into()),
            workspace: Some(".".into()),
            priority: Some(5),
            ..Default::default()
        };
        let (spec, prio) = r.into_spec(dir.path(), &WritableTrees::none()).unwrap();
        assert_eq!(spec.objective, "do it");
        assert_eq!(spec.workspace, dir.path().canonicalize().unwrap());
        assert_eq!(spec.max_rounds, 20);
        assert_eq!(prio, 5);
        let r = JobRequest {
            objective: Some("x".into()),
            agent_cmd: Some("true".into()),
            workspace: Some("/nope/nope".into()),
            ..Default::default()
        };
        assert_eq!(
            r.into_spec(dir.path(), &WritableTrees::none())
                .unwrap_err()
                .field,
            "workspace"
        );
        let r = JobRequest {
            objective: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(
            r.into_spec(dir.path(), &WritableTrees::none())
                .unwrap_err()
                .field,
            "agent_cmd"
        );
    }
}
