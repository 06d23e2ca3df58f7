//! The service's configuration (`/etc/ralph/config.toml`): where it listens, how many jobs run
//! at once, and what a submitter may ask for. The commented default file (`config.toml` beside
//! this module) is the documentation of every key.

use std::path::{Path, PathBuf};

use ralph_sandbox::Mode;
use serde::Deserialize;

use crate::util::units::{ByteSize, HumanDuration};

/// The commented default configuration.
pub const DEFAULT_CONFIG: &str = include_str!("config.toml");

/// Most connections `postgres_pool_size` may ask for.
const MAX_POOL_SIZE: usize = 64;

/// Default config file.
pub const DEFAULT_PATH: &str = "/etc/ralph/config.toml";

/// The service configuration.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// TCP address ("" disables TCP).
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Unix socket to listen on.
    pub unix_socket: Option<PathBuf>,
    /// State directory.
    #[serde(default = "default_state_dir")]
    pub state_dir: PathBuf,
    /// Token file (default `<state_dir>/token`).
    pub token_file: Option<PathBuf>,
    /// Jobs running at once.
    #[serde(default = "default_concurrency")]
    pub max_concurrent_jobs: usize,
    /// Drain grace on SIGTERM.
    #[serde(default = "default_grace")]
    pub drain_grace: HumanDuration,
    /// How long a client may take to send a request head (read when the listener opens).
    #[serde(default = "default_header_timeout")]
    pub header_read_timeout: HumanDuration,
    /// How long a client may take to send a request body.
    #[serde(default = "default_body_timeout")]
    pub body_read_timeout: HumanDuration,
    /// PostgreSQL: how long a runner host's lease lasts without renewal; a host silent this
    /// long has its running jobs closed as interrupted by a surviving one (SPEC §8).
    #[serde(default = "default_lease_timeout")]
    pub lease_timeout: HumanDuration,
    /// PostgreSQL: connections this host opens to the store (independent calls run at once).
    #[serde(default = "default_pool_size")]
    pub postgres_pool_size: usize,
    /// PostgreSQL: how long a call waits for a free connection before it fails.
    #[serde(default = "default_pool_wait")]
    pub postgres_pool_wait: HumanDuration,
    /// Whether /metrics needs the token.
    #[serde(default)]
    pub metrics_require_auth: bool,
    /// The shared PostgreSQL store (absent: SQLite in `state_dir`).
    pub database_url: Option<DatabaseUrl>,
    /// Admission limits.
    #[serde(default)]
    pub limits: Limits,
    /// Provisioned workspaces: credentials, push, retention (SPEC §11).
    #[serde(default)]
    pub provision: crate::provision::ProvisionConfig,
    /// The user rounds run as when the service runs as root and a workspace is root's (`NAME`,
    /// `UID` or `UID:GID`; default `ralph-agent`, else `nobody`). Never root.
    pub agent_user: Option<String>,
    /// The model upstreams jobs may name (SPEC §9).
    #[serde(default)]
    pub gateway: super::gateway_config::GatewayConfig,
    /// The log's form on stderr (`--log-format` wins).
    #[serde(default)]
    pub log_format: crate::logging::LogFormat,
    /// Remove the artifacts of jobs that finished more than this long ago (absent: keep them).
    pub retention: Option<HumanDuration>,
    /// The bytes this host's job caches may hold (SPEC §12; default 10G): after a set-up keeps
    /// one, the least recently used go until the rest fit.
    pub cache_budget: Option<ByteSize>,
    /// The TCP listener's certificate chain (PEM): the API is served over HTTPS.
    pub tls_cert: Option<PathBuf>,
    /// The private key of `tls_cert` (PEM).
    pub tls_key: Option<PathBuf>,
    /// Client certificates must be signed by this CA (PEM): mutual TLS.
    pub client_ca: Option<PathBuf>,
    /// Listen on a non-loopback address without TLS.
    #[serde(default)]
    pub insecure_listen: bool,
    /// Completion webhooks (SPEC §13).
    #[serde(default)]
    pub notify: crate::webhook::NotifyConfig,
    /// Named tokens and their policies (`[tokens.NAME]`).
    #[serde(default)]
    pub tokens: std::collections::BTreeMap<String, super::token_config::TokenConfig>,
    /// The limits of each token with `[tokens.NAME.limits]` (resolved when parsed).
    #[serde(skip)]
    pub token_limits: std::collections::BTreeMap<String, Limits>,
}

