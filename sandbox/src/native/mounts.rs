//! The sandbox's filesystem view, built inside its mount namespace.
//!
//! Filesystem modes get a root of their own, built like bubblewrap does: a scratch tmpfs becomes
//! the temporary root with the host's tree moved under `/oldroot`; a second tmpfs (`/newroot`)
//! receives bind mounts of exactly the trees the plan lists (read-only unless writable), a
//! private `/dev` with the allowed devices, the private `/tmp` and a fresh `/proc`; protections
//! (pinned parents, read-only protected paths, masked secrets, then the writable trees' sockets
//! the supervisor's walk found meanwhile: [`super::late_masks`]) are applied; then `/newroot`
//! becomes `/`, the host's tree is detached, and the root itself is made read-only. Nothing of
//! the host that is not listed exists inside: no paths to probe, no unix sockets to reach, and
//! no metadata (chmod, utimes, xattrs) to change outside the writable trees.
//!
//! full-access keeps the host's view; it gets a fresh `/proc`, the kernel paths a default
//! `docker run` keeps read-only bound read-only over themselves (`/proc/sys`, ..., and the
//! init's `/proc/1`), those it masks masked, and a read-only `/sys`.
//!
//! In every mode the report directory, when the plan has one, is a tmpfs of its own, bounded in
//! bytes and entries ([`crate::report_dir`]): the command never writes the host's.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::statvfs::{FsFlags, statvfs};

use super::idmap::Idmaps;
use super::late_masks;
use super::step::{StepFailure, restriction};
use crate::beneath::{self, TreePath};
use crate::plan::{MountStep, ReportDirPlan, RootPlan, SandboxPlan};
use crate::sys;

const NONE: Option<&str> = None;
const OLD: &str = "/oldroot";
const NEW: &str = "/newroot";

fn fail(step: &str, path: &Path, err: nix::Error) -> StepFailure {
    StepFailure::nix(
        restriction::MOUNTS,
        step,
        &format!("set up `{}`", path.display()),
        err,
    )
}

fn io_fail(step: &str, path: &Path, err: &std::io::Error) -> StepFailure {
    StepFailure::io(
        restriction::MOUNTS,
        step,
        &format!("set up `{}`", path.display()),
        err,
    )
}

/// `/prefix` + an absolute path.
fn under(prefix: &str, path: &Path) -> PathBuf {
    Path::new(prefix).join(path.strip_prefix("/").unwrap_or(path))
}

/// Makes the mount at `path` read-only — with `recursive`, every mount below it too
/// (`mount_setattr`, Linux 5.12+; older kernels: a read-only remount of the top mount, keeping
/// its locked flags).
fn make_read_only(path: &Path, recursive: bool) -> Result<(), StepFailure> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| {
        StepFailure::new(
            restriction::MOUNTS,
            "mount_setattr",
            "path contains a NUL byte",
        )
    })?;
    let err = match sys::make_path_read_only(&c, recursive) {
        Ok(()) => return Ok(()),
        Err(err) => err,
    };
    if err.raw_os_error() != Some(libc::ENOSYS) {
        return Err(io_fail("mount_setattr(MOUNT_ATTR_RDONLY)", path, &err));
    }
    let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked_flags(path);
    mount(NONE, path, NONE, flags, NONE).map_err(|e| fail("mount(MS_REMOUNT|MS_RDONLY)", path, e))
}

/// Flags a remount must keep: inside a user namespace the flags of mounts inherited from the
/// parent are locked, and dropping one makes the remount fail with EPERM.
fn locked_flags(path: &Path) -> MsFlags {
    let Ok(st) = statvfs(path) else {
        return MsFlags::empty();
    };
    let f = st.flags();
    let mut out = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if f.contains(fs) {
            out |= ms;
        }
    }
    out
}

fn bind(src: &Path, dst: &Path) -> Result<(), StepFailure> {
    mount(
        Some(src),
        dst,
        NONE,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        NONE,
    )
    .map_err(|e| fail("mount(MS_BIND)", dst, e))
}

/// Creates `dst` (and its parents) as a mount point like `src`: a directory or an empty file.
fn mount_point(src: &Path, dst: &Path) -> Result<(), StepFailure> {
    // Already there (inside a tree bound before it, e.g. a granted socket in the workspace).
    if std::fs::symlink_metadata(dst).is_ok() {
        return Ok(());
    }
    let is_dir = std::fs::metadata(src)
        .map(|m| m.is_dir())
        .map_err(|e| io_fail("stat", src, &e))?;
    if is_dir {
        std::fs::create_dir_all(dst).map_err(|e| io_fail("mkdir", dst, &e))
    } else {
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_fail("mkdir", parent, &e))?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dst)
            .map(drop)
            .map_err(|e| io_fail("open(O_CREAT)", dst, &e))
    }
}

