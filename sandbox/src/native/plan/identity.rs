//! Who the command of a native run with its own root is: a root runner's round never holds host
//! uid 0 (it runs as the workspace's owner or the agent user, the writable trees bound idmapped
//! when their owner is someone else); anyone else's round runs as the runner in its user
//! namespace.

use std::path::PathBuf;

use super::Bind;
use crate::error::SandboxError;
use crate::host::Host;
use crate::identity::Ids;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::plan::probe::FsProbe;
use crate::plan::{OwnerMap, command_identity, paths};
use crate::spec::SandboxRequest;

/// The command's ids (a root runner's only) and the run-owned directories handed to them; the
/// workspace's and each `--write` tree's bind in `binds` idmapped where its owner differs.
pub(super) fn command(
    probe: &dyn FsProbe,
    req: &SandboxRequest,
    host: &Host,
    binds: &mut [Bind],
    e: &mut Enforcement,
) -> Result<(Option<Ids>, Vec<PathBuf>), SandboxError> {
    if host.euid != 0 {
        e.record(
            Restriction::Identity,
            Level::Full,
            format!("the runner's own uid {} (in a user namespace)", host.euid),
        );
        return Ok((None, Vec::new()));
    }
    let agent = command_identity(probe, req)?;
    for b in binds
        .iter_mut()
        .filter(|b| b.path == req.workspace || req.write.contains(&b.path))
    {
        let (disk_uid, disk_gid) = paths::owner(probe, &b.path, "workspace")?;
        if (disk_uid, disk_gid) != (agent.uid, agent.gid) {
            b.idmap = Some(OwnerMap {
                disk_uid,
                disk_gid,
                uid: agent.uid,
                gid: agent.gid,
            });
        }
    }
    let hand_over = [&req.private.home, &req.private.tmp]
        .into_iter()
        .chain(&req.private.readable)
        .chain(&req.private.writable)
        .cloned()
        .collect();
    let mapped = binds.iter().filter(|b| b.idmap.is_some()).count();
    e.record(
        Restriction::Identity,
        Level::Full,
        format!(
            "uid {} gid {} ({}), never host uid 0; {mapped} tree(s) idmapped so that what it writes belongs to their owner",
            agent.uid, agent.gid, agent.name
        ),
    );
    Ok((Some(agent), hand_over))
}