/// A PostgreSQL connection string; its `Debug` form has the password redacted.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(pub String);

impl DatabaseUrl {
    /// The connection string as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DatabaseUrl")
            .field(&crate::store::postgres::target::redact(&self.0))
            .finish()
    }
}

/// What a submitter may ask for.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Allowed workspace roots.
    #[serde(default)]
    pub workspace_roots: Vec<PathBuf>,
    /// Allowed roots of `read`/`write` paths.
    #[serde(default)]
    pub read_roots: Vec<PathBuf>,
    /// Most powerful mode.
    #[serde(default = "default_max_mode")]
    pub max_mode: Mode,
    /// Whether `network = "full"` is allowed.
    #[serde(default = "yes")]
    pub allow_network_full: bool,
    /// Ceiling of max_rounds.
    #[serde(default = "default_rounds")]
    pub max_rounds: u32,
    /// Ceiling of handoff_cap.
    #[serde(default = "default_handoff")]
    pub max_handoff_cap: ByteSize,
    /// Ceiling (and default) of the memory limit.
    pub max_memory: Option<ByteSize>,
    /// Ceiling (and default) of the process limit.
    pub max_pids: Option<u64>,
    /// Ceiling (and default) of the CPU limit, in CPUs.
    #[serde(default)]
    pub max_cpus: Option<ralph_sandbox::policy::Cpus>,
    /// Ceiling (and default) of the round timeout.
    pub max_round_timeout: Option<HumanDuration>,
    /// Ceiling (and default) of the job timeout.
    pub max_job_timeout: Option<HumanDuration>,
    /// Service environment variables a job may pass.
    #[serde(default)]
    pub allowed_env: Vec<String>,
    /// Service environment variables a job's set-up may get (`setup_env`; SPEC §12): a job
    /// never reads one that is not listed.
    #[serde(default)]
    pub allowed_setup_env: Vec<String>,
    /// Images a docker job may use.
    #[serde(default)]
    pub allowed_images: Vec<String>,
    /// What a job's `allow_host` may name (`HOST`: ports 80 and 443; `HOST:PORT`: that port;
    /// `=private` after either: a job may opt that name into private addresses).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Upstreams a job may name (`None`: every configured one).
    #[serde(default)]
    pub allowed_upstreams: Option<Vec<String>>,
    /// URL prefixes a job's `repo` must start with (empty: no `repo` job is allowed).
    #[serde(default)]
    pub allowed_repos: Vec<String>,
    /// URL prefixes a job's `notify_url` must start with (empty: no job names its own).
    #[serde(default)]
    pub allowed_notify: Vec<String>,
    /// Whether a `repo` job may ask for `push = "BRANCH"`.
    #[serde(default)]
    pub allow_push: bool,
    /// A token without the `admin` scope may cancel and resume only the jobs it submitted.
    #[serde(default)]
    pub cancel_own_only: bool,
    /// Largest upload (`POST /v1/uploads`), in bytes of file content.
    #[serde(default = "default_upload_bytes")]
    pub max_upload_bytes: ByteSize,
    /// Most entries (files, directories, links) of one upload.
    #[serde(default = "default_upload_files")]
    pub max_upload_files: u64,
}

impl Limits {
    /// Where `read`, `write` and `socket` paths may lie: under a workspace root or a read root.
    pub fn path_roots(&self) -> Vec<PathBuf> {
        self.workspace_roots
            .iter()
            .chain(&self.read_roots)
            .cloned()
            .collect()
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            workspace_roots: Vec::new(),
            read_roots: Vec::new(),
            max_mode: default_max_mode(),
            allow_network_full: true,
            max_rounds: default_rounds(),
            max_handoff_cap: default_handoff(),
            max_memory: None,
            max_pids: None,
            max_cpus: None,
            max_round_timeout: None,
            max_job_timeout: None,
            allowed_env: Vec::new(),
            allowed_setup_env: Vec::new(),
            allowed_images: Vec::new(),
            allowed_hosts: Vec::new(),
            allowed_upstreams: None,
            allowed_repos: Vec::new(),
            allowed_notify: Vec::new(),
            allow_push: false,
            cancel_own_only: false,
            max_upload_bytes: default_upload_bytes(),
            max_upload_files: default_upload_files(),
        }
    }
}

