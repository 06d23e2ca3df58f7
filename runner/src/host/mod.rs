//! One start-up for `ralph run` and `ralph serve`: the private state directory, the store in
//! it (or PostgreSQL), the serve lock of a SQLite directory, this runner's identity and lease,
//! the engine over them, and the reconciliation of what dead runners left ([`recovery`]).
//!
//! The two commands differ only in what they ask for ([`HostOptions`]): `serve` takes the
//! directory's serve lock and the full recovery (leftover helpers, cgroups, containers,
//! overlays); `run` shares the directory with a service and other runs, and closes only the
//! jobs of dead runners and their scratch.

pub mod recovery;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ralph_sandbox::policy::PolicySet;

use crate::engine::{Engine, RunnerEnv, Sandboxes};
use crate::store::hold::{ExclusiveFile, HoldError};
use crate::store::lease::LeaseGuard;
use crate::store::postgres::pool::PoolOptions;
use crate::store::{Observer, RunnerInfo, Store, StoreError};

/// The serve lock of a SQLite state directory.
pub const SERVE_LOCK: &str = "serve.lock";

/// What a command asks of its host.
#[derive(Debug)]
pub struct HostOptions<'a> {
    /// The state directory (created private if missing; relative to the working directory).
    pub state_dir: &'a Path,
    /// PostgreSQL instead of the directory's SQLite file.
    pub database_url: Option<&'a str>,
    /// The PostgreSQL pool's size and wait bound.
    pub pool: PoolOptions,
    /// Which command this is.
    pub role: Role,
    /// How long this runner's PostgreSQL lease lives unrenewed.
    pub lease_timeout: Duration,
}

/// Which command opens the host. `serve` is the directory's only service (SQLite: the serve
/// lock) and its runner record names the state directory; `run` shares the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `ralph run`.
    Run,
    /// `ralph serve`.
    Serve,
}

impl Role {
    /// The runner record's role.
    pub fn name(self) -> &'static str {
        match self {
            Role::Run => "run",
            Role::Serve => "serve",
        }
    }
}

/// Why a host could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The state directory could not be created private.
    #[error(transparent)]
    CreateDir(StoreError),
    /// The state directory could not be resolved.
    #[error("failed to resolve `{}`: {source}", path.display())]
    Resolve {
        /// The directory as given.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The store could not be opened.
    #[error(transparent)]
    Open(StoreError),
    /// Another `ralph serve` holds this SQLite state directory.
    #[error("{source} (another `ralph serve` runs on this state directory)")]
    Busy {
        /// Whose hold.
        source: HoldError,
    },
    /// The runner's lease could not be taken.
    #[error(transparent)]
    Lease(StoreError),
}

/// An opened host: the state directory, the store, and this runner's identity and holds.
#[derive(Debug)]
pub struct Host {
    /// The state directory, absolute and resolved.
    pub state_dir: PathBuf,
    /// The store.
    pub store: Arc<Store>,
    /// This runner.
    pub runner: RunnerInfo,
    /// PostgreSQL: this runner's lease, renewed while it is held.
    lease: Option<LeaseGuard>,
    /// SQLite, `exclusive`: the serve lock.
    serve_lock: Option<ExclusiveFile>,
}

impl Host {
    /// Creates (private) and resolves the state directory, opens the store, takes the serve
    /// lock when asked, and starts this runner's lease.
    pub fn open(o: &HostOptions<'_>) -> Result<Self, HostError> {
        // Whatever the store, the rounds' files live under it and are named to them as text:
        // a path that is not (as given, or as resolved) is refused before anything is made.
        let text = |p: &Path| crate::store::state_dir_is_text(p).map_err(HostError::Open);
        text(o.state_dir)?;
        crate::store::sqlite::create_private_dir(o.state_dir).map_err(HostError::CreateDir)?;
        let state_dir =
            std::fs::canonicalize(o.state_dir).map_err(|source| HostError::Resolve {
                path: o.state_dir.to_path_buf(),
                source,
            })?;
        text(&state_dir)?;
        let store = Arc::new(
            Store::open_with(&state_dir, o.database_url, o.pool).map_err(HostError::Open)?,
        );
        let serve_lock = if o.role == Role::Serve && store.is_sqlite() {
            let what = format!("the state directory `{}`", state_dir.display());
            Some(
                ExclusiveFile::try_acquire(&state_dir.join(SERVE_LOCK), &what)
                    .map_err(|source| HostError::Busy { source })?,
            )
        } else {
            None
        };
        let mut runner = RunnerInfo::current(o.role.name());
        if o.role == Role::Serve {
            runner = runner.with_state_dir(&state_dir);
        }
        let lease = store
            .start_lease(&runner, o.lease_timeout)
            .map_err(HostError::Lease)?;
        Ok(Self {
            state_dir,
            store,
            runner,
            lease,
            serve_lock,
        })
    }

    /// Closes as `interrupted` the jobs whose runner died and reaps what it left: for
    /// `scope` [`Recovery::Jobs`] their scratch and fan-out attempts, for [`Recovery::All`]
    /// also leftover helpers, cgroups, containers and overlays ([`recovery::recover`]).
    pub fn recover(
        &self,
        scope: Recovery,
        observers: &[Arc<dyn Observer>],
    ) -> Result<recovery::RecoveryReport, StoreError> {
        recovery::recover(&self.store, &self.state_dir, &self.runner, observers, scope)
    }

    /// The engine of this host, running rounds with `policies`, and the host's holds (the
    /// serve lock, the lease), to keep while the engine runs.
    pub fn into_engine(self, policies: PolicySet) -> (Engine, HostHolds) {
        self.into_engine_with_standby(policies, None)
    }

    /// [`Host::into_engine`], the native backend's standby helper being `standby`'s when given
    /// (started before the host was opened: `ralph run`).
    pub fn into_engine_with_standby(
        self,
        policies: PolicySet,
        standby: Option<Arc<ralph_sandbox::native::standby::Slot>>,
    ) -> (Engine, HostHolds) {
        let engine = Engine::new(
            self.store,
            Sandboxes::with_native_standby("/proc/self/exe", policies, standby),
            self.state_dir,
            self.runner,
            RunnerEnv::capture(),
        );
        (
            engine,
            HostHolds {
                _lease: self.lease,
                _serve_lock: self.serve_lock,
            },
        )
    }
}

/// What a host holds while it lives (the lease, the serve lock): kept as long as the command
/// runs, released on drop.
#[derive(Debug)]
pub struct HostHolds {
    _lease: Option<LeaseGuard>,
    _serve_lock: Option<ExclusiveFile>,
}

/// How much of what dead runners left a start-up reconciles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Their jobs (closed as interrupted), scratch and fan-out attempts: `ralph run`, which
    /// shares the host with services and other runs and must not wait for their rounds' grace.
    Jobs,
    /// Also their sandbox helpers, cgroups, containers, idmapped mounts and workspace
    /// overlays: `ralph serve`.
    All,
}
