//! `ralph-probe`: test support for the sandbox escape matrix. Not shipped.
//!
//! A test runs `ralph-probe ACTION ARGS...` *inside* a sandbox (Landlock + seccomp +
//! namespaces + limits). Each call makes exactly one escape attempt (or one check) through one
//! specific syscall and prints exactly one line of JSON on stdout:
//!
//! ```text
//! {"action":"write","ok":true}
//! {"action":"read","ok":false,"errno":"EACCES","code":13,"step":"open"}
//! {"action":"nope","ok":false,"errno":"USAGE","code":-1,"step":"args","detail":"..."}
//! ```
//!
//! `errno` is the symbolic name of the exact error and `step` the syscall that returned it, so a
//! test can tell "blocked with EPERM by seccomp" from "EACCES from Landlock" from "not found".
//! The probe exits 0 whenever it could make its attempt (whatever the result) and 2 on a usage
//! error. It never prints anything else on stdout: programs it executes write their stdout to the
//! probe's stderr. Syscalls are issued raw (`libc::syscall`) wherever glibc might otherwise pick
//! a different syscall, so the attempted syscall is exactly the one named in `step`.
//!
//! Layout: argument parsing → `match action` → one small function per action → the `Outcome`
//! type → printing.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io::Write as _;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::str::FromStr;
use std::time::{Duration, Instant};

use libc::{c_char, c_int, c_long, c_void, pid_t};
use serde_json::{Value, json};

/// A zero argument of the width every `syscall(2)` argument has.
const ZERO: c_long = 0;

fn main() {
    let mut argv = std::env::args_os().skip(1);
    let action = argv
        .next()
        .map(|a| a.to_string_lossy().into_owned())
        .unwrap_or_default();
    let args = Args(argv.collect());
    let outcome = dispatch(&action, &args);
    std::process::exit(emit(&action, &outcome));
}

// ---------------------------------------------------------------------------------------------
// Argument parsing
// ---------------------------------------------------------------------------------------------

/// The arguments after the action name.
#[derive(Debug)]
struct Args(Vec<OsString>);

impl Args {
    /// Requires exactly `names.len()` arguments (named for the usage message).
    fn want(&self, names: &[&str]) -> Result<(), Failure> {
        if self.0.len() == names.len() {
            Ok(())
        } else {
            Err(usage(format!(
                "expected {} argument(s) ({}), got {}",
                names.len(),
                names.join(" "),
                self.0.len()
            )))
        }
    }

    fn get(&self, i: usize, what: &str) -> Result<&OsStr, Failure> {
        self.0
            .get(i)
            .map(OsString::as_os_str)
            .ok_or_else(|| usage(format!("missing {what}")))
    }

    fn path(&self, i: usize, what: &str) -> Result<CString, Failure> {
        cstring(self.get(i, what)?)
    }

    fn text(&self, i: usize, what: &str) -> Result<&str, Failure> {
        self.get(i, what)?
            .to_str()
            .ok_or_else(|| usage(format!("{what} is not UTF-8")))
    }

    fn parse<T: FromStr>(&self, i: usize, what: &str) -> Result<T, Failure> {
        let text = self.text(i, what)?;
        text.parse()
            .map_err(|_| usage(format!("invalid {what}: {text:?}")))
    }

    fn ip(&self, i: usize) -> Result<IpAddr, Failure> {
        let text = self.text(i, "HOST")?;
        text.parse().map_err(|_| {
            usage(format!(
                "HOST must be an IPv4 or IPv6 address (no name resolution): {text:?}"
            ))
        })
    }

    /// A PID, or the literal `child` (a forked child of the probe).
    fn target(&self, i: usize) -> Result<Target, Failure> {
        if self.text(i, "PID")? == "child" {
            Ok(Target::Child)
        } else {
            self.parse(i, "PID").map(Target::Pid)
        }
    }
}

/// The process an action works on.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// A child the probe forks for the purpose (sleeps 5 s, killed afterwards).
    Child,
    /// Any process.
    Pid(pid_t),
}

fn cstring(arg: &OsStr) -> Result<CString, Failure> {
    CString::new(arg.as_bytes()).map_err(|_| usage("argument contains a NUL byte"))
}

fn usage(detail: impl Into<String>) -> Failure {
    Failure::Usage(detail.into())
}

// ---------------------------------------------------------------------------------------------
// Dispatch
// ---------------------------------------------------------------------------------------------

