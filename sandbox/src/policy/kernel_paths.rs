//! The kernel paths every mode keeps out of reach, `full-access` included (SPEC §5: "every mode
//! is at least as confined as a default `docker run`"): what the container engines mask by
//! default, what they mount read-only, and the sandbox's own init under `/proc/1`. A floor under
//! every policy, not part of one: a policy file can mask more (`filesystem.hidden`), never less.
//!
//! Both backends apply it: the docker backend as the container's `MaskedPaths` and
//! `ReadonlyPaths` (which replace the engine's defaults, so these repeat them); the native one as
//! mounts in full-access, whose view is the host's (the confined modes build a root of their own
//! where `/proc` is read-only to Landlock and these are masked or absent, see
//! `floor_holds_in_the_confined_modes` in the tests).

/// Masked (native: an empty mode-000 file or directory over it; docker: `/dev/null` or an empty
/// read-only tmpfs): kernel memory, keys, timers and scheduler internals that leak host state,
/// and firmware and power-counter interfaces. Docker 20.10's `MaskedPaths` default, plus
/// `/sys/devices/virtual/powercap` (masked by later engines: energy counters are a side channel).
pub const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// Read-only (a read-only bind of the path over itself): the kernel's tunables and triggers. A
/// capability-less uid 0 can still write `/proc/sys/kernel/core_pattern` (a pipe there runs as
/// host root on the next crash) or `/proc/sysrq-trigger` through the file modes: only a
/// read-only mount stops it. Docker 20.10's `ReadonlyPaths` default.
pub const READ_ONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The sandbox's init, pid 1 of its pid namespace: read-only, so that nothing of it can be changed
/// through `/proc` (`oom_score_adj`, `autogroup`, `task/1/...`, `clear_refs`), whoever the
/// command is (in docker it is the init's own user, uid 0 on a root-owned workspace).
pub const INIT_PROC: &str = "/proc/1";

/// Every read-only path: [`READ_ONLY`] and [`INIT_PROC`].
pub fn read_only() -> impl Iterator<Item = &'static str> {
    READ_ONLY.iter().copied().chain(std::iter::once(INIT_PROC))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_are_absolute_disjoint_and_under_proc_or_sys() {
        let all: Vec<&str> = MASKED.iter().copied().chain(read_only()).collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), all.len(), "a path in both lists");
        for p in all {
            assert!(p.starts_with("/proc/") || p.starts_with("/sys/"), "{p}");
        }
    }
}
