//! A container's resource limits: the job's, else the policy's defaults (a share of the host's
//! size where the policy says so), and the engine's own floor for memory.

use super::Runner;
use crate::error::SandboxError;
use crate::outcome::{Enforcement, Level, Restriction};
use crate::policy::Policy;
use crate::spec::SandboxRequest;

/// The least memory the docker engine accepts for a container.
const ENGINE_MIN_MEMORY: u64 = 6 * 1024 * 1024;

/// The limits of a container.
#[derive(Debug)]
pub(super) struct LimitsPlan {
    /// Memory (memory-swap the same).
    pub memory: Option<u64>,
    /// Processes.
    pub pids: Option<u64>,
    /// CPU in thousandths of a CPU.
    pub cpu_millis: Option<u64>,
    /// `RLIMIT_NOFILE`.
    pub open_files: Option<u64>,
    /// `RLIMIT_FSIZE`.
    pub file_size: Option<u64>,
}

fn default_note(asked: bool) -> &'static str {
    if asked { "" } else { " (policy default)" }
}

/// Every limit, recorded in this order: memory, CPU, processes, open files, file size; then a
/// memory limit below what the engine accepts is refused (a backend-specific refusal).
pub(super) fn limits(
    policy: &Policy,
    req: &SandboxRequest,
    runner: &Runner<'_>,
    e: &mut Enforcement,
) -> Result<LimitsPlan, SandboxError> {
    let asked = &req.limits;
    let memory = asked
        .memory_bytes
        .or(policy.limits.memory.and_then(|m| m.bytes(runner.size)));
    match memory {
        Some(m) => e.record(
            Restriction::Memory,
            Level::Full,
            format!(
                "cgroup memory {m} bytes, memory-swap the same{}",
                default_note(asked.memory_bytes.is_some())
            ),
        ),
        None => e.record(Restriction::Memory, Level::NotRequested, "no memory limit"),
    }
    let cpu_millis = asked
        .cpu_millis
        .or(policy.limits.cpus.map(|c| c.millis(runner.size)));
    match cpu_millis {
        Some(m) => e.record(
            Restriction::Cpu,
            Level::Full,
            format!(
                "NanoCpus {}{}",
                m.saturating_mul(1_000_000),
                default_note(asked.cpu_millis.is_some())
            ),
        ),
        None => e.record(Restriction::Cpu, Level::NotRequested, "no cpu limit"),
    }
    let pids = asked.pids.or(policy.limits.pids);
    match pids {
        Some(n) => e.record(Restriction::Pids, Level::Full, format!("pids_limit {n}")),
        None => e.record(Restriction::Pids, Level::NotRequested, "no process limit"),
    }
    let (open_files, file_size) = rlimits(policy, req, runner, e);
    if let Some(n) = memory.filter(|m| *m < ENGINE_MIN_MEMORY) {
        return Err(SandboxError::invalid(
            "memory",
            format!("the docker engine needs at least 6 MiB of memory; {n} bytes requested"),
        ));
    }
    Ok(LimitsPlan {
        memory,
        pids,
        cpu_millis,
        open_files,
        file_size,
    })
}

/// The open-files limit (capped at the engine's hard limit) and the file-size limit.
fn rlimits(
    policy: &Policy,
    req: &SandboxRequest,
    runner: &Runner<'_>,
    e: &mut Enforcement,
) -> (Option<u64>, Option<u64>) {
    let open_files = req
        .limits
        .open_files
        .or(policy.limits.open_files)
        .map(|n| n.min(runner.nofile_hard));
    match open_files {
        Some(n) => e.record(
            Restriction::OpenFiles,
            Level::Full,
            format!("ulimit nofile {n}"),
        ),
        None => e.record(
            Restriction::OpenFiles,
            Level::NotRequested,
            "engine default",
        ),
    }
    let file_size = req
        .limits
        .file_size_bytes
        .or(policy.limits.file_size.map(|s| s.0));
    match file_size {
        Some(n) => e.record(
            Restriction::FileSize,
            Level::Full,
            format!("ulimit fsize {n}"),
        ),
        None => e.record(Restriction::FileSize, Level::NotRequested, "engine default"),
    }
    (open_files, file_size)
}
