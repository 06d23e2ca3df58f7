use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, symlink as ln_s};
use std::path::Path;

use super::*;

fn tree() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn root(d: &Path) -> OwnedFd {
    open_root(d, Access::Read).unwrap()
}

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn names(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

/// How the kernel refuses a symlink as the last component: `ELOOP`, or `ENOTDIR` where a
/// directory was asked for (`O_DIRECTORY | O_NOFOLLOW`).
fn refused_link(e: &FsError) -> bool {
    e.is(libc::ELOOP) || e.is(libc::ENOTDIR)
}

/// `a/b/c` real directories, with a file `a/b/c/f`; `outside` holds `secret`.
fn chain() -> (tempfile::TempDir, tempfile::TempDir) {
    let d = tree();
    std::fs::create_dir_all(d.path().join("a/b/c")).unwrap();
    std::fs::write(d.path().join("a/b/c/f"), "x").unwrap();
    let o = tree();
    std::fs::create_dir_all(o.path().join("b/c")).unwrap();
    std::fs::write(o.path().join("secret"), "s").unwrap();
    (d, o)
}

#[test]
fn a_symlink_at_each_step_of_a_walk_is_refused() {
    for step in ["a", "a/b", "a/b/c"] {
        let (d, o) = chain();
        let at = d.path().join(step);
        std::fs::rename(&at, d.path().join("moved")).unwrap();
        // The link points at a real directory with the same layout: following it would work.
        let target = o.path().join(&step[step.len() - 1..]);
        std::fs::create_dir_all(&target).unwrap();
        std::fs::create_dir_all(target.join("b/c")).unwrap();
        std::fs::create_dir_all(target.join("c")).unwrap();
        ln_s(&target, &at).unwrap();
        let r = root(d.path());
        for create in [Create::No, Create::Missing(0o755)] {
            let e = walk(r.as_fd(), &names(&["a", "b", "c"]), create).unwrap_err();
            assert!(refused_link(&e), "{step}: {e}");
            assert_eq!(e.path(), Path::new(step), "{step}: {e}");
            assert!(e.to_string().starts_with("failed to openat `"), "{e}");
        }
        assert!(
            !target.join("c/c").exists(),
            "{step}: created through the link"
        );
    }
}

#[test]
fn a_walk_opens_real_directories_and_creates_missing_ones() {
    let (d, _o) = chain();
    let r = root(d.path());
    let c = walk(r.as_fd(), &names(&["a", "b", "c"]), Create::No).unwrap();
    assert!(lstat(c.as_fd(), os("f")).unwrap().is_some());
    let e = walk(r.as_fd(), &names(&["a", "x", "y"]), Create::No).unwrap_err();
    assert!(e.is(libc::ENOENT) && e.path() == Path::new("a/x"), "{e}");
    walk(r.as_fd(), &names(&["a", "x", "y"]), Create::Missing(0o750)).unwrap();
    let meta = std::fs::metadata(d.path().join("a/x/y")).unwrap();
    assert!(meta.is_dir());
    // A file on the way is not a directory.
    let e = walk(
        r.as_fd(),
        &names(&["a", "b", "c", "f"]),
        Create::Missing(0o755),
    )
    .unwrap_err();
    assert!(e.is(libc::ENOTDIR), "{e}");
    // No components: the root itself.
    let top = walk(r.as_fd(), &[], Create::No).unwrap();
    assert_eq!(
        fstat(top.as_fd()).unwrap().ino,
        d.path().metadata().unwrap().ino()
    );
}

#[test]
fn opening_never_follows_a_symlink() {
    let (d, o) = chain();
    ln_s(o.path(), d.path().join("dirlink")).unwrap();
    ln_s(o.path().join("secret"), d.path().join("filelink")).unwrap();
    let r = root(d.path());
    for access in [Access::Path, Access::Read] {
        let e = open_dir(r.as_fd(), os("dirlink"), access).unwrap_err();
        assert!(refused_link(&e), "{e}");
    }
    let e = open_regular(r.as_fd(), os("filelink")).unwrap_err();
    assert!(e.is(libc::ELOOP), "{e}");
    // `O_PATH | O_NOFOLLOW` opens the link itself, and says so.
    let fd = open_path(r.as_fd(), os("filelink")).unwrap();
    assert_eq!(fstat(fd.as_fd()).unwrap().kind, Kind::Symlink);
    assert_eq!(
        lstat(r.as_fd(), os("dirlink")).unwrap().map(|s| s.kind),
        Some(Kind::Symlink)
    );
    assert_eq!(lstat(r.as_fd(), os("missing")).unwrap(), None);
    // The root is trusted and may be reached through a link, unless asked otherwise.
    let via = tree();
    ln_s(d.path(), via.path().join("ws")).unwrap();
    open_root(&via.path().join("ws"), Access::Read).unwrap();
    let e = open_root_nofollow(&via.path().join("ws"), Access::Read).unwrap_err();
    assert!(refused_link(&e), "{e}");
    assert!(e.to_string().contains("failed to open `"), "{e}");
}

#[test]
fn only_regular_files_are_read() {
    let (d, _o) = chain();
    nix::unistd::mkfifo(
        &d.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    std::fs::write(d.path().join("data"), "0123456789").unwrap();
    let r = root(d.path());
    // A FIFO is neither waited on nor read.
    let e = open_regular(r.as_fd(), os("fifo")).unwrap_err();
    assert!(matches!(e, FsError::NotRegular { .. }), "{e}");
    assert_eq!(e.cause().to_string(), "not a regular file");
    let e = open_regular(r.as_fd(), os("a")).unwrap_err();
    assert!(matches!(e, FsError::NotRegular { .. }), "{e}");
    assert_eq!(
        read_regular(r.as_fd(), os("data"), 4).unwrap(),
        (b"0123".to_vec(), false)
    );
    assert_eq!(
        read_regular(r.as_fd(), os("data"), 10).unwrap(),
        (b"0123456789".to_vec(), true)
    );
    let (_, st) = open_regular(r.as_fd(), os("data")).unwrap();
    assert_eq!((st.kind, st.size), (Kind::File, 10));
}

#[test]
fn an_exclusive_create_refuses_an_existing_name_or_symlink() {
    let (d, o) = chain();
    let target = o.path().join("made-through-the-link");
    ln_s(&target, d.path().join("dangling")).unwrap();
    ln_s(o.path().join("secret"), d.path().join("link")).unwrap();
    let r = root(d.path());
    for name in ["dangling", "link", "a"] {
        let e = create_new(r.as_fd(), os(name), 0o644).unwrap_err();
        assert!(e.is(libc::EEXIST), "{name}: {e}");
    }
    assert!(!target.exists(), "created through a dangling link");
    assert_eq!(
        std::fs::read_to_string(o.path().join("secret")).unwrap(),
        "s"
    );
    let mut f = create_new(r.as_fd(), os("new"), 0o600).unwrap();
    f.write_all(b"fresh").unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("new")).unwrap(),
        "fresh"
    );
    assert!(
        create_new(r.as_fd(), os("new"), 0o600)
            .unwrap_err()
            .is(libc::EEXIST)
    );
}

