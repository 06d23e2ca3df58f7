//! The init's start of the command: a child that shares the init's memory while the init waits
//! (`clone(CLONE_VM | CLONE_VFORK)`, what `posix_spawn` does), until the child's `execve` or
//! `_exit`. A plain fork of the init copied its page tables (the init is a fork of the 140 MB
//! static binary) and both then took a copy-on-write fault for every page they wrote: about
//! 0.25 ms of every start.
//!
//! The child runs the sandbox's last steps ([`super::child::exec`]: credentials, Landlock,
//! seccomp, `execve`) on a stack of its own, in the init's memory, with the init suspended: what
//! it allocates stays allocated in the init (a few hundred bytes, once), nothing the init
//! holds is freed or changed by it, and it never returns (it ends in `execve` or `_exit`). Its
//! credentials, filters, Landlock domain and descriptor table are its own (no `CLONE_THREAD`,
//! no `CLONE_FILES`).

use std::io;

/// The child's stack: 1 MiB reserved (pages are touched only as used), below it a guard page.
const STACK_SIZE: usize = 1 << 20;
const GUARD: usize = 4096;

/// Runs `f` in a child sharing this process's memory; returns the child's pid once it has
/// called `execve` (or exited).
///
/// # Safety
///
/// The caller must be single-threaded, and `f` must end the child with `execve` or `_exit`:
/// never return, never unwind, never touch what the caller will use after as anything but
/// read-only (the caller is suspended while it runs, and sees its memory afterwards).
pub unsafe fn spawn<F: FnOnce() -> std::convert::Infallible>(f: F) -> io::Result<libc::pid_t> {
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK_SIZE + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let unmap = || {
        // SAFETY: unmaps exactly the mapping made above, which the child no longer uses (it
        // has called execve or exited when clone returns, CLONE_VFORK).
        unsafe { libc::munmap(base, STACK_SIZE + GUARD) };
    };
    // SAFETY: the lowest page of our own mapping becomes inaccessible: a stack overflow faults.
    if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
        let e = io::Error::last_os_error();
        unmap();
        return Err(e);
    }
    // SAFETY: the top of the mapping, 16-byte aligned (mmap returns page-aligned memory).
    let top = unsafe { base.cast::<u8>().add(STACK_SIZE + GUARD) }.cast::<libc::c_void>();
    let mut f = Some(f);
    let arg = (&mut f as *mut Option<F>).cast::<libc::c_void>();
    // SAFETY: the child runs `trampoline::<F>` on the new stack with `arg` pointing at `f` in
    // this (suspended) frame; it takes `f` and never returns (see the contract above).
    let pid = unsafe {
        libc::clone(
            trampoline::<F>,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
        )
    };
    let err = io::Error::last_os_error();
    unmap();
    if pid < 0 {
        return Err(err);
    }
    Ok(pid)
}

/// The child's entry: takes the closure out of the parent's frame and runs it.
extern "C" fn trampoline<F: FnOnce() -> std::convert::Infallible>(
    arg: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `arg` points at the `Option<F>` in `spawn`'s frame, alive while the parent is
    // suspended; only this child takes it.
    let f = unsafe { &mut *arg.cast::<Option<F>>() }.take();
    if let Some(f) = f {
        // `f` never returns (its type says so): the match only consumes the `Infallible`.
        #[allow(unreachable_code)]
        match f() {}
    }
    // SAFETY: _exit in the child.
    unsafe { libc::_exit(127) }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// The child runs in our memory until its execve, with its own descriptor table: it can
    /// report through a pipe; a descriptor it closes stays open here; its exit status is ours
    /// to reap.
    #[test]
    fn the_child_execs_with_its_own_descriptors_and_is_reaped() {
        let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let keep = std::fs::File::open("/dev/null").unwrap();
        let (wfd, kfd) = (w.as_raw_fd(), keep.as_raw_fd());
        let sh = c"/bin/sh";
        let script = c"exit 7";
        // SAFETY: the test's process may be multi-threaded, but the child only makes raw
        // syscalls through libc and execs (no lock, no allocation).
        let pid = unsafe {
            spawn(|| {
                libc::close(kfd);
                libc::write(wfd, b"x".as_ptr().cast(), 1);
                let argv = [
                    sh.as_ptr(),
                    c"-c".as_ptr(),
                    script.as_ptr(),
                    std::ptr::null(),
                ];
                libc::execv(sh.as_ptr(), argv.as_ptr());
                libc::_exit(126)
            })
        }
        .unwrap();
        drop(w);
        let mut got = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(r), &mut got).unwrap();
        assert_eq!(got, b"x");
        // Closed in the child only.
        assert!(nix::fcntl::fcntl(keep.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).is_ok());
        let mut status = 0;
        // SAFETY: our own child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
            "{status:#x}"
        );
    }
}
