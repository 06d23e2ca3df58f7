//! The few raw syscalls the sandbox needs that `nix` does not wrap, each behind a small safe
//! function that maps the libc result to an `io::Error`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Opens a pidfd for `pid` (`pidfd_open(2)`, Linux 5.3+).
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; it touches no
    // memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd)
        .map_err(|_| io::Error::other("pidfd_open returned an out-of-range fd"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind `pidfd` (`pidfd_send_signal(2)`).
pub fn pidfd_send_signal(pidfd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: a valid pidfd, a signal number, a null siginfo (kernel fills a default) and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A reaped child: its pid, raw wait status and resource usage.
#[derive(Clone, Copy, Debug)]
pub struct Reaped {
    /// The child's pid.
    pub pid: i32,
    /// The raw `wait` status.
    pub status: i32,
}

/// Outcome of a non-blocking `wait4(-1, WNOHANG)`.
#[derive(Clone, Copy, Debug)]
pub enum WaitAny {
    /// A child was reaped.
    Reaped(Reaped),
    /// Children exist but none has changed state.
    StillRunning,
    /// There are no children left (`ECHILD`).
    NoChildren,
}

/// Reaps any one exited child without blocking.
pub fn wait_any_nohang() -> io::Result<WaitAny> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer; a null rusage pointer is allowed.
        let pid = unsafe {
            libc::wait4(
                -1,
                &mut status,
                libc::WNOHANG | libc::__WALL,
                std::ptr::null_mut(),
            )
        };
        if pid > 0 {
            return Ok(WaitAny::Reaped(Reaped { pid, status }));
        }
        if pid == 0 {
            return Ok(WaitAny::StillRunning);
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::ECHILD) => return Ok(WaitAny::NoChildren),
            _ => return Err(err),
        }
    }
}

/// Resource usage of all reaped children of this process (`getrusage(RUSAGE_CHILDREN)`).
pub fn rusage_children() -> io::Result<libc::rusage> {
    // SAFETY: rusage is plain old data; all-zero is a valid value to be overwritten.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid out-pointer for the duration of the call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usage)
}

/// Closes every descriptor above 2 but `keep`, in a child forked from a process whose other
/// threads may hold descriptors of their own (their pipes, the runner's listeners and locks):
/// nothing allocated (`close_range(2)`, or `close(2)` up to the descriptor limit on an older
/// kernel), so it is safe between `fork` and `_exit`.
pub fn close_all_but(keep: [RawFd; 2]) {
    let (lo, hi) = if keep[0] < keep[1] {
        (keep[0], keep[1])
    } else {
        (keep[1], keep[0])
    };
    let mut limit: libc::rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid out-pointer for the call.
    let max = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        RawFd::try_from(limit.rlim_cur.min(1 << 20)).unwrap_or(1 << 20)
    } else {
        1 << 20
    };
    for (first, last) in [(3, lo - 1), (lo + 1, hi - 1), (hi + 1, RawFd::MAX)] {
        let first = first.max(3);
        if first > last {
            continue;
        }
        // SAFETY: close_range closes descriptors of this process only and touches no memory.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                u32::try_from(first).unwrap_or(u32::MAX),
                u32::try_from(last).unwrap_or(u32::MAX),
                0u32,
            )
        };
        if rc != 0 {
            for fd in first..=last.min(max) {
                // SAFETY: closing a descriptor number this process may not hold is harmless
                // (EBADF); nothing else in this single-threaded child uses them.
                unsafe { libc::close(fd) };
            }
        }
    }
}

/// Marks every descriptor from `first` upwards close-on-exec (`close_range(2)` with
/// `CLOSE_RANGE_CLOEXEC`), so nothing the process inherited crosses the coming `execve`.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range only changes descriptor flags of this process.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    // Older kernels: walk /proc/self/fd instead.
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd: &RawFd| u32::try_from(*fd).is_ok_and(|fd| fd >= first))
        .collect();
    for fd in fds {
        // SAFETY: setting FD_CLOEXEC on a descriptor number is harmless even if it was closed
        // meanwhile (EBADF is ignored).
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    Ok(())
}

