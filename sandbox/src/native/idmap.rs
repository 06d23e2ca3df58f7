//! Idmapped mounts for a root runner's rounds (see [`crate::identity`]): the command runs as an
//! unprivileged uid, and the trees it writes (the workspace, `--write` directories) are bound
//! *idmapped* so that their owner's files are its own inside, and what it creates belongs to the
//! owner on the host. The kernel needs a user namespace to describe each mapping
//! (`mount_setattr(MOUNT_ATTR_IDMAP)`, Linux 5.12+, on filesystems that support it): the
//! supervisor makes one per distinct mapping with a child born in a new user namespace
//! ([`super::ns_holder`]), writing its maps from outside and keeping a descriptor of the
//! namespace; the child exits.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::ns_holder::Holder;
use super::step::{StepFailure, restriction};
use crate::plan::{OwnerMap, SandboxPlan};

/// The user namespaces of a run's idmapped binds, one per mapping.
#[derive(Debug, Default)]
pub struct Idmaps {
    maps: Vec<(OwnerMap, OwnedFd)>,
}

impl Idmaps {
    /// One user namespace per distinct mapping of `plan`'s binds (none without any).
    pub fn create(plan: &SandboxPlan) -> Result<Self, StepFailure> {
        let mut out = Idmaps::default();
        let binds = plan.root.iter().flat_map(|r| r.binds.iter());
        for map in binds.filter_map(|b| b.idmap) {
            if out.get(&map).is_none() {
                let fd = userns(&map)?;
                out.maps.push((map, fd));
            }
        }
        Ok(out)
    }

    /// The namespace of `map`.
    pub fn get(&self, map: &OwnerMap) -> Option<BorrowedFd<'_>> {
        self.maps
            .iter()
            .find(|(m, _)| m == map)
            .map(|(_, fd)| fd.as_fd())
    }
}

fn fail(step: &str, what: &str, e: &std::io::Error) -> StepFailure {
    StepFailure::io(restriction::MOUNTS, step, what, e)
}

/// A user namespace whose maps send the owner's ids on disk to the command's: a file the owner
/// owns on disk appears as the command's through a mount idmapped with it. Its holder shares
/// this process's memory ([`Holder`]): no copy of the caller's page tables per namespace.
pub(crate) fn userns(map: &OwnerMap) -> Result<OwnedFd, StepFailure> {
    let holder = Holder::spawn().map_err(|e| {
        StepFailure::io(
            restriction::MOUNTS,
            "clone(CLONE_NEWUSER)",
            "create the user namespace of an idmapped mount",
            &e,
        )
    })?;
    let dir = format!("/proc/{}", holder.pid());
    let write = |file: &str, text: String| {
        std::fs::write(format!("{dir}/{file}"), text)
            .map_err(|e| fail("write", &format!("write the idmap namespace's {file}"), &e))
    };
    let result = write("uid_map", format!("{} {} 1\n", map.disk_uid, map.uid))
        .and_then(|()| write("setgroups", "deny\n".into()))
        .and_then(|()| write("gid_map", format!("{} {} 1\n", map.disk_gid, map.gid)))
        .and_then(|()| {
            std::fs::File::open(format!("{dir}/ns/user"))
                .map(OwnedFd::from)
                .map_err(|e| fail("open", "open the idmap namespace", &e))
        });
    holder.finish();
    result
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;

    /// The docker backend makes these namespaces from the multi-threaded runner: two rounds
    /// starting at once fork at the same time, and a child must not hold the other's pipe (or
    /// any other descriptor of the runner). Each side's child then waited for the other's
    /// end-of-file, both rounds hung, and after the runner was killed the two children kept its
    /// listening port and workspace locks for ever.
    #[test]
    fn concurrent_namespaces_from_a_threaded_process_never_wait_for_each_other() {
        let id = nix::unistd::geteuid().as_raw();
        let gid = nix::unistd::getegid().as_raw();
        let map = OwnerMap {
            disk_uid: id,
            disk_gid: gid,
            uid: id,
            gid,
        };
        if userns(&map).is_err() {
            eprintln!("skipped: this host makes no user namespace here");
            return;
        }
        let (tx, rx) = mpsc::channel();
        for _ in 0..4 {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for _ in 0..150 {
                    userns(&map).unwrap();
                }
                tx.send(()).unwrap();
            });
        }
        for done in 0..4 {
            assert!(
                rx.recv_timeout(Duration::from_secs(120)).is_ok(),
                "{done} of 4 threads finished: the others' idmap children wait for each other"
            );
        }
    }
}