fn dispatch(action: &str, a: &Args) -> Outcome {
    match action {
        // Filesystem.
        "write" => {
            a.want(&["PATH"])?;
            write_file(&a.path(0, "PATH")?)
        }
        "append" => {
            a.want(&["PATH"])?;
            append_file(&a.path(0, "PATH")?)
        }
        "read" => {
            a.want(&["PATH"])?;
            read_file_action(&a.path(0, "PATH")?)
        }
        "readdir" => {
            a.want(&["PATH"])?;
            readdir(&a.path(0, "PATH")?)
        }
        "mkdir" => {
            a.want(&["PATH"])?;
            mkdir(&a.path(0, "PATH")?)
        }
        "rmdir" => {
            a.want(&["PATH"])?;
            rmdir(&a.path(0, "PATH")?)
        }
        "unlink" => {
            a.want(&["PATH"])?;
            unlink(&a.path(0, "PATH")?)
        }
        "rename" => {
            a.want(&["FROM", "TO"])?;
            rename(&a.path(0, "FROM")?, &a.path(1, "TO")?)
        }
        "link" => {
            a.want(&["FROM", "TO"])?;
            link(&a.path(0, "FROM")?, &a.path(1, "TO")?)
        }
        "symlink" => {
            a.want(&["TARGET", "LINKPATH"])?;
            symlink(&a.path(0, "TARGET")?, &a.path(1, "LINKPATH")?)
        }
        "truncate" => {
            a.want(&["PATH"])?;
            truncate(&a.path(0, "PATH")?)
        }
        "chmod" => {
            a.want(&["PATH", "MODE_OCTAL"])?;
            chmod(&a.path(0, "PATH")?, parse_octal(a.text(1, "MODE_OCTAL")?)?)
        }
        "create-mode" => {
            a.want(&["PATH", "MODE_OCTAL"])?;
            create_mode(&a.path(0, "PATH")?, parse_octal(a.text(1, "MODE_OCTAL")?)?)
        }
        "openat2" => {
            a.want(&["PATH"])?;
            openat2(&a.path(0, "PATH")?)
        }
        "exec" => {
            if a.0.is_empty() {
                return Err(usage("missing PATH"));
            }
            exec(&a.0)
        }
        "read-link" => {
            a.want(&["PATH"])?;
            read_link(&a.path(0, "PATH")?)
        }

        // Network.
        "connect-tcp" => {
            a.want(&["HOST", "PORT"])?;
            connect_tcp(a.ip(0)?, a.parse(1, "PORT")?)
        }
        "connect-udp" => {
            a.want(&["HOST", "PORT"])?;
            connect_udp(a.ip(0)?, a.parse(1, "PORT")?)
        }
        "dns" => {
            a.want(&["NAME"])?;
            dns(a.text(0, "NAME")?)
        }
        "bind-tcp" => {
            a.want(&["HOST", "PORT"])?;
            bind_tcp(a.ip(0)?, a.parse(1, "PORT")?)
        }
        "raw-socket" => {
            a.want(&[])?;
            socket_only(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP)
        }
        "netlink-socket" => {
            a.want(&[])?;
            socket_only(libc::AF_NETLINK, libc::SOCK_RAW, libc::NETLINK_ROUTE)
        }
        "unix-socketpair" => {
            a.want(&[])?;
            unix_socketpair()
        }
        "unix-bind" => {
            a.want(&["PATH"])?;
            unix_bind(a.get(0, "PATH")?)
        }
        "unix-connect" => {
            a.want(&["PATH"])?;
            unix_connect(a.get(0, "PATH")?)
        }
        "abstract-connect" => {
            a.want(&["NAME"])?;
            abstract_connect(a.get(0, "NAME")?)
        }
        "abstract-listen" => {
            a.want(&["NAME", "SECONDS"])?;
            abstract_listen(a.get(0, "NAME")?, seconds(a, 1)?)
        }

        // Processes and privileges.
        "ptrace-attach" => {
            a.want(&["PID|child"])?;
            ptrace_attach(a.target(0)?)
        }
        "process-vm-readv" => {
            a.want(&["PID|child"])?;
            process_vm_readv(a.target(0)?)
        }
        "io-uring" => {
            a.want(&[])?;
            io_uring()
        }
        "mount" => {
            a.want(&[])?;
            mount_tmpfs()
        }
        "umount" => {
            a.want(&["PATH"])?;
            umount(&a.path(0, "PATH")?)
        }
        "unshare" => {
            a.want(&["FLAG"])?;
            unshare(a.text(0, "FLAG")?)
        }
        "clone-newuser" => {
            a.want(&[])?;
            clone_newuser()
        }
        "clone3" => {
            a.want(&[])?;
            clone3()
        }
        "setns" => {
            a.want(&["PATH"])?;
            setns(&a.path(0, "PATH")?)
        }
        "mknod-char" => {
            a.want(&["PATH"])?;
            mknod(
                &a.path(0, "PATH")?,
                libc::S_IFCHR | 0o600,
                libc::makedev(1, 3),
            )
        }
        "mknod-block" => {
            a.want(&["PATH"])?;
            mknod(
                &a.path(0, "PATH")?,
                libc::S_IFBLK | 0o600,
                libc::makedev(8, 0),
            )
        }
        "mkfifo" => {
            a.want(&["PATH"])?;
            mknod(&a.path(0, "PATH")?, libc::S_IFIFO | 0o600, 0)
        }
        "chroot" => {
            a.want(&["PATH"])?;
            chroot(&a.path(0, "PATH")?)
        }
        "kill" => {
            a.want(&["PID", "SIGNAL_NUMBER"])?;
            kill(a.parse(0, "PID")?, a.parse(1, "SIGNAL_NUMBER")?)
        }
        "bpf" => {
            a.want(&[])?;
            bpf()
        }
        "harmless-syscall" => {
            a.want(&["NAME|NUMBER"])?;
            harmless_syscall(a.text(0, "NAME|NUMBER")?)
        }
        "perf-event-open" => {
            a.want(&[])?;
            perf_event_open()
        }
        "keyctl" => {
            a.want(&[])?;
            keyctl()
        }
        "add-key" => {
            a.want(&[])?;
            add_key()
        }
        "request-key" => {
            a.want(&[])?;
            request_key()
        }
        "userfaultfd" => {
            a.want(&[])?;
            userfaultfd()
        }
        "personality" => {
            a.want(&["VALUE_HEX|query"])?;
            personality(parse_persona(a.text(0, "VALUE_HEX")?)?)
        }
        "kexec-load" => {
            a.want(&[])?;
            kexec_load()
        }
        "init-module" => {
            a.want(&[])?;
            init_module()
        }
        "caps" => {
            a.want(&[])?;
            status_report(&["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"])
        }
        "no-new-privs" => {
            a.want(&[])?;
            no_new_privs()
        }
        "seccomp-mode" => {
            a.want(&[])?;
            status_report(&["Seccomp", "Seccomp_filters"])
        }
        "status-field" => {
            a.want(&["NAME"])?;
            status_field(a.text(0, "NAME")?)
        }
        "setuid-exec" => {
            a.want(&["PATH"])?;
            setuid_exec(a.path(0, "PATH")?)
        }
        "whoami" => {
            a.want(&[])?;
            whoami()
        }
        "tiocsti" => {
            a.want(&["FD"])?;
            tiocsti(a.parse(0, "FD")?)
        }
        "isatty" => {
            a.want(&["FD"])?;
            isatty(a.parse(0, "FD")?)
        }
        "prlimit-pid" => {
            a.want(&["PID"])?;
            prlimit_pid(a.parse(0, "PID")?)
        }

        // Limits.
        "alloc" => {
            a.want(&["MEGABYTES"])?;
            alloc(a.parse(0, "MEGABYTES")?)
        }
        "fork-bomb" => {
            a.want(&["MAX"])?;
            fork_bomb(a.parse(0, "MAX")?)
        }
        "flood" => {
            a.want(&["BYTES"])?;
            flood(a.parse(0, "BYTES")?)
        }
        "daemon" => {
            a.want(&["MARKER_SECONDS"])?;
            daemon(a.text(0, "MARKER_SECONDS")?)
        }
        "sleep" => {
            a.want(&["SECONDS"])?;
            sleep(seconds(a, 0)?)
        }

        "" => Err(usage("missing ACTION")),
        other => Err(usage(format!("unknown action {other:?}"))),
    }
}

fn seconds(a: &Args, i: usize) -> Result<Duration, Failure> {
    let secs: f64 = a.parse(i, "SECONDS")?;
    Duration::try_from_secs_f64(secs).map_err(|_| usage(format!("invalid SECONDS: {secs}")))
}

fn parse_octal(text: &str) -> Result<libc::mode_t, Failure> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    libc::mode_t::from_str_radix(digits, 8)
        .map_err(|_| usage(format!("invalid MODE_OCTAL: {text:?}")))
}

fn parse_persona(text: &str) -> Result<u32, Failure> {
    if text == "query" {
        return Ok(0xffff_ffff);
    }
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    u32::from_str_radix(digits, 16).map_err(|_| usage(format!("invalid VALUE_HEX: {text:?}")))
}

// ---------------------------------------------------------------------------------------------
// Filesystem actions
// ---------------------------------------------------------------------------------------------

fn write_file(path: &CStr) -> Outcome {
    let fd = open(path, libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC, 0o644)?;
    write_all(&fd, b"probe\n")?;
    done()
}

fn append_file(path: &CStr) -> Outcome {
    let fd = open(path, libc::O_WRONLY | libc::O_APPEND, 0)?;
    write_all(&fd, b"probe\n")?;
    done()
}

fn read_file_action(path: &CStr) -> Outcome {
    let fd = open(path, libc::O_RDONLY, 0)?;
    let mut buf = [0u8; 4096];
    let n = read_some(&fd, &mut buf)?;
    Ok(vec![("bytes", json!(n))])
}

fn readdir(path: &CStr) -> Outcome {
    let fd = open(path, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
    let mut buf = vec![0u8; 32 * 1024];
    // SAFETY: `buf` is writable for `buf.len()` bytes and outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_getdents64,
            c_long::from(fd.as_raw_fd()),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    let len = usize::try_from(check(ret, "getdents64")?).unwrap_or(0);
    // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
    let mut entries = 0u64;
    let mut offset = 0usize;
    while offset < len {
        let Some(reclen) = buf.get(offset + 16..offset + 18) else {
            break;
        };
        let reclen = usize::from(u16::from_ne_bytes([reclen[0], reclen[1]]));
        if reclen == 0 {
            break;
        }
        entries += 1;
        offset += reclen;
    }
    Ok(vec![("entries", json!(entries))])
}

fn mkdir(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_mkdir, path.as_ptr(), c_long::from(0o755u32)) };
    check(ret, "mkdir")?;
    done()
}

fn rmdir(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_rmdir, path.as_ptr()) };
    check(ret, "rmdir")?;
    done()
}

fn unlink(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_unlink, path.as_ptr()) };
    check(ret, "unlink")?;
    done()
}

fn rename(from: &CStr, to: &CStr) -> Outcome {
    let cwd = c_long::from(libc::AT_FDCWD);
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            cwd,
            from.as_ptr(),
            cwd,
            to.as_ptr(),
            ZERO,
        )
    };
    check(ret, "renameat2")?;
    done()
}

fn link(from: &CStr, to: &CStr) -> Outcome {
    let cwd = c_long::from(libc::AT_FDCWD);
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let ret =
        unsafe { libc::syscall(libc::SYS_linkat, cwd, from.as_ptr(), cwd, to.as_ptr(), ZERO) };
    check(ret, "linkat")?;
    done()
}

