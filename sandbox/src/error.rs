//! Errors of the sandbox crate, one enum, classified so callers can map them to exit codes.

use std::io;
use std::path::PathBuf;

/// Which kind of failure an error is, for exit-code mapping by callers.
///
/// Deliberately exhaustive (no `#[non_exhaustive]`, unlike the crate's other public errors):
/// the runner maps each class to an exit code and a finish reason with a `match` that must stop
/// compiling when a class is added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// The requested isolation cannot be enforced on this host (SPEC exit 69).
    Unavailable,
    /// The request itself is wrong (SPEC exit 64).
    Usage,
    /// Something broke in the runner or the host (SPEC exit 70).
    Internal,
}

/// A failure to run a command in the sandbox. Exhaustive for the same reason as
/// [`ErrorClass`].
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A requested restriction cannot be enforced; nothing ran.
    #[error("sandbox unavailable: cannot enforce {restriction}: {reason}")]
    Unavailable {
        /// The restriction that cannot be enforced.
        restriction: String,
        /// Why, in the host's terms.
        reason: String,
    },
    /// The request is invalid.
    #[error("invalid sandbox request: {field}: {message}")]
    InvalidRequest {
        /// The offending field or flag.
        field: String,
        /// What was expected.
        message: String,
    },
    /// The helper process could not be started.
    #[error("failed to start the sandbox helper `{exe}`: {source}")]
    SpawnHelper {
        /// The helper executable.
        exe: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The helper ended without writing its result.
    #[error("the sandbox helper ended without a result ({status})")]
    HelperLost {
        /// The helper's own exit status.
        status: String,
    },
    /// The helper's result could not be read.
    #[error("failed to read the sandbox result `{path}`: {message}")]
    BadResult {
        /// Where the result was expected.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The helper reported an internal failure.
    #[error("the sandbox helper failed: {message}")]
    Helper {
        /// The helper's message.
        message: String,
    },
    /// The container engine failed a request (the engine is there, but broke).
    #[error("the container engine failed: {message}")]
    Engine {
        /// The request and the engine's answer.
        message: String,
    },
    /// An I/O operation around the run failed.
    #[error("failed to {action} `{path}`: {source}")]
    Io {
        /// What was being done ("create", "read", ...).
        action: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl SandboxError {
    /// The failure's class, for exit codes.
    pub fn class(&self) -> ErrorClass {
        match self {
            SandboxError::Unavailable { .. } => ErrorClass::Unavailable,
            SandboxError::InvalidRequest { .. } => ErrorClass::Usage,
            SandboxError::SpawnHelper { .. }
            | SandboxError::HelperLost { .. }
            | SandboxError::BadResult { .. }
            | SandboxError::Helper { .. }
            | SandboxError::Engine { .. }
            | SandboxError::Io { .. } => ErrorClass::Internal,
        }
    }

    /// A short, bounded name for why the set-up failed, for metric labels (one of
    /// [`SETUP_FAILURE_REASONS`]); the full message stays in the journal.
    pub fn reason_label(&self) -> &'static str {
        match self {
            SandboxError::Unavailable { restriction, .. } => restriction_label(restriction),
            SandboxError::InvalidRequest { .. } => "invalid_request",
            SandboxError::SpawnHelper { .. } => "helper_spawn",
            SandboxError::Engine { .. } => "engine",
            SandboxError::HelperLost { .. }
            | SandboxError::BadResult { .. }
            | SandboxError::Helper { .. } => "helper",
            SandboxError::Io { .. } => "io",
        }
    }

    /// Shorthand for [`SandboxError::Unavailable`].
    pub fn unavailable(restriction: impl Into<String>, reason: impl Into<String>) -> Self {
        SandboxError::Unavailable {
            restriction: restriction.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for [`SandboxError::InvalidRequest`].
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        SandboxError::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Every value [`SandboxError::reason_label`] can return.
pub const SETUP_FAILURE_REASONS: &[&str] = &[
    "namespaces",
    "mounts",
    "network",
    "capabilities",
    "landlock",
    "seccomp",
    "cgroups",
    "rlimits",
    "docker",
    "image",
    "limits",
    "engine",
    "process",
    "invalid_request",
    "helper_spawn",
    "helper",
    "io",
    "other",
];

/// Maps the name of a restriction that could not be enforced to its label.
fn restriction_label(restriction: &str) -> &'static str {
    let r = restriction.to_ascii_lowercase();
    // Most specific first: "resource limits (cgroups)" names both limits and cgroups.
    const WORDS: &[(&str, &str)] = &[
        ("landlock", "landlock"),
        ("seccomp", "seccomp"),
        ("cgroup", "cgroups"),
        ("rlimit", "rlimits"),
        ("image", "image"),
        ("container limits", "limits"),
        ("docker", "docker"),
        ("mount", "mounts"),
        ("network", "network"),
        ("namespace", "namespaces"),
        ("capabilit", "capabilities"),
        ("process", "process"),
    ];
    WORDS
        .iter()
        .find(|(w, _)| r.contains(w))
        .map_or("other", |(_, l)| l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_labels_are_bounded_and_specific() {
        let cases = [
            ("filesystem isolation (landlock)", "landlock"),
            ("the syscall filter (seccomp)", "seccomp"),
            ("resource limits (cgroups)", "cgroups"),
            ("resource limits (rlimits)", "rlimits"),
            ("the private filesystem view (mount namespace)", "mounts"),
            ("network isolation", "network"),
            ("the docker backend", "docker"),
            ("the image `x`", "image"),
            ("the container image `x`", "image"),
            ("the container limits", "limits"),
            ("the docker backend (container engine)", "docker"),
            ("the container sandbox (docker create)", "docker"),
            ("something new", "other"),
        ];
        for (restriction, want) in cases {
            let l = SandboxError::unavailable(restriction, "why").reason_label();
            assert_eq!(l, want, "{restriction}");
            assert!(SETUP_FAILURE_REASONS.contains(&l));
        }
        assert_eq!(
            SandboxError::invalid("f", "m").reason_label(),
            "invalid_request"
        );
    }
}