/// A tree bound inside the private HOME (a job's cache, `~/.cargo/registry`): its parents are
/// made in HOME's tmpfs owned by HOME's owner, so the command can still write beside it
/// (`~/.cargo/.package-cache`). Nothing to do for a tree elsewhere.
fn home_parents(home: &Path, path: &Path, owner: (u32, u32)) -> Result<(), StepFailure> {
    let Ok(rel) = path.strip_prefix(home) else {
        return Ok(());
    };
    let parts: Vec<_> = rel.components().collect();
    let mut at = under(NEW, home);
    for c in parts.iter().take(parts.len().saturating_sub(1)) {
        at.push(c);
        match std::fs::create_dir(&at) {
            Ok(()) => std::os::unix::fs::lchown(&at, Some(owner.0), Some(owner.1))
                .map_err(|e| io_fail("chown", &at, &e))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_fail("mkdir", &at, &e)),
        }
    }
    Ok(())
}

fn pivot_root(new_root: &str, put_old: &str) -> Result<(), StepFailure> {
    let (n, o) = (
        std::ffi::CString::new(new_root),
        std::ffi::CString::new(put_old),
    );
    let (Ok(n), Ok(o)) = (n, o) else {
        return Err(StepFailure::new(
            restriction::MOUNTS,
            "pivot_root",
            "invalid path",
        ));
    };
    // SAFETY: two NUL-terminated paths alive for the call.
    let rc = unsafe { libc::syscall(libc::SYS_pivot_root, n.as_ptr(), o.as_ptr()) };
    if rc != 0 {
        return Err(io_fail(
            "pivot_root",
            Path::new(new_root),
            &std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn chdir(p: &str) -> Result<(), StepFailure> {
    nix::unistd::chdir(p).map_err(|e| fail("chdir", Path::new(p), e))
}

/// Binds a path inside the workspace onto itself (read-only with `read_only`), reached without
/// following any symlink and mounted on descriptors, not paths: the walk opens each component
/// with `O_NOFOLLOW` from the workspace's copy in the root being built, `open_tree` clones the
/// mount tree found there, `mount_setattr` makes the detached clone read-only, and `move_mount`
/// attaches it on the very inode that was walked to. A symlink swapped in after the plan was
/// made fails the set-up; it is never mounted over or through.
fn bind_in_place(prefix: &str, at: &TreePath, read_only: bool) -> Result<(), StepFailure> {
    let inside = TreePath {
        root: under(prefix, &at.root),
        rel: at.rel.clone(),
    };
    let failed = |call: &str, e: &std::io::Error| io_fail(call, &at.full(), e);
    let (fd, _) = beneath::open_path(&inside).map_err(|e| {
        StepFailure::new(
            restriction::MOUNTS,
            "openat(O_NOFOLLOW)",
            format!("failed to protect `{}`: {e}", at.full().display()),
        )
    })?;
    let tree = sys::clone_tree(&fd).map_err(|e| failed("open_tree(OPEN_TREE_CLONE)", &e))?;
    if read_only {
        sys::make_tree_read_only(&tree)
            .map_err(|e| failed("mount_setattr(MOUNT_ATTR_RDONLY)", &e))?;
    }
    sys::attach_tree(&tree, &fd).map_err(|e| failed("move_mount", &e))
}

/// Binds `src` at `dst` idmapped through `userns` (read-only with `read_only`): a clone of the
/// tree, made idmapped while detached, attached at `dst`. A filesystem that cannot be idmapped
/// fails the set-up (never a plain bind in its place).
fn bind_idmapped(
    src: &Path,
    dst: &Path,
    userns: std::os::fd::BorrowedFd<'_>,
    read_only: bool,
) -> Result<(), StepFailure> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
            .open(p)
            .map_err(|e| io_fail("open(O_PATH)", p, &e))
    };
    let source = open(src)?;
    let tree =
        sys::clone_tree(&source).map_err(|e| io_fail("open_tree(OPEN_TREE_CLONE)", src, &e))?;
    sys::idmap_tree(&tree, &userns, read_only).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EINVAL) {
            " (the filesystem cannot be idmapped; chown the tree to an unprivileged user, or run ralph as one)"
        } else {
            ""
        };
        StepFailure::new(
            restriction::MOUNTS,
            "mount_setattr(MOUNT_ATTR_IDMAP)",
            format!("failed to idmap `{}`: {e}{hint}", src.display()),
        )
    })?;
    let target = open(dst)?;
    sys::attach_tree(&tree, &target).map_err(|e| io_fail("move_mount", dst, &e))
}

