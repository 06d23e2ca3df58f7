//! What `ralph doctor` says about the docker backend: the engine and its API version, whether
//! the image exists, and the ralph containers on this host (leftovers of runners that are gone).

use serde::Serialize;

use super::client::{self, bounded};
use super::reap::{self, Filter, Leftover};
use super::{image, labels};

/// The docker part of the doctor's report.
#[derive(Clone, Debug, Serialize)]
pub struct DockerReport {
    /// The socket.
    pub socket: String,
    /// "engine 20.10.24, API 1.41 (negotiated 1.41)", or why the engine is unusable.
    pub engine: Result<String, String>,
    /// The image checked.
    pub image: String,
    /// Its id, or why it cannot be used.
    pub image_status: Result<String, String>,
    /// This runner's id (the `io.ralph.runner` label).
    pub runner: String,
    /// This host's ralph containers (with `reap`: those removed).
    pub containers: Result<Vec<Leftover>, String>,
}

impl DockerReport {
    /// Whether the engine and the image are usable.
    pub fn ok(&self) -> bool {
        self.engine.is_ok() && self.image_status.is_ok()
    }
}

/// Checks the engine, `image`, and lists (or, with `reap`, removes) leftovers. Runs on a thread
/// of its own with its own runtime; every request is bounded in time.
pub fn check(image_name: &str, reap_them: bool) -> DockerReport {
    let socket = client::socket_path();
    let image_name = image_name.to_owned();
    let runner = labels::runner_id();
    let (s, i, r) = (socket.clone(), image_name.clone(), runner.clone());
    let joined = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(rt.block_on(async move {
            let engine = match client::connect(&s).await {
                Ok(e) => e,
                Err(e) => {
                    let why = e.to_string();
                    return (Err(why.clone()), Err(why.clone()), Err(why));
                }
            };
            let version = bounded("read the engine version", engine.docker.version())
                .await
                .map(|v| {
                    format!(
                        "engine {}, API {} (negotiated {}.{}; ralph needs {}.{}+)",
                        v.version.unwrap_or_default(),
                        v.api_version.unwrap_or_default(),
                        engine.api.0,
                        engine.api.1,
                        client::MIN_API.0,
                        client::MIN_API.1
                    )
                })
                .map_err(|e| e.to_string());
            let img = match image::find(&engine, &i).await {
                Ok(Some(id)) => Ok(id),
                Ok(None) => Err(image::missing(&i).to_string()),
                Err(e) => Err(e.to_string()),
            };
            let filter = Filter { runner: r };
            let containers = if reap_them {
                reap::reap(&engine, &filter).await.map(|r| r.removed)
            } else {
                reap::list(&engine, &filter).await
            }
            .map_err(|e| e.to_string());
            (version, img, containers)
        }))
    })
    .join();
    let (engine, image_status, containers) = match joined {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => (Err(e.clone()), Err(e.clone()), Err(e)),
        Err(_) => {
            let e = "the docker check panicked".to_owned();
            (Err(e.clone()), Err(e.clone()), Err(e))
        }
    };
    DockerReport {
        socket: socket.display().to_string(),
        engine,
        image: image_name,
        image_status,
        runner,
        containers,
    }
}
