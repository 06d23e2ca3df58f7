//! The sandbox escape matrix against the docker backend: the cases of `tests/it/sandbox_escape.rs`
//! (same names, same machinery from `tests/it/escape/mod.rs`), run with
//! `ralph sandbox exec --backend docker` (default image `ralph-agent-base:latest`), the probe bind-mounted
//! read-only (`--read` of its directory), each asserting the exact answer the container gives.
//! Cases that do not apply to a container are listed in [`NOT_APPLICABLE`] with the reason, and
//! `every_native_case_is_ported_or_explained` checks that no native case is silently dropped.
//!
//! What a container looks like from inside, and so which errno each refusal has (where it
//! differs from native, the case says so):
//! - the root is the image's, read-only: a write anywhere but the mounts is EROFS, and the
//!   host's own `/etc`, `/root`, `/home`, `/var/tmp` are not there at all: ENOENT
//!   ([`invisible`]);
//! - the workspace, `--read`/`--write` paths and the private HOME/TMPDIR are bind mounts at their
//!   host paths: rename/link between them is EXDEV, a write to a read-only one EROFS;
//! - full-access in docker does not open the host's filesystem: it differs from workspace-write
//!   only by the network (bridge). So the filesystem cases expect the confined answer in every
//!   mode (native's full-access expects success);
//! - with the network on, the container has its own network namespace (the bridge): loopback is
//!   the container's own, so a host listener on 127.0.0.1 is unreachable (ECONNREFUSED) rather
//!   than reached as natively in full-access;
//! - pid 1 is ralph's container init (`/.ralph-init __container-init`, the runner's own static
//!   executable mounted read-only), running as the command's user.
//!
//! The command runs as the workspace owner; a root runner's round on a root-owned workspace (CI)
//! runs as the agent user on an idmapped workspace, as natively (full-access: the owner, uid 0
//! without any capability).

use crate::common;

use crate::escape;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use escape::*;
use serde_json::json;

fn eperm(step: &'static str) -> Expect {
    err("EPERM", step)
}

fn erofs(step: &'static str) -> Expect {
    err("EROFS", step)
}

fn exdev(step: &'static str) -> Expect {
    err("EXDEV", step)
}

/// A host path that is not mounted into the container does not exist inside (ENOENT at `step`);
/// the path must exist on the host, so a missing target never passes as blocked.
fn invisible(path: &Path, step: &'static str) -> Expect {
    assert!(
        path.symlink_metadata().is_ok(),
        "{} does not exist on the host, so ENOENT in the container would prove nothing",
        path.display()
    );
    err("ENOENT", step)
}

/// Every matrix test starts here: the docker flags for every run, or a skip (never in CI).
fn docker_matrix(group: &str, cases: &[Case]) {
    if !common::docker::ready(group) {
        return;
    }
    // The default image is the test image (`ralph-agent-base:latest`); a case may name another.
    assert_eq!(common::docker::IMAGE, "ralph-agent-base:latest");
    set_backend_flags(argv!["--backend", "docker"]);
    run_matrix(group, cases);
}

// ---------------------------------------------------------------------------------------------
// Filesystem
// ---------------------------------------------------------------------------------------------

