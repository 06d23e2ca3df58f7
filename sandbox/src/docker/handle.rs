//! A created container as a value: it is removed with force when dropped unless it was
//! removed already, so that no path out of a run (an error, a dropped run) leaves it behind.

use bollard::query_parameters::{KillContainerOptions, RemoveContainerOptions};

use super::client::{Engine, EngineError, bounded};

/// How long the engine's own removal (AutoRemove) may take before the runner says so.
const GONE_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// A created container, removed with force when dropped while armed.
#[derive(Debug)]
pub struct Container {
    /// The engine.
    pub engine: Engine,
    /// The container's id.
    pub id: String,
    /// Removed when dropped.
    pub armed: bool,
}

impl Container {
    /// Removes it (with force); gone already is fine.
    pub async fn remove(&mut self) -> Result<(), EngineError> {
        let opts = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        match bounded(
            "remove the container",
            self.engine.docker.remove_container(&self.id, Some(opts)),
        )
        .await
        {
            Ok(()) => {}
            Err(e) if e.status() == Some(404) => {}
            // The engine is removing it already (AutoRemove): gone once it says so.
            Err(e) if e.status() == Some(409) => self.until_gone().await?,
            Err(e) => return Err(e),
        }
        self.armed = false;
        Ok(())
    }

    /// Waits until the engine no longer knows the container, within [`GONE_WITHIN`].
    async fn until_gone(&self) -> Result<(), EngineError> {
        let deadline = tokio::time::Instant::now() + GONE_WITHIN;
        loop {
            match bounded(
                "inspect the container",
                self.engine.docker.inspect_container(&self.id, None),
            )
            .await
            {
                Err(e) if e.status() == Some(404) => return Ok(()),
                Err(e) => return Err(e),
                Ok(_) if tokio::time::Instant::now() >= deadline => {
                    return Err(EngineError::Timeout {
                        action: "remove the container",
                        after: GONE_WITHIN,
                    });
                }
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(25)).await,
            }
        }
    }

    /// Sends `signal` to its init; a container that is not running any more is fine.
    pub async fn kill(&self, signal: &str) {
        let opts = KillContainerOptions {
            signal: signal.to_owned(),
        };
        // Not running any more (409) or gone (404): the wait ends on its own.
        let _ = bounded(
            "signal the container",
            self.engine.docker.kill_container(&self.id, Some(opts)),
        )
        .await;
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // An error or a dropped run left it: remove it on a thread of its own (no runtime may
        // be running here, or the current one may be shutting down).
        let (docker, id) = (self.engine.docker.clone(), self.id.clone());
        let _ = std::thread::Builder::new()
            .name("ralph-docker-rm".into())
            .spawn(move || {
                let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                else {
                    return;
                };
                rt.block_on(async move {
                    let opts = RemoveContainerOptions {
                        force: true,
                        v: true,
                        ..Default::default()
                    };
                    let _ = bounded(
                        "remove the container",
                        docker.remove_container(&id, Some(opts)),
                    )
                    .await;
                });
            })
            .map(|t| t.join());
    }
}
