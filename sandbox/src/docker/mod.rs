//! The docker backend: a fresh hardened container per run, through the Docker Engine API.
//!
//! ```text
//! spawn: plan (pure) ─▶ placeholders, chown ─▶ create ─▶ attach ─▶ start ─┐
//! wait:  wait ◀─ timeout / cancel: kill TERM, grace, kill KILL ◀──────────┘
//!        ─▶ drain output ─▶ inspect (exit code, OOMKilled) ─▶ remove (force)
//! ```
//!
//! Every path is mounted at its host path, so the round's environment (`RALPH_WORKSPACE`, the
//! prompt, report and usage files, HOME, TMPDIR) means the same inside. A container that was
//! created is removed with force on every path out, errors included; one whose runner was killed
//! is found by its labels ([`labels`]) and removed by [`reap`] at the next start.
//!
//! - [`plan`]: request + policy → mounts, user, limits, enforcement (pure).
//! - [`container`]: the create request (every hardening option).
//! - [`seccomp`]: the profile (`policies/docker-seccomp.json` + the mode's deny list).
//! - [`client`]: connection, API version negotiation, bounded requests.
//! - [`image`]: missing images (never pulled). [`labels`], [`reap`]: leftovers.
//! - [`init`]: ralph's own pid 1 in the container (stops with the grace, also when the runner
//!   is gone or past a backstop deadline); [`init_status`]: its report to the runner (exec
//!   failure, CPU time and peak memory), on a channel the command cannot forge.
//! - [`run`]: one container's life; [`handle`]: removal on every way out; [`streams`]: its
//!   stdin and output. [`doctor`]: what `ralph doctor` reports.

pub mod client;
pub mod container;
pub mod doctor;
pub mod gateway;
pub mod handle;
pub mod idmap;
pub mod image;
pub mod init;
pub mod init_status;
pub mod labels;
pub mod plan;
pub mod reap;
pub mod run;
pub mod seccomp;
pub mod streams;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::OnceCell;

use crate::backend::{ExecIo, Running, Sandbox, SpawnFuture};
use crate::error::SandboxError;
use crate::mode::BackendKind;
use crate::policy::PolicySet;
use crate::spec::{ExecSpec, SandboxRequest};

pub use client::Engine;
pub use plan::{ContainerPlan, DEFAULT_IMAGE};
pub use reap::{Filter, Leftover, Reaped, list_leftovers, reap_leftovers};
pub use run::DockerRun;

/// Runs commands in containers.
#[derive(Clone, Debug)]
pub struct DockerBackend {
    policies: Arc<PolicySet>,
    socket: PathBuf,
    engine: Arc<OnceCell<Engine>>,
    runner: String,
    owner: labels::Owner,
    reap_first: bool,
    reaped: Arc<AtomicBool>,
    init_program: Option<PathBuf>,
}

impl DockerBackend {
    /// A backend on the engine at `DOCKER_HOST` (or `/var/run/docker.sock`), enforcing
    /// `policies`. Nothing is contacted until the first run.
    pub fn new(policies: Arc<PolicySet>) -> Self {
        Self {
            policies,
            socket: client::socket_path(),
            engine: Arc::new(OnceCell::new()),
            runner: labels::runner_id(),
            owner: labels::Owner::current(),
            reap_first: false,
            reaped: Arc::new(AtomicBool::new(false)),
            init_program: None,
        }
    }

    /// Runs `program` (the static `ralph` executable) as the containers' init
    /// (`ralph __container-init`, see [`init`]): every process gets the kill grace, and a
    /// container stops itself when the runner dies or past its own deadline. Without it the
    /// engine's init (tini) is used, which signals only the command.
    pub fn with_init_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.init_program = Some(program.into());
        self
    }

    /// Also removes this host's leftover containers (of dead runners), in the background, the
    /// first time a container is started (long-lived runners: `ralph run`, `ralph serve`).
    pub fn reaping_leftovers(mut self) -> Self {
        self.reap_first = true;
        self
    }

    /// The policies in force.
    pub fn policies(&self) -> &PolicySet {
        &self.policies
    }

    /// The connected engine (connected and negotiated on first use).
    pub async fn engine(&self) -> Result<&Engine, SandboxError> {
        self.engine
            .get_or_try_init(|| client::connect(&self.socket))
            .await
    }

    /// Resolves the plan for `req`, failing closed when it cannot be enforced.
    pub fn plan(&self, req: &SandboxRequest) -> Result<ContainerPlan, SandboxError> {
        self.plan_seen(&crate::plan::probe::HostFs, req)
    }

    /// [`Self::plan`] with the host's filesystem seen through `probe`.
    fn plan_seen(
        &self,
        probe: &dyn crate::plan::probe::FsProbe,
        req: &SandboxRequest,
    ) -> Result<ContainerPlan, SandboxError> {
        let policy = self.policies.for_request(req.mode)?;
        let sockets = plan::engine_sockets(&self.socket);
        let size = crate::policy::host_share::HostSize::probe();
        let runner = plan::Runner {
            sockets: &sockets,
            euid: nix::unistd::geteuid().as_raw(),
            nofile_hard: nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                .map_or(u64::MAX, |(_, hard)| hard),
            size: &size,
        };
        plan::resolve_with(probe, policy, req, &runner)
    }
}

impl Sandbox for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// Checks up front what can be checked without the engine (the engine itself is checked
    /// when the first container is created).
    fn preflight(&self, req: &SandboxRequest) -> Result<(), SandboxError> {
        self.plan_seen(&crate::plan::probe::PreflightFs, req)
            .map(|_| ())
    }

    /// What the container is shown of the host ([`plan::can_see`]): its bind mounts, less the
    /// policy's hidden paths. The image's own files are not the host's.
    fn can_see(&self, req: &SandboxRequest, path: &Path) -> Result<bool, SandboxError> {
        let policy = self.policies.for_request(req.mode)?;
        Ok(plan::can_see(policy, req, path))
    }

    fn spawn<'a>(&'a self, spec: &'a ExecSpec, io: ExecIo) -> SpawnFuture<'a> {
        Box::pin(async move {
            let run = self.start(spec, io).await?;
            Ok(Box::new(run) as Box<dyn Running>)
        })
    }
}

impl DockerBackend {
    /// Starts `spec` in a new container ([`Sandbox::spawn`], as the concrete run).
    async fn start(&self, spec: &ExecSpec, io: ExecIo) -> Result<DockerRun, SandboxError> {
        crate::native::validate(spec)?;
        let plan = self.plan(&spec.sandbox)?;
        let engine = self.engine().await?;
        if self.reap_first && !self.reaped.swap(true, Ordering::SeqCst) {
            let (engine, filter) = (
                engine.clone(),
                reap::Filter {
                    runner: self.runner.clone(),
                },
            );
            tokio::spawn(async move {
                match reap::reap(&engine, &filter).await {
                    Ok(reaped) => {
                        for c in reaped.removed {
                            eprintln!(
                                "ralph: removed leftover container {} (job {}, round {}) of a runner that is gone",
                                c.id, c.job, c.round
                            );
                        }
                        for (c, e) in reaped.failed {
                            eprintln!(
                                "ralph: could not remove leftover container {} (job {}, round {}): {e}",
                                c.id, c.job, c.round
                            );
                        }
                    }
                    Err(e) => eprintln!("ralph: could not list leftover containers: {e}"),
                }
            });
        }
        let labels = labels::for_spec(spec, &self.runner, &self.owner);
        run::start(engine, plan, spec, io, labels, self.init_program.as_deref()).await
    }
}