fn filesystem() -> Vec<Case> {
    vec![
        Case::new("write_outside_absolute", ALL, |w, _| {
            let target = w.out.join("new");
            Spec::probe(argv!["write", target], erofs("open"))
                .flags(argv!["--read", w.out])
                .visible(argv!["readdir", w.out])
                .after(exists_iff(target, false))
        }),
        // The image's /etc, on the read-only root (the host's /etc is not there).
        Case::new("write_etc", ALL, |_, _| {
            let target = PathBuf::from(format!("/etc/{}", unique("ralph-escape")));
            Spec::probe(argv!["write", target], erofs("open")).visible(argv!["readdir", "/etc"])
        }),
        Case::new("write_dotdot_from_workspace", ALL, |w, _| {
            let target = format!("{}/../out/f", w.ws.display());
            Spec::probe(argv!["write", target], erofs("open"))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", target])
                .after(content_is(w.outside_file(), "outside\n"))
        }),
        Case::new("write_through_workspace_symlink", ALL, |w, _| {
            let link = w.ws.join("link");
            std::os::unix::fs::symlink(w.outside_file(), &link).unwrap();
            Spec::probe(argv!["write", link], erofs("open"))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", link])
                .after(content_is(w.outside_file(), "outside\n"))
        }),
        // read-only: the workspace mount is read-only (EROFS); otherwise two mounts (EXDEV).
        Case::new("hardlink_outside_file_into_workspace", ALL, |w, sb| {
            let link = w.ws.join("hl");
            Spec::probe(
                argv!["link", w.outside_file(), link],
                sb.pick(erofs("linkat"), exdev("linkat"), exdev("linkat")),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["read", w.outside_file()])
            .after(exists_iff(link, false))
        }),
        Case::new("rename_workspace_to_outside", ALL, |w, _| {
            let from = w.ws.join("a");
            std::fs::write(&from, "a\n").unwrap();
            let to = w.out.join("a");
            Spec::probe(argv!["rename", from, to], exdev("renameat2"))
                .flags(argv!["--read", w.out])
                .visible(argv!["readdir", w.out])
                .after(exists_iff(to, false))
        }),
        Case::new("rename_outside_to_workspace", ALL, |w, _| {
            let to = w.ws.join("f");
            Spec::probe(argv!["rename", w.outside_file(), to], exdev("renameat2"))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", w.outside_file()])
                .after(exists_iff(w.outside_file(), true))
        }),
        Case::new("write_proc_self_cwd_dotdot", ALL, |w, _| {
            let target = "/proc/self/cwd/../out/f";
            Spec::probe(argv!["write", target], erofs("open"))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", target])
                .after(content_is(w.outside_file(), "outside\n"))
        }),
        // The container's /dev/shm is its own tmpfs: the write succeeds there and the host's
        // /dev/shm is untouched (native: EROFS, its /dev/shm is part of the read-only root).
        Case::new("write_dev_shm", ALL, |_, _| {
            let name = unique("ralph-escape");
            let target = Path::new("/dev/shm").join(&name);
            let check = target.clone();
            Spec::probe(argv!["write", target], ok()).after(move |_| {
                if check.exists() {
                    let _ = std::fs::remove_file(&check);
                    Err(format!("{} appeared on the host", check.display()))
                } else {
                    Ok(())
                }
            })
        }),
        Case::new("truncate_outside", ALL, |w, sb| {
            // The agent user (a root runner's confined round) may not write the root-owned
            // file (EACCES, as natively); uid 0 without capabilities meets the read-only mount.
            let refused = if is_root() && sb.confined() {
                err("EACCES", "truncate")
            } else {
                erofs("truncate")
            };
            Spec::probe(argv!["truncate", w.outside_file()], refused)
                .flags(argv!["--read", w.out])
                .visible(argv!["read", w.outside_file()])
                .after(content_is(w.outside_file(), "outside\n"))
        }),
        Case::new("mkdir_outside", ALL, |w, _| {
            let target = w.out.join("d");
            Spec::probe(argv!["mkdir", target], erofs("mkdir"))
                .flags(argv!["--read", w.out])
                .visible(argv!["readdir", w.out])
                .after(exists_iff(target, false))
        }),
        Case::new("unlink_outside", ALL, |w, _| {
            Spec::probe(argv!["unlink", w.outside_file()], erofs("unlink"))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", w.outside_file()])
                .after(exists_iff(w.outside_file(), true))
        }),
        Case::new("symlink_created_outside", ALL, |w, _| {
            let link = w.out.join("l");
            Spec::probe(argv!["symlink", w.ws, link], erofs("symlinkat"))
                .flags(argv!["--read", w.out])
                .visible(argv!["readdir", w.out])
                .after(exists_iff(link, false))
        }),
        Case::new("read_outside_unlisted", ALL, |w, _| {
            let f = w.outside_file();
            Spec::probe(argv!["read", f], invisible(&f, "open"))
        }),
        Case::new("read_outside_listed", ALL, |w, _| {
            Spec::probe(
                argv!["read", w.outside_file()],
                ok_with(vec![("bytes", json!(8))]),
            )
            .flags(argv!["--read", w.out])
        }),
        Case::new("exec_outside_binary", ALL, |w, _| {
            let bin = w.out.join("true");
            std::fs::copy("/bin/true", &bin).expect("/bin/true");
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            Spec::probe(argv!["exec", bin], invisible(&bin, "execve"))
        }),
        // The container's /root is the image's: a file in the host's /root is not there.
        Case::new("read_root_home", ALL, |_, sb| {
            let Ok(file) = tempfile::Builder::new()
                .prefix("ralph-escape-")
                .tempfile_in("/root")
            else {
                return Spec::skip("/root is not writable here (needs root)");
            };
            let path = file.path().to_owned();
            // The container's /root is the image's, mode 0700: the agent user (a root runner's
            // confined round) cannot even look into it (EACCES); uid 0 (full-access) finds the
            // host's file absent.
            let expect = if is_root() && sb.confined() {
                err("EACCES", "open")
            } else {
                invisible(&path, "open")
            };
            Spec::probe(argv!["read", path], expect).keep(file)
        }),
        Case::new("read_other_home", ALL, |_, _| {
            let home = Path::new("/home");
            if nix::unistd::access(home, nix::unistd::AccessFlags::W_OK).is_err() {
                return Spec::skip("/home is not writable here (needs root)");
            }
            let dir = tempfile::Builder::new()
                .prefix("ralph-escape-user-")
                .tempdir_in(home)
                .unwrap();
            let notes = dir.path().join("notes.txt");
            std::fs::write(&notes, "private\n").unwrap();
            Spec::probe(argv!["read", notes], invisible(&notes, "open")).keep(dir)
        }),
        Case::new("read_host_tmp_file", ALL, |_, _| {
            let file = tempfile::Builder::new()
                .prefix("ralph-escape-")
                .tempfile_in("/tmp")
                .unwrap();
            let path = file.path().to_owned();
            Spec::probe(argv!["read", path], invisible(&path, "open")).keep(file)
        }),
        Case::new("write_workspace", ALL, |w, sb| {
            let target = w.ws.join("new");
            Spec::probe(argv!["write", target], sb.pick(erofs("open"), ok(), ok()))
                .visible(argv!["readdir", w.ws])
                .after(exists_iff(target, sb.mode != Mode::ReadOnly))
        }),
        Case::new("write_tmpdir", ALL, |_, _| {
            Spec::sh(r#"exec "$0" write "$TMPDIR/f""#, argv![], ok())
        }),
        Case::new("write_home", ALL, |_, _| {
            Spec::sh(r#"exec "$0" write "$HOME/f""#, argv![], ok())
        }),
        // The container's /tmp is a tmpfs of its own, in every mode.
        Case::new("write_slash_tmp_is_private", ALL, |_, _| {
            let target = PathBuf::from("/tmp").join(unique("ralph-escape"));
            Spec::probe(argv!["write", target], ok()).after(exists_iff(target, false))
        }),
        Case::new("write_dev_null", ALL, |_, _| {
            Spec::probe(argv!["write", "/dev/null"], ok())
        }),
        Case::new("read_dev_urandom", ALL, |_, _| {
            Spec::probe(
                argv!["read", "/dev/urandom"],
                ok_with(vec![("bytes", json!(4096))]),
            )
        }),
        Case::new("read_system_file", ALL, |_, _| {
            Spec::probe(argv!["read", "/etc/passwd"], ok())
        }),
        Case::new("exec_system_binary", ALL, |_, _| {
            Spec::probe(
                argv!["exec", "/bin/true"],
                ok_with(vec![("exit", json!(0))]),
            )
        }),
        Case::new("mkfifo_workspace", ALL, |w, sb| {
            let fifo = w.ws.join("fifo");
            Spec::probe(argv!["mkfifo", fifo], sb.pick(erofs("mknod"), ok(), ok()))
                .after(exists_iff(fifo, sb.mode != Mode::ReadOnly))
        }),
        Case::new("mkfifo_tmpdir", ALL, |_, _| {
            Spec::sh(r#"exec "$0" mkfifo "$TMPDIR/fifo""#, argv![], ok())
        }),
        // The set-id guard refuses device nodes before the read-only mount is looked at (EPERM
        // in read-only too); full-access has no guard and no capability (EPERM).
        Case::new("mknod_char_device", ALL, |w, _| {
            Spec::probe(argv!["mknod-char", w.ws.join("null")], eperm("mknod"))
        }),
        Case::new("unix_bind_workspace", ALL, |w, sb| {
            Spec::probe(
                argv!["unix-bind", w.ws.join("s.sock")],
                sb.pick(erofs("bind"), ok(), ok()),
            )
        }),
        Case::new("unix_bind_tmpdir", ALL, |_, _| {
            Spec::sh(r#"exec "$0" unix-bind "$TMPDIR/s.sock""#, argv![], ok())
        }),
        Case::new("unix_connect_outside_socket", ALL, |w, _| {
            let path = w.out.join("l.sock");
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            std::os::unix::net::UnixStream::connect(&path).unwrap();
            listener.accept().unwrap();
            listener.set_nonblocking(true).unwrap();
            Spec::py(UNIX_CONNECT, argv![path], invisible(&path, "connect")).after(move |_| {
                if listener.accept().is_ok() {
                    Err("the host listener accepted a connection".into())
                } else {
                    Ok(())
                }
            })
        }),
        Case::new("chmod_outside", ALL, |w, _| {
            let f = w.outside_file();
            Spec::probe(argv!["chmod", f, "777"], invisible(&f, "chmod")).after(move |_| {
                match mode_of(&f) {
                    0o644 => Ok(()),
                    m => Err(format!("{} has mode {m:o} afterwards", f.display())),
                }
            })
        }),
        // The image's /etc/passwd on the read-only root.
        Case::new("chmod_system_file", ALL, |_, _| {
            Spec::probe(argv!["chmod", SYSTEM_FILE, "777"], erofs("chmod"))
                .visible(argv!["read", SYSTEM_FILE])
        }),
        Case::new("utime_outside", ALL, |w, _| {
            let f = w.outside_file();
            let before = std::fs::metadata(&f).unwrap().mtime();
            Spec::py(UTIME, argv![f], invisible(&f, "utimensat")).after(move |_| {
                let after = std::fs::metadata(&f).unwrap().mtime();
                if after == before {
                    Ok(())
                } else {
                    Err(format!("mtime went from {before} to {after}"))
                }
            })
        }),
        Case::new("utime_system_file", ALL, |_, _| {
            Spec::py(UTIME, argv![SYSTEM_FILE], erofs("utimensat"))
                .visible(argv!["read", SYSTEM_FILE])
        }),
        Case::new("setxattr_outside", ALL, |w, _| {
            let f = w.outside_file();
            Spec::py(SETXATTR, argv![f], invisible(&f, "setxattr"))
        }),
        Case::new("setxattr_system_file", ALL, |_, _| {
            Spec::py(SETXATTR, argv![SYSTEM_FILE], erofs("setxattr"))
                .visible(argv!["read", SYSTEM_FILE])
        }),
        Case::new("tmp_workspace_read_only", ONLY_RO, |_, _| {
            let w = World::in_host_tmp();
            let target = w.ws.join("new");
            Spec::probe(argv!["write", target], erofs("open"))
                .ws(&w.ws)
                .visible(argv!["readdir", w.ws])
                .after(exists_iff(target, false))
                .keep(w)
        }),
        Case::new("tmp_read_path_not_writable", ALL, |_, _| {
            let w = World::in_host_tmp();
            Spec::probe(argv!["write", w.outside_file()], erofs("open"))
                .ws(&w.ws)
                .flags(argv!["--read", w.out])
                .visible(argv!["read", w.outside_file()])
                .after(content_is(w.outside_file(), "outside\n"))
                .keep(w)
        }),
        Case::new("tmp_workspace_writable", WW_FA, |_, _| {
            let w = World::in_host_tmp();
            let target = w.ws.join("new");
            Spec::probe(argv!["write", target], ok())
                .ws(&w.ws)
                .after(exists_iff(target, true))
                .keep(w)
        }),
        Case::new("extra_write_dir", ALL, |w, sb| {
            let target = w.out.join("new");
            let expect = sb.pick(
                exit_with(64, &[], &["does not allow extra writable directories"]),
                ok(),
                ok(),
            );
            Spec::probe(argv!["write", target], expect)
                .flags(argv!["--write", w.out])
                .after(exists_iff(target, sb.mode != Mode::ReadOnly))
        }),
        // A fresh container: 0, 1, 2 and the listed directory (plus `.` and `..`).
        Case::new("no_inherited_descriptors", ALL, |w, _| {
            Spec::probe(
                argv!["readdir", "/proc/self/fd"],
                ok_with(vec![("entries", json!(6))]),
            )
            .inherit(&w.out)
        }),
    ]
}

const SYSTEM_FILE: &str = "/etc/passwd";

const UNIX_CONNECT: &str = "\
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
except OSError as e:
    fail(e, 'connect')
s.sendall(b'escaped')
out(True)";

const UTIME: &str = "\
try:
    os.utime(sys.argv[1], (978307200, 978307200))
except OSError as e:
    fail(e, 'utimensat')
out(True)";

const SETXATTR: &str = "\
try:
    os.setxattr(sys.argv[1], 'user.ralph_escape', b'1')
except OSError as e:
    fail(e, 'setxattr')
out(True)";

const TIOCSTI: &str = "\
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'#')
except OSError as e:
    fail(e, 'ioctl')
out(True)";

const PROC_PIDS: &str = "\
try:
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
except OSError as e:
    fail(e, 'listdir')
out(True, pids=pids, me=os.getpid())";

// ---------------------------------------------------------------------------------------------
// The view: root, /proc, /sys
// ---------------------------------------------------------------------------------------------

fn view() -> Vec<Case> {
    vec![
        Case::new("write_root_new_file", ALL, |_, _| {
            let target = PathBuf::from("/").join(unique("ralph-escape"));
            Spec::probe(argv!["write", target], erofs("open")).after(exists_iff(target, false))
        }),
        Case::new("mkdir_root", ALL, |_, _| {
            let target = PathBuf::from("/").join(unique("ralph-escape"));
            Spec::probe(argv!["mkdir", target], erofs("mkdir")).after(exists_iff(target, false))
        }),
        // The engine's socket is never mounted: it does not exist inside, whatever the host has.
        Case::new("docker_socket_absent", ALL, |_, _| {
            Spec::py(
                UNIX_CONNECT,
                argv!["/var/run/docker.sock"],
                err("ENOENT", "connect"),
            )
        }),
        // A `--read` of the directory that holds the socket is refused before anything runs.
        Case::new("docker_socket_read_refused", ALL, |_, _| {
            Spec::probe(
                argv!["whoami"],
                exit_with(64, &[], &["container engine's socket"]),
            )
            .flags(argv!["--read", "/run"])
            .after(|run| {
                if run.stdout.is_empty() {
                    Ok(())
                } else {
                    Err("the command ran".into())
                }
            })
        }),
        // pid 1 is the container's init, then the command.
        Case::new("proc_shows_only_sandbox_processes", ALL, |_, _| {
            let host = host_sleeper();
            Spec::py(PROC_PIDS, argv![], ok())
                .after(|run| {
                    let j = run.json().ok_or("no probe line")?;
                    let me = j["me"].as_i64().unwrap_or(-1);
                    if j["pids"] == json!([1, me]) {
                        Ok(())
                    } else {
                        Err(format!("/proc lists the pids {} (own pid {me})", j["pids"]))
                    }
                })
                .keep(host)
        }),
        // The engine mounts the cgroup tree read-only.
        Case::new("sys_cgroup_procs_read_only", ALL, |_, _| {
            let procs = if Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists() {
                "/sys/fs/cgroup/pids/cgroup.procs"
            } else {
                "/sys/fs/cgroup/cgroup.procs"
            };
            Spec::probe(argv!["write", procs], erofs("open"))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Protected paths
// ---------------------------------------------------------------------------------------------

fn git_world(w: &World) -> Option<PathBuf> {
    git_binary().map(|_| w.git_init())
}

fn git_on_host(git: &Path, dir: &Path, home: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(git)
        .args([
            "-c",
            "user.name=ralph-test",
            "-c",
            "user.email=test@example.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("host git {args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    } else {
        Err(format!(
            "host git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The `.git/commondir` attack of `tests/it/sandbox_escape.rs` (exit 3 when git uses the copy).
const COMMONDIR_ATTACK: &str = r#"cp -a .git .evil &&
printf '#!/bin/sh\necho agent-hook > "%s"\n' "$1" > .evil/hooks/pre-commit &&
chmod 755 .evil/hooks/pre-commit &&
echo ../.evil > .git/commondir &&
test "$("$2" rev-parse --git-common-dir)" != .git &&
exit 3"#;

fn host_git_unaffected(git: &Path, ws: &Path, home: &Path, marker: &Path) -> Result<(), String> {
    let commondir = ws.join(".git/commondir");
    if commondir.symlink_metadata().is_ok() {
        return Err(format!("{} exists after the run", commondir.display()));
    }
    let common = git_on_host(git, ws, home, &["rev-parse", "--git-common-dir"])?;
    if common != ".git" {
        return Err(format!("the host's git uses the common dir {common:?}"));
    }
    git_on_host(
        git,
        ws,
        home,
        &["commit", "-q", "--allow-empty", "-m", "host"],
    )?;
    if marker.exists() {
        return Err("a host `git commit` ran the agent's hook".into());
    }
    Ok(())
}

fn protected() -> Vec<Case> {
    vec![
        Case::new("protect_git_hook_existing", RO_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let hook = w.ws.join(".git/hooks/pre-commit");
            Spec::probe(argv!["write", hook], erofs("open"))
                .visible(argv!["read", hook])
                .after(content_is(hook, HOOK))
        }),
        Case::new("protect_git_hook_new", RO_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let hook = w.ws.join(".git/hooks/post-checkout");
            Spec::probe(argv!["write", hook], erofs("open"))
                .visible(argv!["readdir", w.ws.join(".git/hooks")])
                .after(exists_iff(hook, false))
        }),
        Case::new("protect_git_hook_chmod", RO_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let hook = w.ws.join(".git/hooks/pre-commit");
            let check = hook.clone();
            Spec::probe(argv!["chmod", hook, "777"], erofs("chmod"))
                .visible(argv!["read", hook])
                .after(move |_| match mode_of(&check) {
                    0o755 => Ok(()),
                    m => Err(format!("the hook's mode is {m:o} afterwards")),
                })
        }),
        Case::new("protect_git_hooks_rename", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let hooks = w.ws.join(".git/hooks");
            Spec::probe(
                argv!["rename", hooks, w.ws.join(".git/hooks-moved")],
                err("EBUSY", "renameat2"),
            )
            .after(exists_iff(hooks.join("pre-commit"), true))
        }),
        Case::new("protect_git_config_append", RO_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let config = w.ws.join(".git/config");
            let before: &'static str =
                Box::leak(std::fs::read_to_string(&config).unwrap().into_boxed_str());
            Spec::probe(argv!["append", config], erofs("open"))
                .visible(argv!["read", config])
                .after(content_is(config, before))
        }),
        Case::new("protect_git_config_unlink", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let config = w.ws.join(".git/config");
            Spec::probe(argv!["unlink", config], err("EBUSY", "unlink"))
                .after(exists_iff(config, true))
        }),
        Case::new("protect_git_config_rename", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let config = w.ws.join(".git/config");
            Spec::probe(
                argv!["rename", config, w.ws.join("config")],
                exdev("renameat2"),
            )
            .after(exists_iff(config, true))
        }),
        Case::new("protect_git_config_rename_in_git", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let config = w.ws.join(".git/config");
            Spec::probe(
                argv!["rename", config, w.ws.join(".git/config-moved")],
                err("EBUSY", "renameat2"),
            )
            .after(exists_iff(config, true))
        }),
        Case::new("protect_git_config_hardlink", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            Spec::probe(
                argv!["link", w.ws.join(".git/config"), w.ws.join("config")],
                exdev("linkat"),
            )
            .after(exists_iff(w.ws.join("config"), false))
        }),
        Case::new("protect_through_agent_symlink", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            let hook = w.ws.join(".git/hooks/pre-commit");
            Spec::sh(
                r#"ln -s "$1" "$2" && exec "$0" write "$2""#,
                argv![hook, w.ws.join("evil")],
                erofs("open"),
            )
            .after(content_is(hook, HOOK))
        }),
        Case::new("protect_ralph_missing", RO_WW, |w, sb| {
            let dir = w.ws.join(".ralph");
            assert!(!dir.exists());
            let check = dir.clone();
            let spec = if sb == RO {
                Spec::probe(argv!["mkdir", dir], erofs("mkdir"))
            } else {
                Spec::probe(argv!["write", dir.join("x")], erofs("open"))
            };
            spec.after(move |_| {
                let entries: Vec<_> = std::fs::read_dir(&check)
                    .map(|d| d.flatten().map(|e| e.file_name()).collect())
                    .unwrap_or_default();
                if entries.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{} is left with {entries:?}", check.display()))
                }
            })
        }),
        Case::new("protect_explicit_missing", ONLY_WW, |w, _| {
            let dir = w.ws.join("tests");
            Spec::probe(argv!["write", dir.join("x")], erofs("open"))
                .flags(argv!["--protect", "tests"])
                .after(exists_iff(dir, false))
        }),
        Case::new("protect_explicit_nested_missing", ONLY_WW, |w, _| {
            let dir = w.ws.join("tests");
            Spec::probe(argv!["write", dir.join("x")], erofs("open"))
                .flags(argv!["--protect", "tests/unit/golden"])
                .after(exists_iff(dir, false))
        }),
        Case::new("protect_explicit_existing", ONLY_WW, |w, _| {
            std::fs::create_dir(w.ws.join("src")).unwrap();
            let file = w.ws.join("src/lib.rs");
            std::fs::write(&file, "// mine\n").unwrap();
            Spec::probe(argv!["write", file], erofs("open"))
                .flags(argv!["--protect", "src"])
                .visible(argv!["read", file])
                .after(content_is(file, "// mine\n"))
        }),
        // `.git` is bound onto itself (a mount point cannot be renamed).
        Case::new("protect_git_dir_rename", ONLY_WW, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed");
            }
            Spec::probe(
                argv!["rename", w.ws.join(".git"), w.ws.join(".git-moved")],
                err("EBUSY", "renameat2"),
            )
            .after(exists_iff(w.ws.join(".git-moved"), false))
            .after(exists_iff(w.ws.join(".git/hooks/pre-commit"), true))
        }),
        // As natively: the attack works during the run (exit 3), `.git/commondir` is removed
        // afterwards, and the host's git is unaffected.
        Case::new("protect_git_commondir", RO_WW, |w, sb| {
            let Some(git) = git_world(w) else {
                return Spec::skip("git is not installed");
            };
            let marker = w.root.join("agent-hook-ran");
            let spec = if sb == RO {
                Spec::probe(argv!["write", w.ws.join(".git/commondir")], erofs("open"))
            } else {
                // The marker path is outside every mount: the hook could not write it anyway;
                // the check is the host's git afterwards.
                Spec::sh(COMMONDIR_ATTACK, argv![marker, git], exit(3))
            };
            let (ws, home) = (w.ws.clone(), w.root.clone());
            spec.after(move |run| {
                let unaffected = host_git_unaffected(&git, &ws, &home, &marker);
                common::remove_kept_originals(&run.stderr);
                unaffected
            })
        }),
        Case::new("protect_refused_in_full_access", ONLY_FA, |w, _| {
            Spec::probe(
                argv!["write", w.ws.join("x")],
                exit_with(64, &[], &["protect"]),
            )
            .flags(argv!["--protect", "tests"])
            .after(exists_iff(w.ws.join("x"), false))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Network
// ---------------------------------------------------------------------------------------------

fn tcp_listener(addr: &str) -> Option<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).ok()?;
    l.set_nonblocking(true).unwrap();
    Some(l)
}

fn accepted_iff(l: std::net::TcpListener, want: bool) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| {
        let got = l.accept().is_ok();
        if got == want {
            Ok(())
        } else {
            Err(format!("the host listener got a connection: {got}"))
        }
    }
}

/// With the network on, 127.0.0.1 is the container's own loopback (ECONNREFUSED: nothing
/// listens there) and the host listener gets nothing; IPv6 is off in the engine's bridge
/// (EADDRNOTAVAIL). Off: socket(2) refused (EPERM), as natively.
fn tcp_case(sb: Sb, addr: &str, on: Expect) -> Spec {
    let Some(l) = tcp_listener(addr) else {
        return Spec::skip(format!("cannot listen on {addr} on this host"));
    };
    let local = l.local_addr().unwrap();
    let expect = if sb.network() { on } else { eperm("socket") };
    Spec::probe(
        argv![
            "connect-tcp",
            local.ip().to_string(),
            local.port().to_string()
        ],
        expect,
    )
    .after(accepted_iff(l, false))
}

/// The network-off variants. `dns_lookup` runs only in these: with the network on, the answer
/// depends on the engine's rewriting of resolv.conf and on the host's resolver (this machine kind
/// has no DNS beyond its package mirrors), so there is no exact answer to assert.
const NET_OFF: &[Sb] = &[RO, WW, FA_NONET];

fn network() -> Vec<Case> {
    vec![
        Case::new("tcp_connect_loopback", NETS, |_, sb| {
            tcp_case(sb, "127.0.0.1:0", err("ECONNREFUSED", "connect"))
        }),
        Case::new("tcp_connect_ipv6_loopback", NETS, |_, sb| {
            tcp_case(sb, "[::1]:0", err("EADDRNOTAVAIL", "connect"))
        }),
        // With the network on, the datagram goes to the container's own loopback.
        Case::new("udp_send_loopback", NETS, |_, sb| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = s.local_addr().unwrap().port().to_string();
            s.set_nonblocking(true).unwrap();
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["connect-udp", "127.0.0.1", port], expect).after(move |_| {
                let mut buf = [0u8; 8];
                if s.recv(&mut buf).is_ok() {
                    Err("the host received a datagram".into())
                } else {
                    Ok(())
                }
            })
        }),
        Case::new("dns_lookup", NET_OFF, |_, _| {
            Spec::probe(argv!["dns", "example.com"], eperm("socket"))
        }),
        Case::new("bash_dev_tcp", NETS, |_, sb| {
            let l = tcp_listener("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let expect = if sb.network() {
                exit_with(1, &[], &["Connection refused"])
            } else {
                exit_with(1, &[], &["Operation not permitted"])
            };
            Spec::cmd(
                argv![
                    "/bin/bash",
                    "-c",
                    format!("echo x > /dev/tcp/127.0.0.1/{port}")
                ],
                expect,
            )
            .after(accepted_iff(l, false))
        }),
        Case::new("bind_loopback", NETS, |_, sb| {
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["bind-tcp", "127.0.0.1", "0"], expect)
        }),
        Case::new("raw_socket", NETS, |_, _| {
            Spec::probe(argv!["raw-socket"], eperm("socket"))
        }),
        Case::new("netlink_socket", NETS, |_, sb| {
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["netlink-socket"], expect)
        }),
        // Every container has a network namespace of its own (none or bridge): a host's
        // abstract name does not exist there (native full-access shares the host's and connects).
        Case::new("abstract_unix_outside", NETS, |_, _| {
            let name = unique("ralph-escape-abs");
            let listener = abstract_listener(&name);
            Spec::probe(
                argv!["abstract-connect", name],
                err("ECONNREFUSED", "connect"),
            )
            .keep(listener)
        }),
        Case::new("unix_socketpair", NETS, |_, _| {
            Spec::probe(argv!["unix-socketpair"], ok())
        }),
        Case::new("network_full_refused_in_read_only", ONLY_RO, |_, _| {
            Spec::probe(
                argv!["whoami"],
                exit_with(64, &[], &["does not allow `--network full`"]),
            )
            .flags(argv!["--network", "full"])
            .after(|run| {
                if run.stdout.is_empty() {
                    Ok(())
                } else {
                    Err("the command ran".into())
                }
            })
        }),
    ]
}

