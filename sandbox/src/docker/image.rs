//! Images: never pulled (no registry is assumed reachable). A missing image is a clear
//! "unavailable" naming the image and how to build it offline.

use super::client::{Engine, EngineError, bounded};
use crate::error::SandboxError;

/// How to get the default image without a registry.
pub const BUILD_HINT: &str = "build it with `images/build-offline.sh` (ralph never pulls images)";

/// The error for an image the engine does not have.
pub fn missing(image: &str) -> SandboxError {
    SandboxError::unavailable(
        format!("the container image `{image}`"),
        format!("the engine has no image `{image}`; {BUILD_HINT}"),
    )
}

/// Whether the engine has `image` (its id when it does).
pub async fn find(engine: &Engine, image: &str) -> Result<Option<String>, EngineError> {
    match bounded("inspect the image", engine.docker.inspect_image(image)).await {
        Ok(i) => Ok(Some(i.id.unwrap_or_default())),
        Err(e) if e.status() == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}
