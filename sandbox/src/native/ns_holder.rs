//! A process that only holds a new user namespace open while its maps are written from outside
//! ([`super::idmap`]). It is cloned with `CLONE_VM | CLONE_NEWUSER`: it shares this process's
//! memory instead of copying it, so its start costs no copy of the page tables (a fork of the
//! runner or of the 140 MB static binary copied every mapping, and every page this process then
//! wrote took a copy-on-write fault), and it is born in the namespace (no `unshare`, no
//! ready-handshake).
//!
//! Sharing memory constrains the child to raw syscalls on its own small stack: no libc call
//! (errno, locks and the thread pointer are this process's), no allocation, no signal handler
//! (every signal is blocked across the clone, so the child starts with all of them blocked). It
//! closes every descriptor but its end of the `done` pipe (another thread's pipes, the runner's
//! listeners and locks must not outlive the runner in it), then reads that pipe until
//! end-of-file: when the maps are written, or when this process dies.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// The child's stack: it makes three syscalls and keeps one byte.
const STACK_SIZE: usize = 16 * 1024;

/// A running holder; reaped on [`Holder::finish`] or, on any other path, killed and reaped on
/// drop (before its stack is freed).
#[derive(Debug)]
pub struct Holder {
    pid: libc::pid_t,
    /// Where the child runs: freed only after the child is reaped.
    _stack: Box<[u8]>,
    /// Our end of `done`: closing it lets the child exit.
    done_w: Option<OwnedFd>,
    reaped: bool,
}

impl Holder {
    /// Starts a holder in a new user namespace.
    pub fn spawn() -> io::Result<Holder> {
        let (done_r, done_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let mut stack = vec![0u8; STACK_SIZE].into_boxed_slice();
        // SAFETY: the stack's end, aligned down to 16 bytes as the ABI wants, is inside it.
        let top = unsafe { stack.as_mut_ptr().add(STACK_SIZE) };
        let top = (top as usize & !15) as *mut libc::c_void;
        let mut all: libc::sigset_t = unsafe_zeroed_sigset();
        let mut old: libc::sigset_t = unsafe_zeroed_sigset();
        // SAFETY: valid sigset pointers; the mask is restored right after the clone.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        }
        let arg = done_r.as_raw_fd() as usize as *mut libc::c_void;
        // SAFETY: the child runs `hold` on `stack`, which outlives it (`Holder` reaps the child
        // before the stack is freed, on every path); `hold` makes only raw syscalls and touches
        // nothing but its own stack frame. Without CLONE_SIGHAND/CLONE_THREAD the child is a
        // process of its own, reaped with waitpid (SIGCHLD).
        let pid = unsafe {
            libc::clone(
                hold,
                top,
                libc::CLONE_VM | libc::CLONE_NEWUSER | libc::SIGCHLD,
                arg,
            )
        };
        let err = io::Error::last_os_error();
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        // The child has its own copy of the descriptor table: ours of `done_r` goes now.
        drop(done_r);
        if pid < 0 {
            return Err(err);
        }
        Ok(Holder {
            pid,
            _stack: stack,
            done_w: Some(done_w),
            reaped: false,
        })
    }

    /// The holder's pid (its `/proc/<pid>` has the namespace's maps and `ns/user`).
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Lets the holder exit and reaps it.
    pub fn finish(mut self) {
        self.done_w = None;
        self.reap();
    }

    fn reap(&mut self) {
        if self.reaped {
            return;
        }
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a valid out-pointer.
            let rc = unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) };
            if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                break;
            }
        }
        self.reaped = true;
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if !self.reaped {
            // SAFETY: signals our own child, not yet reaped (its pid cannot be reused).
            unsafe { libc::kill(self.pid, libc::SIGKILL) };
            self.done_w = None;
            self.reap();
        }
        // The stack is freed after this, with the fields: the child is gone by now.
    }
}

fn unsafe_zeroed_sigset() -> libc::sigset_t {
    // SAFETY: sigset_t is plain old data; all-zero is the empty set.
    unsafe { std::mem::zeroed() }
}

