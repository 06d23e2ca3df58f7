//! The namespaces of a native run: root creates them directly, anyone else needs a user
//! namespace first; every mode gets its pid, mount, ipc and uts namespaces.

use super::{IdMap, unavailable};
use crate::error::SandboxError;
use crate::host::Host;
use crate::outcome::{Enforcement, Level, Restriction};

/// Which namespaces the run gets.
pub(super) struct Namespaces {
    /// Namespaces can be created (the pid namespace, and the rest).
    pub can_ns: bool,
    /// A mount namespace is needed (always).
    pub need_mount_ns: bool,
    /// The user namespace of a non-root runner.
    pub user_namespace: Option<IdMap>,
}

/// The namespaces on `host`, refusing a non-root runner without user namespaces; records the
/// process tree's containment.
pub(super) fn namespaces(host: &Host, e: &mut Enforcement) -> Result<Namespaces, SandboxError> {
    // Namespaces: root creates them directly; anyone else needs a user namespace first.
    let root = host.euid == 0;
    // Every mode gets a mount namespace: the filesystem modes for their own root, full-access for
    // a fresh /proc and the kernel paths a default `docker run` masks or keeps read-only.
    let need_mount_ns = true;
    let need_userns = !root;
    // full-access too: its mount, ipc and uts namespaces are what keeps it at least as confined
    // as a default `docker run` (SPEC §5); without them it does not run, rather than weaker.
    if need_userns {
        if let Err(reason) = &host.user_namespaces {
            return Err(unavailable(
                "namespaces (user namespace needed by a non-root runner)",
                reason.clone(),
            ));
        }
    }
    let can_ns = root || host.user_namespaces.is_ok();
    let user_namespace = (!root && can_ns).then_some(IdMap {
        uid: host.euid,
        gid: host.egid,
    });
    if can_ns {
        e.record(
            Restriction::ProcessTree,
            Level::Full,
            "private pid namespace: the tree dies with its init",
        );
    } else {
        e.record(
            Restriction::ProcessTree,
            Level::Partial,
            "no pid namespace: child subreaper, the tree is killed while the supervisor lives",
        );
    }
    Ok(Namespaces {
        can_ns,
        need_mount_ns,
        user_namespace,
    })
}