/// Applies one step; paths are taken under `prefix` (the root being built, or `/`), and a mask
/// file under `mask_prefix`.
fn apply_step(
    step: &MountStep,
    prefix: &str,
    hidden_file: Option<&Path>,
) -> Result<(), StepFailure> {
    match step {
        MountStep::Anchor { at } => bind_in_place(prefix, at, false),
        MountStep::ProtectReadOnly { at } => bind_in_place(prefix, at, true),
        MountStep::HideFile { path } => {
            let p = under(prefix, path);
            let mask = hidden_file.ok_or_else(|| {
                StepFailure::new(
                    restriction::MOUNTS,
                    "mount(MS_BIND)",
                    format!("no mask file to hide `{}`", path.display()),
                )
            })?;
            mount(Some(mask), &p, NONE, MsFlags::MS_BIND, NONE)
                .map_err(|e| fail("mount(MS_BIND)", &p, e))?;
            make_read_only(&p, true)
        }
        MountStep::HideDir { path } => {
            let p = under(prefix, path);
            let flags =
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            mount(
                Some("tmpfs"),
                &p,
                Some("tmpfs"),
                flags,
                Some("mode=000,size=4k,nr_inodes=1"),
            )
            .map_err(|e| fail("mount(tmpfs)", &p, e))
        }
        MountStep::ReadOnly { path } => make_read_only(&under(prefix, path), true),
        MountStep::BindReadOnly { path } => {
            let p = under(prefix, path);
            mount(Some(&p), &p, NONE, MsFlags::MS_BIND, NONE)
                .map_err(|e| fail("mount(MS_BIND)", &p, e))?;
            make_read_only(&p, false)
        }
        MountStep::Proc => {
            let p = under(prefix, Path::new("/proc"));
            let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
            mount(Some("proc"), &p, Some("proc"), flags, NONE)
                .map_err(|e| fail("mount(proc)", &p, e))
        }
    }
}

/// Sets up the plan's filesystem view. `hidden_file` is the host path of an empty mode-000 file
/// (present whenever the plan masks a file); `idmaps` the user namespaces of idmapped binds;
/// `late` the supervisor's masks for the sockets its walk finds meanwhile, applied after the
/// plan's steps ([`super::late_masks`]).
pub fn apply(
    plan: &SandboxPlan,
    hidden_file: Option<&Path>,
    idmaps: &Idmaps,
    late: Option<OwnedFd>,
) -> Result<(), StepFailure> {
    // Nothing done here may leak back to the host's mount table.
    mount(NONE, "/", NONE, MsFlags::MS_REC | MsFlags::MS_PRIVATE, NONE)
        .map_err(|e| fail("mount(MS_REC|MS_PRIVATE)", Path::new("/"), e))?;
    let report = plan.report_dir.as_ref().filter(|r| r.tmpfs);
    match &plan.root {
        Some(root) => build_root(root, &plan.mounts, report, hidden_file, idmaps, late),
        None => {
            plan.mounts
                .iter()
                .try_for_each(|s| apply_step(s, "/", hidden_file))?;
            apply_late(late, "/", hidden_file)?;
            report.map_or(Ok(()), |r| mount_report_dir(r, "/"))
        }
    }
}

/// Waits for the supervisor's socket masks (when it sends any: `late`) and applies them.
fn apply_late(
    late: Option<OwnedFd>,
    prefix: &str,
    hidden_file: Option<&Path>,
) -> Result<(), StepFailure> {
    let Some(r) = late else {
        return Ok(());
    };
    for path in late_masks::receive(r)? {
        apply_step(&MountStep::HideFile { path }, prefix, hidden_file)?;
    }
    Ok(())
}

/// The report directory's own tmpfs (bounded in bytes and entries, no exec, no devices, no
/// set-id) at its path under `prefix` ([`crate::report_dir`]).
fn mount_report_dir(r: &ReportDirPlan, prefix: &str) -> Result<(), StepFailure> {
    let at = under(prefix, &r.dir.path);
    std::fs::create_dir_all(&at).map_err(|e| io_fail("mkdir", &at, &e))?;
    let data = crate::report_dir::tmpfs_data(&r.dir, r.owner.0, r.owner.1);
    mount(
        Some("tmpfs"),
        &at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(data.as_str()),
    )
    .map_err(|e| fail("mount(tmpfs)", &at, e))
}

const DEV_LINKS: [(&str, &str); 4] = [
    ("/dev/fd", "/proc/self/fd"),
    ("/dev/stdin", "/proc/self/fd/0"),
    ("/dev/stdout", "/proc/self/fd/1"),
    ("/dev/stderr", "/proc/self/fd/2"),
];