/// The child: closes every descriptor but `arg` (its end of `done`) above stderr, then reads
/// `arg` until end-of-file. Raw syscalls only (see the module comment).
extern "C" fn hold(arg: *mut libc::c_void) -> libc::c_int {
    let fd = arg as usize as RawFd;
    let keep = u64::try_from(fd).unwrap_or(u64::MAX);
    // SAFETY: close_range and read touch no memory but `byte`, on this child's own stack.
    unsafe {
        if keep > 3 {
            raw::syscall3(libc::SYS_close_range, 3, keep - 1, 0);
        }
        if raw::syscall3(libc::SYS_close_range, keep + 1, u64::from(u32::MAX), 0) != 0 {
            // A kernel before 5.9: one by one, up to a bound no descriptor table here exceeds.
            for other in (keep + 1)..(1 << 16) {
                raw::syscall3(libc::SYS_close, other, 0, 0);
            }
        }
        let mut byte = 0u8;
        loop {
            let r = raw::syscall3(libc::SYS_read, keep, &mut byte as *mut u8 as u64, 1);
            if r != -i64::from(libc::EINTR) {
                break;
            }
        }
    }
    0
}

mod raw {
    /// A syscall with three arguments, without libc (no errno write): returns the kernel's
    /// value (a negative errno on failure).
    ///
    /// # Safety
    ///
    /// As the syscall itself: any pointer argument must be valid for it.
    #[cfg(target_arch = "x86_64")]
    pub unsafe fn syscall3(nr: libc::c_long, a: u64, b: u64, c: u64) -> i64 {
        let ret: i64;
        // SAFETY: the x86_64 syscall ABI: number in rax, arguments in rdi, rsi, rdx; rcx and
        // r11 are clobbered; no stack use.
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") nr => ret,
                in("rdi") a,
                in("rsi") b,
                in("rdx") c,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub unsafe fn syscall3(nr: libc::c_long, a: u64, b: u64, c: u64) -> i64 {
        compile_error!("ns_holder's raw syscalls are written for x86_64 only");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `pid` is a child of this process (a zombie included): /proc's parent link.
    fn is_our_child(pid: libc::pid_t) -> bool {
        super::super::tree::parent_of(pid) == i32::try_from(std::process::id()).ok()
    }

    /// The holder is in a user namespace of its own, holds none of our descriptors but its
    /// pipe's end, and is gone (reaped) after `finish`.
    #[test]
    fn the_holder_is_in_a_new_user_namespace_with_only_its_pipe_and_is_reaped() {
        let canary = std::fs::File::open("/dev/null").unwrap();
        let h = match Holder::spawn() {
            Ok(h) => h,
            Err(e) => {
                eprintln!("skipped: this host makes no user namespace here: {e}");
                return;
            }
        };
        let pid = h.pid();
        let ours = std::fs::read_link("/proc/self/ns/user").unwrap();
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/user")).unwrap();
        assert_ne!(ours, theirs, "the holder is in our user namespace");
        // Its descriptors: 0-2 as ours, and one pipe. The canary (and every other of ours) is
        // closed; the child closes them first thing, so wait for that with a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let fds = loop {
            let fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.parse::<i32>().map(|n| n > 2).unwrap_or(false))
                .collect();
            if fds.len() == 1 || std::time::Instant::now() > deadline {
                break fds;
            }
            std::thread::yield_now();
        };
        assert_eq!(fds.len(), 1, "{fds:?}");
        let link = std::fs::read_link(format!("/proc/{pid}/fd/{}", fds[0])).unwrap();
        assert!(link.to_string_lossy().starts_with("pipe:"), "{link:?}");
        drop(canary);
        h.finish();
        // Reaped: no child of ours (not even a zombie) has its pid.
        assert!(!is_our_child(pid));
    }

    /// Dropped without `finish` (a failure between the spawn and the end): killed and reaped,
    /// nothing left.
    #[test]
    fn a_dropped_holder_is_killed_and_reaped() {
        let Ok(h) = Holder::spawn() else {
            eprintln!("skipped: this host makes no user namespace here");
            return;
        };
        let pid = h.pid();
        drop(h);
        assert!(!is_our_child(pid));
    }
}