fn symlink(target: &CStr, linkpath: &CStr) -> Outcome {
    // SAFETY: both paths are NUL-terminated and outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_symlinkat,
            target.as_ptr(),
            c_long::from(libc::AT_FDCWD),
            linkpath.as_ptr(),
        )
    };
    check(ret, "symlinkat")?;
    done()
}

fn truncate(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_truncate, path.as_ptr(), ZERO) };
    check(ret, "truncate")?;
    done()
}

fn chmod(path: &CStr, mode: libc::mode_t) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_chmod, path.as_ptr(), c_long::from(mode)) };
    check(ret, "chmod")?;
    done()
}

/// Creates a new file with exactly `mode` (openat(O_CREAT | O_EXCL), umask cleared first).
fn create_mode(path: &CStr, mode: libc::mode_t) -> Outcome {
    // SAFETY: umask takes no pointers.
    unsafe { libc::umask(0) };
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat,
            c_long::from(libc::AT_FDCWD),
            path.as_ptr(),
            c_long::from(libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC),
            c_long::from(mode),
        )
    };
    let fd = check(ret, "openat")?;
    // SAFETY: the kernel just returned this descriptor.
    drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    done()
}

/// openat2(2) of `path` for reading.
fn openat2(path: &CStr) -> Outcome {
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow {
        flags: libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64,
        mode: 0,
        resolve: 0,
    };
    // SAFETY: `path` is NUL-terminated and `how` is a live open_how of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            c_long::from(libc::AT_FDCWD),
            path.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    let fd = check(ret, "openat2")?;
    // SAFETY: the kernel just returned this descriptor.
    drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
    done()
}

/// Pushes the byte `x` into the input of the terminal behind `fd` (ioctl TIOCSTI).
fn tiocsti(fd: c_int) -> Outcome {
    let byte: c_char = b'x' as c_char;
    // SAFETY: `byte` is a live char the kernel only reads.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            c_long::from(fd),
            libc::TIOCSTI as c_long,
            &byte as *const c_char,
        )
    };
    check(ret, "ioctl")?;
    done()
}

/// Whether `fd` is a terminal (`tty` field).
fn isatty(fd: c_int) -> Outcome {
    // SAFETY: isatty takes no pointers.
    let tty = unsafe { libc::isatty(fd) } == 1;
    Ok(vec![("tty", json!(tty))])
}

/// Lowers `pid`'s RLIMIT_NOFILE to 64 (prlimit64 with a new limit).
fn prlimit_pid(pid: pid_t) -> Outcome {
    let new = libc::rlimit64 {
        rlim_cur: 64,
        rlim_max: 64,
    };
    // SAFETY: `new` is a live rlimit64 the kernel only reads; no old-limit pointer.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_prlimit64,
            c_long::from(pid),
            c_long::from(libc::RLIMIT_NOFILE as c_int),
            &new as *const libc::rlimit64,
            std::ptr::null_mut::<libc::rlimit64>(),
        )
    };
    check(ret, "prlimit64")?;
    done()
}

fn read_link(path: &CStr) -> Outcome {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `path` is NUL-terminated; `buf` is writable for `buf.len()` bytes.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_readlink,
            path.as_ptr(),
            buf.as_mut_ptr(),
            buf.len(),
        )
    };
    let n = usize::try_from(check(ret, "readlink")?).unwrap_or(0);
    buf.truncate(n);
    Ok(vec![("target", json!(String::from_utf8_lossy(&buf)))])
}

fn exec(args: &[OsString]) -> Outcome {
    let argv = args
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    let pid = spawn(&argv, &environ(), None)?;
    let status = reap(pid)?;
    Ok(wait_fields(status))
}

// ---------------------------------------------------------------------------------------------
// Network actions
// ---------------------------------------------------------------------------------------------

fn connect_tcp(ip: IpAddr, port: u16) -> Outcome {
    let addr = SockAddr::ip(ip, port);
    let fd = socket(addr.family(), libc::SOCK_STREAM, 0)?;
    // A blackholed address must not hang the test: connect(2) honours SO_SNDTIMEO
    // (and then fails with EINPROGRESS).
    set_timeout(&fd, libc::SO_SNDTIMEO, 5)?;
    let (ptr, len) = addr.raw();
    // SAFETY: `ptr` points to a live socket address of `len` bytes.
    let ret = unsafe { libc::connect(fd.as_raw_fd(), ptr, len) };
    check(c_long::from(ret), "connect")?;
    done()
}

fn connect_udp(ip: IpAddr, port: u16) -> Outcome {
    let addr = SockAddr::ip(ip, port);
    let fd = socket(addr.family(), libc::SOCK_DGRAM, 0)?;
    send_to(&fd, b"x", &addr)?;
    done()
}

fn dns(name: &str) -> Outcome {
    let query = dns_query(name)?;
    let (server, resolv_conf) = match read_text(c"/etc/resolv.conf") {
        Ok(text) => (first_nameserver(&text), Value::from("read")),
        Err(Failure::Sys { errno, .. }) => (None, Value::from(errno_name(errno))),
        Err(other) => return Err(other),
    };
    let server = server.unwrap_or(IpAddr::from([127, 0, 0, 1]));
    let context = vec![
        ("nameserver", json!(server.to_string())),
        ("resolv_conf", resolv_conf),
    ];
    let in_context = |f: Failure| {
        context
            .iter()
            .fold(f, |f, (key, value)| f.with(key, value.clone()))
    };
    let addr = SockAddr::ip(server, 53);
    let fd = socket(addr.family(), libc::SOCK_DGRAM, 0).map_err(in_context)?;
    set_timeout(&fd, libc::SO_RCVTIMEO, 2).map_err(in_context)?;
    send_to(&fd, &query, &addr).map_err(in_context)?;
    let mut reply = [0u8; 512];
    let n = recv(&fd, &mut reply, 0, "recvfrom").map_err(in_context)?;
    let mut fields = context.clone();
    fields.push(("bytes", json!(n)));
    if n >= 8 {
        fields.push(("rcode", json!(reply[3] & 0x0f)));
        fields.push(("answers", json!(u16::from_be_bytes([reply[6], reply[7]]))));
    }
    Ok(fields)
}

/// A minimal recursive query for the A record of `name`.
fn dns_query(name: &str) -> Result<Vec<u8>, Failure> {
    // id, flags (RD), qdcount 1, ancount, nscount, arcount.
    let mut q = vec![0x52, 0x50, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    let name = name.trim_end_matches('.');
    if !name.is_empty() {
        for label in name.split('.') {
            let len = u8::try_from(label.len())
                .ok()
                .filter(|len| (1..=63).contains(len))
                .ok_or_else(|| usage(format!("invalid DNS label {label:?}")))?;
            q.push(len);
            q.extend_from_slice(label.as_bytes());
        }
    }
    q.push(0);
    q.extend_from_slice(&[0, 1, 0, 1]); // QTYPE A, QCLASS IN
    Ok(q)
}

fn first_nameserver(resolv_conf: &str) -> Option<IpAddr> {
    resolv_conf.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        if words.next() != Some("nameserver") {
            return None;
        }
        let addr = words.next()?;
        let addr = addr.split('%').next().unwrap_or(addr);
        addr.parse().ok()
    })
}

fn bind_tcp(ip: IpAddr, port: u16) -> Outcome {
    let addr = SockAddr::ip(ip, port);
    let fd = socket(addr.family(), libc::SOCK_STREAM, 0)?;
    bind(&fd, &addr)?;
    listen(&fd)?;
    let mut local = SockAddr::ip(ip, 0);
    let (ptr, mut len) = local.raw_mut();
    // SAFETY: `ptr` points to writable storage of `len` bytes for the address.
    let ret = unsafe { libc::getsockname(fd.as_raw_fd(), ptr, &mut len) };
    check(c_long::from(ret), "getsockname")?;
    Ok(vec![("port", json!(local.port()))])
}

fn socket_only(domain: c_int, ty: c_int, protocol: c_int) -> Outcome {
    socket(domain, ty, protocol)?;
    done()
}