fn default_listen() -> String {
    "127.0.0.1:7979".into()
}
fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/ralph")
}
fn default_concurrency() -> usize {
    4
}
fn default_grace() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(300))
}
fn default_header_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(10))
}
fn default_body_timeout() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(30))
}
fn default_lease_timeout() -> HumanDuration {
    HumanDuration(crate::store::lease::DEFAULT_LEASE_TIMEOUT)
}
fn default_pool_size() -> usize {
    crate::store::postgres::pool::DEFAULT_POOL_SIZE
}
fn default_pool_wait() -> HumanDuration {
    HumanDuration(crate::store::postgres::pool::DEFAULT_POOL_WAIT)
}
fn default_max_mode() -> Mode {
    Mode::WorkspaceWrite
}
fn yes() -> bool {
    true
}
fn default_rounds() -> u32 {
    crate::job::spec::DEFAULT_ROUNDS_CEILING
}
fn default_upload_bytes() -> ByteSize {
    ByteSize(1 << 30)
}
fn default_upload_files() -> u64 {
    100_000
}
fn default_handoff() -> ByteSize {
    ByteSize(crate::report::MAX_HANDOFF_CAP as u64)
}

/// A configuration that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration `{path}`: {message}")]
pub struct ConfigError {
    /// The file.
    pub path: String,
    /// What is wrong, naming the key.
    pub message: String,
}

/// Keys whose values may hold a secret: a TOML error on their line is not shown with the line.
const SECRET_KEYS: [&str; 1] = ["database_url"];

/// A TOML error as the toml crate writes it (the line, with a caret under the offending text), or
/// only its line number and message when the line sets a key that may hold a secret.
fn toml_error(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return e.to_string().trim_end().to_owned();
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("");
    let key = line.split('=').next().unwrap_or("").trim();
    if SECRET_KEYS.contains(&key) {
        format!(
            "line {line_no}: `{key}`: {} (the line is not shown: it may hold a secret)",
            e.message().trim_end()
        )
    } else {
        e.to_string().trim_end().to_owned()
    }
}

