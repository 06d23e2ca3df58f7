//! The host-boundary cases of SPEC §5 that a single run can show (no set-id files, no device
//! nodes, no terminal injection, the sandbox's init out of reach, kernel information masked),
//! written once as data and run against each backend: `ralph sandbox exec` with the native
//! backend and with `--backend docker`, through the escape matrix's machinery
//! (`tests/it/escape/mod.rs`). Where a backend answers differently, the case says which and why.
//! Each case asserts on the host where there is a host effect (the file's mode, no file at all).
//!
//! Run as root (`cargo test`) and, for the native backend, as the unprivileged `ralph-ci`
//! (`.ci/run`).

use crate::common;

use crate::escape;

use std::cell::Cell;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use escape::*;
use serde_json::json;

use crate::escape::init_reach;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    Native,
    Docker,
}

thread_local! {
    static BACKEND: Cell<Backend> = const { Cell::new(Backend::Native) };
}

/// The value for the backend the current test runs against.
fn by_backend<T>(native: T, docker: T) -> T {
    match BACKEND.with(Cell::get) {
        Backend::Native => native,
        Backend::Docker => docker,
    }
}

fn eperm(step: &'static str) -> Expect {
    err("EPERM", step)
}

/// `harmless-syscall NAME`: refused by the allow-list — ENOSYS natively, EPERM on docker (a
/// default `docker run`'s answer) — except natively in full-access (no allow-list: the call
/// succeeds).
fn harmless(name: &'static str, sb: Sb) -> Spec {
    let refused = by_backend(err("ENOSYS", name), err("EPERM", name));
    let expect = if sb.mode == Mode::FullAccess {
        by_backend(ok(), refused)
    } else {
        refused
    };
    Spec::probe(argv!["harmless-syscall", name], expect)
}

/// A copy of the host's `/bin/sh` in the workspace, owned like the workspace, mode 0755.
fn shell_copy(w: &World) -> PathBuf {
    let x = w.ws.join("sh-copy");
    std::fs::copy("/bin/sh", &x).unwrap();
    std::fs::set_permissions(&x, std::fs::Permissions::from_mode(0o755)).unwrap();
    x
}

/// After the run: `path` on the host carries neither set-id bit.
fn no_setid(path: PathBuf) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| match std::fs::symlink_metadata(&path) {
        Err(_) => Ok(()),
        Ok(m) if m.permissions().mode() & 0o6000 == 0 => Ok(()),
        Ok(m) => Err(format!(
            "{} has mode {:o} on the host",
            path.display(),
            m.permissions().mode()
        )),
    }
}

/// A listening unix socket at `path` (mode 0777, so only the sandbox stands in the way),
/// non-blocking for [`accepted`].
fn listener(path: &Path) -> std::os::unix::net::UnixListener {
    let l = std::os::unix::net::UnixListener::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    l.set_nonblocking(true).unwrap();
    l
}

/// After the run: the listener accepted exactly `want` connections.
fn accepted(
    l: std::os::unix::net::UnixListener,
    want: usize,
) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| {
        let mut n = 0;
        while l.accept().is_ok() {
            n += 1;
        }
        if n == want {
            Ok(())
        } else {
            Err(format!(
                "the host's listener accepted {n} connection(s), expected {want}"
            ))
        }
    }
}

/// A minimal pure-Python wheel (`ralph_tiny`), built on the host with python3's zipfile.
fn tiny_wheel(dir: &Path) -> PathBuf {
    let wheel = dir.join("ralph_tiny-1.0-py3-none-any.whl");
    let script = r#"
import sys, zipfile
files = {
    "ralph_tiny/__init__.py": "VALUE = 1\n",
    "ralph_tiny-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: ralph-tiny\nVersion: 1.0\n",
    "ralph_tiny-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
rec = "".join(f"{k},,\n" for k in files) + "ralph_tiny-1.0.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for k, v in files.items():
        z.writestr(k, v)
    z.writestr("ralph_tiny-1.0.dist-info/RECORD", rec)
"#;
    let ok = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&wheel)
        .status()
        .unwrap()
        .success();
    assert!(ok, "could not build the test wheel");
    std::fs::set_permissions(&wheel, std::fs::Permissions::from_mode(0o644)).unwrap();
    wheel
}