/// Sets every catchable signal back to its default disposition and unblocks all signals, so the
/// command starts with a clean signal state whatever the runner inherited or ignored.
pub fn reset_signals() -> io::Result<()> {
    for sig in 1..=31 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: installing SIG_DFL has no memory-safety implications.
        unsafe { libc::signal(sig, libc::SIG_DFL) };
    }
    // SAFETY: an all-empty set is valid; sigprocmask reads it and writes no old set.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether a signal an init read from its signalfd (`ssi_code`, `ssi_pid`) was sent from outside
/// the sandbox's pid namespace by `kill(2)` or `pidfd_send_signal(2)` without an info: the
/// engine's stop, the supervisor's stop request, its death (`PR_SET_PDEATHSIG`). Every process
/// inside the namespace — the command and all it starts — shows with its own pid there (a sender
/// in an outer namespace shows as 0), the kernel refuses a forged `SI_USER` from another process
/// (`rt_sigqueueinfo`, `pidfd_send_signal` with an info: only negative codes pass, with any
/// pid), and a signal an owner set with `F_SETOWN` gets (SIGIO or the `F_SETSIG` one) carries a
/// `POLL_*` code. So only the outside can stop a round through its init: from the command, any
/// route (`kill(0)`, a pidfd of `/proc/1`, SIGIO) is read and ignored.
pub fn from_outside(code: i32, pid: u32) -> bool {
    code == libc::SI_USER && pid == 0
}

const OPEN_TREE_CLONE: u32 = 1;
const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
const AT_EMPTY_PATH: u32 = libc::AT_EMPTY_PATH as u32;
const AT_RECURSIVE: u32 = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
const MOUNT_ATTR_RDONLY: u64 = 0x1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const EMPTY: &std::ffi::CStr = c"";

/// A detached copy of the mount tree at `fd` (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)`,
/// Linux 5.2+): the same as a recursive bind mount's source, taken from a descriptor, so no path
/// is resolved.
pub fn clone_tree(fd: &impl AsRawFd) -> io::Result<OwnedFd> {
    // SAFETY: a valid descriptor and an empty NUL-terminated path (AT_EMPTY_PATH); returns a new
    // descriptor or -1.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd.as_raw_fd(),
            EMPTY.as_ptr(),
            OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(rc)
        .map_err(|_| io::Error::other("open_tree returned an out-of-range fd"))?;
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes the (detached or attached) mount tree at `fd` read-only, every mount in it
/// (`mount_setattr(AT_EMPTY_PATH | AT_RECURSIVE, MOUNT_ATTR_RDONLY)`, Linux 5.12+).
pub fn make_tree_read_only(fd: &impl AsRawFd) -> io::Result<()> {
    set_mount_read_only(fd.as_raw_fd(), EMPTY, AT_EMPTY_PATH | AT_RECURSIVE)
}

/// Makes the mount at `path` read-only (every mount below it too with `recursive`):
/// `mount_setattr(MOUNT_ATTR_RDONLY)`, Linux 5.12+; ENOSYS on older kernels.
pub fn make_path_read_only(path: &std::ffi::CStr, recursive: bool) -> io::Result<()> {
    set_mount_read_only(
        libc::AT_FDCWD,
        path,
        if recursive { AT_RECURSIVE } else { 0 },
    )
}

/// Makes the detached mount tree `tree` idmapped through the user namespace `userns` (and
/// read-only with `read_only`): `mount_setattr(MOUNT_ATTR_IDMAP)`, Linux 5.12+, on filesystems
/// that support idmapped mounts.
pub fn idmap_tree(tree: &impl AsRawFd, userns: &impl AsRawFd, read_only: bool) -> io::Result<()> {
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    let userns_fd = u64::try_from(userns.as_raw_fd())
        .map_err(|_| io::Error::other("invalid user namespace descriptor"))?;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP | if read_only { MOUNT_ATTR_RDONLY } else { 0 },
        attr_clr: 0,
        propagation: 0,
        userns_fd,
    };
    mount_setattr(tree.as_raw_fd(), EMPTY, AT_EMPTY_PATH | AT_RECURSIVE, &attr)
}

fn set_mount_read_only(dirfd: RawFd, path: &std::ffi::CStr, flags: u32) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    mount_setattr(dirfd, path, flags, &attr)
}

