//! The memory bound of the runner's git where it reads what a round wrote (staging and
//! diffing a result, SPEC §11): a workspace can hold files of any size, and git reads a blob
//! whole below `core.bigFileThreshold` and holds both sides of a `diff --binary`, outside any
//! round's `--memory`. A bounded git runs with an address-space limit set in the child before
//! it executes git ([`GIT_MEMORY`]; works unprivileged, inherited by git's own children),
//! settings that stream large files and keep pack windows small ([`SETTINGS`]), and is reaped
//! with `wait4` so its peak resident memory is measured ([`PeakRss`]). A git that fails or
//! dies for memory is told apart from one that fails otherwise ([`out_of_memory`]).

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The address space a bounded git may use (`RLIMIT_AS`). 1 GiB leaves headroom for git's
/// binary, libraries, stacks and pack windows (at most `core.packedGitLimit`) beside the
/// blobs it holds: a file of a patch is at most [`super::stage::MAX_PATCH_FILE`] (100 MiB),
/// and a binary diff of one holds its old and new content, the deflated literal and a delta
/// index (measured: about six times the file, 600 MiB for a changed 100 MiB one).
pub const GIT_MEMORY: u64 = 1 << 30;

/// Settings of a bounded git: files above 16 MiB are streamed (hashed and stored in chunks,
/// never read whole, and diffed as binary) and stored fast (the runner's objects are
/// throwaway: level 1 deflates a GiB of zeros twice as fast), pack windows are small enough
/// for [`GIT_MEMORY`], one thread (every thread's malloc arena reserves address space), and no
/// automatic maintenance.
pub const SETTINGS: [&str; 12] = [
    "core.bigFileThreshold=16m",
    "pack.compression=1",
    "core.packedGitWindowSize=16m",
    "core.packedGitLimit=128m",
    "core.deltaBaseCacheLimit=32m",
    "pack.windowMemory=64m",
    "pack.deltaCacheSize=32m",
    "pack.threads=1",
    "index.threads=1",
    "core.preloadIndex=false",
    "gc.auto=0",
    "maintenance.auto=false",
];

/// The highest peak resident memory of the bounded git commands that reported to it (shared
/// by clones: one per result).
#[derive(Clone, Debug, Default)]
pub struct PeakRss(Arc<AtomicU64>);

impl PeakRss {
    /// The highest peak seen, in bytes (0 before any git ran).
    pub fn bytes(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn record(&self, bytes: u64) {
        self.0.fetch_max(bytes, Ordering::Relaxed);
    }
}

/// How a bounded git runs: its address-space limit and where its peak memory is recorded.
#[derive(Clone, Debug)]
pub struct Bound {
    /// `RLIMIT_AS` of the git process, in bytes.
    pub address_space: u64,
    /// Records each git's peak resident memory.
    pub meter: PeakRss,
}

impl Bound {
    /// The runner's bound ([`GIT_MEMORY`]), measured into `meter`.
    pub fn new(meter: &PeakRss) -> Self {
        Self::of(GIT_MEMORY, meter)
    }

    /// A bound of `address_space` bytes, measured into `meter`.
    pub fn of(address_space: u64, meter: &PeakRss) -> Self {
        Bound {
            address_space,
            meter: meter.clone(),
        }
    }

    /// The bound as a size for messages (`1 GiB`).
    pub fn shown(&self) -> String {
        crate::util::units::ByteSize(self.address_space).to_string()
    }
}

/// The address-space limit a bounded git gets for a bound of `bytes`: never above the
/// runner's own hard limit (an unprivileged runner cannot raise it).
fn allowed(bytes: u64) -> u64 {
    let mut current = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: `current` is a valid, writable rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut current) } != 0 {
        current.rlim_max = libc::RLIM_INFINITY;
    }
    if current.rlim_max == libc::RLIM_INFINITY {
        bytes
    } else {
        bytes.min(current.rlim_max)
    }
}

/// The script `/bin/sh` runs a bounded git with: `$1` the limit in KiB (`ulimit -v` sets the
/// soft and hard `RLIMIT_AS`), then git and its arguments, executed in its place (same pid:
/// `wait4` measures git).
const LIMIT_SCRIPT: &str = "ulimit -v \"$1\" || exit 125; shift; exec \"$@\"";

/// The start of the command line that runs `git` under an address-space limit of `bytes`
/// (rounded down to KiB) set before it executes: `/bin/sh -c LIMIT_SCRIPT`, so the runner
/// needs no fork of its own to set it ([`ralph_sandbox::posix_spawn`]).
pub(super) fn limited(git: &Path, bytes: u64) -> Vec<OsString> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        LIMIT_SCRIPT.into(),
        "ralph-git".into(),
        (allowed(bytes) / 1024).to_string().into(),
        git.as_os_str().to_owned(),
    ]
}