#[test]
fn a_listing_gives_kinds_without_following() {
    let (d, o) = chain();
    ln_s(o.path(), d.path().join("dirlink")).unwrap();
    ln_s("nowhere", d.path().join("dangling")).unwrap();
    std::fs::write(d.path().join("file"), "").unwrap();
    nix::unistd::mkfifo(
        &d.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let r = root(d.path());
    let got: BTreeMap<_, _> = entries(r.as_fd())
        .unwrap()
        .into_iter()
        .map(|e| (e.name.into_string().unwrap(), e.kind))
        .collect();
    let want: BTreeMap<_, _> = [
        ("a", Kind::Dir),
        ("dirlink", Kind::Symlink),
        ("dangling", Kind::Symlink),
        ("file", Kind::File),
        ("fifo", Kind::Special),
    ]
    .into_iter()
    .map(|(n, k)| (n.to_owned(), k))
    .collect();
    assert_eq!(got, want);
}

#[test]
fn a_listing_streams_and_rewinds() {
    let d = tree();
    for i in 0..300 {
        std::fs::write(d.path().join(format!("file-with-a-longish-name-{i}")), "").unwrap();
    }
    let fd = open_root(d.path(), Access::Read).unwrap();
    // A small buffer: many `getdents64` calls.
    let mut l = Listing::new(fd, 256);
    let mut first = Vec::new();
    while let Some(e) = l.next_entry().unwrap() {
        assert_eq!(e.d_type, libc::DT_REG);
        assert_eq!(
            e.ino,
            std::fs::symlink_metadata(d.path().join(&e.name))
                .unwrap()
                .ino()
        );
        first.push(e.name);
    }
    assert_eq!(first.len(), 300);
    l.rewind().unwrap();
    let mut again = Vec::new();
    while let Some(e) = l.next_entry().unwrap() {
        again.push(e.name);
    }
    assert_eq!(first, again);
}

#[test]
fn names_change_without_following() {
    let (d, o) = chain();
    ln_s(o.path(), d.path().join("dirlink")).unwrap();
    let r = root(d.path());
    // mkdir: a taken name fails, a link there is not followed.
    assert!(
        mkdir(r.as_fd(), os("dirlink"), 0o755)
            .unwrap_err()
            .is(libc::EEXIST)
    );
    mkdir(r.as_fd(), os("new"), 0o755).unwrap();
    assert!(d.path().join("new").is_dir());
    // unlink removes the link, not its target; rmdir only empty directories.
    assert!(rmdir(r.as_fd(), os("a")).unwrap_err().is(libc::ENOTEMPTY));
    rmdir(r.as_fd(), os("new")).unwrap();
    // symlink and read_link.
    symlink(os("../../etc/passwd"), r.as_fd(), os("l")).unwrap();
    assert_eq!(read_link(r.as_fd(), os("l")).unwrap(), b"../../etc/passwd");
    assert_eq!(
        read_link(r.as_fd(), os("dirlink")).unwrap(),
        o.path().as_os_str().as_encoded_bytes()
    );
    assert!(
        symlink(os("x"), r.as_fd(), os("l"))
            .unwrap_err()
            .is(libc::EEXIST)
    );
    assert!(read_link(r.as_fd(), os("a")).unwrap_err().is(libc::EINVAL));
    // A hard link to a symlink links the symlink, never its target.
    hard_link(r.as_fd(), os("dirlink"), r.as_fd(), os("hard")).unwrap();
    assert_eq!(
        lstat(r.as_fd(), os("hard")).unwrap().map(|s| s.kind),
        Some(Kind::Symlink)
    );
    let c = walk(r.as_fd(), &names(&["a", "b", "c"]), Create::No).unwrap();
    hard_link(c.as_fd(), os("f"), r.as_fd(), os("f2")).unwrap();
    assert_eq!(
        lstat(r.as_fd(), os("f2")).unwrap().map(|s| s.nlink),
        Some(2)
    );
    assert!(
        hard_link(c.as_fd(), os("f"), r.as_fd(), os("f2"))
            .unwrap_err()
            .is(libc::EEXIST)
    );
    unlink(r.as_fd(), os("dirlink")).unwrap();
    unlink(r.as_fd(), os("hard")).unwrap();
    assert_eq!(lstat(r.as_fd(), os("dirlink")).unwrap(), None);
    assert!(o.path().join("secret").exists());
    // rename without replacing.
    let e = rename_noreplace(r.as_fd(), os("f2"), r.as_fd(), os("l")).unwrap_err();
    assert!(e.is(libc::EEXIST), "{e}");
    rename_noreplace(r.as_fd(), os("f2"), c.as_fd(), os("g")).unwrap();
    assert!(d.path().join("a/b/c/g").is_file());
}

#[test]
fn errors_name_the_call_and_the_path() {
    let d = tree();
    let r = root(d.path());
    let e = open_dir(r.as_fd(), os("missing"), Access::Read).unwrap_err();
    assert!(matches!(&e, FsError::Os { call: "openat", .. }), "{e}");
    assert_eq!(e.path(), Path::new("missing"));
    let shown = e.under(Path::new("/ws/sub")).to_string();
    assert!(
        shown.starts_with("failed to openat `/ws/sub/missing`: "),
        "{shown}"
    );
    let e = fstat(r.as_fd()).map(drop);
    assert!(e.is_ok());
    let e = unlink(r.as_fd(), os("nope")).unwrap_err().at("/ws/nope");
    assert_eq!(e.path(), Path::new("/ws/nope"));
    assert!(
        e.to_string().starts_with("failed to unlinkat `/ws/nope`"),
        "{e}"
    );
    assert_eq!(e.into_io().raw_os_error(), Some(libc::ENOENT));
    let e = mkdir(r.as_fd(), OsStr::from_bytes(b"a\0b"), 0o755).unwrap_err();
    assert!(matches!(e, FsError::Nul { .. }), "{e}");
    assert_eq!(e.errno(), None);
    assert!(e.to_string().contains("NUL byte"), "{e}");
}

/// A name with a `/` would have the kernel resolve (and follow symlinks in) its first
/// components: every call that takes a name in a directory refuses it, before any system call.
#[test]
fn a_name_with_a_slash_is_refused_before_the_kernel_sees_it() {
    let (d, o) = chain();
    // `a/link` leads outside: through it, `link/secret` would be the outside's file.
    ln_s(o.path(), d.path().join("a/link")).unwrap();
    let r = root(d.path());
    let a = open_dir(r.as_fd(), os("a"), Access::Read).unwrap();
    let not_a_name = |e: FsError| matches!(e, FsError::NotAName { .. });
    assert!(not_a_name(
        open_regular(a.as_fd(), os("link/secret")).unwrap_err()
    ));
    assert!(not_a_name(
        open_path(a.as_fd(), os("link/secret")).unwrap_err()
    ));
    assert!(not_a_name(lstat(a.as_fd(), os("link/secret")).unwrap_err()));
    assert!(not_a_name(
        open_dir(a.as_fd(), os("link/b"), Access::Read).unwrap_err()
    ));
    assert!(not_a_name(
        create_new(a.as_fd(), os("link/new"), 0o600).unwrap_err()
    ));
    assert!(not_a_name(
        mkdir(a.as_fd(), os("link/new"), 0o700).unwrap_err()
    ));
    assert!(not_a_name(
        unlink(a.as_fd(), os("link/secret")).unwrap_err()
    ));
    assert!(not_a_name(
        symlink(os("x"), a.as_fd(), os("link/l")).unwrap_err()
    ));
    assert!(not_a_name(mkdir(a.as_fd(), os(""), 0o700).unwrap_err()));
    // The outside is untouched, and a symlink's target may hold slashes.
    assert!(o.path().join("secret").exists() && !o.path().join("new").exists());
    symlink(os("../x/y"), a.as_fd(), os("l")).unwrap();
    let e = open_regular(a.as_fd(), os("a/b")).unwrap_err();
    assert_eq!(e.to_string(), "`a/b` is not a single file name");
}