impl ServiceConfig {
    /// Parses and validates a configuration text.
    pub fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        let err = |message: String| ConfigError {
            path: path.to_owned(),
            message,
        };
        let mut c: ServiceConfig = toml::from_str(text).map_err(|e| err(toml_error(text, &e)))?;
        if c.max_concurrent_jobs == 0 {
            return Err(err("`max_concurrent_jobs` must be at least 1".into()));
        }
        if !(1..=MAX_POOL_SIZE).contains(&c.postgres_pool_size) {
            return Err(err(format!(
                "`postgres_pool_size` must be within 1..={MAX_POOL_SIZE}"
            )));
        }
        for (key, d) in [
            ("header_read_timeout", c.header_read_timeout),
            ("body_read_timeout", c.body_read_timeout),
            ("postgres_pool_wait", c.postgres_pool_wait),
        ] {
            if d.0.is_zero() {
                return Err(err(format!("`{key}` must be more than 0s")));
            }
        }
        if c.limits.max_rounds == 0 || c.limits.max_rounds > 100_000 {
            return Err(err("`limits.max_rounds` must be within 1..=100000".into()));
        }
        for (key, roots) in [
            ("limits.workspace_roots", &c.limits.workspace_roots),
            ("limits.read_roots", &c.limits.read_roots),
        ] {
            if let Some(r) = roots.iter().find(|r| !r.is_absolute()) {
                return Err(err(format!(
                    "`{key}`: `{}` is not an absolute path",
                    r.display()
                )));
            }
        }
        if let Some(u) = &c.agent_user {
            ralph_sandbox::identity::agent_user(Some(u), std::path::Path::new("/etc"))
                .map_err(|e| err(format!("`agent_user`: {e}")))?;
        }
        if !c.listen.is_empty() && c.listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(err(format!(
                "`listen`: `{}` is not an address like 127.0.0.1:7979",
                c.listen
            )));
        }
        if let Some(DatabaseUrl(url)) = &c.database_url {
            crate::store::postgres::target::Target::parse(url).map_err(|e| {
                err(format!(
                    "`database_url`: `{}` is not a PostgreSQL connection string: {e}",
                    crate::store::postgres::target::redact(url),
                ))
            })?;
        }
        c.gateway.validate().map_err(err)?;
        for h in &c.limits.allowed_hosts {
            h.parse::<crate::gateway::AllowHost>()
                .map_err(|e| err(format!("`limits.allowed_hosts`: {e}")))?;
        }
        if let Some(names) = &c.limits.allowed_upstreams {
            if let Some(n) = names.iter().find(|n| !c.gateway.upstreams.contains_key(*n)) {
                return Err(err(format!(
                    "`limits.allowed_upstreams`: `{n}` is not an upstream of [gateway.upstreams]"
                )));
            }
        }
        if c.retention.is_some_and(|r| r.0.is_zero()) {
            return Err(err("`retention` must be more than 0s".into()));
        }
        if c.provision.upload_retention.is_some_and(|r| r.0.is_zero()) {
            return Err(err(
                "`provision.upload_retention` must be more than 0s (an upload must outlive its submission)"
                    .into(),
            ));
        }
        if c.limits.max_upload_files == 0 {
            return Err(err("`limits.max_upload_files` must be at least 1".into()));
        }
        c.token_limits = super::token_config::resolve(text, &c.tokens).map_err(err)?;
        for (name, l) in &c.token_limits {
            for (key, roots) in [
                ("workspace_roots", &l.workspace_roots),
                ("read_roots", &l.read_roots),
            ] {
                if let Some(r) = roots.iter().find(|r| !r.is_absolute()) {
                    return Err(err(format!(
                        "`tokens.{name}.limits.{key}`: `{}` is not an absolute path",
                        r.display()
                    )));
                }
            }
        }
        let all_limits = std::iter::once(("limits".to_owned(), &c.limits)).chain(
            c.token_limits
                .iter()
                .map(|(name, l)| (format!("tokens.{name}.limits"), l)),
        );
        let mut jobs_may_name = false;
        for (key, l) in all_limits {
            for p in &l.allowed_notify {
                crate::webhook::target::parse(p)
                    .map_err(|e| err(format!("`{key}.allowed_notify`: {e}")))?;
            }
            jobs_may_name |= !l.allowed_notify.is_empty();
        }
        c.notify
            .validate(jobs_may_name)
            .map_err(|e| err(e.to_string()))?;
        match (&c.tls_cert, &c.tls_key) {
            (Some(_), None) => return Err(err("`tls_cert` is set without `tls_key`".into())),
            (None, Some(_)) => return Err(err("`tls_key` is set without `tls_cert`".into())),
            _ => {}
        }
        if c.client_ca.is_some() && c.tls_cert.is_none() {
            return Err(err(
                "`client_ca` needs `tls_cert` and `tls_key` (client certificates are checked in TLS)"
                    .into(),
            ));
        }
        if c.listen.is_empty() && c.unix_socket.is_none() {
            return Err(err(
                "`listen` is empty and no `unix_socket` is set: nothing to listen on".into(),
            ));
        }
        Ok(c)
    }

    /// Loads `path`; a missing file at the default path means the defaults.
    pub fn load(path: &Path, explicit: bool) -> Result<Self, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Self::parse("", "(defaults)")
            }
            Err(e) => Err(ConfigError {
                path: path.display().to_string(),
                message: format!("failed to read: {e}"),
            }),
        }
    }

    /// The PostgreSQL pool this configuration asks for.
    pub fn pool_options(&self) -> crate::store::postgres::pool::PoolOptions {
        crate::store::postgres::pool::PoolOptions {
            size: self.postgres_pool_size,
            wait: self.postgres_pool_wait.0,
        }
    }

    /// The TLS files, when `tls_cert` and `tls_key` are set.
    pub fn tls_files(&self) -> Option<super::tls::TlsFiles> {
        Some(super::tls::TlsFiles {
            cert: self.tls_cert.clone()?,
            key: self.tls_key.clone()?,
            client_ca: self.client_ca.clone(),
        })
    }

    /// The limits of the jobs `token` submits: its `[tokens.NAME.limits]`, else `[limits]`.
    pub fn limits_for(&self, token: &str) -> &Limits {
        self.token_limits.get(token).unwrap_or(&self.limits)
    }

    /// The token file.
    pub fn token_path(&self) -> PathBuf {
        self.token_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join("token"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commented_default_file_is_the_defaults() {
        let from_file = ServiceConfig::parse(DEFAULT_CONFIG, "default").unwrap();
        let empty = ServiceConfig::parse("", "empty").unwrap();
        assert_eq!(from_file, empty);
        assert_eq!(empty.listen, "127.0.0.1:7979");
        assert_eq!(empty.limits.max_mode, Mode::WorkspaceWrite);
    }

    #[test]
    fn unknown_keys_and_bad_values_are_named() {
        let e = ServiceConfig::parse("[limits]\nmax_round = 3\n", "c.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_round") && e.contains("c.toml"), "{e}");
        let e = ServiceConfig::parse("max_concurrent_jobs = 0\n", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_concurrent_jobs"), "{e}");
        let e = ServiceConfig::parse("listen = \"localhost\"\n", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("listen"), "{e}");
        let e = ServiceConfig::parse(
            "database_url = \"postgres://ralph:s3cret@db/ralph?sslmode=sometimes\"\n",
            "c",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("database_url") && !e.contains("s3cret"), "{e}");
        let c = ServiceConfig::parse(
            "database_url = \"postgres://ralph@/ralph?host=/run/postgresql\"\n",
            "c",
        )
        .unwrap();
        assert_eq!(
            c.database_url.as_ref().map(DatabaseUrl::as_str),
            Some("postgres://ralph@/ralph?host=/run/postgresql")
        );
        let c = ServiceConfig::parse("database_url = \"postgres://r:s3cret@db/r\"\n", "c").unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
        for bad in ["postgres_pool_size = 0\n", "postgres_pool_size = 65\n"] {
            let e = ServiceConfig::parse(bad, "c").unwrap_err().to_string();
            assert!(e.contains("postgres_pool_size"), "{e}");
        }
        let e = ServiceConfig::parse("postgres_pool_wait = \"0s\"\n", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("postgres_pool_wait"), "{e}");
        // A syntax error shows the line with a caret under it, on its own lines...
        let e = ServiceConfig::parse("listen = \"127.0.0.1:1\"\nmax_concurrent_jobs = two\n", "c")
            .unwrap_err()
            .to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert!(e.contains("line 2"), "{e}");
        let code = lines
            .iter()
            .position(|l| l.contains("max_concurrent_jobs = two"));
        assert!(
            code.is_some_and(|c| lines.get(c + 1).is_some_and(|l| l.contains('^'))),
            "{e}"
        );
        // ...except a line that may hold a secret.
        let e = ServiceConfig::parse("database_url = postgres://r:s3cret@db/r\n", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1") && e.contains("database_url"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        for (bad, key) in [
            (
                "[provision]\nupload_retention = \"0s\"\n",
                "upload_retention",
            ),
            ("[limits]\nmax_upload_files = 0\n", "max_upload_files"),
        ] {
            let e = ServiceConfig::parse(bad, "c").unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
        let c = ServiceConfig::parse("[limits]\nmax_upload_bytes = \"2M\"\n", "c").unwrap();
        assert_eq!(c.limits.max_upload_bytes.0, 2 << 20);
        let e = ServiceConfig::parse("[limits]\nworkspace_roots = [\"srv\"]\n", "c")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workspace_roots"), "{e}");
    }
}