fn unix_socketpair() -> Outcome {
    let mut fds: [c_int; 2] = [-1, -1];
    // SAFETY: `fds` has room for the two descriptors socketpair(2) writes.
    let ret = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    check(c_long::from(ret), "socketpair")?;
    let a = own_fd(fds[0]);
    let b = own_fd(fds[1]);
    write_all(&a, b"p")?;
    let mut buf = [0u8; 1];
    let n = read_some(&b, &mut buf)?;
    if n == 1 && buf[0] == b'p' {
        done()
    } else {
        Err(Failure::errno(libc::EIO, "read"))
    }
}

fn unix_bind(path: &OsStr) -> Outcome {
    let addr = SockAddr::unix(path.as_bytes(), false)?;
    let server = socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)?;
    let size: c_int = 64 * 1024;
    // SAFETY: `size` is a live c_int and its size is passed along.
    let ret = unsafe {
        libc::setsockopt(
            server.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            std::ptr::from_ref(&size).cast::<c_void>(),
            size_of::<c_int>() as libc::socklen_t,
        )
    };
    check(c_long::from(ret), "setsockopt")?;
    bind(&server, &addr)?;
    let client = socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0)?;
    send_to(&client, b"p", &addr)?;
    // A unix datagram is queued by the time sendto(2) returns: never block here.
    let mut buf = [0u8; 16];
    let n = recv(&server, &mut buf, libc::MSG_DONTWAIT, "recv")?;
    if n == 1 && buf[0] == b'p' {
        done()
    } else {
        Err(Failure::errno(libc::EIO, "recv"))
    }
}

/// Connects to the unix socket at a filesystem path.
fn unix_connect(path: &OsStr) -> Outcome {
    let addr = SockAddr::unix(path.as_bytes(), false)?;
    let fd = socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)?;
    let (ptr, len) = addr.raw();
    // SAFETY: `ptr` points to a live socket address of `len` bytes.
    let ret = unsafe { libc::connect(fd.as_raw_fd(), ptr, len) };
    check(c_long::from(ret), "connect")?;
    done()
}

fn abstract_connect(name: &OsStr) -> Outcome {
    let addr = SockAddr::unix(name.as_bytes(), true)?;
    let fd = socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)?;
    let (ptr, len) = addr.raw();
    // SAFETY: `ptr` points to a live socket address of `len` bytes.
    let ret = unsafe { libc::connect(fd.as_raw_fd(), ptr, len) };
    check(c_long::from(ret), "connect")?;
    done()
}

/// Prints its own success line as soon as it listens, accepts until `duration` has passed and
/// exits 0 without returning. Only a failure before listening is returned.
fn abstract_listen(name: &OsStr, duration: Duration) -> Outcome {
    let addr = SockAddr::unix(name.as_bytes(), true)?;
    let fd = socket(libc::AF_UNIX, libc::SOCK_STREAM, 0)?;
    bind(&fd, &addr)?;
    listen(&fd)?;
    emit("abstract-listen", &done());
    let deadline = Instant::now() + duration;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = c_int::try_from(left.as_millis().max(1)).unwrap_or(c_int::MAX);
        // SAFETY: `pfd` is one live pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ready > 0 {
            // SAFETY: null address pointers are allowed by accept4(2).
            let conn = unsafe {
                libc::accept4(
                    fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if conn >= 0 {
                drop(own_fd(conn));
            }
        }
    }
    std::process::exit(0)
}

// ---------------------------------------------------------------------------------------------
// Process and privilege actions
// ---------------------------------------------------------------------------------------------

fn ptrace_attach(target: Target) -> Outcome {
    with_target(target, |pid| {
        // SAFETY: PTRACE_ATTACH takes no pointers.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_ptrace,
                c_long::from(libc::PTRACE_ATTACH),
                c_long::from(pid),
                ZERO,
                ZERO,
            )
        };
        check(ret, "ptrace")?;
        // The tracee must be in its attach stop before it can be detached.
        let mut status: c_int = 0;
        // SAFETY: `status` is a live c_int.
        unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        // SAFETY: PTRACE_DETACH takes no pointers (0 = no signal to deliver).
        let detached = unsafe {
            libc::syscall(
                libc::SYS_ptrace,
                c_long::from(libc::PTRACE_DETACH),
                c_long::from(pid),
                ZERO,
                ZERO,
            )
        } == 0;
        Ok(vec![("pid", json!(pid)), ("detached", json!(detached))])
    })
}

/// A marker the probe reads from its forked child's copy of this address space.
static PROBE_MARKER: u64 = 0x7072_6f62_655f_6d6b;

fn process_vm_readv(target: Target) -> Outcome {
    with_target(target, |pid| {
        let mut value = [0u8; 8];
        let local = libc::iovec {
            iov_base: value.as_mut_ptr().cast::<c_void>(),
            iov_len: value.len(),
        };
        let remote = libc::iovec {
            iov_base: std::ptr::from_ref(&PROBE_MARKER)
                .cast_mut()
                .cast::<c_void>(),
            iov_len: size_of::<u64>(),
        };
        // SAFETY: `local` describes our own writable buffer; `remote` only names an address in
        // the other process, which the kernel checks.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_process_vm_readv,
                c_long::from(pid),
                &local,
                1usize,
                &remote,
                1usize,
                ZERO,
            )
        };
        let n = check(ret, "process_vm_readv")?;
        let value = u64::from_ne_bytes(value);
        Ok(vec![
            ("bytes", json!(n)),
            ("value", json!(format!("{value:#018x}"))),
            ("matched", json!(n == 8 && value == PROBE_MARKER)),
        ])
    })
}

/// Runs `attempt` on `target`; a `Child` is forked first and killed and reaped afterwards.
fn with_target(target: Target, attempt: impl FnOnce(pid_t) -> Outcome) -> Outcome {
    match target {
        Target::Pid(pid) => attempt(pid),
        Target::Child => {
            let pid = fork_sleeper(5)?;
            let outcome = attempt(pid);
            kill_and_reap(pid);
            outcome
        }
    }
}

fn io_uring() -> Outcome {
    // struct io_uring_params is 120 bytes; all zero asks for the defaults.
    let mut params = [0u8; 120];
    // SAFETY: `params` is a writable io_uring_params-sized buffer.
    let ret = unsafe { libc::syscall(libc::SYS_io_uring_setup, 8 as c_long, params.as_mut_ptr()) };
    fd_from(ret, "io_uring_setup")?;
    done()
}

fn mount_tmpfs() -> Outcome {
    // SAFETY: all strings are NUL-terminated literals; `data` may be null.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount,
            c"none".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            ZERO,
            std::ptr::null::<c_void>(),
        )
    };
    check(ret, "mount")?;
    done()
}

fn umount(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_umount2, path.as_ptr(), ZERO) };
    check(ret, "umount2")?;
    done()
}

fn unshare(flag: &str) -> Outcome {
    let flags = match flag {
        "user" => libc::CLONE_NEWUSER,
        "mount" => libc::CLONE_NEWNS,
        "net" => libc::CLONE_NEWNET,
        "pid" => libc::CLONE_NEWPID,
        "ipc" => libc::CLONE_NEWIPC,
        "uts" => libc::CLONE_NEWUTS,
        "cgroup" => libc::CLONE_NEWCGROUP,
        "time" => libc::CLONE_NEWTIME,
        _ => {
            return Err(usage(format!(
                "FLAG must be user|mount|net|pid|ipc|uts|cgroup|time, got {flag:?}"
            )));
        }
    };
    // SAFETY: unshare(2) takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_unshare, c_long::from(flags)) };
    check(ret, "unshare")?;
    done()
}

fn clone_newuser() -> Outcome {
    let flags = c_long::from(libc::CLONE_NEWUSER | libc::SIGCHLD);
    // SAFETY: with a null stack the child runs on a copy of our memory, like fork(2). The probe
    // is single-threaded and the child only calls `_exit`.
    let ret = unsafe { libc::syscall(libc::SYS_clone, flags, ZERO, ZERO, ZERO, ZERO) };
    let pid = check(ret, "clone")?;
    if pid == 0 {
        // SAFETY: leaving the child at once, without running any of the parent's cleanup.
        unsafe { libc::_exit(0) }
    }
    let pid = pid_t::try_from(pid).unwrap_or(-1);
    let mut fields = vec![("pid", json!(pid))];
    fields.extend(wait_fields(reap(pid)?));
    Ok(fields)
}

