//! Leftover containers: those a runner on this host created and whose owning process is gone
//! (killed with SIGKILL, crashed) are found by their labels and removed with force.

use std::collections::HashMap;

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use serde::Serialize;

use super::client::{self, Engine, EngineError, bounded};
use super::labels::{self, Owner};
use crate::error::SandboxError;

/// Which containers to look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// `io.ralph.runner` must equal this.
    pub runner: String,
}

impl Filter {
    /// The containers of this runner host.
    pub fn this_runner() -> Self {
        Self {
            runner: labels::runner_id(),
        }
    }
}

/// One ralph container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Leftover {
    /// Container id (short).
    pub id: String,
    /// Its job label.
    pub job: String,
    /// Its round label.
    pub round: String,
    /// Its state (running, exited, created, ...).
    pub state: String,
    /// Whether its owner process still runs (then it is not a leftover and stays).
    pub owner_alive: bool,
}

/// The ralph containers of `filter`, with whether their owners live.
pub async fn list(engine: &Engine, filter: &Filter) -> Result<Vec<Leftover>, EngineError> {
    let filters = HashMap::from([(
        "label".to_owned(),
        vec![format!("{}={}", labels::RUNNER, filter.runner)],
    )]);
    let opts = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    let found = bounded("list containers", engine.docker.list_containers(Some(opts))).await?;
    Ok(found
        .into_iter()
        .map(|c| {
            let l = c.labels.unwrap_or_default();
            let get = |k: &str| l.get(k).cloned().unwrap_or_default();
            Leftover {
                id: c.id.unwrap_or_default().chars().take(12).collect(),
                job: get(labels::JOB),
                round: get(labels::ROUND),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                owner_alive: Owner::decode(&get(labels::OWNER)).is_some_and(|o| o.is_alive()),
            }
        })
        .collect())
}

/// Removes (with force) every container of `filter` whose owner is gone; returns them.
pub async fn reap(engine: &Engine, filter: &Filter) -> Result<Vec<Leftover>, EngineError> {
    let mut removed = Vec::new();
    for c in list(engine, filter).await? {
        if c.owner_alive {
            continue;
        }
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match bounded(
            "remove a leftover container",
            engine.docker.remove_container(&c.id, Some(opts)),
        )
        .await
        {
            Ok(()) => removed.push(c),
            // Gone meanwhile (its own runner removed it).
            Err(e) if e.status() == Some(404) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Connects and reaps, from synchronous code (service start-up, `ralph doctor`): runs on a
/// thread of its own with its own runtime, so it works inside or outside a runtime.
pub fn reap_leftovers(filter: &Filter) -> Result<Vec<Leftover>, SandboxError> {
    on_own_runtime(filter, |engine, filter| Box::pin(reap(engine, filter)))
}

/// Lists this host's ralph containers from synchronous code (see [`reap_leftovers`]).
pub fn list_leftovers(filter: &Filter) -> Result<Vec<Leftover>, SandboxError> {
    on_own_runtime(filter, |engine, filter| Box::pin(list(engine, filter)))
}

type Job = for<'a> fn(
    &'a Engine,
    &'a Filter,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Vec<Leftover>, EngineError>> + Send + 'a>,
>;

fn on_own_runtime(filter: &Filter, job: Job) -> Result<Vec<Leftover>, SandboxError> {
    let filter = filter.clone();
    let handle = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SandboxError::Engine {
                message: format!("failed to start a runtime: {e}"),
            })?;
        rt.block_on(async {
            let engine = client::connect(&client::socket_path()).await?;
            job(&engine, &filter).await.map_err(SandboxError::from)
        })
    });
    handle.join().unwrap_or_else(|_| {
        Err(SandboxError::Engine {
            message: "the reaper thread panicked".into(),
        })
    })
}
