//! Who a container round runs as: the workspace's owner, or on a root-owned workspace of a root
//! runner the agent user, the workspace (and each root-owned `--write` tree) bound idmapped so
//! its files are the agent's inside and what it creates is the owner's on the host (as
//! natively; Docker Engine 20.10 cannot idmap a bind, so the runner makes the idmapped mount the
//! bind takes as its source, [`crate::docker::idmap`]).

use std::path::PathBuf;

use super::mounts::workspace_writable;
use crate::error::SandboxError;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::probe::FsProbe;
use crate::plan::{OwnerMap, command_identity, paths};
use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// The container's user.
#[derive(Debug)]
pub(super) struct User {
    /// The uid the command runs as.
    pub uid: u32,
    /// Its gid.
    pub gid: u32,
    /// Root-owned trees bound idmapped: (tree, mapping, read-only).
    pub idmapped: Vec<(PathBuf, OwnerMap, bool)>,
}

/// The command's user; records the identity line.
pub(super) fn command_user(
    probe: &dyn FsProbe,
    policy: &Policy,
    req: &SandboxRequest,
    runner_euid: u32,
    e: &mut Enforcement,
) -> Result<User, SandboxError> {
    let owner = paths::owner(probe, &req.workspace, "workspace")?;
    let (uid, gid) = owner;
    let root_owned = uid == 0 || gid == 0;
    let mut user = User {
        uid,
        gid,
        idmapped: Vec::new(),
    };
    if policy.filesystem.unrestricted {
        e.record(
            Restriction::Identity,
            Level::NotRequested,
            format!("full-access: the workspace's owner, uid {uid} gid {gid}"),
        );
    } else if root_owned && runner_euid == 0 {
        let agent = command_identity(probe, req)?;
        let map = |(disk_uid, disk_gid): (u32, u32)| OwnerMap {
            disk_uid,
            disk_gid,
            uid: agent.uid,
            gid: agent.gid,
        };
        let read_only = !workspace_writable(policy);
        user.idmapped
            .push((req.workspace.clone(), map(owner), read_only));
        for w in &req.write {
            let o = paths::owner(probe, w, "write")?;
            if o.0 == 0 || o.1 == 0 {
                user.idmapped.push((w.clone(), map(o), false));
            }
        }
        e.record(
            Restriction::Identity,
            Level::Full,
            format!(
                "{}, uid {} gid {}, never host uid 0: the workspace is root's and bound idmapped (its files are the agent's inside, what it creates is uid {} gid {} on the host)",
                agent.name, agent.uid, agent.gid, owner.0, owner.1
            ),
        );
        (user.uid, user.gid) = (agent.uid, agent.gid);
    } else if root_owned {
        e.record(
            Restriction::Identity,
            Level::Partial,
            format!(
                "the workspace is root's: uid {uid} gid {gid} without any capability, with the set-id, device and init guards (an unprivileged runner cannot idmap it; chown the workspace to an unprivileged user)"
            ),
        );
    } else {
        e.record(
            Restriction::Identity,
            Level::Full,
            format!("the workspace's owner, uid {uid} gid {gid}, never host uid 0"),
        );
    }
    Ok(user)
}