fn clone3() -> Outcome {
    // struct clone_args (88 bytes, 11 u64): flags, pidfd, child_tid, parent_tid, exit_signal,
    // stack, stack_size, tls, set_tid, set_tid_size, cgroup.
    let mut args = [0u64; 11];
    args[4] = libc::SIGCHLD as u64;
    // SAFETY: `args` is a clone_args of the size passed. Without a stack the child runs on a
    // copy of our memory, like fork(2); the probe is single-threaded and the child only `_exit`s.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), size_of_val(&args)) };
    let pid = check(ret, "clone3")?;
    if pid == 0 {
        // SAFETY: leaving the child at once, without running any of the parent's cleanup.
        unsafe { libc::_exit(0) }
    }
    let pid = pid_t::try_from(pid).unwrap_or(-1);
    let mut fields = vec![("pid", json!(pid))];
    fields.extend(wait_fields(reap(pid)?));
    Ok(fields)
}

fn setns(path: &CStr) -> Outcome {
    let fd = open(path, libc::O_RDONLY, 0)?;
    // SAFETY: setns(2) takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_setns, c_long::from(fd.as_raw_fd()), ZERO) };
    check(ret, "setns")?;
    done()
}

fn mknod(path: &CStr, mode: libc::mode_t, dev: libc::dev_t) -> Outcome {
    let dev = c_long::try_from(dev).map_err(|_| usage("device number out of range"))?;
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_mknod, path.as_ptr(), c_long::from(mode), dev) };
    check(ret, "mknod")?;
    done()
}

fn chroot(path: &CStr) -> Outcome {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe { libc::syscall(libc::SYS_chroot, path.as_ptr()) };
    check(ret, "chroot")?;
    done()
}

fn kill(pid: pid_t, signal: c_int) -> Outcome {
    // SAFETY: kill(2) takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_kill, c_long::from(pid), c_long::from(signal)) };
    check(ret, "kill")?;
    done()
}

fn bpf() -> Outcome {
    const BPF_PROG_LOAD: c_long = 5;
    // SAFETY: a null attribute pointer with size 0 is rejected by the kernel, never dereferenced.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            std::ptr::null::<c_void>(),
            ZERO,
        )
    };
    let fd = fd_from(ret, "bpf")?;
    drop(fd);
    done()
}

/// A syscall that succeeds on the host without privileges (NUMA policy calls asking for the
/// default, `kcmp` of the probe with itself), or a bare number with zero arguments: what the
/// allow-list refuses outright.
fn harmless_syscall(which: &str) -> Outcome {
    let me = c_long::from(std::process::id() as i32);
    let (nr, args, step): (c_long, [c_long; 5], &'static str) = match which {
        // move_pages(0, 0 pages, ...): nothing to move.
        "move_pages" => (libc::SYS_move_pages, [0; 5], "move_pages"),
        // mbind(NULL, 0, MPOL_DEFAULT, NULL, 0, 0).
        "mbind" => (libc::SYS_mbind, [0; 5], "mbind"),
        // set_mempolicy(MPOL_DEFAULT, NULL, 0).
        "set_mempolicy" => (libc::SYS_set_mempolicy, [0; 5], "set_mempolicy"),
        // kcmp(me, me, KCMP_VM): same address space.
        "kcmp" => (libc::SYS_kcmp, [me, me, 1, 0, 0], "kcmp"),
        n => match n.parse::<c_long>() {
            Ok(nr) => (nr, [0; 5], "syscall"),
            Err(_) => return Err(usage("unknown syscall name")),
        },
    };
    // SAFETY: every argument is a number or a null pointer the kernel does not dereference
    // (zero counts, MPOL_DEFAULT).
    let ret = unsafe { libc::syscall(nr, args[0], args[1], args[2], args[3], args[4], ZERO) };
    check(ret, step)?;
    done()
}

fn perf_event_open() -> Outcome {
    // struct perf_event_attr: u32 type @0, u32 size @4, u64 config @8, rest zero.
    let mut attr = [0u8; 128];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&128u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&0u64.to_ne_bytes()); // PERF_COUNT_SW_CPU_CLOCK
    // SAFETY: `attr` is a live perf_event_attr of the size it declares.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            attr.as_mut_ptr(),
            ZERO,
            -1 as c_long,
            -1 as c_long,
            ZERO,
        )
    };
    fd_from(ret, "perf_event_open")?;
    done()
}

fn keyctl() -> Outcome {
    const KEYCTL_GET_KEYRING_ID: c_long = 0;
    const KEY_SPEC_SESSION_KEYRING: c_long = -3;
    // SAFETY: KEYCTL_GET_KEYRING_ID takes no pointers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_keyctl,
            KEYCTL_GET_KEYRING_ID,
            KEY_SPEC_SESSION_KEYRING,
            ZERO,
        )
    };
    Ok(vec![("value", json!(check(ret, "keyctl")?))])
}

fn add_key() -> Outcome {
    const KEY_SPEC_PROCESS_KEYRING: c_long = -2;
    let payload = b"x";
    // SAFETY: the strings are NUL-terminated literals; `payload` is live for its length.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_add_key,
            c"user".as_ptr(),
            c"probe".as_ptr(),
            payload.as_ptr(),
            payload.len(),
            KEY_SPEC_PROCESS_KEYRING,
        )
    };
    Ok(vec![("value", json!(check(ret, "add_key")?))])
}

fn request_key() -> Outcome {
    // SAFETY: the strings are NUL-terminated literals; the callout info may be null.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_request_key,
            c"user".as_ptr(),
            c"probe-none".as_ptr(),
            std::ptr::null::<c_char>(),
            ZERO,
        )
    };
    Ok(vec![("value", json!(check(ret, "request_key")?))])
}

fn userfaultfd() -> Outcome {
    // SAFETY: userfaultfd(2) takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_userfaultfd, c_long::from(libc::O_CLOEXEC)) };
    fd_from(ret, "userfaultfd")?;
    done()
}

fn personality(persona: u32) -> Outcome {
    // SAFETY: personality(2) takes no pointers.
    let ret = unsafe { libc::syscall(libc::SYS_personality, c_long::from(persona)) };
    let previous = check(ret, "personality")?;
    Ok(vec![
        ("previous", json!(previous)),
        ("previous_hex", json!(format!("{previous:#x}"))),
    ])
}

fn kexec_load() -> Outcome {
    // SAFETY: no segments, so the null segment pointer is never dereferenced.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_kexec_load,
            ZERO,
            ZERO,
            std::ptr::null::<c_void>(),
            ZERO,
        )
    };
    check(ret, "kexec_load")?;
    done()
}

fn init_module() -> Outcome {
    // SAFETY: a zero-length image is never read through the null pointer; `""` is NUL-terminated.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_init_module,
            std::ptr::null::<c_void>(),
            ZERO,
            c"".as_ptr(),
        )
    };
    check(ret, "init_module")?;
    done()
}

fn no_new_privs() -> Outcome {
    // SAFETY: PR_GET_NO_NEW_PRIVS takes no pointers.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_prctl,
            c_long::from(libc::PR_GET_NO_NEW_PRIVS),
            ZERO,
            ZERO,
            ZERO,
            ZERO,
        )
    };
    Ok(vec![("value", json!(check(ret, "prctl")?))])
}

/// Reports the named fields of /proc/self/status (as strings; `null` when absent).
fn status_report(keys: &[&'static str]) -> Outcome {
    let text = read_text(c"/proc/self/status")?;
    Ok(keys
        .iter()
        .map(|key| (*key, json!(status_value(&text, key))))
        .collect())
}

fn status_field(name: &str) -> Outcome {
    let text = read_text(c"/proc/self/status")?;
    match status_value(&text, name) {
        Some(value) => Ok(vec![("name", json!(name)), ("value", json!(value))]),
        None => Err(Failure::errno(libc::ENOENT, "lookup").with("name", json!(name))),
    }
}

fn status_value<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|line| {
        let (k, v) = line.split_once(':')?;
        (k == key).then(|| v.trim())
    })
}

