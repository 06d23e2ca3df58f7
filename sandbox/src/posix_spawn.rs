//! Starting a process with `posix_spawn(3)` instead of `fork`: glibc starts it with
//! `clone(CLONE_VM | CLONE_VFORK)`, so the caller's page tables are not copied and the caller
//! takes no copy-on-write faults afterwards (a `fork` of a runner with its runtime's threads and
//! heap costs about 1.5 ms of CPU here, faults included). `std::process::Command` forks in this
//! static binary: it finds glibc's version and `posix_spawn_file_actions_addchdir_np` through
//! `dlsym`, which a static binary cannot answer.
//!
//! The primitives ([`FileActions`], [`Attr`]) serve the sandbox helper's start
//! ([`crate::native::spawn`]) and [`run`], a synchronous run of a short command with its output
//! collected and its resource usage read (the runner's git). A child inherits only the
//! descriptors the actions name and its caller's others that lack close-on-exec (Rust opens
//! every descriptor close-on-exec).

use std::ffi::{CString, OsString};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// `/dev/null` open for reading (close-on-exec).
pub fn open_null() -> io::Result<OwnedFd> {
    Ok(std::fs::File::open("/dev/null")?.into())
}

/// `posix_spawn_file_actions_t`, destroyed when dropped.
pub struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    /// No actions yet.
    pub fn new() -> io::Result<Self> {
        // SAFETY: zeroed storage that posix_spawn_file_actions_init initialises before any use.
        let mut a = Self(unsafe { std::mem::zeroed() });
        // SAFETY: a pointer to storage this function owns.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut a.0) })?;
        Ok(a)
    }

    /// `dup2(from, to)` in the child (onto itself: its close-on-exec cleared there only).
    pub fn dup2(&mut self, from: RawFd, to: RawFd) -> io::Result<()> {
        // SAFETY: initialised actions; plain descriptor numbers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }

    /// `chdir(dir)` in the child (glibc 2.29 and later; the binary is static: the build's).
    pub fn chdir(&mut self, dir: &Path) -> io::Result<()> {
        let c = CString::new(dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: initialised actions; glibc copies the NUL-terminated path.
        check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut self.0, c.as_ptr()) })
    }

    /// The raw actions, for `posix_spawn`.
    pub fn as_ptr(&self) -> *const libc::posix_spawn_file_actions_t {
        &self.0
    }
}

impl std::fmt::Debug for FileActions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FileActions")
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// `posix_spawnattr_t` for default signal dispositions and an empty signal mask (as
/// `std::process::Command` gives), in a new process group when asked; destroyed when dropped.
pub struct Attr(libc::posix_spawnattr_t);

impl Attr {
    /// The attributes; `new_group`: the child leads a process group of its own.
    pub fn new(new_group: bool) -> io::Result<Self> {
        // SAFETY: zeroed storage that posix_spawnattr_init initialises before any use.
        let mut a = Self(unsafe { std::mem::zeroed() });
        // SAFETY: a pointer to storage this function owns.
        check(unsafe { libc::posix_spawnattr_init(&mut a.0) })?;
        // SAFETY: sigset_t values are initialised by sigemptyset/sigfillset before use; the
        // attribute calls take pointers to live values.
        unsafe {
            let mut none: libc::sigset_t = std::mem::zeroed();
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigfillset(&mut all);
            check(libc::posix_spawnattr_setsigmask(&mut a.0, &none))?;
            check(libc::posix_spawnattr_setsigdefault(&mut a.0, &all))?;
            let mut flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            if new_group {
                check(libc::posix_spawnattr_setpgroup(&mut a.0, 0))?;
                flags |= libc::POSIX_SPAWN_SETPGROUP;
            }
            check(libc::posix_spawnattr_setflags(
                &mut a.0,
                flags as libc::c_short,
            ))?;
        }
        Ok(a)
    }

    /// The raw attributes, for `posix_spawn`.
    pub fn as_ptr(&self) -> *const libc::posix_spawnattr_t {
        &self.0
    }
}

impl std::fmt::Debug for Attr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Attr")
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// NUL-terminated copies of `args`, and a null-terminated array of pointers to them (valid while
/// the copies live).
#[derive(Debug)]
pub struct CArgs {
    strings: Vec<CString>,
    ptrs: Vec<*mut libc::c_char>,
}

impl CArgs {
    /// The copies; a NUL inside one is refused.
    pub fn new(args: impl IntoIterator<Item = Vec<u8>>) -> io::Result<Self> {
        let strings = args
            .into_iter()
            .map(|b| CString::new(b).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput)))
            .collect::<io::Result<Vec<_>>>()?;
        let mut ptrs: Vec<*mut libc::c_char> =
            strings.iter().map(|s| s.as_ptr().cast_mut()).collect();
        ptrs.push(std::ptr::null_mut());
        Ok(Self { strings, ptrs })
    }

    /// The null-terminated array.
    pub fn as_ptr(&self) -> *const *mut libc::c_char {
        self.ptrs.as_ptr()
    }

    /// The first string (the program), if any.
    pub fn first(&self) -> Option<&CString> {
        self.strings.first()
    }
}

