//! What a container does not show of what it mounts, and its scratch space: the engine's masked
//! kernel paths with the policy's hidden ones, the unix sockets found in the mounted trees
//! (masked unless granted), the HOME/TMPDIR tmpfs and the report directory's.

use crate::error::SandboxError;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::probe::FsProbe;
use crate::plan::sockets_detail;
use crate::policy::admit::Admitted;
use crate::policy::{Policy, kernel_paths};
use crate::sockets;
use crate::spec::SandboxRequest;

/// The container's masked paths; records the socket, scratch, report directory and secret
/// lines. A socket to mask whose path is not UTF-8 cannot be named to the engine (its API
/// takes strings; a lossy name masks nothing and leaves the socket connectable): the run is
/// refused, naming it.
pub(super) fn masked(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    admitted: &Admitted,
    e: &mut Enforcement,
) -> Result<Vec<String>, SandboxError> {
    let mut masked = masked_paths(policy);
    // Unix sockets in the mounted trees: masked unless granted.
    let candidates = std::iter::once(req.workspace.clone())
        .chain(req.read.iter().cloned())
        .chain(req.write.iter().cloned())
        .collect();
    let found = probe.scan_sockets(&sockets::roots(candidates));
    let before = masked.len();
    for s in found.sockets.iter().filter(|s| !req.sockets.contains(s)) {
        let Some(name) = s.to_str() else {
            return Err(SandboxError::unavailable(
                "unix sockets",
                format!(
                    "the socket {s:?} has a path that is not UTF-8, which a container's masked paths cannot name; remove it, or run with the native backend"
                ),
            ));
        };
        masked.push(name.to_owned());
    }
    e.record(
        Restriction::UnixSockets,
        if found.incomplete.is_empty() {
            Level::Full
        } else {
            Level::Partial
        },
        sockets_detail(
            masked.len() - before,
            req.sockets.len(),
            &found.incomplete,
            None,
        ),
    );
    e.record(
        Restriction::ScratchSpace,
        Level::Full,
        format!(
            "HOME, TMPDIR and /tmp: a tmpfs of {} bytes each",
            admitted.scratch_size
        ),
    );
    if let Some(dir) = &req.private.report {
        e.record(
            Restriction::ReportDir,
            Level::Full,
            crate::report_dir::describe(dir),
        );
    }
    e.record(
        Restriction::HiddenSecrets,
        Level::Full,
        format!(
            "the host's /etc, /root and home directories are not mounted (the image has its own); {} kernel path(s) masked",
            masked.len()
        ),
    );
    Ok(masked)
}

/// The engine's masked paths ([`kernel_paths::MASKED`], in every mode) plus the policy's hidden
/// kernel paths (under `/proc` and `/sys`), in every mode but full-access.
pub(super) fn masked_paths(policy: &Policy) -> Vec<String> {
    let mut out: Vec<String> = kernel_paths::MASKED
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    if !policy.filesystem.unrestricted {
        out.extend(
            policy
                .filesystem
                .hidden
                .iter()
                .filter(|p| p.starts_with("/proc") || p.starts_with("/sys"))
                .map(|p| p.display().to_string()),
        );
    }
    out.sort();
    out.dedup();
    out
}
