//! The run's report directory natively: a tmpfs owned by the command where a mount namespace
//! exists ([`crate::report_dir`]). Its request was checked at admission.

use super::ReportDirPlan;
use crate::host::Host;
use crate::identity::Ids;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::spec::SandboxRequest;

/// The report directory's plan, if the request has one.
pub(super) fn report_dir_plan(
    req: &SandboxRequest,
    identity: Option<&Ids>,
    host: &Host,
    can_ns: bool,
    e: &mut Enforcement,
) -> Option<ReportDirPlan> {
    let dir = req.private.report.as_ref()?;
    if can_ns {
        e.record(
            Restriction::ReportDir,
            Level::Full,
            crate::report_dir::describe(dir),
        );
    } else {
        e.record(
            Restriction::ReportDir,
            Level::Partial,
            "no mount namespace: the command writes the host directory itself; it is measured after the run and emptied when over its bound",
        );
    }
    Some(ReportDirPlan {
        dir: dir.clone(),
        owner: identity.map_or((host.euid, host.egid), |i| (i.uid, i.gid)),
        tmpfs: can_ns,
    })
}