fn build_root(
    root: &RootPlan,
    steps: &[MountStep],
    report: Option<&ReportDirPlan>,
    hidden_file: Option<&Path>,
    idmaps: &Idmaps,
    late: Option<OwnedFd>,
) -> Result<(), StepFailure> {
    let tmpfs = |at: &Path, opts: &str| {
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(opts),
        )
        .map_err(|e| fail("mount(tmpfs)", at, e))
    };
    // 1. A scratch tmpfs becomes the root; the host's tree moves to /oldroot.
    tmpfs(Path::new("/tmp"), "mode=0755,size=64k")?;
    chdir("/tmp")?;
    for d in ["oldroot", "newroot"] {
        std::fs::create_dir(d).map_err(|e| io_fail("mkdir", Path::new(d), &e))?;
    }
    pivot_root(".", "oldroot")?;
    chdir("/")?;
    // 2. The new root: only mount points, filled with exactly what the plan lists.
    tmpfs(Path::new(NEW), "mode=0755")?;
    for (path, target) in &root.symlinks {
        std::os::unix::fs::symlink(target, under(NEW, path))
            .map_err(|e| io_fail("symlink", path, &e))?;
    }
    // The private TMPDIR, a size-limited tmpfs, at /tmp first: trees that live under the host's
    // /tmp are bound on top of it (their mount points are made inside it, which is scratch).
    let scratch = |at: &Path| -> Result<(), StepFailure> {
        std::fs::create_dir_all(at).map_err(|e| io_fail("mkdir", at, &e))?;
        let (uid, gid) = root.scratch_owner;
        let opts = format!("mode=0700,size={},uid={uid},gid={gid}", root.scratch_size);
        mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(opts.as_str()),
        )
        .map_err(|e| fail("mount(tmpfs)", at, e))
    };
    let tmp = under(NEW, Path::new("/tmp"));
    scratch(&tmp)?;
    let tmp_path = under(NEW, &root.tmp);
    std::fs::create_dir_all(&tmp_path).map_err(|e| io_fail("mkdir", &tmp_path, &e))?;
    bind(&tmp, &tmp_path)?;
    scratch(&under(NEW, &root.home))?;
    if let Some(r) = report {
        mount_report_dir(r, NEW)?;
    }
    for b in &root.binds {
        let (src, dst) = (under(OLD, &b.path), under(NEW, &b.path));
        home_parents(&root.home, &b.path, root.scratch_owner)?;
        mount_point(&src, &dst)?;
        match &b.idmap {
            Some(map) => {
                let userns = idmaps.get(map).ok_or_else(|| {
                    StepFailure::new(
                        restriction::MOUNTS,
                        "mount_setattr(MOUNT_ATTR_IDMAP)",
                        format!("no user namespace for the idmapped `{}`", b.path.display()),
                    )
                })?;
                bind_idmapped(&src, &dst, userns, !b.write)?;
            }
            None => {
                bind(&src, &dst)?;
                if !b.write {
                    make_read_only(&dst, true)?;
                }
            }
        }
    }
    let dev = under(NEW, Path::new("/dev"));
    std::fs::create_dir_all(&dev).map_err(|e| io_fail("mkdir", &dev, &e))?;
    for d in &root.devices {
        let (src, dst) = (under(OLD, d), under(NEW, d));
        mount_point(&src, &dst)?;
        bind(&src, &dst)?;
    }
    for (link, target) in DEV_LINKS {
        std::os::unix::fs::symlink(target, under(NEW, Path::new(link)))
            .map_err(|e| io_fail("symlink", Path::new(link), &e))?;
    }
    let proc = under(NEW, Path::new("/proc"));
    std::fs::create_dir_all(&proc).map_err(|e| io_fail("mkdir", &proc, &e))?;
    apply_step(&MountStep::Proc, NEW, None)?;
    // 3. Protections, inside the new view (the mask file still comes from the host's tree).
    let mask = hidden_file.map(|h| under(OLD, h));
    for step in steps {
        apply_step(step, NEW, mask.as_deref())?;
    }
    apply_late(late, NEW, mask.as_deref())?;
    // 4. The new root becomes `/`; the scratch root and the host's tree are detached.
    chdir(NEW)?;
    pivot_root(".", ".")?;
    umount2(".", MntFlags::MNT_DETACH)
        .map_err(|e| fail("umount2(MNT_DETACH)", Path::new("/"), e))?;
    chdir("/")?;
    // 5. Nothing can be created at the top level (the bound trees keep their own flags).
    make_read_only(Path::new("/"), false)
}
