//! The resource limits of a native run: rlimits (open files, file size) and cgroup limits
//! (memory, processes, CPU). A limit the job asked for and the host cannot enforce is refused;
//! a policy default that cannot be enforced is reported as partial.

use super::{CgroupLimit, IdMap, unavailable};
use crate::error::SandboxError;
use crate::host::{CgroupSite, Host};
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// The limits of a run.
pub(super) struct LimitsPlan {
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`.
    pub file_size: Option<u64>,
    /// `RLIMIT_NPROC` (the process limit in a private user namespace without the pids cgroup).
    pub nproc: Option<u64>,
    /// Memory through a cgroup.
    pub memory: Option<CgroupLimit>,
    /// Processes through a cgroup.
    pub pids: Option<CgroupLimit>,
    /// CPU through a cgroup, in thousandths of a CPU.
    pub cpu: Option<CgroupLimit>,
}

/// Every limit, recorded in this order: open files, file size, memory, processes, CPU.
pub(super) fn limits(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    user_namespace: Option<IdMap>,
    e: &mut Enforcement,
) -> Result<LimitsPlan, SandboxError> {
    let (open_files, file_size) = rlimits(policy, req, host, e);
    let memory = memory(policy, req, host, e)?;
    let (pids, nproc) = pids(policy, req, host, user_namespace, e)?;
    let cpu = cpu(policy, req, host, e)?;
    Ok(LimitsPlan {
        open_files,
        file_size,
        nproc,
        memory,
        pids,
        cpu,
    })
}

fn limit(site: &CgroupSite, value: u64) -> CgroupLimit {
    CgroupLimit {
        version: site.version,
        parent: site.dir.clone(),
        value,
    }
}

/// The open-files and file-size limits: the job's (`--nofile`), else the policy's, capped at the
/// host's hard limits (as docker: `crate::docker::plan::limits`).
fn rlimits(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    e: &mut Enforcement,
) -> (Option<u64>, Option<u64>) {
    let asked = &req.limits;
    let open_files = asked
        .open_files
        .or(policy.limits.open_files)
        .map(|n| n.min(host.nofile_hard));
    let file_size = asked
        .file_size_bytes
        .or(policy.limits.file_size.map(|s| s.0))
        .map(|n| n.min(host.fsize_hard));
    let note = |asked: bool| if asked { "" } else { " (policy default)" };
    match open_files {
        Some(n) => e.record(
            Restriction::OpenFiles,
            Level::Full,
            format!("RLIMIT_NOFILE {n}{}", note(asked.open_files.is_some())),
        ),
        None => e.record(Restriction::OpenFiles, Level::NotRequested, "inherited"),
    }
    match file_size {
        Some(n) => e.record(
            Restriction::FileSize,
            Level::Full,
            format!("RLIMIT_FSIZE {n}{}", note(asked.file_size_bytes.is_some())),
        ),
        None => e.record(Restriction::FileSize, Level::NotRequested, "inherited"),
    }
    (open_files, file_size)
}

/// The memory limit: `--memory`, else the policy's default.
fn memory(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    e: &mut Enforcement,
) -> Result<Option<CgroupLimit>, SandboxError> {
    let memory_default = policy.limits.memory.and_then(|m| m.bytes(&host.size));
    Ok(match (req.limits.memory_bytes, memory_default) {
        (Some(bytes), _) => match &host.memory {
            Ok(site) => {
                e.record(
                    Restriction::Memory,
                    Level::Full,
                    format!("cgroup v{} memory {bytes} bytes", site.version),
                );
                Some(limit(site, bytes))
            }
            Err(reason) => return Err(unavailable("the memory limit (--memory)", reason.clone())),
        },
        (None, Some(bytes)) => match &host.memory {
            Ok(site) => {
                e.record(
                    Restriction::Memory,
                    Level::Full,
                    format!(
                        "cgroup v{} memory {bytes} bytes (policy default)",
                        site.version
                    ),
                );
                Some(limit(site, bytes))
            }
            Err(reason) => {
                e.record(
                    Restriction::Memory,
                    Level::Partial,
                    format!("policy default not enforced: {reason}"),
                );
                None
            }
        },
        (None, None) => {
            e.record(Restriction::Memory, Level::NotRequested, "no memory limit");
            None
        }
    })
}

/// The process limit: `--pids`, else the policy's default; through the pids cgroup, else
/// `RLIMIT_NPROC` in a private user namespace.
fn pids(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    user_namespace: Option<IdMap>,
    e: &mut Enforcement,
) -> Result<(Option<CgroupLimit>, Option<u64>), SandboxError> {
    let (asked, default) = (req.limits.pids, policy.limits.pids);
    if asked.is_none() && default.is_none() {
        e.record(Restriction::Pids, Level::NotRequested, "no process limit");
        return Ok((None, None));
    }
    let n = asked.or(default).unwrap_or(u64::MAX);
    let default_note = if asked.is_some() {
        ""
    } else {
        " (policy default)"
    };
    Ok(match (&host.pids, user_namespace) {
        (Ok(site), _) => {
            e.record(
                Restriction::Pids,
                Level::Full,
                format!("cgroup v{} pids.max {n}{default_note}", site.version),
            );
            (Some(limit(site, n)), None)
        }
        (Err(_), Some(_)) => {
            e.record(
                Restriction::Pids,
                Level::Full,
                format!("RLIMIT_NPROC {n} in a private user namespace{default_note}"),
            );
            (None, Some(n))
        }
        (Err(reason), None) if asked.is_some() => {
            return Err(unavailable("the process limit (--pids)", reason.clone()));
        }
        (Err(reason), None) => {
            e.record(
                Restriction::Pids,
                Level::Partial,
                format!("policy default not enforced: {reason}"),
            );
            (None, None)
        }
    })
}

/// The CPU limit: `--cpus`, else the policy's default, through the cpu cgroup's quota.
fn cpu(
    policy: &Policy,
    req: &SandboxRequest,
    host: &Host,
    e: &mut Enforcement,
) -> Result<Option<CgroupLimit>, SandboxError> {
    let (asked, default) = (
        req.limits.cpu_millis,
        policy.limits.cpus.map(|c| c.millis(&host.size)),
    );
    if asked.is_none() && default.is_none() {
        e.record(Restriction::Cpu, Level::NotRequested, "no cpu limit");
        return Ok(None);
    }
    let millis = asked.or(default).unwrap_or(u64::MAX);
    let note = if asked.is_some() {
        ""
    } else {
        " (policy default)"
    };
    match &host.cpu {
        Ok(site) => {
            let (quota, period) = crate::native::cgroup::cfs_quota(millis);
            e.record(
                Restriction::Cpu,
                Level::Full,
                format!(
                    "cgroup v{} cpu quota {quota}/{period} us{note}",
                    site.version
                ),
            );
            Ok(Some(limit(site, millis)))
        }
        Err(reason) if asked.is_some() => {
            Err(unavailable("the cpu limit (--cpus)", reason.clone()))
        }
        Err(reason) => {
            e.record(
                Restriction::Cpu,
                Level::Partial,
                format!("policy default not enforced: {reason}"),
            );
            Ok(None)
        }
    }
}
