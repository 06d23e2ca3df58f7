//! The job's own paths checked on the host, with the same refusals on both backends: a
//! `--read` path exists, a `--write` path is a directory, a `--socket` path is a unix socket, a
//! tree's owner can be read. Each backend calls them in its own order.

use std::path::Path;

use super::probe::{FsProbe, Kind};
use crate::error::SandboxError;

/// A `--read` path must exist (a dangling symlink counts).
pub(crate) fn check_read(probe: &dyn FsProbe, p: &Path) -> Result<(), SandboxError> {
    if probe.exists(p) {
        return Ok(());
    }
    Err(SandboxError::invalid(
        "read",
        format!("`{}` does not exist", p.display()),
    ))
}

/// A `--write` path must be a directory (following symlinks).
pub(crate) fn check_write(probe: &dyn FsProbe, p: &Path) -> Result<(), SandboxError> {
    if probe.is_dir(p) {
        return Ok(());
    }
    Err(SandboxError::invalid(
        "write",
        format!("`{}` is not a directory", p.display()),
    ))
}

/// A `--socket` path must be a unix socket (not following a symlink).
pub(crate) fn check_socket(probe: &dyn FsProbe, p: &Path) -> Result<(), SandboxError> {
    if probe.kind(p) == Some(Kind::Socket) {
        return Ok(());
    }
    Err(SandboxError::invalid(
        "socket",
        format!("`{}` is not a unix socket", p.display()),
    ))
}

/// The owner (uid, gid) of `p`, a refusal naming `field` when it cannot be read.
pub(crate) fn owner(
    probe: &dyn FsProbe,
    p: &Path,
    field: &str,
) -> Result<(u32, u32), SandboxError> {
    probe
        .owner(p)
        .map_err(|e| SandboxError::invalid(field, format!("`{}`: {e}", p.display())))
}
