//! The sandbox escape matrix: every escape attempt of the issue, run with `ralph sandbox exec`
//! and the probe in every sandbox mode where it applies, each asserting the exact result (errno
//! and failing step, or exit code), plus what must keep working and the fail-closed paths.
//!
//! Nothing here needs root: CI runs this file once as root and once as an unprivileged user.
//! Where the right answer differs between the two (e.g. full-access reading `/etc/shadow`), the
//! case asserts the right one for each. The cases that need root (cgroup limits, output flood,
//! timeout) are in `tests/it/sandbox_limits.rs`.
//!
//! Layout: one table of cases per group (a `Case` is a name, the sandbox variants it runs in and
//! a builder of what to run and expect, see `tests/it/escape/mod.rs`), one `#[test]` per group that
//! runs its table, and one `#[ignore = "BUG: …"]` test per known sandbox bug.
//!
//! What the filesystem modes (read-only, workspace-write) look like from inside, and so which
//! errno each refusal has: the sandbox has a root of its own holding only bind mounts of the
//! policy's readable trees (`/usr`, `/etc`, …), the workspace, the `--read`/`--write` paths and
//! the private HOME and TMPDIR, plus a private `/dev`, `/tmp` and `/proc`. So
//! - a host path that is not bound does not exist inside: ENOENT. That invisibility is the
//!   block; every such case asserts on the host that the target exists, so a target that is
//!   simply missing can never pass as blocked (see [`invisible`]);
//! - a write of any kind to a visible read-only tree (or to the root itself) meets a read-only
//!   mount first: EROFS (Landlock, the second layer, is never reached; `landlock_second_layer_*`
//!   shows it still refuses where a mount is writable but its rules are not);
//! - a rename or link between two bound trees crosses mounts: EXDEV.
//!
//! full-access keeps the host's filesystem but gets a fresh `/proc` (only the sandbox's own
//! processes) and a read-only `/sys` (the cgroup limits hold even for uid 0).
//!
//! Worlds (workspace `ws/` plus an outside directory `out/`) live in `/var/tmp`, not `/tmp`: the
//! sandbox's `/tmp` is its private TMPDIR, so paths under the host's `/tmp` are either invisible
//! or bound onto it specially; the `tmp_*` cases cover a world under `/tmp` explicitly.
//!
//! Not covered here: the runner's state directory (no state dir exists for `sandbox exec`; its
//! visibility to `ralph run` rounds is tested elsewhere).

use crate::common;

use crate::escape;

use std::collections::BTreeSet;
use std::io::BufRead as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use escape::*;
use serde_json::{Value, json};

fn eacces(step: &'static str) -> Expect {
    err("EACCES", step)
}

fn eperm(step: &'static str) -> Expect {
    err("EPERM", step)
}

/// A write to a read-only mount (a visible read-only tree, the root, a protected path).
fn erofs(step: &'static str) -> Expect {
    err("EROFS", step)
}

/// A rename or link from one mount to another.
fn exdev(step: &'static str) -> Expect {
    err("EXDEV", step)
}

/// The refusal of a target the filesystem modes do not bind: it does not exist inside (ENOENT at
/// `step`). The invisibility is the block, so the target must exist on the host (asserted here,
/// while the case is built): a missing target can never pass as blocked.
fn invisible(path: &Path, step: &'static str) -> Expect {
    assert!(
        path.symlink_metadata().is_ok(),
        "{} does not exist on the host, so ENOENT in the sandbox would prove nothing",
        path.display()
    );
    err("ENOENT", step)
}

/// `confined` in read-only and workspace-write, `full` in full-access.
fn confined_or(sb: Sb, confined: Expect, full: Expect) -> Expect {
    if sb.confined() { confined } else { full }
}

/// The outside file's content after a write attempt: untouched unless full-access.
fn outside_file_after(sb: Sb) -> &'static str {
    if sb.confined() {
        "outside\n"
    } else {
        "probe\n"
    }
}

// ---------------------------------------------------------------------------------------------
// Filesystem: writes outside the workspace, reads of secrets, what must keep working
// ---------------------------------------------------------------------------------------------