/// Whether `/bin/sh` sets the limit [`limited`] asks of it (asked once: a shell whose `ulimit`
/// has no `-v` leaves the bounded git to a fork that sets it itself, [`limit_child`]).
pub(super) fn shell_limits() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        let mut argv = limited(Path::new("/bin/sh"), GIT_MEMORY);
        let kib = argv[4].clone();
        argv.extend(["-c".into(), "ulimit -v".into()]);
        ralph_sandbox::posix_spawn::run(ralph_sandbox::posix_spawn::Command {
            argv,
            env: vec!["PATH=/usr/bin:/bin".into()],
            cwd: None,
            stdin: None,
            stdout: None,
        })
        .is_ok_and(|out| out.status.success() && out.stdout.trim_ascii() == kib.as_encoded_bytes())
    })
}

/// Sets the address-space limit of the child `cmd` starts, before it executes git. The limit
/// never rises above the runner's own hard limit (an unprivileged runner cannot raise it).
pub(super) fn limit_child(cmd: &mut Command, bytes: u64) {
    let bytes = allowed(bytes);
    let limit = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: the closure runs in the forked child before exec and only calls setrlimit(2),
    // which is async-signal-safe; `limit` is a plain value moved into it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Reaps `child` with `wait4`: how it ended and its peak resident memory in bytes (its own or
/// that of a child of its own it waited for, whichever was larger).
pub(super) fn reap(child: &Child) -> std::io::Result<(ExitStatus, u64)> {
    let pid = libc::pid_t::try_from(child.id())
        .map_err(|_| std::io::Error::other("the child's pid does not fit a pid_t"))?;
    // std's `Child` never waits on its own here: the pid is still ours to reap.
    ralph_sandbox::posix_spawn::reap(pid)
}

/// Records a reaped git's peak in `bound`'s meter.
pub(super) fn record(bound: &Bound, max_rss: u64) {
    bound.meter.record(max_rss);
}

/// What git's stderr says when an allocation or a map failed under the limit.
const MEMORY_MESSAGES: [&str; 4] = [
    "Out of memory",
    "Cannot allocate memory",
    "mmap failed",
    "unable to allocate",
];

/// Why a bounded git that failed did so for memory, if it did: killed by a signal a failed
/// allocation or stack growth raises, or an allocation or map it reports failed.
pub(super) fn out_of_memory(status: ExitStatus, stderr: &str) -> Option<String> {
    if let Some(signal) = status.signal() {
        if [libc::SIGSEGV, libc::SIGKILL, libc::SIGBUS, libc::SIGABRT].contains(&signal) {
            return Some(format!("killed by signal {signal}"));
        }
    }
    MEMORY_MESSAGES
        .iter()
        .find(|m| stderr.contains(*m))
        .map(|m| format!("\"{m}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_sets_the_soft_and_hard_limit_before_the_program_runs() {
        // Debian's dash (and bash, busybox) can: CI runs the spawned path.
        assert!(shell_limits(), "/bin/sh cannot set `ulimit -v` here");
        let mut argv = limited(Path::new("/bin/sh"), 64 << 20);
        argv.extend([
            "-c".into(),
            "ulimit -S -v; ulimit -H -v; x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo after"
                .into(),
        ]);
        let out = ralph_sandbox::posix_spawn::run(ralph_sandbox::posix_spawn::Command {
            argv,
            env: vec!["PATH=/usr/bin:/bin".into()],
            cwd: None,
            stdin: None,
            stdout: None,
        })
        .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // The limit is there before anything runs, and 100 MB do not fit in 64 MiB.
        assert!(text.starts_with("65536\n65536\n"), "{text}");
        assert!(!text.contains("after"), "{text}");
        assert!(out.max_rss < 64 << 20, "{}", out.max_rss);
    }

    #[test]
    fn a_failed_allocation_or_a_fatal_signal_is_out_of_memory_and_other_failures_are_not() {
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        let killed = ExitStatus::from_raw;
        assert!(
            out_of_memory(
                exited(128),
                "fatal: Out of memory, malloc failed (tried to allocate 1073741825 bytes)"
            )
            .is_some()
        );
        assert!(out_of_memory(exited(128), "fatal: mmap failed: Cannot allocate memory").is_some());
        assert!(out_of_memory(killed(libc::SIGSEGV), "").is_some());
        assert!(out_of_memory(killed(libc::SIGKILL), "").is_some());
        assert!(out_of_memory(exited(128), "fatal: not a git repository").is_none());
        assert!(out_of_memory(killed(libc::SIGTERM), "").is_none());
    }
}