fn setuid_exec(path: CString) -> Outcome {
    let (stdin_r, stdin_w) = pipe()?;
    let pid = spawn(&[path], &environ(), Some(stdin_r.as_raw_fd()))?;
    drop(stdin_r);
    std::thread::sleep(Duration::from_millis(300));
    let status = read_text(&proc_status_path(pid));
    kill_and_reap(pid);
    drop(stdin_w);
    let status = status?;
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
    let mut uids = uid_line
        .trim_start_matches("Uid:")
        .split_whitespace()
        .map(|u| u.parse::<u64>().ok());
    let ruid = uids.next().flatten();
    let euid = uids.next().flatten();
    Ok(vec![
        ("pid", json!(pid)),
        ("uid_line", json!(uid_line)),
        ("ruid", json!(ruid)),
        ("euid", json!(euid)),
        ("capeff", json!(status_value(&status, "CapEff"))),
        ("state", json!(status_value(&status, "State"))),
    ])
}

fn proc_status_path(pid: pid_t) -> CString {
    // A formatted number never contains a NUL byte.
    CString::new(format!("/proc/{pid}/status")).unwrap_or_default()
}

fn whoami() -> Outcome {
    let hostname = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .ok();
    let cwd = std::env::current_dir()
        .map(|d| d.to_string_lossy().into_owned())
        .ok();
    Ok(vec![
        ("uid", json!(nix::unistd::getuid().as_raw())),
        ("gid", json!(nix::unistd::getgid().as_raw())),
        ("euid", json!(nix::unistd::geteuid().as_raw())),
        ("egid", json!(nix::unistd::getegid().as_raw())),
        ("pid", json!(nix::unistd::getpid().as_raw())),
        ("ppid", json!(nix::unistd::getppid().as_raw())),
        ("hostname", json!(hostname)),
        ("cwd", json!(cwd)),
    ])
}

// ---------------------------------------------------------------------------------------------
// Limit actions
// ---------------------------------------------------------------------------------------------

fn alloc(megabytes: usize) -> Outcome {
    let len = megabytes
        .checked_mul(1 << 20)
        .filter(|len| *len > 0)
        .ok_or_else(|| usage("MEGABYTES must be between 1 and the address space"))?;
    // SAFETY: a fresh anonymous private mapping; no existing memory is affected.
    let addr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if addr == libc::MAP_FAILED {
        return Err(Failure::last("mmap"));
    }
    let base = addr.cast::<u8>();
    for offset in (0..len).step_by(4096) {
        // SAFETY: `offset < len`, so the byte lies inside the mapping just created.
        unsafe { base.add(offset).write_volatile(1) };
    }
    // SAFETY: unmapping exactly the mapping created above, which nothing references any more.
    unsafe { libc::munmap(addr, len) };
    Ok(vec![("megabytes", json!(megabytes))])
}

fn fork_bomb(max: u32) -> Outcome {
    let mut children = Vec::new();
    let mut failure = None;
    while children.len() < max as usize {
        match fork_sleeper(30) {
            Ok(pid) => children.push(pid),
            Err(Failure::Sys { errno, .. }) => {
                failure = Some(errno);
                break;
            }
            Err(other) => return Err(other),
        }
    }
    let forked = children.len();
    for pid in children {
        kill_and_reap(pid);
    }
    let mut fields = vec![("forked", json!(forked))];
    if let Some(errno) = failure {
        fields.push(("errno", json!(errno_name(errno))));
        fields.push(("code", json!(errno)));
    }
    Ok(fields)
}

fn flood(bytes: u64) -> Outcome {
    let chunk = [b'x'; 64 * 1024];
    let mut written = 0u64;
    while written < bytes {
        let want = usize::try_from(bytes - written)
            .unwrap_or(chunk.len())
            .min(chunk.len());
        // SAFETY: `chunk` is live for `want <= chunk.len()` bytes.
        let ret = unsafe { libc::write(libc::STDERR_FILENO, chunk.as_ptr().cast(), want) };
        if ret < 0 {
            let errno = last_errno();
            if errno == libc::EINTR {
                continue;
            }
            return Err(Failure::errno(errno, "write").with("written", json!(written)));
        }
        written += ret as u64;
    }
    Ok(vec![("written", json!(written))])
}

/// Messages the daemon's descendants send back through a pipe: (tag, value) as two i32.
const DAEMON_PID: i32 = 1;
const DAEMON_FORK_ERRNO: i32 = 2;
const DAEMON_SETSID_ERRNO: i32 = 3;
const DAEMON_EXEC_ERRNO: i32 = 4;

fn daemon(marker: &str) -> Outcome {
    let marker = cstring(OsStr::new(marker))?;
    let sleeps = sleep_candidates();
    let envp = environ();
    let env_ptrs = null_terminated(&envp);
    let (report_r, report_w) = pipe()?;
    let w = report_w.as_raw_fd();
    let middle = fork()?;
    if middle == 0 {
        // SAFETY: single-threaded child of a fork: fork again and leave with `_exit`.
        let grandchild = unsafe { libc::fork() };
        if grandchild < 0 {
            send_record(w, DAEMON_FORK_ERRNO, last_errno());
        } else if grandchild == 0 {
            daemon_grandchild(w, &sleeps, &marker, &env_ptrs);
        }
        // SAFETY: leaving the intermediate child without running the parent's cleanup.
        unsafe { libc::_exit(0) }
    }
    drop(report_w);
    let reaped = reap(middle);
    let records = read_to_end(&report_r)?;
    reaped?;
    let mut pid = None;
    for record in records.chunks_exact(8) {
        let tag = i32::from_ne_bytes([record[0], record[1], record[2], record[3]]);
        let value = i32::from_ne_bytes([record[4], record[5], record[6], record[7]]);
        match tag {
            DAEMON_PID => pid = Some(value),
            DAEMON_FORK_ERRNO => return Err(Failure::errno(value, "fork")),
            DAEMON_SETSID_ERRNO => return Err(Failure::errno(value, "setsid")),
            DAEMON_EXEC_ERRNO => {
                return Err(Failure::errno(value, "execve").with("pid", json!(pid)));
            }
            _ => {}
        }
    }
    match pid {
        Some(pid) => Ok(vec![("pid", json!(pid))]),
        None => Err(Failure::errno(libc::ECHILD, "fork")),
    }
}

