//! `ralph serve`: a queue of jobs run by the same engine as `ralph run`, an HTTP API to submit,
//! watch, cancel and resume them, crash recovery at start, and a drain on SIGTERM.
//!
//! - [`config`]: the configuration file and what a submitter may ask ([`admission`],
//!   [`path_admission`]).
//! - [`api`]: the HTTP/JSON API under `/v1`, `/healthz`, `/readyz`, `/metrics`, served by
//!   [`http_server`] (read timeouts, graceful shutdown).
//! - [`recovery`]: start-up reconciliation of what a dead instance left.
//! - `orphan_watch`: the periodic close of jobs whose runner died (hold free, lease expired).
//! - `scheduler`: which queued job starts next (concurrency, one job per workspace).
//! - [`auth`]: the generated first token; [`tokens`]: the named tokens and their [`scope`]s,
//!   [`token_config`] (`[tokens.NAME]`), [`token_api`] (`/v1/tokens`), [`rate_limit`].
//! - [`results`]: a job's patch, logs and artifacts through any host of a fleet (SPEC §11).
//! - [`uploads`]: `POST /v1/uploads` (a tree for `upload` jobs) and the uploads' retention.
//! - [`ui`]: the dashboard at `/ui` (read-only pages, a browser login, live logs; SPEC §13).
//! - [`tls`]: HTTPS for the TCP listener (mutual TLS with `client_ca`). [`notify`]: `sd_notify`.

pub mod admission;
pub mod api;
pub mod api_error;
pub mod auth;
pub mod batches;
pub mod config;
pub mod disk_room;
pub mod gateway_config;
pub mod http_server;
pub mod list_query;
pub mod log_follow;
pub mod notify;
mod orphan_watch;
pub mod path_admission;
pub mod provisioned;
pub mod rate_limit;
pub mod refusal_log;
pub mod repo_admission;
pub mod results;
mod retention;
mod scheduler;
pub mod scope;
pub mod tls;
pub mod tls_init;
pub mod token_api;
pub mod token_config;
pub mod tokens;
pub mod ui;
pub mod uploads;
pub mod webhooks;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{Notify, broadcast};

use crate::engine::{Cancel, Engine, EngineError};
use crate::host::{Host, HostHolds, HostOptions, Recovery, Role};
use crate::job::{FinishReason, Outcome};
use crate::metrics::{Metrics, MetricsObserver};
use crate::store::{Event, EventKind, JobState, JobView, Journal, Observer};
use config::ServiceConfig;