fn abstract_listener(name: &str) -> Guard {
    use std::io::BufRead as _;
    let mut child = Command::new(probe())
        .args(["abstract-listen", name, "60"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let guard = Guard(child);
    assert!(line.contains(r#""ok":true"#), "listener: {line}");
    guard
}

// ---------------------------------------------------------------------------------------------
// Processes and namespaces
// ---------------------------------------------------------------------------------------------

fn unshare_case(kind: &'static str) -> Build {
    match kind {
        "user" => |_, sb| unshare_spec(sb, "user"),
        "mount" => |_, sb| unshare_spec(sb, "mount"),
        "net" => |_, sb| unshare_spec(sb, "net"),
        "pid" => |_, sb| unshare_spec(sb, "pid"),
        "ipc" => |_, sb| unshare_spec(sb, "ipc"),
        "uts" => |_, sb| unshare_spec(sb, "uts"),
        "cgroup" => |_, sb| unshare_spec(sb, "cgroup"),
        "time" => |_, sb| unshare_spec(sb, "time"),
        other => panic!("unknown namespace {other}"),
    }
}

/// The seccomp profile refuses unshare(2) in every mode: the confined modes' deny list, and in
/// full-access the allow-list, as a default `docker run` (native full-access allows a user
/// namespace).
fn unshare_spec(_sb: Sb, kind: &str) -> Spec {
    Spec::probe(argv!["unshare", kind], eperm("unshare"))
}

fn processes() -> Vec<Case> {
    let mut cases = vec![
        Case::new("ptrace_host_process", ALL, |_, _| {
            let host = host_sleeper();
            Spec::probe(
                argv!["ptrace-attach", host.pid().to_string()],
                // full-access too: the allow-list leaves ptrace out, as a default `docker run`.
                eperm("ptrace"),
            )
            .keep(host)
        }),
        Case::new("ptrace_own_child", ALL, |_, _| {
            Spec::probe(argv!["ptrace-attach", "child"], eperm("ptrace"))
        }),
        Case::new("process_vm_readv_own_child", ALL, |_, _| {
            Spec::probe(
                argv!["process-vm-readv", "child"],
                eperm("process_vm_readv"),
            )
        }),
        Case::new("process_vm_readv_host_process", ALL, |_, _| {
            let host = host_sleeper();
            Spec::probe(
                argv!["process-vm-readv", host.pid().to_string()],
                eperm("process_vm_readv"),
            )
            .keep(host)
        }),
        Case::new("kill_host_process", ALL, |_, _| {
            let host = host_sleeper();
            Spec::probe(
                argv!["kill", host.pid().to_string(), "15"],
                err("ESRCH", "kill"),
            )
            .keep(host)
        }),
        // pid 1 is the container's init, running as the command's own user, in the container's
        // pid namespace. The init guard refuses any signal to pid 1 in the confined modes; full-access trusts
        // the command (the init runs as its user, so signalling it is allowed).
        Case::new("kill_init", ALL, |_, sb| {
            Spec::probe(
                argv!["kill", "1", "0"],
                sb.pick(eperm("kill"), eperm("kill"), ok()),
            )
        }),
        // /proc/1/root: the init runs as the same user but is not dumpable (its status socket
        // must stay out of the command's reach), so the link is refused, as natively.
        Case::new("proc_1_root", ALL, |_, _| {
            Spec::probe(argv!["read", "/proc/1/root/root"], err("EACCES", "open"))
        }),
        Case::new("proc_1_cmdline", ALL, |_, _| {
            Spec::probe(
                argv!["exec", "/bin/cat", "/proc/1/cmdline"],
                ok_with(vec![("exit", json!(0))]),
            )
            .after(|run| {
                if run.stderr.starts_with("/.ralph-init\0__container-init\0") {
                    Ok(())
                } else {
                    Err("/proc/1/cmdline is not ralph's container init".into())
                }
            })
        }),
        Case::new("proc_host_process_status", ALL, |_, _| {
            let host = host_sleeper();
            let path = PathBuf::from(format!("/proc/{}/status", host.pid()));
            Spec::probe(argv!["read", path], invisible(&path, "open")).keep(host)
        }),
        Case::new("proc_host_process_mem", ALL, |_, _| {
            let host = host_sleeper();
            let path = PathBuf::from(format!("/proc/{}/mem", host.pid()));
            Spec::probe(argv!["read", path], invisible(&path, "open")).keep(host)
        }),
        // The init's namespace file does not open (not dumpable), as natively.
        Case::new("setns_init_net", ALL, |_, _| {
            Spec::probe(argv!["setns", "/proc/1/ns/net"], err("EACCES", "open"))
        }),
        Case::new("setns_own_net", ALL, |_, _| {
            Spec::probe(argv!["setns", "/proc/self/ns/net"], eperm("setns"))
        }),
        Case::new("clone_newuser", ALL, |_, _| {
            Spec::probe(argv!["clone-newuser"], eperm("clone"))
        }),
        Case::new("clone3_enosys", ALL, |_, _| {
            Spec::probe(argv!["clone3"], err("ENOSYS", "clone3"))
        }),
        Case::new("chroot", ALL, |_, _| {
            Spec::probe(argv!["chroot", "/"], eperm("chroot"))
        }),
        Case::new("mount_tmpfs", ALL, |_, _| {
            Spec::probe(argv!["mount"], eperm("mount"))
        }),
        Case::new("umount_proc", ALL, |_, _| {
            Spec::probe(argv!["umount", "/proc"], eperm("umount2"))
        }),
        // Refused in every mode, full-access included (native full-access allows it): the
        // docker profile always denies io_uring.
        Case::new("io_uring", ALL, |_, _| {
            Spec::probe(argv!["io-uring"], eperm("io_uring_setup"))
        }),
        Case::new("fork_bomb_pids_limit", ALL, |_, _| {
            Spec::probe(
                argv!["fork-bomb", "1000"],
                ok_with(vec![("errno", json!("EAGAIN"))]),
            )
            .flags(argv!["--pids", "64"])
            .after(|run| {
                let forked = run.json().unwrap()["forked"].as_u64().unwrap_or(u64::MAX);
                if forked < 64 {
                    Ok(())
                } else {
                    Err(format!("forked {forked} processes with --pids 64"))
                }
            })
        }),
        // No terminal reaches a container (tty off, stdin /dev/null when ralph's is a terminal):
        // ENOTTY in full-access; the confined modes' guard refuses TIOCSTI before the kernel looks
        // at the descriptor (EPERM).
        Case::new("tiocsti_terminal_injection", ALL, |_, sb| {
            Spec::py(
                TIOCSTI,
                argv![],
                sb.pick(eperm("ioctl"), eperm("ioctl"), err("ENOTTY", "ioctl")),
            )
            .pty()
        }),
        Case::new("own_pid_namespace", ALL, |_, sb| {
            Spec::probe(
                argv!["whoami"],
                ok_with(vec![("uid", json!(agent_uid(sb))), ("ppid", json!(1))]),
            )
            .after(|run| {
                let pid = run.json().unwrap()["pid"].as_i64().unwrap_or(-1);
                if (2..10).contains(&pid) {
                    Ok(())
                } else {
                    Err(format!("the command is pid {pid}"))
                }
            })
        }),
    ];
    for kind in [
        "user", "mount", "net", "pid", "ipc", "uts", "cgroup", "time",
    ] {
        let name: &'static str = Box::leak(format!("unshare_{kind}").into_boxed_str());
        cases.push(Case::new(name, ALL, unshare_case(kind)));
    }
    cases
}

// ---------------------------------------------------------------------------------------------
// Privileges
// ---------------------------------------------------------------------------------------------

fn privileges() -> Vec<Case> {
    vec![
        Case::new("capabilities_empty", ALL, |_, _| {
            let z = json!("0000000000000000");
            Spec::probe(
                argv!["caps"],
                ok_with(vec![
                    ("CapInh", z.clone()),
                    ("CapPrm", z.clone()),
                    ("CapEff", z.clone()),
                    ("CapBnd", z.clone()),
                    ("CapAmb", z),
                ]),
            )
        }),
        Case::new("no_new_privs", ALL, |_, _| {
            Spec::probe(argv!["no-new-privs"], ok_with(vec![("value", json!(1))]))
        }),
        Case::new("seccomp_filter_active", ALL, |_, _| {
            Spec::probe(
                argv!["status-field", "Seccomp"],
                ok_with(vec![("value", json!("2"))]),
            )
        }),
        // The image's setuid-root passwd: no_new_privs ignores the bit.
        Case::new("setuid_binary", ALL, |_, sb| {
            Spec::probe(
                argv!["setuid-exec", "/usr/bin/passwd"],
                ok_with(vec![
                    ("ruid", json!(agent_uid(sb))),
                    ("euid", json!(agent_uid(sb))),
                    ("capeff", json!("0000000000000000")),
                ]),
            )
        }),
        Case::new("bpf", ALL, |_, _| Spec::probe(argv!["bpf"], eperm("bpf"))),
        Case::new("perf_event_open", ALL, |_, _| {
            Spec::probe(argv!["perf-event-open"], eperm("perf_event_open"))
        }),
        Case::new("keyctl", ALL, |_, _| {
            Spec::probe(argv!["keyctl"], eperm("keyctl"))
        }),
        Case::new("add_key", ALL, |_, _| {
            Spec::probe(argv!["add-key"], eperm("add_key"))
        }),
        Case::new("request_key", ALL, |_, _| {
            Spec::probe(argv!["request-key"], eperm("request_key"))
        }),
        Case::new("userfaultfd", ALL, |_, _| {
            Spec::probe(argv!["userfaultfd"], eperm("userfaultfd"))
        }),
        Case::new("personality_change", ALL, |_, _| {
            Spec::probe(
                argv!["personality", "0x0040000"],
                // full-access too, as a default `docker run` (native full-access allows it).
                eperm("personality"),
            )
        }),
        Case::new("personality_query", ALL, |_, _| {
            Spec::probe(
                argv!["personality", "query"],
                ok_with(vec![("previous", json!(0))]),
            )
        }),
        Case::new("kexec_load", ALL, |_, _| {
            Spec::probe(argv!["kexec-load"], eperm("kexec_load"))
        }),
        Case::new("init_module", ALL, |_, _| {
            Spec::probe(argv!["init-module"], eperm("init_module"))
        }),
        // The profile allows only x86_64 syscalls: an x32-ABI call meets the engine's
        // bad-architecture action, which kills the process with SIGSYS (exit 128 + 31; native
        // answers EPERM). Refused either way, and more loudly here.
        Case::new("x32_syscall", ALL, |_, _| {
            Spec::cmd(
                argv![
                    PYTHON,
                    "-c",
                    "import ctypes; ctypes.CDLL(None).syscall(0x40000000 + 39); print('survived')"
                ],
                exit(159),
            )
            .after(|run| {
                if run.stdout.contains("survived") {
                    Err("the x32 syscall returned".into())
                } else {
                    Ok(())
                }
            })
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// What must keep working
// ---------------------------------------------------------------------------------------------

fn keeps_working() -> Vec<Case> {
    vec![
        Case::new("git_status", ALL, |w, _| {
            if git_world(w).is_none() {
                return Spec::skip("git is not installed on the host");
            }
            std::fs::write(w.ws.join("untracked.txt"), "x\n").unwrap();
            // The image's git; the host made the repository.
            Spec::cmd(
                argv!["/usr/bin/git", "status", "--porcelain"],
                exit_with(0, &["?? untracked.txt"], &[]),
            )
        }),
        Case::new("git_commit", WW_FA, |w, _| {
            let Some(git) = git_world(w) else {
                return Spec::skip("git is not installed on the host");
            };
            std::fs::write(w.ws.join("new.txt"), "x\n").unwrap();
            let ws = w.ws.clone();
            let root = w.root.clone();
            Spec::sh(
                r#"/usr/bin/git add new.txt && /usr/bin/git -c user.name=agent -c user.email=agent@example.invalid commit -q -m "from the container""#,
                argv![],
                exit(0),
            )
            .after(move |_| {
                let subject = git_on_host(&git, &ws, &root, &["log", "-1", "--format=%s"])?;
                if subject == "from the container" {
                    Ok(())
                } else {
                    Err(format!("the host's last commit is {subject:?}"))
                }
            })
        }),
        Case::new("python3_runs", ALL, |_, _| {
            Spec::cmd(argv![PYTHON, "-c", "print(1)"], exit_with(0, &["1\n"], &[]))
        }),
        Case::new("exit_status_passthrough", ALL, |_, _| {
            Spec::cmd(argv!["/bin/sh", "-c", "exit 42"], exit(42))
        }),
        // The container's init reports the failed exec: 127 and 126, like a shell (and native).
        Case::new("command_not_found", ALL, |_, _| {
            Spec::cmd(
                argv!["/nonexistent/ralph-escape-command"],
                exit_with(127, &[], &["No such file or directory"]),
            )
        }),
        Case::new("command_not_executable", ALL, |w, _| {
            let file = w.ws.join("script.txt");
            std::fs::write(&file, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
            Spec::cmd(argv![file], exit(126))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Failing closed
// ---------------------------------------------------------------------------------------------

fn not_run(marker: PathBuf) -> impl FnOnce(&Run) -> Result<(), String> {
    move |run| {
        if !run.stdout.is_empty() {
            return Err(format!("the command printed {:?}", run.stdout));
        }
        exists_iff(marker, false)(run)
    }
}

fn fails_closed() -> Vec<Case> {
    vec![
        Case::new("memory_limit_enforced_or_refused", ALL, |_, _| {
            Spec::probe(
                argv!["alloc", "16"],
                ok_with(vec![("megabytes", json!(16))]),
            )
            .flags(argv!["--memory", "64M"])
        }),
        Case::new("image_missing_fails_closed", ALL, |w, _| {
            let marker = w.ws.join("marker");
            Spec::probe(
                argv!["write", marker],
                exit_with(
                    69,
                    &[],
                    &[
                        "sandbox unavailable: cannot enforce the container image `ralph-no-such-image:0`",
                        "images/build-offline.sh",
                    ],
                ),
            )
            .flags(argv!["--image", "ralph-no-such-image:0"])
            .after(not_run(marker))
        }),
        Case::new("engine_missing_fails_closed", ALL, |w, _| {
            let marker = w.ws.join("marker");
            Spec::probe(
                argv!["write", marker],
                exit_with(
                    69,
                    &[],
                    &["sandbox unavailable: cannot enforce the docker backend (container engine)"],
                ),
            )
            .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
            .after(not_run(marker))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Cases of the native matrix that do not apply to a container
// ---------------------------------------------------------------------------------------------

/// (native case, why it does not apply to the docker backend).
const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "read_etc_shadow",
        "the container's /etc is the image's: the host's /etc/shadow is not in the container at all (host files being absent is what read_root_home, read_other_home and read_host_tmp_file assert); the image's own shadow holds only the image's system accounts",
    ),
    (
        "read_hidden_ssl_private",
        "same as read_etc_shadow: the host's /etc/ssl/private is not in the container; nothing is masked because nothing of the host's /etc is mounted",
    ),
    (
        "landlock_second_layer_proc_write",
        "there is no Landlock layer in a container; the mounts, the read-only root, the seccomp profile and the dropped capabilities are its layers",
    ),
    (
        "root_lists_only_bound_trees",
        "the container's / is the image's root, not a root assembled from bound host trees; write_root_new_file and mkdir_root show it is read-only",
    ),
    (
        "dev_holds_only_allowed_devices",
        "the container's /dev is the engine's standard minimal set (null, zero, full, random, urandom, tty, console, pts, ptmx, shm, mqueue and the fd links); no host device is added",
    ),
    (
        "gcc_compile_and_run",
        "the agent base image has no compiler (images/Dockerfile: git, python3, ca-certificates); images built FROM it add toolchains",
    ),
    (
        "no_landlock_fails_closed",
        "a container needs no Landlock; the docker backend's fail-closed paths are image_missing_fails_closed and engine_missing_fails_closed",
    ),
    (
        "old_landlock_abi_fails_closed",
        "as no_landlock_fails_closed",
    ),
];

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

fn all_cases() -> Vec<Case> {
    let mut all = filesystem();
    all.extend(view());
    all.extend(protected());
    all.extend(network());
    all.extend(processes());
    all.extend(privileges());
    all.extend(keeps_working());
    all.extend(fails_closed());
    all
}

/// The names of the native matrix's cases, read from its source.
fn native_case_names() -> Vec<String> {
    let src = include_str!("sandbox_escape.rs");
    let mut names: Vec<String> = src
        .split("Case::new(\"")
        .skip(1)
        .filter_map(|s| s.split('"').next().map(str::to_owned))
        .collect();
    names.extend(
        [
            "user", "mount", "net", "pid", "ipc", "uts", "cgroup", "time",
        ]
        .map(|k| format!("unshare_{k}")),
    );
    names
}

#[test]
fn every_native_case_is_ported_or_explained() {
    let docker: Vec<&str> = all_cases().iter().map(|c| c.name).collect();
    let native = native_case_names();
    assert_eq!(
        native.len(),
        136,
        "the native matrix changed: update this table"
    );
    let mut missing = Vec::new();
    for n in &native {
        let ported = docker.contains(&n.as_str());
        let na = NOT_APPLICABLE.iter().any(|(x, _)| x == n);
        assert!(!(ported && na), "{n} is both ported and not applicable");
        if !ported && !na {
            missing.push(n.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "native cases neither ported nor explained: {missing:?}"
    );
    for (n, why) in NOT_APPLICABLE {
        assert!(native.iter().any(|x| x == n), "{n} is not a native case");
        assert!(why.len() > 20, "{n}: say why");
    }
    let (cases, runs) = check_table(&all_cases());
    eprintln!(
        "docker matrix: {cases} cases ({} native cases not applicable), {runs} case runs",
        NOT_APPLICABLE.len()
    );
}

#[test]
fn docker_escape_filesystem() {
    docker_matrix("docker filesystem", &filesystem());
}

#[test]
fn docker_escape_filesystem_view() {
    docker_matrix("docker filesystem view", &view());
}

#[test]
fn docker_escape_protected_paths() {
    docker_matrix("docker protected paths", &protected());
}

#[test]
fn docker_escape_network() {
    docker_matrix("docker network", &network());
}

#[test]
fn docker_escape_processes() {
    docker_matrix("docker processes", &processes());
}

#[test]
fn docker_escape_privileges() {
    docker_matrix("docker privileges", &privileges());
}

#[test]
fn docker_keeps_working() {
    docker_matrix("docker keeps working", &keeps_working());
}

#[test]
fn docker_fails_closed() {
    docker_matrix("docker fails closed", &fails_closed());
}