fn mount_setattr(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    flags: u32,
    attr: &MountAttr,
) -> io::Result<()> {
    // SAFETY: a valid descriptor (or AT_FDCWD), a NUL-terminated path and a mount_attr of the
    // size passed, all alive for the call; the kernel only reads them.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached mount tree `tree` on top of what `target` refers to
/// (`move_mount(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`, Linux 5.2+): a mount made
/// on a descriptor, not on a path that could be swapped.
pub fn attach_tree(tree: &impl AsRawFd, target: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: two valid descriptors and two empty NUL-terminated paths alive for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            EMPTY.as_ptr(),
            target.as_raw_fd(),
            EMPTY.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The kernel's `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`, Linux 5.7+).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// `CLONE_INTO_CGROUP` (Linux 5.7+; not in every libc's headers).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Forks this process with the child born in the cgroup v2 directory `cgroup`
/// (`clone3(CLONE_INTO_CGROUP)`): no move after the fork, so no write lock on the kernel's
/// `cgroup_threadgroup_rwsem` (whose first taker after a quiet spell waits a whole RCU grace
/// period). Returns the child's pid in the parent and 0 in the child, like `fork(2)`.
///
/// # Safety
///
/// Like `fork(2)` in a single-threaded process, and more: the child skips libc's fork
/// handlers, and libc's own record of its thread id keeps the parent's. The caller must be
/// single-threaded, and the child must not rely on libc's cached thread id (robust,
/// error-checking or priority-inheritance mutexes).
pub unsafe fn fork_into_cgroup(cgroup: &impl AsRawFd) -> io::Result<i32> {
    let fd =
        u64::try_from(cgroup.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: fd,
        ..CloneArgs::default()
    };
    // SAFETY: the caller upholds the single-threaded contract above.
    unsafe { clone3(&args) }
}

/// `clone3(args)` without CLONE_VM: returns the child's pid here and 0 in the child.
///
/// # Safety
///
/// As [`fork_into_cgroup`]; any pointer in `args` must be valid for the kernel to write.
unsafe fn clone3(args: &CloneArgs) -> io::Result<i32> {
    // SAFETY: clone3 reads `args` (size given) and, without CLONE_VM, duplicates the process
    // like fork; the caller upholds the rest.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    i32::try_from(rc).map_err(|_| io::Error::other("clone3 returned an out-of-range pid"))
}

/// `CLONE_PARENT` and `CLONE_PIDFD`.
const CLONE_PARENT_PIDFD: u64 = (libc::CLONE_PARENT | libc::CLONE_PIDFD) as u64;

/// Forks this process with the child made a child of this process's parent (`clone3` with
/// `CLONE_PARENT`): the parent can wait for it as for a child of its own, and this process never
/// has to reap it. Returns 0 in the child; in this process, the child's pid and a pidfd for it
/// (`CLONE_PIDFD`: made with the child, so it names that child whatever happens to the pid).
///
/// # Safety
///
/// As [`fork_into_cgroup`]: the caller must be single-threaded, and the child must not rely on
/// libc's cached thread id.
pub unsafe fn fork_sibling() -> io::Result<(i32, Option<OwnedFd>)> {
    let mut pidfd: libc::c_int = -1;
    let args = CloneArgs {
        flags: CLONE_PARENT_PIDFD,
        pidfd: &mut pidfd as *mut libc::c_int as u64,
        // Must be 0 with CLONE_PARENT: the child signals its end as this process does (SIGCHLD,
        // for a process started with `posix_spawn`).
        exit_signal: 0,
        ..CloneArgs::default()
    };
    // SAFETY: `pidfd`, where the kernel writes, is alive for the call; the caller upholds the
    // single-threaded contract above.
    let pid = unsafe { clone3(&args) }?;
    if pid == 0 {
        return Ok((0, None));
    }
    // SAFETY: the kernel made `pidfd` for this process (CLONE_PIDFD) and nothing else owns it.
    Ok((pid, Some(unsafe { OwnedFd::from_raw_fd(pidfd) })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_plain_signal_from_outside_the_namespace_is_from_outside() {
        // kill(2) from the supervisor or the engine: SI_USER, no pid in the init's namespace.
        assert!(from_outside(libc::SI_USER, 0));
        // The same from the command: its own pid.
        assert!(!from_outside(libc::SI_USER, 7));
        // A forged info (only negative codes pass the kernel), tkill, SIGIO's POLL_IN.
        for code in [libc::SI_QUEUE, libc::SI_TKILL, 1, 0x80] {
            assert!(!from_outside(code, 0), "{code}");
        }
    }
}