fn filesystem() -> Vec<Case> {
    vec![
        // `out/` is visible through `--read`, as a read-only mount, which refuses the create.
        Case::new("write_outside_absolute", ALL, |w, sb| {
            let target = w.out.join("new");
            Spec::probe(argv!["write", target], confined_or(sb, erofs("open"), ok()))
                .flags(argv!["--read", w.out])
                .visible(argv!["readdir", w.out])
                .after(exists_iff(target, !sb.confined()))
        }),
        // `/etc` is a read-only mount. Never attempted in full-access, where it would succeed as
        // root.
        Case::new("write_etc", CONFINED, |_, _| {
            let target = PathBuf::from(format!("/etc/{}", unique("ralph-escape")));
            assert!(Path::new("/etc").is_dir() && !target.exists());
            let check = target.clone();
            Spec::probe(argv!["write", target], erofs("open"))
                .visible(argv!["readdir", "/etc"])
                .after(move |_| {
                    if check.exists() {
                        let _ = std::fs::remove_file(&check);
                        return Err(format!("{} was created on the host", check.display()));
                    }
                    Ok(())
                })
        }),
        Case::new("write_dotdot_from_workspace", ALL, |w, sb| {
            let target = format!("{}/../out/f", w.ws.display());
            Spec::probe(argv!["write", target], confined_or(sb, erofs("open"), ok()))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", target])
                .after(content_is(w.outside_file(), outside_file_after(sb)))
        }),
        Case::new("write_through_workspace_symlink", ALL, |w, sb| {
            let link = w.ws.join("link");
            std::os::unix::fs::symlink(w.outside_file(), &link).unwrap();
            Spec::probe(argv!["write", link], confined_or(sb, erofs("open"), ok()))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", link])
                .after(content_is(w.outside_file(), outside_file_after(sb)))
        }),
        // read-only: the workspace is a read-only mount (EROFS). workspace-write: the link would
        // cross from the `out/` mount into the workspace's (EXDEV, before Landlock's REFER check
        // is reached).
        Case::new("hardlink_outside_file_into_workspace", ALL, |w, sb| {
            let link = w.ws.join("hl");
            Spec::probe(
                argv!["link", w.outside_file(), link],
                sb.pick(erofs("linkat"), exdev("linkat"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["read", w.outside_file()])
            .after(exists_iff(link, !sb.confined()))
        }),
        // The workspace and `out/` are different mounts.
        Case::new("rename_workspace_to_outside", ALL, |w, sb| {
            let from = w.ws.join("a");
            std::fs::write(&from, "a\n").unwrap();
            let to = w.out.join("a");
            Spec::probe(
                argv!["rename", from, to],
                confined_or(sb, exdev("renameat2"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["readdir", w.out])
            .after(exists_iff(to, !sb.confined()))
        }),
        Case::new("rename_outside_to_workspace", ALL, |w, sb| {
            let to = w.ws.join("f");
            Spec::probe(
                argv!["rename", w.outside_file(), to],
                confined_or(sb, exdev("renameat2"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["read", w.outside_file()])
            .after(exists_iff(w.outside_file(), sb.confined()))
        }),
        // The command's directory is the workspace, so this is `out/f` again.
        Case::new("write_proc_self_cwd_dotdot", ALL, |w, sb| {
            let target = "/proc/self/cwd/../out/f";
            Spec::probe(argv!["write", target], confined_or(sb, erofs("open"), ok()))
                .flags(argv!["--read", w.out])
                .visible(argv!["read", target])
                .after(content_is(w.outside_file(), outside_file_after(sb)))
        }),
        // Inside, `/dev/shm` is no tmpfs but a directory of the read-only root: the path down to
        // the private HOME and TMPDIR, which `sandbox exec` keeps in `/dev/shm` whenever the user
        // can write it (the condition of this case). Nothing can be created there.
        Case::new("write_dev_shm", ALL, |_, sb| {
            let shm = Path::new("/dev/shm");
            if nix::unistd::access(shm, nix::unistd::AccessFlags::W_OK).is_err() {
                return Spec::skip("/dev/shm is missing or not writable on this host");
            }
            let target = shm.join(unique("ralph-escape"));
            let check = target.clone();
            Spec::probe(argv!["write", target], confined_or(sb, erofs("open"), ok())).after(
                move |_| {
                    let exists = check.exists();
                    let _ = std::fs::remove_file(&check);
                    if exists != sb.confined() {
                        Ok(())
                    } else {
                        Err(format!("{} exists afterwards: {exists}", check.display()))
                    }
                },
            )
        }),
        // The outside file is the test user's (mode 0644): a root runner's round is another
        // uid and has no write permission (EACCES); an unprivileged runner's round is its owner
        // and meets the read-only mount (EROFS).
        Case::new("truncate_outside", ALL, |w, sb| {
            let refused = if is_root() {
                err("EACCES", "truncate")
            } else {
                erofs("truncate")
            };
            Spec::probe(
                argv!["truncate", w.outside_file()],
                confined_or(sb, refused, ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["read", w.outside_file()])
            .after(content_is(
                w.outside_file(),
                if sb.confined() { "outside\n" } else { "" },
            ))
        }),
        Case::new("mkdir_outside", ALL, |w, sb| {
            let target = w.out.join("d");
            Spec::probe(
                argv!["mkdir", target],
                confined_or(sb, erofs("mkdir"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["readdir", w.out])
            .after(exists_iff(target, !sb.confined()))
        }),
        Case::new("unlink_outside", ALL, |w, sb| {
            Spec::probe(
                argv!["unlink", w.outside_file()],
                confined_or(sb, erofs("unlink"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["read", w.outside_file()])
            .after(exists_iff(w.outside_file(), sb.confined()))
        }),
        Case::new("symlink_created_outside", ALL, |w, sb| {
            let link = w.out.join("l");
            Spec::probe(
                argv!["symlink", w.ws, link],
                confined_or(sb, erofs("symlinkat"), ok()),
            )
            .flags(argv!["--read", w.out])
            .visible(argv!["readdir", w.out])
            .after(exists_iff(link, !sb.confined()))
        }),
        // Without `--read`, a directory outside the readable trees is not bound: it does not
        // exist inside.
        Case::new("read_outside_unlisted", ALL, |w, sb| {
            let f = w.outside_file();
            Spec::probe(
                argv!["read", f],
                confined_or(sb, invisible(&f, "open"), ok()),
            )
        }),
        // The same file with `--read` (so the ENOENT above is the missing bind, nothing else).
        Case::new("read_outside_listed", ALL, |w, _| {
            Spec::probe(
                argv!["read", w.outside_file()],
                ok_with(vec![("bytes", json!(8))]),
            )
            .flags(argv!["--read", w.out])
        }),
        Case::new("exec_outside_binary", ALL, |w, sb| {
            let bin = w.out.join("true");
            std::fs::copy("/bin/true", &bin).expect("/bin/true");
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
            Spec::probe(
                argv!["exec", bin],
                confined_or(
                    sb,
                    invisible(&bin, "execve"),
                    ok_with(vec![("exit", json!(0))]),
                ),
            )
        }),
        Case::new("read_root_home", ALL, |_, sb| {
            let root = Path::new("/root");
            assert!(root.is_dir(), "/root does not exist");
            Spec::probe(
                argv!["readdir", root],
                confined_or(
                    sb,
                    invisible(root, "open"),
                    like_host(argv!["readdir", root]),
                ),
            )
        }),
        Case::new("read_other_home", ALL, |_, sb| {
            let Some((home, keep)) = other_home() else {
                return Spec::skip("no other user's home directory readable on this host");
            };
            Spec::probe(
                argv!["readdir", home],
                confined_or(
                    sb,
                    invisible(&home, "open"),
                    like_host(argv!["readdir", home]),
                ),
            )
            .keep(keep)
        }),
        // A mode-000 file is mounted over it; full-access sees what the runner's user sees.
        Case::new("read_etc_shadow", ALL, |_, sb| {
            assert!(
                Path::new("/etc/shadow").is_file(),
                "/etc/shadow does not exist"
            );
            Spec::probe(
                argv!["read", "/etc/shadow"],
                confined_or(sb, eacces("open"), like_host(argv!["read", "/etc/shadow"])),
            )
        }),
        // An empty mode-000 tmpfs is mounted over it.
        Case::new("read_hidden_ssl_private", ALL, |_, sb| {
            let dir = Path::new("/etc/ssl/private");
            if !dir.is_dir() {
                return Spec::skip("/etc/ssl/private does not exist on this host");
            }
            Spec::probe(
                argv!["readdir", dir],
                confined_or(sb, eacces("open"), like_host(argv!["readdir", dir])),
            )
        }),
        // The sandbox's /tmp is its private TMPDIR: a host file in /tmp is simply not there.
        Case::new("read_host_tmp_file", ALL, |_, sb| {
            let file = tempfile::Builder::new()
                .prefix("ralph-escape-")
                .tempfile_in("/tmp")
                .unwrap();
            let path = file.path().to_owned();
            Spec::probe(
                argv!["read", path],
                confined_or(sb, invisible(&path, "open"), ok()),
            )
            .keep(file)
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
        // Writes land in the private /tmp, not in the host's (full-access would write the host's).
        Case::new("write_slash_tmp_is_private", CONFINED, |_, _| {
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
            assert!(Path::new("/etc/passwd").is_file());
            Spec::probe(argv!["read", "/etc/passwd"], ok())
        }),
        Case::new("exec_system_binary", ALL, |_, _| {
            assert!(Path::new("/bin/true").is_file());
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
        // The confined modes' set-id guard refuses device nodes before the read-only mount is
        // looked at; full-access: no CAP_MKNOD.
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
        // A unix socket of a host service outside every readable tree (think
        // /run/user/UID/bus): Landlock on this kernel has no right for connecting to a named
        // socket, but the socket is not bound into the sandbox's root, so there is nothing to
        // connect to.
        Case::new("unix_connect_outside_socket", ALL, |w, sb| {
            let path = w.out.join("l.sock");
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            // Prove it accepts from outside the sandbox, then drain that connection.
            std::os::unix::net::UnixStream::connect(&path).unwrap();
            listener.accept().unwrap();
            listener.set_nonblocking(true).unwrap();
            let expect = confined_or(sb, invisible(&path, "connect"), ok());
            Spec::py(UNIX_CONNECT, argv![path], expect).after(move |_| {
                let accepted = listener.accept().is_ok();
                if accepted != sb.confined() {
                    Ok(())
                } else {
                    Err(format!(
                        "the host listener accepted a connection: {accepted}"
                    ))
                }
            })
        }),
        // chmod(2), utimensat(2) and setxattr(2) have no Landlock right on this kernel: the
        // own root is what stops them. Outside every bound tree the file is not there at all;
        // in a visible read-only tree (`/etc/passwd`, which root could change on the host) the
        // read-only mount refuses. The `*_system_file` cases never run in full-access, where
        // root would change the host's file.
        Case::new("chmod_outside", ALL, |w, sb| {
            let f = w.outside_file();
            let expect = confined_or(sb, invisible(&f, "chmod"), ok());
            Spec::probe(argv!["chmod", f, "777"], expect).after(move |_| {
                let mode = mode_of(&f);
                let want = if sb.confined() { 0o644 } else { 0o777 };
                if mode == want {
                    Ok(())
                } else {
                    Err(format!("{} has mode {mode:o} afterwards", f.display()))
                }
            })
        }),
        Case::new("chmod_system_file", CONFINED, |_, _| {
            let f = PathBuf::from(SYSTEM_FILE);
            let before = mode_of(&f);
            Spec::probe(argv!["chmod", f, "777"], erofs("chmod"))
                .visible(argv!["read", f])
                .after(move |_| match mode_of(&f) {
                    m if m == before => Ok(()),
                    m => Err(format!("{SYSTEM_FILE} went from mode {before:o} to {m:o}")),
                })
        }),
        Case::new("utime_outside", ALL, |w, sb| {
            let f = w.outside_file();
            let before = std::fs::metadata(&f).unwrap().mtime();
            let expect = confined_or(sb, invisible(&f, "utimensat"), ok());
            Spec::py(UTIME, argv![f], expect).after(move |_| {
                let after = std::fs::metadata(&f).unwrap().mtime();
                if (after == before) == sb.confined() {
                    Ok(())
                } else {
                    Err(format!(
                        "mtime of {} went from {before} to {after}",
                        f.display()
                    ))
                }
            })
        }),
        Case::new("utime_system_file", CONFINED, |_, _| {
            let f = PathBuf::from(SYSTEM_FILE);
            let before = std::fs::metadata(&f).unwrap().mtime();
            Spec::py(UTIME, argv![f], erofs("utimensat"))
                .visible(argv!["read", f])
                .after(move |_| {
                    let after = std::fs::metadata(&f).unwrap().mtime();
                    if after == before {
                        Ok(())
                    } else {
                        Err(format!(
                            "mtime of {SYSTEM_FILE} went from {before} to {after}"
                        ))
                    }
                })
        }),
        Case::new("setxattr_outside", ALL, |w, sb| {
            let f = w.outside_file();
            // The host filesystem must support user xattrs for the attempt to mean anything.
            let scratch = w.out.join("xattr-check");
            std::fs::write(&scratch, "x").unwrap();
            let host = host_py(SETXATTR, &[scratch.as_os_str()]);
            if host["ok"] != Value::Bool(true) {
                return Spec::skip(format!("no user xattrs on the host filesystem: {host}"));
            }
            let expect = confined_or(sb, invisible(&f, "setxattr"), ok());
            Spec::py(SETXATTR, argv![f], expect).after(move |_| {
                let got = host_py(GETXATTR, &[f.as_os_str()]);
                let set = got["ok"] == Value::Bool(true);
                if set != sb.confined() {
                    Ok(())
                } else {
                    Err(format!(
                        "user.ralph_escape on the host file afterwards: {got}"
                    ))
                }
            })
        }),
        Case::new("setxattr_system_file", CONFINED, |_, _| {
            let f = PathBuf::from(SYSTEM_FILE);
            let before = host_py(GETXATTR, &[f.as_os_str()]);
            assert_ne!(before["ok"], true, "{SYSTEM_FILE} has the xattr already");
            Spec::py(SETXATTR, argv![f], erofs("setxattr"))
                .visible(argv!["read", f])
                .after(move |_| {
                    let got = host_py(GETXATTR, &[f.as_os_str()]);
                    if got["ok"] == Value::Bool(true) {
                        Err(format!(
                            "user.ralph_escape on {SYSTEM_FILE} afterwards: {got}"
                        ))
                    } else {
                        Ok(())
                    }
                })
        }),
        // A workspace under the host's /tmp is bound onto the private /tmp (which is writable),
        // and bound read-only in read-only mode.
        Case::new("tmp_workspace_read_only", ONLY_RO, |_, _| {
            let w = World::in_host_tmp();
            let target = w.ws.join("new");
            Spec::probe(argv!["write", target], erofs("open"))
                .ws(&w.ws)
                .visible(argv!["readdir", w.ws])
                .after(exists_iff(target, false))
                .keep(w)
        }),
        // Same for a `--read` directory under the host's /tmp, in both filesystem modes.
        Case::new("tmp_read_path_not_writable", CONFINED, |_, _| {
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
        // `ralph` itself has the outside directory open on descriptor 7 (not close-on-exec):
        // the command sees only 0, 1, 2 and the directory being listed (plus `.` and `..`).
        Case::new("no_inherited_descriptors", ALL, |w, _| {
            Spec::probe(
                argv!["readdir", "/proc/self/fd"],
                ok_with(vec![("entries", json!(6))]),
            )
            .inherit(&w.out)
        }),
        // The second layer. `/proc` is a writable mount (procfs) that Landlock's rules grant
        // only reading: writing the process's own `comm` (harmless, allowed by procfs) is
        // refused by Landlock alone. full-access has no Landlock.
        Case::new("landlock_second_layer_proc_write", ALL, |_, sb| {
            Spec::probe(
                argv!["write", "/proc/self/comm"],
                confined_or(sb, eacces("open"), ok()),
            )
            .visible(argv!["read", "/proc/self/comm"])
        }),
    ]
}

/// A system file of a visible read-only tree that root could change on the host.
const SYSTEM_FILE: &str = "/etc/passwd";

/// Another user's home directory, readable on the host: one this test creates under /home when
/// it can (root), else an existing one.
fn other_home() -> Option<(PathBuf, Option<tempfile::TempDir>)> {
    let home = Path::new("/home");
    if !home.is_dir() {
        return None;
    }
    if nix::unistd::access(home, nix::unistd::AccessFlags::W_OK).is_ok() {
        let dir = tempfile::Builder::new()
            .prefix("ralph-escape-user-")
            .tempdir_in(home)
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "private\n").unwrap();
        return Some((dir.path().to_owned(), Some(dir)));
    }
    let mine = std::env::var_os("HOME").map(PathBuf::from);
    std::fs::read_dir(home)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| Some(p) != mine.as_ref())
        .find(|p| p.is_dir() && std::fs::read_dir(p).is_ok())
        .map(|p| (p, None))
}

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

const GETXATTR: &str = "\
try:
    v = os.getxattr(sys.argv[1], 'user.ralph_escape')
except OSError as e:
    fail(e, 'getxattr')
out(True, value=v.decode())";

const TIOCSTI: &str = "\
import fcntl, termios
try:
    fcntl.ioctl(0, termios.TIOCSTI, b'#')
except OSError as e:
    fail(e, 'ioctl')
out(True)";

const X32_GETPID: &str = "\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
if libc.syscall(0x40000000 + 39) < 0:
    fail(OSError(ctypes.get_errno(), ''), 'syscall')
out(True)";

/// Runs a Python snippet on the host (harmless ones only).
fn host_py(body: &str, args: &[&std::ffi::OsStr]) -> Value {
    let out = Command::new(PYTHON)
        .arg("-c")
        .arg(py_script(body))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "host python: {e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

// ---------------------------------------------------------------------------------------------
// The filesystem view: the own root of the filesystem modes, /proc and /sys of every mode
// ---------------------------------------------------------------------------------------------

/// The readable trees of the read-only and workspace-write policies (`policies/*.toml`); each
/// one that exists on the host is bound at its own path (a top-level symlink such as
/// `/bin -> usr/bin` is recreated as a symlink).
const POLICY_TREES: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/run/systemd/resolve",
    "/sys/devices/system/cpu",
    "/sys/fs/cgroup",
];

/// The devices of the policies' private `/dev`, and the links the sandbox adds there.
const POLICY_DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
const DEV_LINKS: &[&str] = &["fd", "stdin", "stdout", "stderr"];

/// Lists the directory `sys.argv[1]`; says where HOME and TMPDIR are.
const LISTDIR: &str = "\
try:
    names = sorted(os.listdir(sys.argv[1]))
except OSError as e:
    fail(e, 'listdir')
out(True, entries=names, home=os.environ.get('HOME', ''), tmpdir=os.environ.get('TMPDIR', ''))";

/// The pids in `/proc`, and the command's own.
const PROC_PIDS: &str = "\
try:
    pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
except OSError as e:
    fail(e, 'listdir')
out(True, pids=pids, me=os.getpid())";

/// The first component of an absolute path (`/var/tmp/x` → `var`).
fn top(path: &Path) -> Option<String> {
    path.components().find_map(|c| match c {
        Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
        _ => None,
    })
}

/// The first component of `path` below `dir` (`/dev/shm/x`, `/dev` → `shm`).
fn first_below(path: &Path, dir: &Path) -> Option<String> {
    top(&Path::new("/").join(path.strip_prefix(dir).ok()?))
}

/// The `entries` the listing printed, against what must be there: the difference both ways.
fn entries_are(run: &Run, want: &BTreeSet<String>) -> Result<(), String> {
    let j = run.json().ok_or("no probe line")?;
    let got: BTreeSet<String> = j["entries"]
        .as_array()
        .ok_or("no entries")?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let extra: Vec<_> = got.difference(want).collect();
    let missing: Vec<_> = want.difference(&got).collect();
    if extra.is_empty() && missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "entries {got:?}: not expected {extra:?}, missing {missing:?}"
        ))
    }
}

/// A field of the probe line, as a path.
fn field_path(run: &Run, key: &str) -> Result<PathBuf, String> {
    run.json()
        .and_then(|j| j[key].as_str().map(PathBuf::from))
        .filter(|p| p.is_absolute())
        .ok_or_else(|| format!("no absolute {key} in the probe line"))
}

/// The host's cgroup.procs of the pids controller (v1), or of the unified hierarchy (v2).
fn cgroup_procs() -> Option<PathBuf> {
    [
        "/sys/fs/cgroup/pids/cgroup.procs",
        "/sys/fs/cgroup/cgroup.procs",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
}

fn view() -> Vec<Case> {
    vec![
        // `/` holds exactly: the policy's readable trees that exist on this host, `/dev`,
        // `/proc` and `/tmp`, and the top directories of the workspace, of the probe's directory
        // (`--read`) and of the private HOME and TMPDIR. The world is under the host's /tmp, so
        // its workspace adds nothing: whatever else the host has at its top (`/root`, `/home`,
        // `/var`, `/boot`, …) must be absent (unless the probe's directory is under it).
        //
        // BUG: listing `/` (and `/dev`) is refused with EACCES: the plan's `LandlockPlan::list`
        // (`/`, `/dev`) is never turned into a Landlock rule (`sandbox/src/native/landlock.rs`
        // adds rules for `read`, `write` and `devices` only), so nothing grants READ_DIR there:
        //   ralph sandbox exec --mode workspace-write --workspace W -- ls /
        //   → ls: cannot open directory '/': Permission denied
        // With a READ_DIR rule for `list` added to a copy of the sandbox, this case and the next
        // pass as root and as nobody (and nothing else of the matrix changes).
        Case::new("root_lists_only_bound_trees", CONFINED, |_, _| {
            let w = World::in_host_tmp();
            for p in ["/root", "/var"] {
                assert!(Path::new(p).is_dir(), "{p} does not exist on the host");
            }
            let mut want: BTreeSet<String> = POLICY_TREES
                .iter()
                .map(Path::new)
                .filter(|p| p.symlink_metadata().is_ok())
                .filter_map(top)
                .collect();
            want.extend(["dev", "proc", "tmp"].map(String::from));
            want.extend(top(&w.ws));
            want.extend(top(&bin_dir()));
            Spec::py(LISTDIR, argv!["/"], ok())
                .ws(&w.ws)
                .after(move |run| {
                    let mut want = want;
                    for key in ["home", "tmpdir"] {
                        want.extend(top(&field_path(run, key)?));
                    }
                    entries_are(run, &want)
                })
                .keep(w)
        }),
        // `/dev` holds only the allowed devices and the fd links, plus the first directory of
        // the path to the private HOME and TMPDIR when they live under `/dev` (`sandbox exec`
        // keeps them in `/dev/shm`; that directory is part of the read-only root, see
        // `write_dev_shm`).
        Case::new("dev_holds_only_allowed_devices", CONFINED, |_, _| {
            let mut want: BTreeSet<String> = POLICY_DEVICES
                .iter()
                .filter(|d| Path::new("/dev").join(d).exists())
                .map(|d| (*d).to_owned())
                .collect();
            want.extend(DEV_LINKS.iter().map(|l| (*l).to_owned()));
            Spec::py(LISTDIR, argv!["/dev"], ok()).after(move |run| {
                let mut want = want;
                for key in ["home", "tmpdir"] {
                    want.extend(first_below(&field_path(run, key)?, Path::new("/dev")));
                }
                entries_are(run, &want)
            })
        }),
        // The root itself is a read-only mount: nothing can be created at the top.
        Case::new("write_root_new_file", CONFINED, |_, _| {
            let target = PathBuf::from("/").join(unique("ralph-escape"));
            Spec::probe(argv!["write", target], erofs("open")).after(exists_iff(target, false))
        }),
        Case::new("mkdir_root", CONFINED, |_, _| {
            let target = PathBuf::from("/").join(unique("ralph-escape"));
            Spec::probe(argv!["mkdir", target], erofs("mkdir")).after(exists_iff(target, false))
        }),
        // The Docker socket (whether or not this host has one): `/var` is not bound, so there
        // is no socket to connect to.
        Case::new("docker_socket_absent", CONFINED, |_, _| {
            Spec::py(
                UNIX_CONNECT,
                argv!["/var/run/docker.sock"],
                err("ENOENT", "connect"),
            )
        }),
        // Every mode mounts a fresh procfs for its pid namespace: the only processes are ralph's
        // init (pid 1) and the command.
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
        // `/sys` is read-only in every mode (the filesystem modes bind `/sys/fs/cgroup`
        // read-only; full-access remounts all of `/sys` read-only): even uid 0 cannot move a
        // process out of its cgroup, which would lift `--memory` and `--pids` (see
        // `tests/it/sandbox_limits.rs`).
        Case::new("sys_cgroup_procs_read_only", ALL, |_, _| {
            let Some(procs) = cgroup_procs() else {
                return Spec::skip("no pids cgroup.procs under /sys/fs/cgroup on this host");
            };
            Spec::probe(argv!["write", procs], erofs("open"))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Protected paths (workspace-write; in read-only the whole workspace is a read-only mount)
// ---------------------------------------------------------------------------------------------

fn git_world(w: &World) -> Option<PathBuf> {
    git_binary().map(|_| w.git_init())
}

/// Runs git on the host in `dir` (HOME `home`, no system config), for checks after a run.
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

/// The `.git/commondir` attack, as the agent's shell script: copy `.git` to `.evil`, give the
/// copy a pre-commit hook that writes the marker file `$1`, and point `.git/commondir` at it;
/// then prove with git (`$2`) that git now uses the copy. The exit status is 3.
const COMMONDIR_ATTACK: &str = r#"cp -a .git .evil &&
printf '#!/bin/sh\necho agent-hook > "%s"\n' "$1" > .evil/hooks/pre-commit &&
chmod 755 .evil/hooks/pre-commit &&
echo ../.evil > .git/commondir &&
test "$("$2" rev-parse --git-common-dir)" != .git &&
exit 3"#;

/// After a run that tried the commondir attack in the workspace `ws` (marker file `marker`):
/// `.git/commondir` is gone, the host's git uses `.git`, and a host commit runs no agent-made
/// hook. With `live`, the attack is then replayed on the host (the hook the git check removed
/// from `.evil` and the commondir written back) to prove that it would have worked: git uses
/// `.evil` and the commit runs the agent's hook.
fn host_git_unaffected(
    git: &Path,
    ws: &Path,
    home: &Path,
    marker: &Path,
    live: bool,
) -> Result<(), String> {
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
    if live {
        // `.evil` is a repository the run made in the workspace: the git check has replaced its
        // hooks (tests/it/git_boundary.rs). Replay the whole attack: the hook and the commondir.
        let hook = ws.join(".evil/hooks/pre-commit");
        if hook.symlink_metadata().is_ok() {
            return Err(format!(
                "{} (the run's hook) is still there after the run",
                hook.display()
            ));
        }
        std::fs::write(
            &hook,
            format!("#!/bin/sh\necho agent-hook > \"{}\"\n", marker.display()),
        )
        .map_err(|e| e.to_string())?;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
        std::fs::write(&commondir, "../.evil\n").map_err(|e| e.to_string())?;
        let common = git_on_host(git, ws, home, &["rev-parse", "--git-common-dir"])?;
        git_on_host(
            git,
            ws,
            home,
            &["commit", "-q", "--allow-empty", "-m", "replay"],
        )?;
        if common == ".git" || !marker.exists() {
            return Err(format!(
                "the replayed attack did nothing (common dir {common:?}): the case proves nothing"
            ));
        }
    }
    Ok(())
}

fn protected() -> Vec<Case> {
    vec![
        // read-only: the workspace is a read-only mount; workspace-write: the hooks are.
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
        // A mount point cannot be renamed.
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
        // Out of `.git` (which is bound onto itself, see `protect_git_dir_rename`), the rename
        // would cross mounts.
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
        // Within `.git`, the same mount: `.git/config` is a mount point.
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
        // The agent makes its own symlink to the hook and writes through it.
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
        // `.ralph` is missing: in workspace-write an empty read-only placeholder stands in for it
        // during the run (the policy's own placeholders may stay afterwards, empty); read-only
        // mounts none, and the read-only workspace refuses to create the directory.
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
                if !check.exists() {
                    return Ok(());
                }
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
        // Only the first missing component becomes the placeholder.
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
        // Renaming `.git` would move the protected mounts away with it, and the agent could put
        // a `.git` of its own, with any hooks and config, in its place. `.git`, the parent of
        // protected paths, is bound onto itself: a mount point cannot be renamed.
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
        // `.git/commondir` redirects git to another common directory, whose `hooks/` and `config`
        // git then uses, without touching the protected ones. workspace-write cannot refuse to
        // create it (git needs `.git` writable and refuses a commondir it cannot read), so the
        // agent CAN write it and use it during the run (the script proves that, and exits 3);
        // the supervisor removes it after the run. The property: `sandbox exec` keeps the exit
        // status, and the host's git is unaffected afterwards (the attack replayed on the host
        // shows it would not have been). In read-only the workspace is a read-only mount. The
        // report through `ralph run` is `git_commondir_created_in_a_round_is_journalled`.
        Case::new("protect_git_commondir", RO_WW, |w, sb| {
            let Some(git) = git_world(w) else {
                return Spec::skip("git is not installed");
            };
            let marker = w.root.join("agent-hook-ran");
            let spec = if sb == RO {
                Spec::probe(argv!["write", w.ws.join(".git/commondir")], erofs("open"))
            } else {
                Spec::sh(COMMONDIR_ATTACK, argv![marker, git], exit(3))
            };
            let (ws, home) = (w.ws.clone(), w.root.clone());
            spec.after(move |run| {
                let unaffected = host_git_unaffected(&git, &ws, &home, &marker, sb == WW);
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

/// A TCP listener on the host, proven reachable from outside the sandbox by the probe.
fn tcp_listener(addr: &str) -> Option<std::net::TcpListener> {
    let l = std::net::TcpListener::bind(addr).ok()?;
    let local = l.local_addr().unwrap();
    let j = host_probe(argv![
        "connect-tcp",
        local.ip().to_string(),
        local.port().to_string()
    ]);
    assert_eq!(j["ok"], true, "the probe cannot connect from the host: {j}");
    l.accept().unwrap();
    l.set_nonblocking(true).unwrap();
    Some(l)
}

/// After the run, the listener has a connection exactly when `want`.
fn accepted_iff(l: std::net::TcpListener, want: bool) -> impl FnOnce(&Run) -> Result<(), String> {
    move |_| {
        let got = l.accept().is_ok();
        if got == want {
            Ok(())
        } else {
            Err(format!(
                "the host listener {} a connection",
                if got { "got" } else { "did not get" }
            ))
        }
    }
}

fn tcp_case(sb: Sb, addr: &str) -> Spec {
    let Some(l) = tcp_listener(addr) else {
        return Spec::skip(format!("cannot listen on {addr} on this host"));
    };
    let local = l.local_addr().unwrap();
    let expect = if sb.network() { ok() } else { eperm("socket") };
    Spec::probe(
        argv![
            "connect-tcp",
            local.ip().to_string(),
            local.port().to_string()
        ],
        expect,
    )
    .after(accepted_iff(l, sb.network()))
}

fn network() -> Vec<Case> {
    vec![
        Case::new("tcp_connect_loopback", NETS, |_, sb| {
            tcp_case(sb, "127.0.0.1:0")
        }),
        Case::new("tcp_connect_ipv6_loopback", NETS, |_, sb| {
            tcp_case(sb, "[::1]:0")
        }),
        Case::new("udp_send_loopback", NETS, |_, sb| {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let port = s.local_addr().unwrap().port().to_string();
            let j = host_probe(argv!["connect-udp", "127.0.0.1", port]);
            assert_eq!(j["ok"], true, "{j}");
            let mut buf = [0u8; 8];
            assert_eq!(s.recv(&mut buf).unwrap(), 1);
            s.set_nonblocking(true).unwrap();
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["connect-udp", "127.0.0.1", port], expect).after(move |_| {
                let got = s.recv(&mut buf).is_ok();
                if got == sb.network() {
                    Ok(())
                } else {
                    Err(format!("host received a datagram: {got}"))
                }
            })
        }),
        // With the network, the answer is whatever the host gets (this host may have no DNS).
        Case::new("dns_lookup", NETS, |_, sb| {
            let expect = if sb.network() {
                like_host(argv!["dns", "example.com"])
            } else {
                eperm("socket")
            };
            Spec::probe(argv!["dns", "example.com"], expect)
        }),
        Case::new("bash_dev_tcp", NETS, |_, sb| {
            if !Path::new("/bin/bash").is_file() {
                return Spec::skip("/bin/bash is not installed");
            }
            let l = tcp_listener("127.0.0.1:0").unwrap();
            let port = l.local_addr().unwrap().port();
            let expect = if sb.network() {
                exit(0)
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
            .after(accepted_iff(l, sb.network()))
        }),
        Case::new("bind_loopback", NETS, |_, sb| {
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["bind-tcp", "127.0.0.1", "0"], expect)
        }),
        // No CAP_NET_RAW in any mode.
        Case::new("raw_socket", NETS, |_, _| {
            Spec::probe(argv!["raw-socket"], eperm("socket"))
        }),
        Case::new("netlink_socket", NETS, |_, sb| {
            let expect = if sb.network() { ok() } else { eperm("socket") };
            Spec::probe(argv!["netlink-socket"], expect)
        }),
        // The listener runs on the host. Abstract unix names belong to a network namespace: with
        // the network off the sandbox has its own, where the name does not exist
        // (ECONNREFUSED). With `--network full` in workspace-write the namespace is the host's
        // and Landlock's abstract-socket scoping refuses (EPERM). full-access connects.
        Case::new("abstract_unix_outside", NETS, |_, sb| {
            let name = unique("ralph-escape-abs");
            let listener = abstract_listener(&name);
            let expect = if sb == FA {
                ok()
            } else if sb == WW_NET {
                eperm("connect")
            } else {
                err("ECONNREFUSED", "connect")
            };
            Spec::probe(argv!["abstract-connect", name], expect).keep(listener)
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

/// `ralph-probe abstract-listen NAME` on the host, proven reachable from the host.
fn abstract_listener(name: &str) -> Guard {
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
    let j = host_probe(argv!["abstract-connect", name]);
    assert_eq!(
        j["ok"], true,
        "the host cannot connect to its own listener: {j}"
    );
    guard
}

// ---------------------------------------------------------------------------------------------
// Processes and namespaces
// ---------------------------------------------------------------------------------------------

fn unshare_case(kind: &'static str) -> Build {
    // A fn pointer per namespace kind, so each is a case of its own.
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

/// Seccomp refuses unshare(2) in the filesystem modes. full-access allows it: only a user
/// namespace can be made without capabilities.
fn unshare_spec(sb: Sb, kind: &str) -> Spec {
    let expect = if sb.confined() || kind != "user" {
        eperm("unshare")
    } else {
        ok()
    };
    Spec::probe(argv!["unshare", kind], expect)
}

fn processes() -> Vec<Case> {
    let mut cases = vec![
        // Seccomp refuses ptrace(2) before the pid is even looked up; in full-access the host's
        // process does not exist in the sandbox's pid namespace.
        Case::new("ptrace_host_process", ALL, |_, sb| {
            let host = host_sleeper();
            Spec::probe(
                argv!["ptrace-attach", host.pid().to_string()],
                confined_or(sb, eperm("ptrace"), err("ESRCH", "ptrace")),
            )
            .keep(host)
        }),
        Case::new("ptrace_own_child", ALL, |_, sb| {
            Spec::probe(
                argv!["ptrace-attach", "child"],
                confined_or(
                    sb,
                    eperm("ptrace"),
                    ok_with(vec![("detached", json!(true))]),
                ),
            )
        }),
        Case::new("process_vm_readv_own_child", ALL, |_, sb| {
            Spec::probe(
                argv!["process-vm-readv", "child"],
                confined_or(
                    sb,
                    eperm("process_vm_readv"),
                    ok_with(vec![("matched", json!(true))]),
                ),
            )
        }),
        Case::new("process_vm_readv_host_process", ALL, |_, sb| {
            let host = host_sleeper();
            Spec::probe(
                argv!["process-vm-readv", host.pid().to_string()],
                confined_or(
                    sb,
                    eperm("process_vm_readv"),
                    err("ESRCH", "process_vm_readv"),
                ),
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
        // pid 1 is ralph's own init; Landlock scopes signals to the sandbox. full-access has no
        // Landlock (signal 0 only checks).
        Case::new("kill_init", ALL, |_, sb| {
            Spec::probe(
                argv!["kill", "1", "0"],
                confined_or(sb, eperm("kill"), ok()),
            )
        }),
        Case::new("proc_1_root", ALL, |_, _| {
            Spec::probe(argv!["read", "/proc/1/root/root"], eacces("open"))
        }),
        // Every mode mounts a fresh procfs, where pid 1 is ralph's init (a fork of the ralph
        // binary, so the same command line), not the host's init.
        Case::new("proc_1_cmdline", ALL, |_, _| {
            let want = format!("{}\0sandbox\0exec\0", ralph().display());
            assert!(Path::new("/bin/cat").is_file());
            Spec::probe(
                argv!["exec", "/bin/cat", "/proc/1/cmdline"],
                ok_with(vec![("exit", json!(0))]),
            )
            .after(move |run| {
                if run.stderr.starts_with(&want) {
                    Ok(())
                } else {
                    Err(format!(
                        "/proc/1/cmdline is not {:?}",
                        want.replace('\0', " ")
                    ))
                }
            })
        }),
        // The fresh procfs of every mode has no host pids: the host's process is running (and
        // in the host's /proc), but there is no /proc entry for it inside.
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
        Case::new("setns_init_net", ALL, |_, _| {
            Spec::probe(argv!["setns", "/proc/1/ns/net"], eacces("open"))
        }),
        // Seccomp in the filesystem modes, no CAP_SYS_ADMIN in full-access.
        Case::new("setns_own_net", ALL, |_, _| {
            Spec::probe(argv!["setns", "/proc/self/ns/net"], eperm("setns"))
        }),
        Case::new("clone_newuser", ALL, |_, sb| {
            Spec::probe(
                argv!["clone-newuser"],
                confined_or(sb, eperm("clone"), ok_with(vec![("exit", json!(0))])),
            )
        }),
        Case::new("clone3_enosys", ALL, |_, sb| {
            Spec::probe(
                argv!["clone3"],
                confined_or(
                    sb,
                    err("ENOSYS", "clone3"),
                    ok_with(vec![("exit", json!(0))]),
                ),
            )
        }),
        Case::new("chroot", ALL, |_, _| {
            Spec::probe(argv!["chroot", "/"], eperm("chroot"))
        }),
        // Seccomp in the filesystem modes, no CAP_SYS_ADMIN in full-access (whose mount
        // namespace is its own, so even a mount that worked would not reach the host).
        Case::new("mount_tmpfs", ALL, |_, _| {
            Spec::probe(argv!["mount"], eperm("mount"))
        }),
        Case::new("umount_proc", ALL, |_, _| {
            Spec::probe(argv!["umount", "/proc"], eperm("umount2"))
        }),
        Case::new("io_uring", ALL, |_, sb| {
            Spec::probe(
                argv!["io-uring"],
                confined_or(sb, eperm("io_uring_setup"), ok()),
            )
        }),
        // Enforced with cgroup pids.max where the runner can write cgroups, else with
        // RLIMIT_NPROC in a private user namespace: either way fork fails with EAGAIN.
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
        // The terminal ralph was started from never reaches the command: its stdin is /dev/null
        // then (full-access: ENOTTY), and the confined modes' guard refuses TIOCSTI on any
        // descriptor before the kernel looks at it (EPERM). The command is a session leader
        // without a controlling terminal besides.
        Case::new("tiocsti_terminal_injection", ALL, |_, sb| {
            if !Path::new(PYTHON).is_file() {
                return Spec::skip("python3 is not installed");
            }
            let host = host_tiocsti();
            if host["ok"] != Value::Bool(true) {
                return Spec::skip(format!("TIOCSTI is refused on this host anyway: {host}"));
            }
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
                    Err(format!(
                        "the command is pid {pid}, not one of a fresh namespace"
                    ))
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

/// TIOCSTI on the host, in a new session whose controlling terminal is a fresh pty.
fn host_tiocsti() -> Value {
    let pty = nix::pty::openpty(None, None).unwrap();
    let mut c = Command::new(PYTHON);
    c.arg("-c").arg(py_script(TIOCSTI));
    c.stdin(Stdio::from(pty.slave));
    with_controlling_tty(&mut c);
    let out = c.output().unwrap();
    drop(pty.master);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

// ---------------------------------------------------------------------------------------------
// Privileges and kernel interfaces
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
        // no_new_privs: the setuid bit is ignored (the probe reads the ids and capabilities of
        // the exec'd process from /proc/PID/status, the sandbox's own /proc in every mode).
        Case::new("setuid_binary", ALL, |_, sb| {
            let passwd = Path::new("/usr/bin/passwd");
            let Ok(meta) = passwd.metadata() else {
                return Spec::skip("/usr/bin/passwd is not installed");
            };
            assert!(
                meta.mode() & 0o4000 != 0 && meta.uid() == 0,
                "/usr/bin/passwd is not setuid root"
            );
            Spec::probe(
                argv!["setuid-exec", passwd],
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
        // ADDR_NO_RANDOMIZE; full-access does not restrict personality(2).
        Case::new("personality_change", ALL, |_, sb| {
            Spec::probe(
                argv!["personality", "0x0040000"],
                confined_or(sb, eperm("personality"), ok()),
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
        // getpid(2) through the x32 ABI (syscall number | 0x40000000): refused in every mode
        // (a host without x32 support answers ENOSYS, so EPERM is the filter's).
        Case::new("x32_syscall", ALL, |_, _| {
            Spec::py(X32_GETPID, argv![], eperm("syscall"))
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// What must keep working
// ---------------------------------------------------------------------------------------------

fn keeps_working() -> Vec<Case> {
    vec![
        Case::new("git_status", ALL, |w, _| {
            let Some(git) = git_world(w) else {
                return Spec::skip("git is not installed");
            };
            std::fs::write(w.ws.join("untracked.txt"), "x\n").unwrap();
            Spec::cmd(
                argv![git, "status", "--porcelain"],
                exit_with(0, &["?? untracked.txt"], &[]),
            )
        }),
        // `.git/hooks` and `.git/config` stay protected while objects, refs and the index are
        // written (and the protected pre-commit hook runs).
        Case::new("git_commit", WW_FA, |w, _| {
            let Some(git) = git_world(w) else {
                return Spec::skip("git is not installed");
            };
            std::fs::write(w.ws.join("new.txt"), "x\n").unwrap();
            let ws = w.ws.clone();
            let root = w.root.clone();
            let g = git.clone();
            Spec::sh(
                r#""$1" add new.txt && "$1" -c user.name=agent -c user.email=agent@example.invalid commit -q -m "from the sandbox""#,
                argv![git],
                exit(0),
            )
            .after(move |_| {
                let out = Command::new(&g)
                    .args(["log", "-1", "--format=%s"])
                    .current_dir(&ws)
                    .env("HOME", &root)
                    .output()
                    .unwrap();
                let subject = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if subject == "from the sandbox" {
                    Ok(())
                } else {
                    Err(format!("the host's last commit is {subject:?}"))
                }
            })
        }),
        // The source is in the workspace; the binary goes to TMPDIR so that read-only works too.
        Case::new("gcc_compile_and_run", ALL, |w, _| {
            if !Path::new("/usr/bin/gcc").exists() {
                return Spec::skip("/usr/bin/gcc is not installed");
            }
            std::fs::write(w.ws.join("t.c"), "int main(void) { return 7; }\n").unwrap();
            Spec::sh(
                r#"/usr/bin/gcc -o "$TMPDIR/t" t.c && exec "$TMPDIR/t""#,
                argv![],
                exit(7),
            )
        }),
        Case::new("python3_runs", ALL, |_, _| {
            if !Path::new(PYTHON).exists() {
                return Spec::skip("python3 is not installed");
            }
            Spec::cmd(argv![PYTHON, "-c", "print(1)"], exit_with(0, &["1\n"], &[]))
        }),
        Case::new("exit_status_passthrough", ALL, |_, _| {
            Spec::cmd(argv!["/bin/sh", "-c", "exit 42"], exit(42))
        }),
        Case::new("command_not_found", ALL, |_, _| {
            let missing = "/nonexistent/ralph-escape-command";
            assert!(!Path::new(missing).exists());
            Spec::cmd(argv![missing], exit(127))
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

/// The command writes a marker in the workspace (and prints its line): neither may happen when
/// the sandbox cannot be set up.
fn not_run(marker: PathBuf, ran: bool) -> impl FnOnce(&Run) -> Result<(), String> {
    move |run| {
        let printed = !run.stdout.is_empty();
        if printed != ran {
            return Err(format!("the command printed {:?}", run.stdout));
        }
        exists_iff(marker, ran)(run)
    }
}

fn fails_closed() -> Vec<Case> {
    vec![
        Case::new("no_landlock_fails_closed", ALL, |w, sb| {
            let marker = w.ws.join("marker");
            let expect = confined_or(
                sb,
                exit_with(
                    69,
                    &[],
                    &["sandbox unavailable: cannot enforce filesystem isolation (landlock)"],
                ),
                ok(),
            );
            Spec::probe(argv!["write", marker], expect)
                .env("RALPH_SIMULATE_NO_LANDLOCK", "1")
                .after(not_run(marker, sb.mode == Mode::FullAccess))
        }),
        Case::new("old_landlock_abi_fails_closed", ALL, |w, sb| {
            let marker = w.ws.join("marker");
            let expect = confined_or(
                sb,
                exit_with(
                    69,
                    &[],
                    &[
                        "sandbox unavailable: cannot enforce filesystem isolation (landlock)",
                        "abi 2",
                    ],
                ),
                ok(),
            );
            Spec::probe(argv!["write", marker], expect)
                .env("RALPH_SIMULATE_LANDLOCK_ABI", "2")
                .after(not_run(marker, sb.mode == Mode::FullAccess))
        }),
        // Enforced where this user can write cgroups (root), refused up front elsewhere.
        Case::new("memory_limit_enforced_or_refused", ALL, |_, _| {
            let expect = if cgroup_writable("memory") {
                ok_with(vec![("megabytes", json!(16))])
            } else {
                exit_with(
                    69,
                    &[],
                    &["sandbox unavailable: cannot enforce the memory limit (--memory)"],
                )
            };
            Spec::probe(argv!["alloc", "16"], expect).flags(argv!["--memory", "64M"])
        }),
    ]
}

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

#[test]
fn the_matrix_is_big_enough() {
    for bin in [probe(), ralph()] {
        assert!(bin.is_file(), "{} is missing", bin.display());
    }
    let (cases, runs) = check_table(&all_cases());
    eprintln!("{cases} cases, {runs} case runs");
    assert!(cases >= 60, "only {cases} distinct cases");
    assert!(runs >= 60, "only {runs} case runs");
}

#[test]
fn escape_filesystem() {
    run_matrix("filesystem", &filesystem());
}

#[test]
fn escape_filesystem_view() {
    run_matrix("filesystem view", &view());
}

#[test]
fn escape_protected_paths() {
    run_matrix("protected paths", &protected());
}

#[test]
fn escape_network() {
    run_matrix("network", &network());
}

#[test]
fn escape_processes() {
    run_matrix("processes", &processes());
}

#[test]
fn escape_privileges() {
    run_matrix("privileges", &privileges());
}

#[test]
fn keeps_working_in_the_sandbox() {
    run_matrix("keeps working", &keeps_working());
}

#[test]
fn fails_closed_when_it_cannot_enforce() {
    run_matrix("fails closed", &fails_closed());
}

/// A round of `ralph run` (workspace-write) whose agent makes the `.git/commondir` attack,
/// proves that it works during the run (the attack script exits 3) and then reports completion.
struct CommondirRound {
    fixture: common::Fixture,
    out: common::Output,
    git: PathBuf,
    marker: PathBuf,
}

impl CommondirRound {
    fn run() -> Option<Self> {
        let git = git_binary()?;
        let fixture = common::Fixture::new();
        let home = fixture.root.path().to_owned();
        std::fs::write(fixture.ws.join("README"), "hello\n").unwrap();
        for args in [
            &["init", "-q", "."][..],
            &["add", "README"],
            &["commit", "-q", "-m", "initial"],
        ] {
            git_on_host(&git, &fixture.ws, &home, args).unwrap();
        }
        let marker = home.join("agent-hook-ran");
        let agent = fixture.agent(
            "commondir.sh",
            &format!(
                "sh -c '{}' attack {} {}\ntest $? = 3 || exit 1\necho '{}'",
                COMMONDIR_ATTACK.replace('\'', r"'\''"),
                marker.display(),
                git.display(),
                common::complete_report("done")
            ),
        );
        let out = fixture
            .run(&agent)
            .args(["--max-rounds", "1", "--round-retries", "0"])
            .output();
        // The round's report is not trusted: it fails as tampered, and with no retry left, so
        // does the job.
        out.expect_code(3);
        Some(Self {
            fixture,
            out,
            git,
            marker,
        })
    }

    /// What the supervisor reports for the removed file.
    fn violation(&self) -> String {
        format!(
            "`{}`: was created during the run, and must not exist; it has been removed",
            self.fixture.ws.join(".git/commondir").display()
        )
    }
}

/// The supervisor removes `.git/commondir`, the round fails as `workspace_tampered` whatever it
/// reported, the journal's `round_finished` says what was removed in `sandbox_violations`, and
/// the host's git is unaffected (see `protect_git_commondir` for `sandbox exec`).
#[test]
fn git_commondir_created_in_a_round_is_journalled() {
    let Some(r) = CommondirRound::run() else {
        eprintln!("skipped: git is not installed");
        return;
    };
    let events = r.fixture.events(&r.out.job_id());
    let finished: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "round_finished")
        .map(|(_, e)| e)
        .collect();
    assert_eq!(finished.len(), 1, "{events:#?}");
    assert_eq!(
        finished[0]["sandbox_violations"],
        json!([r.violation()]),
        "{:#}",
        finished[0]
    );
    assert_eq!(finished[0]["result"]["reason"], "workspace_tampered");
    assert!(
        finished[0]["result"]["message"]
            .as_str()
            .unwrap()
            .contains(&r.violation()),
        "{:#}",
        finished[0]
    );
    let home = r.fixture.root.path();
    host_git_unaffected(&r.git, &r.fixture.ws, home, &r.marker, true).unwrap();
}

/// The same violation is shown to the user on stderr.
#[test]
fn git_commondir_created_in_a_round_is_warned() {
    let Some(r) = CommondirRound::run() else {
        eprintln!("skipped: git is not installed");
        return;
    };
    let warning = format!("warning: round 1: sandbox: {}", r.violation());
    assert!(
        r.out.stderr.contains(&warning),
        "stderr does not contain {warning:?}:\n{}",
        r.out.stderr
    );
}

/// Cases marked BUG (each needs an `#[ignore = "BUG: …"]` test that runs it with `run_bug`).
/// Every bug of the former sandbox is a normal case of its group now; these are of the new one.
const KNOWN_BUGS: &[&str] = &[];

/// Every case marked BUG has its ignored test (listed in [`KNOWN_BUGS`]), and no other case is.
#[test]
fn every_bug_has_an_ignored_test() {
    let mut marked: Vec<&str> = all_cases()
        .iter()
        .filter(|c| c.bug.is_some())
        .map(|c| c.name)
        .collect();
    marked.sort_unstable();
    let mut listed = KNOWN_BUGS.to_vec();
    listed.sort_unstable();
    assert_eq!(marked, listed);
}