/// The daemon itself: a new session, stdio on /dev/null, then `sleep MARKER`.
fn daemon_grandchild(
    report: RawFd,
    sleeps: &[CString],
    marker: &CStr,
    envp: &[*const c_char],
) -> ! {
    // SAFETY: setsid(2) takes no pointers.
    if unsafe { libc::setsid() } < 0 {
        send_record(report, DAEMON_SETSID_ERRNO, last_errno());
        // SAFETY: leaving the child without running the parent's cleanup.
        unsafe { libc::_exit(127) }
    }
    // SAFETY: getpid(2) cannot fail.
    send_record(report, DAEMON_PID, unsafe { libc::getpid() });
    // SAFETY: the path is a NUL-terminated literal.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    for fd in 0..3 {
        if null >= 0 {
            // SAFETY: dup2(2) on descriptors; `null` is open.
            unsafe { libc::dup2(null, fd) };
        } else {
            // SAFETY: closing our own stdio so the caller's pipes see EOF.
            unsafe { libc::close(fd) };
        }
    }
    reset_child_signals();
    let mut errno = libc::ENOENT;
    for sleep in sleeps {
        let argv = [sleep.as_ptr(), marker.as_ptr(), std::ptr::null()];
        // SAFETY: `argv` and `envp` are null-terminated arrays of live NUL-terminated strings.
        unsafe { libc::execve(sleep.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
        let e = last_errno();
        if e != libc::ENOENT && e != libc::ENOTDIR {
            errno = e;
        }
    }
    send_record(report, DAEMON_EXEC_ERRNO, errno);
    // SAFETY: leaving the child without running the parent's cleanup.
    unsafe { libc::_exit(127) }
}

fn sleep_candidates() -> Vec<CString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<Vec<u8>> = path
        .as_bytes()
        .split(|b| *b == b':')
        .filter(|d| !d.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    dirs.push(b"/usr/bin".to_vec());
    dirs.push(b"/bin".to_vec());
    dirs.into_iter()
        .filter_map(|mut dir| {
            dir.extend_from_slice(b"/sleep");
            CString::new(dir).ok()
        })
        .collect()
}

fn send_record(fd: RawFd, tag: i32, value: i32) {
    let mut record = [0u8; 8];
    record[..4].copy_from_slice(&tag.to_ne_bytes());
    record[4..].copy_from_slice(&value.to_ne_bytes());
    // SAFETY: `record` is live for its length; an 8-byte pipe write is atomic.
    unsafe { libc::write(fd, record.as_ptr().cast(), record.len()) };
}

fn sleep(duration: Duration) -> Outcome {
    std::thread::sleep(duration);
    Ok(vec![("slept", json!(duration.as_secs_f64()))])
}

// ---------------------------------------------------------------------------------------------
// Syscall helpers
// ---------------------------------------------------------------------------------------------

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `ret` of a syscall: negative means failed with `errno`.
fn check(ret: c_long, step: &'static str) -> Result<c_long, Failure> {
    if ret < 0 {
        Err(Failure::last(step))
    } else {
        Ok(ret)
    }
}

fn fd_from(ret: c_long, step: &'static str) -> Result<OwnedFd, Failure> {
    let fd = check(ret, step)?;
    let fd = RawFd::try_from(fd).map_err(|_| Failure::errno(libc::EBADF, step))?;
    Ok(own_fd(fd))
}

fn own_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: the kernel just handed us this descriptor and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

fn open(path: &CStr, flags: c_int, mode: libc::mode_t) -> Result<OwnedFd, Failure> {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_open,
            path.as_ptr(),
            c_long::from(flags | libc::O_CLOEXEC),
            c_long::from(mode),
        )
    };
    fd_from(ret, "open")
}

fn write_all(fd: &OwnedFd, mut data: &[u8]) -> Result<(), Failure> {
    while !data.is_empty() {
        // SAFETY: `data` is live for its length.
        let ret = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
        if ret < 0 {
            if last_errno() == libc::EINTR {
                continue;
            }
            return Err(Failure::last("write"));
        }
        data = data.get(ret as usize..).unwrap_or_default();
    }
    Ok(())
}

fn read_some(fd: &OwnedFd, buf: &mut [u8]) -> Result<usize, Failure> {
    loop {
        // SAFETY: `buf` is writable for its length.
        let ret = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if ret >= 0 {
            return Ok(ret as usize);
        }
        if last_errno() != libc::EINTR {
            return Err(Failure::last("read"));
        }
    }
}