/// A failure to start or run the service.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// The token is unusable.
    #[error(transparent)]
    Token(#[from] auth::TokenError),
    /// The named tokens are unusable.
    #[error(transparent)]
    Tokens(#[from] tokens::TokensError),
    /// The TLS certificate, key or client CA is unusable.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// A non-loopback address without TLS.
    #[error(
        "refusing to listen on `{addr}` without TLS: the token, objectives and logs would cross the network in clear; set `tls_cert` and `tls_key` (see docs/operations.md), or `insecure_listen = true` to accept that"
    )]
    Insecure {
        /// The address.
        addr: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// A listener could not be opened.
    #[error("failed to listen on `{addr}`: {source}")]
    Listen {
        /// The address or socket path.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The sandbox policies are unusable.
    #[error(transparent)]
    Policy(#[from] ralph_sandbox::policy::PolicyError),
    /// The state directory, the store, the serve lock or the lease.
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Everything `ralph serve` needs to start.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Config file.
    pub config_path: PathBuf,
    /// Whether the config file was named explicitly (a missing one is then an error).
    pub explicit_config: bool,
    /// `--listen` override.
    pub listen: Option<String>,
    /// `--state-dir` override.
    pub state_dir: Option<PathBuf>,
    /// Where the sandbox policies may be overridden.
    pub policy_dir: PathBuf,
}

/// Forwards every journalled event to the API's followers.
struct Broadcast(broadcast::Sender<Event>);

impl Observer for Broadcast {
    fn on_event(&self, _view: &JobView, event: &Event) {
        let _ = self.0.send(event.clone());
    }
}

/// The running service.
pub struct Service {
    engine: Engine,
    config: RwLock<ServiceConfig>,
    options: ServeOptions,
    tokens: tokens::Tokens,
    tls: Option<Arc<tls::Reloadable>>,
    rates: rate_limit::RateLimiter,
    running: Mutex<HashMap<String, scheduler::RunningJob>>,
    /// Queued jobs found waiting for a workspace another process holds, and the holder's pid
    /// when that was logged (so each wait is logged once).
    waiting: Mutex<HashMap<String, Option<u32>>>,
    wake: Notify,
    draining: AtomicBool,
    ready: AtomicBool,
    events: broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
    /// This host's runner lease (PostgreSQL, renewed while the service lives) and the state
    /// directory's serve lock (SQLite: one `ralph serve` per directory).
    _holds: HostHolds,
    /// Held by a submission naming an upload from its check until its jobs are queued, and by
    /// the uploads' sweep while it decides and removes: an upload a job is being queued with
    /// is never swept between the two.
    uploads_gate: tokio::sync::Mutex<()>,
    /// The full state disk's log, at a bounded rate ([`disk_room`]).
    disk_log: disk_room::LogGate,
    sessions: ui::session::Sessions,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

pub use crate::host::SERVE_LOCK;

/// How often a job the engine could not finish is tried to be closed, and the pause between.
const FAIL_TRIES: u32 = 12;
const FAIL_PAUSE: Duration = Duration::from_secs(5);

/// Whether the engine stopped because another process changed the job (another runner sharing
/// the store): such a job is not this runner's to fail.
fn changed_by_another_runner(e: &EngineError) -> bool {
    matches!(
        e,
        EngineError::Store(crate::store::StoreError::Conflict { .. })
            | EngineError::Conflict { .. }
    )
}

impl Service {
    /// Loads the configuration, opens the store, recovers, and builds the service.
    pub fn start(options: ServeOptions) -> Result<Arc<Service>, ServiceError> {
        let mut config = ServiceConfig::load(&options.config_path, options.explicit_config)?;
        if let Some(l) = &options.listen {
            config.listen = l.clone();
        }
        if let Some(d) = &options.state_dir {
            config.state_dir = d.clone();
        }
        if !config.listen.is_empty()
            && config.tls_cert.is_none()
            && !tls::is_loopback(&config.listen)
        {
            if !config.insecure_listen {
                return Err(ServiceError::Insecure {
                    addr: config.listen.clone(),
                });
            }
            tracing::warn!(address = %config.listen, "insecure_listen = true: serving plain HTTP on the non-loopback address {}; tokens, objectives and logs cross the network in clear", config.listen);
        }
        let host = Host::open(&HostOptions {
            state_dir: &config.state_dir,
            database_url: config
                .database_url
                .as_ref()
                .map(config::DatabaseUrl::as_str),
            pool: config.pool_options(),
            role: Role::Serve,
            lease_timeout: config.lease_timeout.0,
        })?;
        let state_dir = host.state_dir.clone();
        config.state_dir = state_dir.clone();
        let store = host.store.clone();
        if config.database_url.is_some() {
            tracing::info!(store = %store.location(), "state store: {}", store.location());
        }
        let tls = config
            .tls_files()
            .map(tls::Reloadable::load)
            .transpose()?
            .map(Arc::new);
        let token = auth::load_or_create(&config.token_path())?;
        let tokens = tokens::Tokens::load(&token, &state_dir, &config.tokens)?;
        let policies = ralph_sandbox::policy::PolicySet::load(Some(&options.policy_dir))?;
        let ceilings = crate::job::Ceilings {
            max_rounds: config.limits.max_rounds,
            handoff_cap: usize::try_from(config.limits.max_handoff_cap.0).unwrap_or(usize::MAX),
        };
        let metrics = Arc::new(Metrics::new(true).map_err(|e| ServiceError::Other(e.to_string()))?);
        let (events, _) = broadcast::channel(4096);
        let mut observers: Vec<Arc<dyn Observer>> = vec![
            Arc::new(Broadcast(events.clone())),
            Arc::new(MetricsObserver(metrics.clone())),
        ];
        // Webhooks (SPEC §13): their attempts are journalled to the same observers.
        let jobs_may_name = !config.limits.allowed_notify.is_empty()
            || config
                .token_limits
                .values()
                .any(|l| !l.allowed_notify.is_empty());
        if let Some(notify) = config
            .notify
            .load(jobs_may_name)
            .map_err(|e| ServiceError::Other(e.to_string()))?
        {
            let notifier = crate::webhook::Notifier::new(notify, store.clone(), observers.clone())
                .map_err(|e| ServiceError::Other(e.to_string()))?;
            observers.push(Arc::new(webhooks::NotifyObserver::new(
                notifier,
                state_dir.clone(),
            )));
        }
        // Recovery before any work is taken.
        let report = host.recover(Recovery::All, &observers)?;
        for id in &report.interrupted {
            tracing::warn!(job_id = %id, "job {id}: closed as interrupted at start (its runner died)");
        }
        if !report.interrupted.is_empty()
            || report.helpers_killed > 0
            || report.cgroups_removed > 0
            || report.containers_removed > 0
            || report.scratch_removed > 0
            || report.overlays_unmounted > 0
        {
            tracing::warn!(
                interrupted = report.interrupted.len(),
                jobs = %report.interrupted.join(","),
                helpers_killed = report.helpers_killed,
                cgroups_removed = report.cgroups_removed,
                containers_removed = report.containers_removed,
                scratch_removed = report.scratch_removed,
                overlays_unmounted = report.overlays_unmounted,
                "recovered: {} job(s) interrupted ({}), {} orphaned helper(s) killed, {} leftover cgroup(s) removed, {} leftover container(s) removed, {} leftover private dir(s) removed, {} workspace overlay(s) unmounted",
                report.interrupted.len(),
                report.interrupted.join(", "),
                report.helpers_killed,
                report.cgroups_removed,
                report.containers_removed,
                report.scratch_removed,
                report.overlays_unmounted
            );
        } else {
            tracing::info!(interrupted = 0, "recovered: nothing to reconcile");
        }
        let (engine, holds) = host.into_engine(policies);
        let engine = engine
            .with_ceilings(ceilings)
            .with_observers(observers)
            .with_agent_user(config.agent_user.clone())
            .with_cache_budget(
                config
                    .cache_budget
                    .map_or(crate::cache::DEFAULT_BUDGET, |b| b.0),
            )
            .with_upstreams(config.gateway.upstreams())
            .with_provision(crate::provision::ProvisionConfig {
                allow_push: config.limits.allow_push,
                agent_user: config.agent_user.clone(),
                ..config.provision.clone()
            });
        Ok(Arc::new(Service {
            engine,
            config: RwLock::new(config),
            options,
            tokens,
            tls,
            rates: rate_limit::RateLimiter::default(),
            running: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            draining: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            metrics,
            events,
            _holds: holds,
            uploads_gate: tokio::sync::Mutex::new(()),
            disk_log: disk_room::LogGate::new(),
            sessions: ui::session::Sessions::default(),
        }))
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The API tokens.
    pub fn tokens(&self) -> &tokens::Tokens {
        &self.tokens
    }

    /// Takes `n` from `token`'s rate limit of `kind`, when its `[tokens.NAME]` sets one.
    pub fn check_rate(
        &self,
        token: &str,
        kind: rate_limit::Kind,
        n: u32,
    ) -> Result<(), api::ApiError> {
        let config = self.config();
        let Some(t) = config.tokens.get(token) else {
            return Ok(());
        };
        let per_minute = match kind {
            rate_limit::Kind::Requests => t.requests_per_minute,
            rate_limit::Kind::Jobs => t.jobs_per_minute,
        };
        let Some(per_minute) = per_minute else {
            return Ok(());
        };
        self.rates.take(token, kind, per_minute, n).map_err(|wait| {
            api::ApiError::rate_limited(
                format!(
                    "token `{token}` is over its rate limit (`tokens.{token}.{}` = {per_minute}): try again in {}s",
                    kind.key(),
                    wait.as_secs_f64().ceil()
                ),
                wait,
            )
        })
    }

    /// A copy of the configuration in force.
    pub fn config(&self) -> ServiceConfig {
        self.config
            .read()
            .map(|c| c.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Draining after SIGTERM: no new work is taken.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Ready to take work (recovered, listening, not draining).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && !self.draining.load(Ordering::SeqCst)
    }

    /// Wakes the scheduler (a job was queued or finished).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The metrics, with the job gauges brought up to date.
    pub fn metrics(&self) -> Result<String, String> {
        let store = self.engine.store();
        let queued = store
            .count_in_state(JobState::Queued)
            .map_err(|e| e.to_string())?;
        let running = store
            .count_in_state(JobState::Running)
            .map_err(|e| e.to_string())?;
        self.metrics.set_jobs(queued, running);
        self.metrics.encode().map_err(|e| e.to_string())
    }

    /// Follows journal events.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// The cancel switch of a running job.
    pub fn running_cancel(&self, id: &str) -> Option<Cancel> {
        self.running.lock().ok()?.get(id).map(|r| r.cancel.clone())
    }

    /// The slots of `max_concurrent_jobs` the running jobs take.
    fn running_slots(&self) -> usize {
        self.running
            .lock()
            .map(|m| m.values().map(|r| r.slots).sum())
            .unwrap_or_default()
    }

    fn running_ids(&self) -> Vec<String> {
        self.running
            .lock()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// [`Service::fail`], tried again for a while when the store cannot be written (e.g. the
    /// database is briefly down); a job still not closed then is left running in the store,
    /// and the next start's recovery closes it as interrupted.
    async fn fail_with_retries(&self, id: &str, message: &str) {
        for attempt in 1..=FAIL_TRIES {
            let e = match crate::store::journal::blocking(|| self.fail(id, message)) {
                Ok(()) => return,
                Err(e) => e,
            };
            if matches!(e, crate::store::StoreError::Conflict { .. }) {
                tracing::warn!(job_id = %id, error = %e, "job {id}: left as it is, another runner changed its journal: {e}");
                return;
            }
            if attempt == FAIL_TRIES {
                tracing::error!(job_id = %id, error = %e, "job {id}: failed to close it as an error ({e}); it stays running in the store until this service restarts");
                return;
            }
            tracing::warn!(job_id = %id, error = %e, "job {id}: failed to close it as an error ({e}); trying again in {}s", FAIL_PAUSE.as_secs());
            tokio::time::sleep(FAIL_PAUSE).await;
        }
    }

    /// Closes a job the engine could not finish (infrastructure failure). A job that runs
    /// under another runner is left alone.
    fn fail(&self, id: &str, message: &str) -> Result<(), crate::store::StoreError> {
        let mut j = Journal::open(self.engine.store().clone(), id, self.engine.observers())?;
        if j.view().state == JobState::Finished {
            return Ok(());
        }
        if j.view().state == JobState::Running
            && j.view().runner.as_ref() != Some(self.engine.runner())
        {
            tracing::warn!(job_id = %id, "job {id}: not closed as an error: it runs under another runner");
            return Ok(());
        }
        if j.view().state == JobState::Queued {
            j.record(EventKind::JobStarted {
                runner: self.engine.runner().clone(),
            })?;
        }
        crate::engine::close::close_job(
            &mut j,
            crate::engine::close::Ending::new(Outcome::Error, FinishReason::InternalError, message),
            &self.engine.job_dir(id),
        )?;
        Ok(())
    }

    /// Stops taking work and lets running jobs stop after their round; after `grace`, or on a
    /// second request, cancels them outright (their journal says which: "cancelled by SIGTERM
    /// (drain grace passed)", "cancelled by second SIGTERM"). `first` is the signal that
    /// started the drain. Returns when no job runs.
    async fn drain(
        self: &Arc<Self>,
        first: &'static str,
        mut again: tokio::sync::mpsc::Receiver<&'static str>,
    ) {
        self.draining.store(true, Ordering::SeqCst);
        notify::notify("STOPPING=1");
        let grace = self.config().drain_grace.0;
        let running: Vec<Cancel> = self
            .running
            .lock()
            .map(|m| m.values().map(|r| r.cancel.clone()).collect())
            .unwrap_or_default();
        tracing::info!(
            running = running.len(),
            grace = %crate::util::units::HumanDuration(grace),
            "draining: {} running job(s) may finish their round within {}",
            running.len(),
            crate::util::units::HumanDuration(grace)
        );
        for c in &running {
            c.drain(first);
        }
        let deadline = tokio::time::Instant::now() + grace;
        let mut hard = false;
        loop {
            if self.running_ids().is_empty() {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                () = tokio::time::sleep_until(deadline), if !hard => {
                    hard = true;
                    tracing::warn!("drain grace passed: cancelling the rounds still running");
                    self.cancel_all(&format!("{first} (drain grace passed)"));
                }
                Some(sig) = again.recv(), if !hard => {
                    hard = true;
                    tracing::warn!(signal = sig, "second {sig}: cancelling the running rounds now");
                    self.cancel_all(&format!("second {sig}"));
                }
            }
        }
    }

    fn cancel_all(&self, by: &str) {
        if let Ok(m) = self.running.lock() {
            for r in m.values() {
                r.cancel.cancel(by);
            }
        }
    }

    /// Re-reads the configuration (SIGHUP): limits and concurrency change; listeners do not.
    fn reload(&self) {
        match ServiceConfig::load(&self.options.config_path, self.options.explicit_config) {
            Ok(mut new) => {
                let old = self.config();
                new.listen = old.listen.clone();
                new.unix_socket = old.unix_socket.clone();
                new.state_dir = old.state_dir.clone();
                new.token_file = old.token_file.clone();
                new.database_url = old.database_url.clone();
                self.tokens.set_config(&new.tokens);
                match (&self.tls, new.tls_files()) {
                    (Some(tls), Some(files)) => match tls.reload(Some(&files)) {
                        Ok(()) => {
                            tracing::info!(cert = %files.cert.display(), "TLS certificate reloaded")
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "TLS certificate not reloaded, the old one stays: {e}")
                        }
                    },
                    (None, Some(_)) | (Some(_), None) => {
                        tracing::warn!(
                            "turning TLS on or off needs a restart; the listener stays as it is"
                        );
                        new.tls_cert = old.tls_cert.clone();
                        new.tls_key = old.tls_key.clone();
                        new.client_ca = old.client_ca.clone();
                    }
                    (None, None) => {}
                }
                if let Ok(mut c) = self.config.write() {
                    *c = new;
                }
                tracing::info!(config = %self.options.config_path.display(), "configuration reloaded");
                self.wake();
            }
            Err(e) => {
                tracing::error!(error = %e, "configuration not reloaded, the old one stays: {e}")
            }
        }
    }

    /// Serves until SIGTERM/SIGINT, then drains and returns.
    pub async fn serve(self: Arc<Self>) -> Result<(), ServiceError> {
        use tokio::signal::unix::{SignalKind, signal};
        let config = self.config();
        let router = api::router(self.clone());
        let shutdown = tokio_util::sync::CancellationToken::new();
        let header_timeout = config.header_read_timeout.0;
        let mut servers = Vec::new();
        if !config.listen.is_empty() {
            let listener = tokio::net::TcpListener::bind(&config.listen)
                .await
                .map_err(|source| ServiceError::Listen {
                    addr: config.listen.clone(),
                    source,
                })?;
            let addr = listener
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|_| config.listen.clone());
            if let Some(tls) = &self.tls {
                let mutual = if config.client_ca.is_some() {
                    " (client certificates required)"
                } else {
                    ""
                };
                tracing::info!(address = %format!("https://{addr}"), "listening on https://{addr}{mutual}");
                servers.push(tokio::spawn(http_server::serve_tls(
                    listener,
                    tls.clone(),
                    router.clone(),
                    header_timeout,
                    shutdown.clone(),
                )));
            } else {
                tracing::info!(address = %format!("http://{addr}"), "listening on http://{addr}");
                servers.push(tokio::spawn(http_server::serve(
                    listener,
                    router.clone(),
                    header_timeout,
                    shutdown.clone(),
                )));
            }
        }
        if let Some(path) = &config.unix_socket {
            let _ = std::fs::remove_file(path);
            let listener =
                tokio::net::UnixListener::bind(path).map_err(|source| ServiceError::Listen {
                    addr: path.display().to_string(),
                    source,
                })?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660));
            tracing::info!(address = %format!("unix://{}", path.display()), "listening on unix://{}", path.display());
            servers.push(tokio::spawn(http_server::serve(
                listener,
                router.clone(),
                header_timeout,
                shutdown.clone(),
            )));
        }
        let sig =
            |k| signal(k).map_err(|e| ServiceError::Other(format!("failed to watch signals: {e}")));
        let (mut term, mut int, mut hup) = (
            sig(SignalKind::terminate())?,
            sig(SignalKind::interrupt())?,
            sig(SignalKind::hangup())?,
        );
        // The socket scans' listings of the last run of this state directory (module doc of
        // `ralph_sandbox::sockets::memo`): the first scan stats the toolchains instead of
        // listing them.
        let listings = self
            .engine
            .state_dir()
            .join(ralph_sandbox::sockets::LISTINGS_FILE);
        crate::store::journal::blocking(|| ralph_sandbox::sockets::load_listings(&listings));
        self.ready.store(true, Ordering::SeqCst);
        notify::notify("READY=1");
        if let Some(every) = notify::watchdog_interval() {
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    notify::notify("WATCHDOG=1");
                }
            });
        }
        let scheduler = tokio::spawn(self.clone().schedule());
        let orphans = tokio::spawn(self.clone().watch_orphans());
        let retention = tokio::spawn(self.clone().keep_retention());
        let workspaces = tokio::spawn(self.clone().keep_workspaces());
        let uploads = tokio::spawn(self.clone().keep_uploads());
        let first = loop {
            tokio::select! {
                _ = term.recv() => break "SIGTERM",
                _ = int.recv() => break "SIGINT",
                _ = hup.recv() => self.reload(),
            }
        };
        tracing::info!(signal = first, "{first}: stopping (no new jobs)");
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            loop {
                let s = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                if tx.send(s).await.is_err() {
                    return;
                }
            }
        });
        self.drain(first, rx).await;
        scheduler.abort();
        orphans.abort();
        retention.abort();
        workspaces.abort();
        uploads.abort();
        shutdown.cancel();
        for s in servers {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
        if let Err(e) =
            crate::store::journal::blocking(|| ralph_sandbox::sockets::save_listings(&listings))
        {
            tracing::warn!(error = %e, "failed to keep the socket scans' listings in `{}`: {e}", listings.display());
        }
        tracing::info!("stopped");
        Ok(())
    }
}
