//! Namespaces: a user namespace mapping the runner's own ids (so a non-root runner can build the
//! others), and `unshare` of the rest.

use nix::sched::{CloneFlags, unshare};

use super::step::{StepFailure, restriction};
use crate::plan::IdMap;

/// Enters a new user namespace where the runner's uid and gid map to themselves.
pub fn enter_user_namespace(map: IdMap) -> Result<(), StepFailure> {
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        StepFailure::nix(
            restriction::NAMESPACES,
            "unshare(CLONE_NEWUSER)",
            "create a user namespace",
            e,
        )
    })?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| {
            StepFailure::io(restriction::NAMESPACES, file, &format!("write {file}"), &e)
        })
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{0} {0} 1\n", map.uid))?;
    write("/proc/self/gid_map", format!("{0} {0} 1\n", map.gid))?;
    Ok(())
}

/// `unshare(flags)`, naming the namespaces in the failure.
pub fn enter(flags: CloneFlags, names: &str) -> Result<(), StepFailure> {
    unshare(flags).map_err(|e| {
        StepFailure::nix(
            restriction::NAMESPACES,
            &format!("unshare({names})"),
            &format!("create {names} namespaces"),
            e,
        )
    })
}
