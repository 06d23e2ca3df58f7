//! The forked child's last steps before `execve`: everything here runs in a fresh,
//! single-threaded process, and any failure is sent back to the supervisor on a close-on-exec
//! pipe (empty pipe at EOF = `execve` succeeded).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::resource::{Resource, setrlimit};
use serde::{Deserialize, Serialize};

use crate::spec::{ExecSpec, StderrMode, StdinMode};
use crate::sys;

/// Why the child did not reach the command.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildFailure {
    /// The step that failed ("exec" means the command itself could not be executed).
    pub step: String,
    /// The errno, if a syscall failed.
    pub errno: Option<i32>,
    /// A readable explanation.
    pub detail: String,
}

/// The command, prepared before `fork` so the child only runs syscalls.
#[derive(Debug)]
pub struct ExecPlan {
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    display: String,
}

/// Default search path when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

impl ExecPlan {
    /// Prepares `spec`'s command: C strings and the `PATH` candidates for `argv[0]`.
    pub fn new(spec: &ExecSpec) -> Result<Self, ChildFailure> {
        let bad = |what: &str| ChildFailure {
            step: "prepare".into(),
            errno: None,
            detail: format!("{what} contains a NUL byte"),
        };
        let Some(program) = spec.argv.first() else {
            return Err(ChildFailure {
                step: "prepare".into(),
                errno: None,
                detail: "empty argv".into(),
            });
        };
        let argv = spec
            .argv
            .iter()
            .map(|a| CString::new(a.as_bytes()).map_err(|_| bad("an argument")))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| {
                CString::new(format!("{k}={v}")).map_err(|_| bad("an environment variable"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let candidates: Vec<PathBuf> = if program.contains('/') {
            vec![PathBuf::from(program)]
        } else {
            let path = spec
                .env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map_or(DEFAULT_PATH, |(_, v)| v);
            path.split(':')
                .map(|d| {
                    if d.is_empty() {
                        Path::new(".")
                    } else {
                        Path::new(d)
                    }
                })
                .map(|d| d.join(program))
                .collect()
        };
        let candidates = candidates
            .iter()
            .map(|c| CString::new(c.as_os_str().as_bytes()).map_err(|_| bad("the program path")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            candidates,
            argv,
            envp,
            display: program.clone(),
        })
    }
}

fn fail(err_w: &OwnedFd, step: &str, errno: Option<i32>, detail: String) -> ! {
    let failure = ChildFailure {
        step: step.to_owned(),
        errno,
        detail,
    };
    if let Ok(bytes) = serde_json::to_vec(&failure) {
        let mut f = std::fs::File::from(
            err_w
                .try_clone()
                .unwrap_or_else(|_| std::process::exit(127)),
        );
        let _ = f.write_all(&bytes);
    }
    // SAFETY: _exit ends the process without running atexit handlers or flushing stdio that
    // belongs to the parent's copy of the address space.
    unsafe { libc::_exit(127) }
}

fn errno_detail(what: &str, err: &std::io::Error) -> String {
    format!("failed to {what}: {err}")
}

/// Runs in the forked child: sets up the process and executes the command. Never returns.
pub fn exec(spec: &ExecSpec, plan: &ExecPlan, err_w: &OwnedFd) -> ! {
    let io_fail = |step: &str, what: &str, err: std::io::Error| -> ! {
        fail(err_w, step, err.raw_os_error(), errno_detail(what, &err))
    };
    let nix_fail = |step: &str, what: &str, err: nix::Error| -> ! {
        fail(
            err_w,
            step,
            Some(err as i32),
            format!("failed to {what}: {}", err.desc()),
        )
    };

    if let Err(e) = sys::reset_signals() {
        io_fail("sigprocmask", "reset the signal mask", e);
    }
    if let Err(e) = nix::unistd::setsid() {
        nix_fail("setsid", "start a new session (setsid)", e);
    }
    if spec.stdin == StdinMode::Null {
        match nix::fcntl::open(
            "/dev/null",
            nix::fcntl::OFlag::O_RDONLY,
            nix::sys::stat::Mode::empty(),
        ) {
            // SAFETY: dup2 onto fd 0 of this single-threaded child; the source fd is valid.
            Ok(fd) => unsafe {
                libc::dup2(fd, 0);
                libc::close(fd);
            },
            Err(e) => nix_fail("open", "open /dev/null for stdin", e),
        }
    }
    if spec.stderr == StderrMode::MergedIntoStdout {
        // SAFETY: dup2 on the standard descriptors of this single-threaded child.
        if unsafe { libc::dup2(1, 2) } < 0 {
            io_fail(
                "dup2",
                "merge stderr into stdout (dup2)",
                std::io::Error::last_os_error(),
            );
        }
    }
    if let Err(e) = setrlimit(Resource::RLIMIT_CORE, 0, 0) {
        nix_fail("setrlimit", "disable core dumps (setrlimit RLIMIT_CORE)", e);
    }
    if let Some(n) = spec.sandbox.limits.open_files {
        if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, n, n) {
            nix_fail("setrlimit", "limit open files (setrlimit RLIMIT_NOFILE)", e);
        }
    }
    if let Some(n) = spec.sandbox.limits.file_size_bytes {
        if let Err(e) = setrlimit(Resource::RLIMIT_FSIZE, n, n) {
            nix_fail("setrlimit", "limit file size (setrlimit RLIMIT_FSIZE)", e);
        }
    }
    if let Err(e) = nix::unistd::chdir(&spec.cwd) {
        fail(
            err_w,
            "chdir",
            Some(e as i32),
            format!(
                "failed to enter the working directory `{}`: {}",
                spec.cwd.display(),
                e.desc()
            ),
        );
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        nix_fail("prctl", "set no_new_privs (prctl PR_SET_NO_NEW_PRIVS)", e);
    }
    if let Err(e) = sys::cloexec_from(3) {
        io_fail(
            "close_range",
            "close inherited descriptors (close_range)",
            e,
        );
    }
    exec_command(plan, err_w)
}

/// The final `execve`, trying each `PATH` candidate like `execvp` does.
pub fn exec_command(plan: &ExecPlan, err_w: &OwnedFd) -> ! {
    let mut envp: Vec<*const libc::c_char> = plan.envp.iter().map(|c| c.as_ptr()).collect();
    envp.push(std::ptr::null());
    let mut argv: Vec<*const libc::c_char> = plan.argv.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut last = libc::ENOENT;
    let mut saw_eacces = false;
    for candidate in &plan.candidates {
        // SAFETY: every pointer is a NUL-terminated C string owned by `plan`, and both arrays are
        // null-terminated; on success execve does not return.
        unsafe { libc::execve(candidate.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        last = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT);
        if last == libc::EACCES {
            saw_eacces = true;
        }
        if !matches!(last, libc::ENOENT | libc::ENOTDIR | libc::EACCES) {
            break;
        }
    }
    if saw_eacces && last == libc::ENOENT {
        last = libc::EACCES;
    }
    let err = std::io::Error::from_raw_os_error(last);
    let detail = format!("failed to execute `{}`: {err}", plan.display);
    // Tell the command's own stderr too, like a shell would.
    let _ = writeln!(std::io::stderr(), "ralph-sandbox: {detail}");
    let code = if last == libc::ENOENT { 127 } else { 126 };
    let failure = ChildFailure {
        step: "exec".into(),
        errno: Some(last),
        detail,
    };
    if let Ok(bytes) = serde_json::to_vec(&failure) {
        // SAFETY: writing a byte buffer to the error pipe descriptor we own.
        unsafe { libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }
    // SAFETY: see `fail`.
    unsafe { libc::_exit(code) }
}
