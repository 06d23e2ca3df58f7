//! The command's last steps before `execve`, in a fresh single-threaded process: clean signal
//! state, its own session, stdio, rlimits, working directory, then the irreversible part —
//! capabilities dropped, `no_new_privs`, Landlock, seccomp — and descriptors closed on exec. Any
//! failure goes back to the supervisor on a close-on-exec pipe (EOF = `execve` succeeded).

use std::ffi::CString;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::sys::resource::{Resource, setrlimit};
use seccompiler::BpfProgram;
use serde::{Deserialize, Serialize};

use super::step::{StepFailure, restriction};
use super::{caps, landlock, seccomp};
use crate::identity::Ids;
use crate::plan::SandboxPlan;
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
    /// The restriction that could not be enforced.
    pub restriction: Option<String>,
}

/// The command, prepared before `fork` so the child only makes syscalls.
#[derive(Debug)]
pub struct ExecPlan {
    candidates: Vec<CString>,
    argv: Vec<CString>,
    envp: Vec<CString>,
    display: String,
    seccomp: Vec<BpfProgram>,
}

/// Default search path when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

impl ExecPlan {
    /// Prepares `spec`'s command: C strings, the `PATH` candidates for `argv[0]`, and the
    /// seccomp programs of `plan`.
    pub fn new(spec: &ExecSpec, plan: Option<&SandboxPlan>) -> Result<Self, String> {
        let program = spec.argv.first().ok_or("empty argv")?;
        let cstr = |what: &str, s: &[u8]| {
            CString::new(s).map_err(|_| format!("{what} contains a NUL byte"))
        };
        let argv = spec
            .argv
            .iter()
            .map(|a| cstr("an argument", a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = spec
            .env
            .iter()
            .map(|(k, v)| cstr("an environment variable", format!("{k}={v}").as_bytes()))
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
            .map(|c| cstr("the program path", c.as_os_str().as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let seccomp = match plan {
            Some(p) => seccomp::build(&p.seccomp).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        Ok(Self {
            candidates,
            argv,
            envp,
            display: program.clone(),
            seccomp,
        })
    }
}

/// Sends `failure` to the supervisor and exits with `code`.
pub fn report_and_exit(err_w: &OwnedFd, failure: &ChildFailure, code: i32) -> ! {
    if let Ok(bytes) = serde_json::to_vec(failure) {
        // SAFETY: writing a byte buffer we own to a descriptor we own.
        unsafe { libc::write(err_w.as_raw_fd(), bytes.as_ptr().cast(), bytes.len()) };
    }
    // SAFETY: _exit ends this forked child without running the parent's atexit handlers.
    unsafe { libc::_exit(code) }
}

pub(super) fn die(err_w: &OwnedFd, f: StepFailure) -> ! {
    let failure = ChildFailure {
        step: f.step,
        errno: f.errno,
        detail: f.reason,
        restriction: Some(f.restriction),
    };
    report_and_exit(err_w, &failure, 127)
}

fn rlimit(err_w: &OwnedFd, r: Resource, name: &str, v: u64) {
    if let Err(e) = setrlimit(r, v, v) {
        die(
            err_w,
            StepFailure::nix(
                restriction::RLIMITS,
                "setrlimit",
                &format!("set {name} to {v}"),
                e,
            ),
        );
    }
}

/// Runs in the forked command process: sets it up and executes the command. Never returns.
/// `ruleset` is the plan's Landlock ruleset built ahead ([`landlock::prepare`]); without one,
/// a plan's ruleset is built here.
pub fn exec(
    spec: &ExecSpec,
    plan: Option<&SandboxPlan>,
    exec: &ExecPlan,
    ruleset: Option<&landlock::Prepared>,
    err_w: &OwnedFd,
) -> ! {
    if let Err(e) = sys::reset_signals() {
        die(
            err_w,
            StepFailure::io(
                restriction::PROCESS,
                "sigprocmask",
                "reset the signal mask",
                &e,
            ),
        );
    }
    if let Err(e) = nix::unistd::setsid() {
        die(
            err_w,
            StepFailure::nix(restriction::PROCESS, "setsid", "start a new session", e),
        );
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
            Err(e) => die(
                err_w,
                StepFailure::nix(restriction::PROCESS, "open", "open /dev/null for stdin", e),
            ),
        }
    }
    // SAFETY: dup2 on the standard descriptors of this single-threaded child.
    if spec.stderr == StderrMode::MergedIntoStdout && unsafe { libc::dup2(1, 2) } < 0 {
        die(
            err_w,
            StepFailure::io(
                restriction::PROCESS,
                "dup2",
                "merge stderr into stdout",
                &std::io::Error::last_os_error(),
            ),
        );
    }
    rlimit(err_w, Resource::RLIMIT_CORE, "RLIMIT_CORE", 0);
    let open_files = plan
        .and_then(|p| p.open_files)
        .or(spec.sandbox.limits.open_files);
    let file_size = plan
        .and_then(|p| p.file_size)
        .or(spec.sandbox.limits.file_size_bytes);
    if let Some(n) = open_files {
        rlimit(err_w, Resource::RLIMIT_NOFILE, "RLIMIT_NOFILE", n);
    }
    if let Some(n) = file_size {
        rlimit(err_w, Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", n);
    }
    if let Some(n) = plan.and_then(|p| p.nproc) {
        rlimit(err_w, Resource::RLIMIT_NPROC, "RLIMIT_NPROC", n);
    }
    if let Err(e) = nix::unistd::chdir(&spec.cwd) {
        die(
            err_w,
            StepFailure::nix(
                restriction::PROCESS,
                "chdir",
                &format!("enter the working directory `{}`", spec.cwd.display()),
                e,
            ),
        );
    }
    let drop_caps = plan.is_some_and(|p| p.drop_capabilities);
    if drop_caps {
        if let Err(f) = caps::drop_bounding_and_ambient() {
            die(err_w, f);
        }
    }
    if let Some(ids) = plan.and_then(|p| p.identity.as_ref()) {
        if let Err(f) = become_user(ids) {
            die(err_w, f);
        }
    }
    if drop_caps {
        if let Err(f) = caps::clear() {
            die(err_w, f);
        }
    }
    if let Err(e) = nix::sys::prctl::set_no_new_privs() {
        die(
            err_w,
            StepFailure::nix(
                restriction::PROCESS,
                "prctl(PR_SET_NO_NEW_PRIVS)",
                "set no_new_privs",
                e,
            ),
        );
    }
    if let Some(ll) = plan.and_then(|p| p.landlock.as_ref()) {
        let enforced = match ruleset {
            Some(r) => r.enforce(),
            None => landlock::restrict(ll),
        };
        if let Err(f) = enforced {
            die(err_w, f);
        }
    }
    if let Err(f) = seccomp::install(&exec.seccomp) {
        die(err_w, f);
    }
    if let Err(e) = sys::cloexec_from(3) {
        die(
            err_w,
            StepFailure::io(
                restriction::PROCESS,
                "close_range",
                "close inherited descriptors",
                &e,
            ),
        );
    }
    exec_command(exec, err_w)
}

/// Switches to `ids` for good (no supplementary groups; real, effective and saved ids), and
/// checks that uid 0 is gone.
fn become_user(ids: &Ids) -> Result<(), StepFailure> {
    let fail = |step: &str, e: nix::Error| {
        StepFailure::nix(
            restriction::PROCESS,
            step,
            &format!("become uid {} gid {} ({})", ids.uid, ids.gid, ids.name),
            e,
        )
    };
    nix::unistd::setgroups(&[]).map_err(|e| fail("setgroups", e))?;
    let gid = nix::unistd::Gid::from_raw(ids.gid);
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| fail("setresgid", e))?;
    let uid = nix::unistd::Uid::from_raw(ids.uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| fail("setresuid", e))?;
    let (r, e, s) = (
        nix::unistd::getuid(),
        nix::unistd::geteuid(),
        nix::unistd::getresuid().map(|u| u.saved),
    );
    if r.is_root() || e.is_root() || !matches!(s, Ok(s) if !s.is_root()) {
        return Err(StepFailure::new(
            restriction::PROCESS,
            "setresuid",
            format!("uid 0 is still held after switching to uid {}", ids.uid),
        ));
    }
    Ok(())
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
        saw_eacces |= last == libc::EACCES;
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
    report_and_exit(
        err_w,
        &ChildFailure {
            step: "exec".into(),
            errno: Some(last),
            detail,
            restriction: None,
        },
        code,
    )
}