/// `ralph-ci`'s uid and gid (created by `.ci/setup`).
fn unprivileged() -> Option<(u32, u32)> {
    let u = nix::unistd::User::from_name("ralph-ci").ok().flatten()?;
    Some((u.uid.as_raw(), u.gid.as_raw()))
}

/// After the run: `path` exists on the host and belongs to `uid`.
fn owned_by(path: PathBuf, uid: u32) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| match std::fs::symlink_metadata(&path) {
        Ok(m) if m.uid() == uid => Ok(()),
        Ok(m) => Err(format!(
            "{} belongs to uid {} on the host, expected {uid}",
            path.display(),
            m.uid()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn cases() -> Vec<Case> {
    vec![
        // A root runner's round never holds uid 0: the agent user on an idmapped workspace, on
        // both backends (docker: the runner makes the idmapped mount the container's bind takes
        // as its source).
        Case::new("who_the_command_is", CONFINED, |_, sb| {
            Spec::probe(
                argv!["whoami"],
                ok_with(vec![("uid", json!(agent_uid(sb)))]),
            )
        }),
        // What the round creates belongs to the workspace's owner on the host, not to the agent.
        Case::new("created_files_belong_to_the_owner", ONLY_WW, |w, _| {
            let f = w.ws.join("made-by-the-round");
            let d = w.ws.join("dir-by-the-round");
            let owner = w.ws.metadata().unwrap().uid();
            Spec::sh(r#"mkdir "$2" && exec "$0" write "$1""#, argv![f, d], ok())
                .after(owned_by(f, owner))
                .after(owned_by(d, owner))
        }),
        // A mode-0600 file of the runner's user in a visible tree: unreadable to a root runner's
        // round (another uid), on both backends.
        Case::new("root_only_file_in_a_visible_tree", CONFINED, |w, _| {
            let secret = w.out.join("secret");
            std::fs::write(&secret, "token\n").unwrap();
            std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
            let refused = is_root();
            Spec::probe(
                argv!["read", secret],
                if refused { err("EACCES", "open") } else { ok() },
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["readdir", w.out])
        }),
        // A workspace owned by an unprivileged user is worked on as that user, on both backends.
        // (An unprivileged runner cannot hand a workspace to someone else: its rounds are its own
        // uid, and what they create is its own.)
        Case::new("workspace_of_another_user", ONLY_WW, |w, _| {
            if !is_root() {
                let me = nix::unistd::geteuid().as_raw();
                let f = w.ws.join("made-by-the-round");
                return Spec::probe(argv!["write", f], ok()).after(owned_by(f, me));
            }
            let Some((uid, gid)) = unprivileged() else {
                assert!(std::env::var_os("CI").is_none(), "CI: no user ralph-ci");
                return Spec::skip("no user ralph-ci (.ci/setup creates it)");
            };
            std::os::unix::fs::chown(&w.ws, Some(uid), Some(gid)).unwrap();
            // Without an idmap, the file's owner on the host is who the command was.
            let f = w.ws.join("made-by-the-round");
            Spec::probe(argv!["write", f], ok()).after(owned_by(f, uid))
        }),
        // `cp /bin/bash x; chmod 4755 x` under a root runner left a setuid-root shell that any
        // local user could run. The filter refuses the bit (before any filesystem check, so the
        // read-only workspace answers EPERM too).
        Case::new("setuid_bit_by_chmod", CONFINED, |w, _| {
            let x = shell_copy(w);
            Spec::probe(argv!["chmod", x, "4755"], eperm("chmod")).after(no_setid(x))
        }),
        Case::new("setgid_bit_by_chmod", CONFINED, |w, _| {
            let x = shell_copy(w);
            Spec::probe(argv!["chmod", x, "2755"], eperm("chmod")).after(no_setid(x))
        }),
        // Through the shell's own chmod(1), as an agent would do it.
        Case::new("setuid_bit_by_chmod_1", ONLY_WW, |w, _| {
            let x = shell_copy(w);
            Spec::sh(
                r#"chmod u+s "$1" 2>/dev/null && exit 3; exec "$0" read "$1""#,
                argv![x],
                ok(),
            )
            .after(no_setid(x))
        }),
        Case::new("setuid_bit_at_creation", CONFINED, |w, _| {
            let y = w.ws.join("created");
            Spec::probe(argv!["create-mode", y, "4755"], eperm("openat"))
                .after(exists_iff(y, false))
        }),
        // A file in TMPDIR is the run's own, but the rule is the same everywhere.
        Case::new("setgid_bit_at_creation_in_tmpdir", CONFINED, |_, _| {
            Spec::sh(
                r#"exec "$0" create-mode "$TMPDIR/created" 2755"#,
                Vec::new(),
                eperm("openat"),
            )
        }),
        Case::new("plain_modes_still_work", ONLY_WW, |w, _| {
            let y = w.ws.join("script");
            Spec::sh(
                r#""$0" create-mode "$1" 644 >/dev/null && exec "$0" chmod "$1" 1755"#,
                argv![y],
                ok(),
            )
            .after(move |_| match mode_of(&y) {
                0o1755 => Ok(()),
                m => Err(format!("mode {m:o} on the host, expected 1755")),
            })
        }),
        // openat2's mode lives in memory the filter cannot read: it answers ENOSYS, and libc
        // falls back to openat.
        Case::new("openat2_answers_enosys", CONFINED, |_, _| {
            Spec::probe(argv!["openat2", "/etc/hostname"], err("ENOSYS", "openat2"))
        }),
        // The allow-list (issue 28): what Docker's default profile refuses is refused in the
        // confined modes on both backends, and on docker in full-access too; natively
        // full-access keeps the host's behaviour (these calls succeed there).
        Case::new("move_pages_refused", ALL, |_, sb| {
            harmless("move_pages", sb)
        }),
        Case::new("mbind_refused", ALL, |_, sb| harmless("mbind", sb)),
        Case::new("set_mempolicy_refused", ALL, |_, sb| {
            harmless("set_mempolicy", sb)
        }),
        Case::new("kcmp_refused", ALL, |_, sb| harmless("kcmp", sb)),
        // A syscall this kernel knows but no list names (463, setxattrat on 6.13+), and one no
        // kernel has: ENOSYS everywhere but native full-access, where the kernel answers.
        Case::new("unlisted_syscall_answers_enosys", CONFINED, |_, _| {
            Spec::probe(argv!["harmless-syscall", "463"], err("ENOSYS", "syscall"))
        }),
        Case::new("unassigned_syscall_answers_enosys", ALL, |_, _| {
            Spec::probe(argv!["harmless-syscall", "1000"], err("ENOSYS", "syscall"))
        }),
        Case::new("mknod_block_device", CONFINED, |w, _| {
            let dev = w.ws.join("sda");
            Spec::probe(argv!["mknod-block", dev], eperm("mknod")).after(exists_iff(dev, false))
        }),
        // A terminal on the command's stdin is replaced by /dev/null (`ralph sandbox exec` from
        // an interactive shell): nothing it reads or injects reaches the user's terminal.
        Case::new("stdin_is_never_a_terminal", CONFINED, |_, _| {
            Spec::probe(argv!["isatty", "0"], ok_with(vec![("tty", json!(false))])).pty()
        }),
        // TIOCSTI is refused on any descriptor, before the kernel even looks at it.
        Case::new("tiocsti_refused", CONFINED, |_, _| {
            Spec::probe(argv!["tiocsti", "0"], eperm("ioctl")).pty()
        }),
        // The sandbox's init (pid 1): its limits cannot be lowered, it cannot be signalled.
        Case::new("prlimit_on_init", CONFINED, |_, _| {
            Spec::probe(argv!["prlimit-pid", "1"], eperm("prlimit64"))
        }),
        Case::new("signal_to_init", CONFINED, |_, _| {
            Spec::probe(argv!["kill", "1", "0"], eperm("kill"))
        }),
        Case::new("own_limits_still_settable", CONFINED, |_, _| {
            Spec::probe(argv!["prlimit-pid", "0"], ok())
        }),
        // The private HOME and TMPDIR are tmpfs of --tmp-size each: a round cannot fill the
        // host's memory or disk through them.
        Case::new("tmpdir_is_size_limited", CONFINED, |_, _| {
            Spec::sh(
                r#"dd if=/dev/zero of="$TMPDIR/big" bs=1M count=8 2>/dev/null; wc -c < "$TMPDIR/big""#,
                Vec::new(),
                exit_with(0, &["4194304"], &[]),
            )
            .flags(argv!["--tmp-size", "4M"])
        }),
        Case::new("home_is_size_limited", CONFINED, |_, _| {
            Spec::sh(
                r#"dd if=/dev/zero of="$HOME/big" bs=1M count=8 2>/dev/null; wc -c < "$HOME/big""#,
                Vec::new(),
                exit_with(0, &["4194304"], &[]),
            )
            .flags(argv!["--tmp-size", "4M"])
        }),
        // A live socket a host process keeps in the workspace (git's fsmonitor daemon keeps one
        // in `.git`): masked before the run, so nothing reaches the process behind it. Natively
        // an empty mode-000 file over it (EACCES); docker masks it with /dev/null (ECONNREFUSED).
        Case::new("socket_in_the_workspace_is_masked", CONFINED, |w, _| {
            let path = w.ws.join("fsmonitor.ipc");
            let l = listener(&path);
            Spec::probe(
                argv!["unix-connect", path],
                by_backend(err("EACCES", "connect"), err("ECONNREFUSED", "connect")),
            )
            .after(accepted(l.try_clone().unwrap(), 0))
            .keep(l)
        }),
        // The writable trees' sockets are found by the git check's walk, which never looks into
        // a protected path: the plan scans those itself. Deep below the workspace and inside
        // `.ralph/`, both masked.
        Case::new(
            "socket_deep_in_the_workspace_is_masked",
            CONFINED,
            |w, _| {
                let dir = w.ws.join("a/b/c");
                std::fs::create_dir_all(&dir).unwrap();
                let path = dir.join("deep.sock");
                let l = listener(&path);
                Spec::probe(
                    argv!["unix-connect", path],
                    by_backend(err("EACCES", "connect"), err("ECONNREFUSED", "connect")),
                )
                .after(accepted(l.try_clone().unwrap(), 0))
                .keep(l)
            },
        ),
        // The walk's sockets reach the init as bytes while it builds the view: a name with a
        // newline, an escape sequence and bytes that are not UTF-8 is masked like any other
        // (the probe finds it by a glob: ralph's own command line takes UTF-8 only). Docker's
        // masked paths are strings: a name that is not UTF-8 cannot be masked there, so the
        // run is refused (69, sandbox unavailable), naming the socket escaped.
        Case::new("socket_with_a_hostile_name_is_masked", CONFINED, |w, _| {
            use std::os::unix::ffi::OsStrExt;
            let dir = w.ws.join("h");
            std::fs::create_dir(&dir).unwrap();
            let path = dir.join(std::ffi::OsStr::from_bytes(b"x\n\x1b[31mred\xff.sock"));
            let l = listener(&path);
            Spec::sh(
                r#"for f in "$1"/x*; do exec "$0" unix-connect "$f"; done; echo no socket >&2; exit 3"#,
                argv![dir],
                by_backend(
                    err("EACCES", "connect"),
                    exit_with(
                        69,
                        &[],
                        &[r#"the socket "#, r#"x\n\u{1b}[31mred\xFF.sock" has a path that is not UTF-8"#],
                    ),
                ),
            )
            .after(accepted(l.try_clone().unwrap(), 0))
            .keep(l)
        }),
        // More sockets than a pipe holds at once (1,500 names, ~110 KB of paths): every one is
        // masked, the live one made last included, and the run does not hang.
        Case::new(
            "many_sockets_in_the_workspace_are_all_masked",
            CONFINED,
            |w, _| {
                let dir = w.ws.join("s");
                std::fs::create_dir(&dir).unwrap();
                let pad = "p".repeat(40);
                for i in 0..1500 {
                    // Bound then closed: a socket file nobody listens on any more.
                    drop(
                        std::os::unix::net::UnixListener::bind(dir.join(format!("{i}{pad}")))
                            .unwrap(),
                    );
                }
                let path = dir.join(format!("live{pad}"));
                let l = listener(&path);
                Spec::probe(
                    argv!["unix-connect", path],
                    by_backend(err("EACCES", "connect"), err("ECONNREFUSED", "connect")),
                )
                .after(accepted(l.try_clone().unwrap(), 0))
                .keep(l)
            },
        ),
        Case::new("socket_in_a_protected_path_is_masked", ONLY_WW, |w, _| {
            let dir = w.ws.join(".ralph");
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("agent.sock");
            let l = listener(&path);
            Spec::probe(
                argv!["unix-connect", path],
                by_backend(err("EACCES", "connect"), err("ECONNREFUSED", "connect")),
            )
            .after(accepted(l.try_clone().unwrap(), 0))
            .keep(l)
        }),
        Case::new("socket_in_a_read_dir_is_masked", CONFINED, |w, _| {
            let path = w.out.join("daemon.sock");
            let l = listener(&path);
            Spec::probe(
                argv!["unix-connect", path],
                by_backend(err("EACCES", "connect"), err("ECONNREFUSED", "connect")),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["readdir", w.out])
            .after(accepted(l.try_clone().unwrap(), 0))
            .keep(l)
        }),
        // `--socket PATH` grants one: it stays (or becomes) visible and connectable.
        Case::new("socket_granted", CONFINED, |w, _| {
            let path = w.out.join("granted.sock");
            let l = listener(&path);
            Spec::probe(argv!["unix-connect", path], ok())
                .flags(argv!["--socket", path])
                .after(accepted(l.try_clone().unwrap(), 1))
                .keep(l)
        }),
        Case::new("socket_granted_in_the_workspace", ONLY_WW, |w, _| {
            let path = w.ws.join("granted.sock");
            let l = listener(&path);
            Spec::probe(argv!["unix-connect", path], ok())
                .flags(argv!["--socket", path])
                .after(accepted(l.try_clone().unwrap(), 1))
                .keep(l)
        }),
        // Legitimate work through the new rules: a package installed with pip into a `--write`
        // cache (its files belong to the cache's owner on the host, no set-id bit anywhere).
        Case::new("pip_install_target_into_a_write_cache", ONLY_WW, |w, _| {
            let cache = w.root.join("cache");
            std::fs::create_dir(&cache).unwrap();
            let wheel = tiny_wheel(&w.out);
            let owner = cache.metadata().unwrap().uid();
            let installed = cache.join("site/ralph_tiny/__init__.py");
            Spec::sh(
                r#"python3 -m pip install --quiet --no-index --no-deps --no-cache-dir --disable-pip-version-check --target "$1/site" "$2" >&2 && exec "$0" read "$1/site/ralph_tiny/__init__.py""#,
                argv![cache, wheel],
                ok(),
            )
            .flags(argv!["--write", cache, "--read", w.out])
            .after(owned_by(installed, owner))
        }),
        // Kernel information container runtimes mask, in every mode (full-access too: SPEC §5, at
        // least a default `docker run`): natively an empty mode-000 file over it (EACCES); docker
        // masks it with /dev/null (reads as empty).
        Case::new("proc_keys_masked", ALL, |_, _| {
            assert!(
                Path::new("/proc/keys").exists(),
                "no /proc/keys on this host"
            );
            Spec::probe(
                argv!["read", "/proc/keys"],
                by_backend(err("EACCES", "open"), ok_with(vec![("bytes", json!(0))])),
            )
        }),
        Case::new("proc_timer_list_masked", ALL, |_, _| {
            assert!(Path::new("/proc/timer_list").exists());
            Spec::probe(
                argv!["read", "/proc/timer_list"],
                by_backend(err("EACCES", "open"), ok_with(vec![("bytes", json!(0))])),
            )
        }),
        Case::new("proc_key_users_masked", CONFINED, |_, _| {
            assert!(Path::new("/proc/key-users").exists());
            Spec::probe(
                argv!["read", "/proc/key-users"],
                by_backend(err("EACCES", "open"), ok_with(vec![("bytes", json!(0))])),
            )
        }),
        // A masked directory: natively an empty mode-000 tmpfs, in docker an empty read-only one
        // (`.` and `..` only).
        Case::new("proc_acpi_masked", ALL, |_, _| {
            if !Path::new("/proc/acpi").is_dir() {
                return Spec::skip("this kernel has no /proc/acpi");
            }
            Spec::probe(
                argv!["readdir", "/proc/acpi"],
                by_backend(err("EACCES", "open"), ok_with(vec![("entries", json!(2))])),
            )
        }),
        Case::new("sys_firmware_masked", ALL, |_, sb| {
            assert!(Path::new("/sys/firmware").is_dir(), "no /sys/firmware here");
            // The confined modes do not bind /sys/firmware at all (invisible); full-access masks
            // it with an empty mode-000 directory; docker with an empty read-only one.
            Spec::probe(
                argv!["readdir", "/sys/firmware"],
                by_backend(
                    sb.pick(
                        err("ENOENT", "open"),
                        err("ENOENT", "open"),
                        err("EACCES", "open"),
                    ),
                    ok_with(vec![("entries", json!(2))]),
                ),
            )
        }),
        // Issue 25 (C): a capability-less uid 0 writes /proc/sys/kernel/core_pattern through the
        // file modes, and a pipe there runs as host root at the next crash. Every mode keeps
        // /proc/sys read-only (EROFS), or, where the command is not root, its mode refuses it
        // first (EACCES; the confined modes natively: Landlock). The host's value is checked
        // unchanged, and put back by the guard if a run ever changed it.
        Case::new("proc_sys_core_pattern_unchanged", ALL, |_, sb| {
            let guard = CorePattern::save();
            // A confined round is never uid 0 (the agent user, on both backends): the file's
            // mode refuses it first; uid 0 (a root runner's full-access) meets the read-only
            // mount.
            let errno = if is_root() && !sb.confined() {
                "EROFS"
            } else {
                "EACCES"
            };
            let want = guard.saved.clone();
            Spec::probe(
                argv!["append", "/proc/sys/kernel/core_pattern"],
                err(errno, "open"),
            )
            .after(move |_| {
                let now = std::fs::read_to_string(CORE_PATTERN).unwrap();
                if now == want {
                    Ok(())
                } else {
                    Err(format!("the host's core_pattern is {now:?}, was {want:?}"))
                }
            })
            .keep(guard)
        }),
        // The host's SysV IPC is not the round's: a shared memory segment the test made on the
        // host (mode 0666, so only a namespace stands in the way) cannot be found inside, in any
        // mode; on the host it is still there, attached by nobody.
        Case::new("host_sysv_shm_is_invisible", ALL, |_, _| {
            let seg = HostShm::create();
            let (key, id) = (seg.key, seg.id);
            Spec::py(
                r#"import ctypes
libc = ctypes.CDLL(None, use_errno=True)
r = libc.shmget(int(sys.argv[1]), 0, 0)
if r < 0:
    e = ctypes.get_errno()
    out(False, errno=errno.errorcode.get(e, 'E%d' % e), code=e, step='shmget')
out(True, id=r)"#,
                argv![key.to_string()],
                err("ENOENT", "shmget"),
            )
            .after(move |_| match HostShm::attached(id) {
                Some(0) => Ok(()),
                Some(n) => Err(format!("the host's segment {id} has {n} attachment(s)")),
                None => Err(format!("the host's segment {id} is gone")),
            })
            .keep(seg)
        }),
        // Own ipc and uts namespaces in every mode, full-access included.
        Case::new("own_ipc_and_uts_namespaces", ALL, |_, _| {
            let ns = |n: &str| std::fs::read_link(format!("/proc/self/ns/{n}")).unwrap();
            Spec::py(
                "out(True, same_ipc=os.readlink('/proc/self/ns/ipc') == sys.argv[1], same_uts=os.readlink('/proc/self/ns/uts') == sys.argv[2])",
                argv![ns("ipc"), ns("uts")],
                ok_with(vec![("same_ipc", json!(false)), ("same_uts", json!(false))]),
            )
        }),
    ]
}

const CORE_PATTERN: &str = "/proc/sys/kernel/core_pattern";

/// The host's `core_pattern`, put back when dropped if a run changed it (the test must never
/// leave the host with a pattern a sandbox wrote).
struct CorePattern {
    saved: String,
}

impl CorePattern {
    fn save() -> Self {
        Self {
            saved: std::fs::read_to_string(CORE_PATTERN).unwrap(),
        }
    }
}

impl Drop for CorePattern {
    fn drop(&mut self) {
        if std::fs::read_to_string(CORE_PATTERN).ok().as_deref() != Some(self.saved.as_str()) {
            let _ = std::fs::write(CORE_PATTERN, self.saved.trim_end());
        }
    }
}

/// A SysV shared memory segment on the host, removed when dropped.
struct HostShm {
    key: i32,
    id: i32,
}

impl HostShm {
    fn create() -> Self {
        for n in 0..64 {
            let key = 0x5a00_0000 | (std::process::id() as i32 & 0xffff) << 8 | n;
            // SAFETY: shmget takes plain integers.
            let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o666) };
            if id >= 0 {
                return Self { key, id };
            }
        }
        panic!(
            "no SysV segment could be made on the host: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Its attachment count, or `None` when it is gone.
    fn attached(id: i32) -> Option<u64> {
        // SAFETY: shmid_ds is plain data, filled by shmctl.
        let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
        // SAFETY: `ds` is a valid, writable shmid_ds.
        (unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) } == 0).then_some(ds.shm_nattch)
    }
}

impl Drop for HostShm {
    fn drop(&mut self) {
        // SAFETY: removing a segment this test made; a null buffer is allowed for IPC_RMID.
        unsafe { libc::shmctl(self.id, libc::IPC_RMID, std::ptr::null_mut()) };
    }
}

#[test]
fn the_table_is_well_formed() {
    check_table(&cases());
}

#[test]
fn native_boundary_matrix() {
    BACKEND.with(|b| b.set(Backend::Native));
    run_matrix("boundary native", &cases());
}

#[test]
fn docker_boundary_matrix() {
    if !is_root() || !common::docker::ready("docker_boundary_matrix") {
        return;
    }
    BACKEND.with(|b| b.set(Backend::Docker));
    set_backend_flags(argv!["--backend", "docker"]);
    run_matrix("boundary docker", &cases());
}

/// Issue 25 (A): no route from the command reaches the native init — its nice value, policy,
/// affinity, I/O priority, limits, `/proc/1` files and liveness read from the host are unchanged
/// and the run ends normally (`tests/it/escape/init_reach.rs`, one row per route). Run as root and,
/// in CI, as the unprivileged `ralph-ci` (whose init is its own uid, in a user namespace).
#[test]
fn native_init_out_of_reach() {
    init_reach::run_routes("init native", CONFINED, init_reach::Finder::Native);
}

/// Issue 25 (A): the same routes against ralph's container init, which runs as the command's own
/// user (uid 0 on a root-owned workspace): before the fix `pidfd_send_signal` on a descriptor of
/// `/proc/1` stopped the round, `setpriority`/`sched_setscheduler` reniced it and made it
/// `SCHED_IDLE`, and a write to `/proc/1/oom_score_adj` made it the first OOM victim.
#[test]
fn docker_init_out_of_reach() {
    if !is_root() || !common::docker::ready("docker_init_out_of_reach") {
        return;
    }
    set_backend_flags(argv!["--backend", "docker"]);
    init_reach::run_routes("init docker", CONFINED, init_reach::Finder::Docker);
}

/// `--agent-user` picks who a root runner's rounds are on a root-owned workspace; root is
/// refused (64) before anything runs.
#[test]
fn root_runner_agent_user_flag() {
    if !is_root() {
        eprintln!(
            "root_runner_agent_user_flag: not applicable: the flag concerns root runners only"
        );
        return;
    }
    let w = World::new();
    let run = |user: &str| {
        let argv = argv![
            "sandbox",
            "exec",
            "--workspace",
            w.ws,
            "--read",
            bin_dir(),
            "--agent-user",
            user,
            "--",
            probe(),
            "whoami"
        ];
        run_ralph(&argv, &[], &Launch::default())
    };
    let refused = run("root");
    assert_eq!(refused.code, 64, "{}", refused.describe());
    assert!(
        refused.stderr.contains("agent-user"),
        "{}",
        refused.describe()
    );
    let zero = run("0:1000");
    assert_eq!(zero.code, 64, "{}", zero.describe());
    let ok = run("4242:4343");
    assert_eq!(ok.code, 0, "{}", ok.describe());
    let j = ok.json().unwrap();
    assert_eq!(
        (j["uid"].as_u64(), j["gid"].as_u64()),
        (Some(4242), Some(4343)),
        "{j}"
    );
}