/// `posix_spawn` of `argv[0]` (an absolute path) with `argv` and `envp`: the child's pid.
pub fn spawn(
    argv: &CArgs,
    envp: &CArgs,
    actions: &FileActions,
    attr: &Attr,
) -> io::Result<libc::pid_t> {
    let program = argv
        .first()
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: the actions and attributes are initialised
    // and outlive it; `program`, `argv` and `envp` are NUL-terminated strings in null-terminated
    // arrays that outlive it.
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            program.as_ptr(),
            actions.as_ptr(),
            attr.as_ptr(),
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    check(rc)?;
    Ok(pid)
}

/// A short command to run to its end ([`run`]).
#[derive(Debug)]
pub struct Command {
    /// The program (an absolute path: no `PATH` search) and its arguments.
    pub argv: Vec<OsString>,
    /// Its whole environment (`NAME=value`).
    pub env: Vec<OsString>,
    /// Where it starts (else the caller's directory).
    pub cwd: Option<PathBuf>,
    /// Its standard input (else `/dev/null`).
    pub stdin: Option<std::fs::File>,
    /// Where its standard output goes (else it is collected).
    pub stdout: Option<std::fs::File>,
}

/// How a [`run`] ended.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its standard output (empty when it went to a file).
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Its peak resident memory in bytes (`wait4`'s, of it or a child it waited for).
    pub max_rss: u64,
}

/// Runs `cmd` to its end: started with `posix_spawn`, its standard output (unless to a file)
/// and error collected, reaped with `wait4`.
pub fn run(cmd: Command) -> io::Result<Finished> {
    let argv = CArgs::new(cmd.argv.into_iter().map(OsStringExt::into_vec))?;
    let envp = CArgs::new(cmd.env.into_iter().map(OsStringExt::into_vec))?;
    let stdin: OwnedFd = match cmd.stdin {
        Some(f) => f.into(),
        None => open_null()?,
    };
    let (out_r, out_w): (Option<OwnedFd>, OwnedFd) = match cmd.stdout {
        Some(f) => (None, f.into()),
        None => {
            let (r, w) = pipe_pair()?;
            (Some(r), w)
        }
    };
    let (err_r, err_w) = pipe_pair()?;
    let mut actions = FileActions::new()?;
    actions.dup2(stdin.as_raw_fd(), 0)?;
    actions.dup2(out_w.as_raw_fd(), 1)?;
    actions.dup2(err_w.as_raw_fd(), 2)?;
    if let Some(dir) = &cmd.cwd {
        actions.chdir(dir)?;
    }
    let attr = Attr::new(false)?;
    // Its stderr is read meanwhile (a full pipe would stop it): the reader first, so that a
    // child is never started without one.
    let mut err = std::fs::File::from(err_r);
    let stderr = std::thread::Builder::new()
        .name("ralph-stderr".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf);
            buf
        })?;
    let spawned = spawn(&argv, &envp, &actions, &attr);
    // The child's ends are the child's now: the pipes end when it (and what it started) does,
    // or at once when it did not start.
    drop((stdin, out_w, err_w));
    let pid = match spawned {
        Ok(pid) => pid,
        Err(e) => {
            let _ = stderr.join();
            return Err(e);
        }
    };
    let mut stdout = Vec::new();
    let read = match out_r {
        Some(r) => std::fs::File::from(r).read_to_end(&mut stdout).map(|_| ()),
        None => Ok(()),
    };
    let reaped = reap(pid);
    let stderr = stderr.join().unwrap_or_default();
    let (status, max_rss) = reaped?;
    read?;
    Ok(Finished {
        status,
        stdout,
        stderr,
        max_rss,
    })
}

/// Reaps the child `pid` with `wait4`: how it ended and its peak resident memory in bytes (its
/// own or that of a child of its own it waited for, whichever was larger).
pub fn reap(pid: libc::pid_t) -> io::Result<(ExitStatus, u64)> {
    let mut status: libc::c_int = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    loop {
        // SAFETY: `status` and `usage` are valid, writable and live across the call; `pid` is
        // our own child, not yet reaped.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
        if rc == pid {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    // SAFETY: wait4 returned the child, so it filled `usage` (and it was zeroed before).
    let usage = unsafe { usage.assume_init() };
    let kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    Ok((ExitStatus::from_raw(status), kib.saturating_mul(1024)))
}

#[cfg(test)]
mod tests;
