//! Namespaces: a user namespace mapping the runner's own ids (so a non-root runner can build the
//! others), and `unshare` of the rest.

use nix::sched::{CloneFlags, unshare};

use super::step::{StepFailure, restriction};
use crate::plan::IdMap;

/// Enters a new user namespace where the runner's uid and gid map to themselves.
pub fn enter_user_namespace(map: IdMap) -> Result<(), StepFailure> {
    unshare(CloneFlags::CLONE_NEWUSER).map_err(|e| {
        let mut f = StepFailure::nix(
            restriction::NAMESPACES,
            "unshare(CLONE_NEWUSER)",
            "create a user namespace",
            e,
        );
        f.reason.push_str(&format!("; {}", userns_fix()));
        f
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

/// What to do when a user namespace cannot be made: the host setting that forbids it, when one
/// does ([`crate::host::user_namespaces`]), else where to look.
pub fn userns_fix() -> String {
    match crate::host::user_namespaces(|p| std::fs::read_to_string(p).ok()) {
        Err(why) => why,
        Ok(()) => "user namespaces are forbidden here although the sysctls allow them (a container's seccomp profile, a full user.max_user_namespaces count, or an LSM): run `ralph doctor`, allow unshare(CLONE_NEWUSER) for ralph, or run it as root".to_owned(),
    }
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
