//! Leftover containers: those a runner on this host created and whose owning process is gone
//! (killed with SIGKILL, crashed) are found by their labels and removed with force. One still
//! running is stopping by itself (its init saw the runner's liveness FIFO close) and may be in
//! the middle of its round's clean-up: it is stopped with the grace its init was started with
//! (`docker stop -t`, the engine's SIGTERM changes nothing for an init already stopping) before
//! it is removed, so a reaper starting elsewhere on the host never cuts that grace short (issue
//! 27).

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::{
    ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
};
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
    /// The grace its init was started with (`--grace-ms` in its command line), if it says.
    #[serde(skip)]
    pub grace: Option<Duration>,
}

impl Leftover {
    /// A container of a dead runner that still runs: reaping it takes up to its grace.
    pub fn is_stopping(&self) -> bool {
        !self.owner_alive && self.state == "running"
    }
}

/// The grace assumed for a running leftover whose command line names none (the engine's tini
/// fallback, an older init): the engine's own default stop timeout.
pub const FALLBACK_GRACE: Duration = Duration::from_secs(10);

/// The grace in a container's command line as the engine lists it (`--grace-ms N`, see
/// [`super::init::command_line`]).
pub fn grace_of_command(command: &str) -> Option<Duration> {
    let mut words = command.split_whitespace();
    while let Some(w) = words.next() {
        if w == "--grace-ms" {
            return words
                .next()
                .and_then(|ms| ms.parse::<u64>().ok())
                .map(Duration::from_millis);
        }
        if w == "--" {
            break;
        }
    }
    None
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
                grace: c.command.as_deref().and_then(grace_of_command),
            }
        })
        .collect())
}

/// Removes (with force) every container of `filter` whose owner is gone; returns them. One
/// still running is first stopped with its grace (all of them at once), so this takes up to
/// the longest such grace. Fails only when the containers cannot be listed: a container that
/// cannot be removed does not keep the others (each such failure is returned in
/// [`Reaped::failed`]), and one another party removes meanwhile (its own runner, the engine's
/// AutoRemove: 404 or 409 "removal already in progress") is simply not counted.
pub async fn reap(engine: &Engine, filter: &Filter) -> Result<Reaped, EngineError> {
    let gone: Vec<Leftover> = list(engine, filter)
        .await?
        .into_iter()
        .filter(|c| !c.owner_alive)
        .collect();
    let results =
        futures_util::future::join_all(gone.into_iter().map(|c| reap_one(engine, c))).await;
    let mut reaped = Reaped::default();
    for r in results {
        match r {
            Ok(Some(c)) => reaped.removed.push(c),
            Ok(None) => {}
            Err((c, e)) => reaped.failed.push((c, e.to_string())),
        }
    }
    Ok(reaped)
}

/// What [`reap`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reaped {
    /// Leftovers removed.
    pub removed: Vec<Leftover>,
    /// Leftovers that could not be removed, with the engine's answer.
    pub failed: Vec<(Leftover, String)>,
}

/// Stops `c` with its grace when it still runs, then removes it; `None` when it was gone
/// meanwhile or another party is removing it.
async fn reap_one(
    engine: &Engine,
    c: Leftover,
) -> Result<Option<Leftover>, (Leftover, EngineError)> {
    if c.is_stopping() {
        let grace = c.grace.unwrap_or(FALLBACK_GRACE);
        let opts = StopContainerOptions {
            t: Some(i32::try_from(grace.as_millis().div_ceil(1000)).unwrap_or(i32::MAX)),
            signal: None,
        };
        // The engine answers once the container has ended (or it killed it at the end of the
        // grace): bounded by the grace on top of the usual request bound. Not running any more
        // (304), gone (404) or an error: the removal below settles it.
        let _ = tokio::time::timeout(
            grace + super::client::REQUEST_TIMEOUT,
            engine.docker.stop_container(&c.id, Some(opts)),
        )
        .await;
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
        Ok(()) => Ok(Some(c)),
        Err(e) if removed_elsewhere(e.status()) => Ok(None),
        Err(e) => Err((c, e)),
    }
}

/// Whether a removal's answer means another party removed the container (404) or is removing
/// it (409: "removal of container … is already in progress", e.g. the engine's AutoRemove of a
/// container whose init just ended).
fn removed_elsewhere(status: Option<u16>) -> bool {
    matches!(status, Some(404 | 409))
}

/// Connects and reaps, from synchronous code (service start-up, `ralph doctor`): runs on a
/// thread of its own with its own runtime, so it works inside or outside a runtime.
pub fn reap_leftovers(filter: &Filter) -> Result<Reaped, SandboxError> {
    on_own_runtime(filter, |engine, filter| Box::pin(reap(engine, filter)))
}

/// Lists this host's ralph containers from synchronous code (see [`reap_leftovers`]).
pub fn list_leftovers(filter: &Filter) -> Result<Vec<Leftover>, SandboxError> {
    on_own_runtime(filter, |engine, filter| Box::pin(list(engine, filter)))
}

type Job<T> = for<'a> fn(
    &'a Engine,
    &'a Filter,
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<T, EngineError>> + Send + 'a>,
>;

fn on_own_runtime<T: Send + 'static>(filter: &Filter, job: Job<T>) -> Result<T, SandboxError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_is_read_from_the_init_command_line_only() {
        let line = super::super::init::command_line(
            Duration::from_millis(7_500),
            None,
            None,
            &[],
            &["sh".into(), "-c".into(), "x --grace-ms 1".into()],
        )
        .join(" ");
        assert_eq!(grace_of_command(&line), Some(Duration::from_millis(7_500)));
        // The command's own words after `--` are not the init's.
        assert_eq!(grace_of_command("/bin/sh -- x --grace-ms 1"), None);
        assert_eq!(grace_of_command("tini -- sleep 300"), None);
        assert_eq!(grace_of_command("/.ralph-init --grace-ms"), None);
    }
}