fn read_to_end(fd: &OwnedFd) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = read_some(fd, &mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// A whole (small) file as text, with `open`/`read` as the failing steps.
fn read_text(path: &CStr) -> Result<String, Failure> {
    let fd = open(path, libc::O_RDONLY, 0)?;
    Ok(String::from_utf8_lossy(&read_to_end(&fd)?).into_owned())
}

fn pipe() -> Result<(OwnedFd, OwnedFd), Failure> {
    let mut fds: [c_int; 2] = [-1, -1];
    // SAFETY: `fds` has room for the two descriptors pipe2(2) writes.
    let ret = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    check(c_long::from(ret), "pipe2")?;
    Ok((own_fd(fds[0]), own_fd(fds[1])))
}

fn fork() -> Result<pid_t, Failure> {
    // SAFETY: the probe is single-threaded, so the child may run any code; every child path
    // ends in `_exit`.
    let pid = unsafe { libc::fork() };
    check(c_long::from(pid), "fork")?;
    Ok(pid)
}

/// Forks a child that sleeps `seconds` and exits.
fn fork_sleeper(seconds: u32) -> Result<pid_t, Failure> {
    let pid = fork()?;
    if pid == 0 {
        // SAFETY: sleep, then leave without running the parent's cleanup.
        unsafe {
            libc::sleep(seconds);
            libc::_exit(0)
        }
    }
    Ok(pid)
}

fn kill_and_reap(pid: pid_t) {
    // SAFETY: kill(2) takes no pointers; `pid` is our own child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let _ = reap(pid);
}

fn reap(pid: pid_t) -> Result<c_int, Failure> {
    let mut status: c_int = 0;
    loop {
        // SAFETY: `status` is a live c_int.
        let ret = unsafe { libc::waitpid(pid, &mut status, 0) };
        if ret >= 0 {
            return Ok(status);
        }
        if last_errno() != libc::EINTR {
            return Err(Failure::last("waitpid"));
        }
    }
}

fn wait_fields(status: c_int) -> Fields {
    if libc::WIFEXITED(status) {
        vec![("exit", json!(libc::WEXITSTATUS(status)))]
    } else if libc::WIFSIGNALED(status) {
        vec![("signal", json!(libc::WTERMSIG(status)))]
    } else {
        vec![("status", json!(status))]
    }
}

/// The current environment as `KEY=VALUE` strings.
fn environ() -> Vec<CString> {
    std::env::vars_os()
        .filter_map(|(key, value)| {
            let mut entry = key.into_vec();
            entry.push(b'=');
            entry.extend(value.into_vec());
            CString::new(entry).ok()
        })
        .collect()
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Undoes what the Rust runtime changed for the probe (SIGPIPE ignored) before an exec.
fn reset_child_signals() {
    // SAFETY: restoring the default disposition; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// fork + execve(argv[0], argv, envp) with the child's stdout on our stderr (and its stdin on
/// `stdin` if given). Returns once the exec succeeded; an exec failure is reported by the child
/// through a close-on-exec pipe and returned as step `execve`.
fn spawn(argv: &[CString], envp: &[CString], stdin: Option<RawFd>) -> Result<pid_t, Failure> {
    let Some(program) = argv.first() else {
        return Err(usage("missing PATH"));
    };
    let argv_ptrs = null_terminated(argv);
    let env_ptrs = null_terminated(envp);
    let (err_r, err_w) = pipe()?;
    let pid = fork()?;
    if pid == 0 {
        if let Some(fd) = stdin {
            // SAFETY: dup2(2) on descriptors we own.
            unsafe { libc::dup2(fd, libc::STDIN_FILENO) };
        }
        // SAFETY: dup2(2) on the standard descriptors.
        unsafe { libc::dup2(libc::STDERR_FILENO, libc::STDOUT_FILENO) };
        reset_child_signals();
        // SAFETY: both arrays are null-terminated arrays of live NUL-terminated strings.
        unsafe { libc::execve(program.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
        let errno = last_errno().to_ne_bytes();
        // SAFETY: `errno` is live for its length; then leave without the parent's cleanup.
        unsafe {
            libc::write(err_w.as_raw_fd(), errno.as_ptr().cast(), errno.len());
            libc::_exit(127)
        }
    }
    drop(err_w);
    let report = read_to_end(&err_r);
    match report {
        Ok(bytes) if bytes.len() >= 4 => {
            let _ = reap(pid);
            let errno = i32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
            Err(Failure::errno(errno, "execve"))
        }
        Ok(_) => Ok(pid),
        Err(failure) => {
            kill_and_reap(pid);
            Err(failure)
        }
    }
}

fn socket(domain: c_int, ty: c_int, protocol: c_int) -> Result<OwnedFd, Failure> {
    // SAFETY: socket(2) takes no pointers.
    let ret = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, protocol) };
    fd_from(c_long::from(ret), "socket")
}

fn set_timeout(fd: &OwnedFd, option: c_int, seconds: libc::time_t) -> Result<(), Failure> {
    let tv = libc::timeval {
        tv_sec: seconds,
        tv_usec: 0,
    };
    // SAFETY: `tv` is a live timeval and its size is passed along.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref(&tv).cast::<c_void>(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    check(c_long::from(ret), "setsockopt")?;
    Ok(())
}

fn bind(fd: &OwnedFd, addr: &SockAddr) -> Result<(), Failure> {
    let (ptr, len) = addr.raw();
    // SAFETY: `ptr` points to a live socket address of `len` bytes.
    let ret = unsafe { libc::bind(fd.as_raw_fd(), ptr, len) };
    check(c_long::from(ret), "bind")?;
    Ok(())
}

fn listen(fd: &OwnedFd) -> Result<(), Failure> {
    // SAFETY: listen(2) takes no pointers.
    let ret = unsafe { libc::listen(fd.as_raw_fd(), 16) };
    check(c_long::from(ret), "listen")?;
    Ok(())
}

fn send_to(fd: &OwnedFd, data: &[u8], addr: &SockAddr) -> Result<usize, Failure> {
    let (ptr, len) = addr.raw();
    // SAFETY: `data` is live for its length; `ptr` points to a live address of `len` bytes.
    let ret = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            0,
            ptr,
            len,
        )
    };
    Ok(check(ret as c_long, "sendto")? as usize)
}

fn recv(fd: &OwnedFd, buf: &mut [u8], flags: c_int, step: &'static str) -> Result<usize, Failure> {
    // SAFETY: `buf` is writable for its length; null source-address pointers are allowed.
    let ret = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            flags,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    Ok(check(ret as c_long, step)? as usize)
}

/// A socket address the probe connects, binds or sends to.
#[derive(Debug)]
enum SockAddr {
    Inet(libc::sockaddr_in),
    Inet6(libc::sockaddr_in6),
    /// The address and its length (which matters for abstract names).
    Unix(libc::sockaddr_un, libc::socklen_t),
}

impl SockAddr {
    fn ip(ip: IpAddr, port: u16) -> Self {
        match ip {
            IpAddr::V4(v4) => Self::Inet(libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                sin_zero: [0; 8],
            }),
            IpAddr::V6(v6) => Self::Inet6(libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: port.to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                sin6_scope_id: 0,
            }),
        }
    }

    /// A filesystem path, or (`abstract_name`) the abstract address "\0NAME".
    fn unix(name: &[u8], abstract_name: bool) -> Result<Self, Failure> {
        let mut addr = libc::sockaddr_un {
            sun_family: libc::AF_UNIX as libc::sa_family_t,
            sun_path: [0; 108],
        };
        let start = usize::from(abstract_name);
        // Keep a terminating NUL for paths; abstract names use all the room after the '\0'.
        let room = addr.sun_path.len() - 1;
        if name.is_empty() || name.len() > room || name.contains(&0) {
            return Err(usage(format!(
                "unix socket name must be 1 to {room} bytes without NUL"
            )));
        }
        for (slot, byte) in addr.sun_path[start..].iter_mut().zip(name) {
            *slot = *byte as c_char;
        }
        let used = std::mem::offset_of!(libc::sockaddr_un, sun_path)
            + start
            + name.len()
            + usize::from(!abstract_name);
        Ok(Self::Unix(addr, used as libc::socklen_t))
    }

    fn family(&self) -> c_int {
        match self {
            Self::Inet(_) => libc::AF_INET,
            Self::Inet6(_) => libc::AF_INET6,
            Self::Unix(..) => libc::AF_UNIX,
        }
    }

    fn port(&self) -> Option<u16> {
        match self {
            Self::Inet(a) => Some(u16::from_be(a.sin_port)),
            Self::Inet6(a) => Some(u16::from_be(a.sin6_port)),
            Self::Unix(..) => None,
        }
    }

    fn raw(&self) -> (*const libc::sockaddr, libc::socklen_t) {
        match self {
            Self::Inet(a) => (
                std::ptr::from_ref(a).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            Self::Inet6(a) => (
                std::ptr::from_ref(a).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
            Self::Unix(a, len) => (std::ptr::from_ref(a).cast(), *len),
        }
    }

    fn raw_mut(&mut self) -> (*mut libc::sockaddr, libc::socklen_t) {
        match self {
            Self::Inet(a) => (
                std::ptr::from_mut(a).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ),
            Self::Inet6(a) => (
                std::ptr::from_mut(a).cast(),
                size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            ),
            Self::Unix(a, _) => (
                std::ptr::from_mut(a).cast(),
                size_of::<libc::sockaddr_un>() as libc::socklen_t,
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Outcome
// ---------------------------------------------------------------------------------------------

/// Extra fields of the result line, in print order.
type Fields = Vec<(&'static str, Value)>;

/// What one action did: `Ok` with extra fields, or why it failed.
type Outcome = Result<Fields, Failure>;

/// Why an action did not succeed.
#[derive(Debug)]
enum Failure {
    /// A syscall failed with `errno` (extra fields are appended to the line).
    Sys {
        errno: i32,
        step: &'static str,
        extra: Fields,
    },
    /// The probe was called wrongly.
    Usage(String),
}

impl Failure {
    fn last(step: &'static str) -> Self {
        Self::errno(last_errno(), step)
    }

    fn errno(errno: i32, step: &'static str) -> Self {
        Self::Sys {
            errno,
            step,
            extra: Vec::new(),
        }
    }

    fn with(mut self, key: &'static str, value: Value) -> Self {
        if let Self::Sys { extra, .. } = &mut self {
            extra.push((key, value));
        }
        self
    }
}

fn done() -> Outcome {
    Ok(Vec::new())
}

// ---------------------------------------------------------------------------------------------
// Printing
// ---------------------------------------------------------------------------------------------

/// Prints the one JSON line for `outcome` and returns the exit code (0, or 2 for usage errors).
fn emit(action: &str, outcome: &Outcome) -> i32 {
    let mut fields: Vec<(&str, Value)> = vec![("action", json!(action))];
    let code = match outcome {
        Ok(extra) => {
            fields.push(("ok", json!(true)));
            fields.extend(extra.iter().cloned());
            0
        }
        Err(Failure::Sys { errno, step, extra }) => {
            fields.push(("ok", json!(false)));
            fields.push(("errno", json!(errno_name(*errno))));
            fields.push(("code", json!(errno)));
            fields.push(("step", json!(step)));
            fields.extend(extra.iter().cloned());
            0
        }
        Err(Failure::Usage(detail)) => {
            fields.push(("ok", json!(false)));
            fields.push(("errno", json!("USAGE")));
            fields.push(("code", json!(-1)));
            fields.push(("step", json!("args")));
            fields.push(("detail", json!(detail)));
            2
        }
    };
    let body: Vec<String> = fields
        .iter()
        .map(|(key, value)| format!("{}:{value}", Value::from(*key)))
        .collect();
    let line = format!("{{{}}}\n", body.join(","));
    let mut stdout = std::io::stdout().lock();
    // Nothing useful can be done if stdout is gone.
    let _ = stdout.write_all(line.as_bytes());
    let _ = stdout.flush();
    code
}

/// The symbolic name of an errno value (`E<n>` when unknown).
fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::ENOEXEC => "ENOEXEC",
        libc::EBADF => "EBADF",
        libc::ECHILD => "ECHILD",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::ENOTBLK => "ENOTBLK",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOTTY => "ENOTTY",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::EPIPE => "EPIPE",
        libc::EDOM => "EDOM",
        libc::ERANGE => "ERANGE",
        libc::EDEADLK => "EDEADLK",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOLCK => "ENOLCK",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ENOTSOCK => "ENOTSOCK",
        libc::EDESTADDRREQ => "EDESTADDRREQ",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::EPROTOTYPE => "EPROTOTYPE",
        libc::ENOPROTOOPT => "ENOPROTOOPT",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::ESOCKTNOSUPPORT => "ESOCKTNOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNABORTED => "ECONNABORTED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ENOBUFS => "ENOBUFS",
        libc::EISCONN => "EISCONN",
        libc::ENOTCONN => "ENOTCONN",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EALREADY => "EALREADY",
        libc::EINPROGRESS => "EINPROGRESS",
        libc::ECANCELED => "ECANCELED",
        libc::ENOKEY => "ENOKEY",
        libc::EKEYEXPIRED => "EKEYEXPIRED",
        libc::EKEYREVOKED => "EKEYREVOKED",
        libc::EKEYREJECTED => "EKEYREJECTED",
        _ => return format!("E{errno}"),
    };
    name.to_owned()
}
