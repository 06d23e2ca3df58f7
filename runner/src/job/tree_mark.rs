//! The mark a root runner leaves on every tree its rounds may write (the workspace and each
//! `--write` directory of a job that is not `read-only`): the extended attribute
//! [`MARK`] on the tree's root directory, set before each run. It is the filesystem's own record
//! of "a round may have written below here", for the path rule of [`super::resolve`] to read
//! whichever state store (or none: `ralph sandbox exec`) a later job uses.
//!
//! Why it is needed: a root runner's rounds on a root-owned tree leave root-owned files there —
//! natively through the idmapped mount (what the agent user creates belongs to the tree's owner),
//! in docker as uid 0 — so a symlink they plant looks like one of root's own. The `trusted.`
//! namespace is root's alone: setting or removing such an attribute needs `CAP_SYS_ADMIN`, which
//! no round holds, and an unprivileged process does not even see it. A runner that is not root
//! marks nothing (its rounds are its own uid, and their links are refused for not being root's).
//! A filesystem without `trusted.` attributes (NFS, some FUSE) cannot be marked; then only the
//! state store's record covers such a tree (docs/sandbox.md says so).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The attribute's name.
pub const MARK: &str = "trusted.ralph.writable_tree";

fn c_path(p: &Path) -> Option<CString> {
    CString::new(p.as_os_str().as_bytes()).ok()
}

fn c_name() -> CString {
    // A constant without NUL bytes.
    CString::new(MARK).unwrap_or_default()
}

/// Marks the directory `dir` (not followed if it is a symlink: the attribute lands on the link,
/// which is then refused anyway). Does nothing unless this process is root; a filesystem that
/// cannot hold the attribute is left unmarked (`Err`, for the caller to ignore or report).
pub fn mark(dir: &Path) -> std::io::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let path = c_path(dir).ok_or_else(|| std::io::Error::other("path holds a NUL byte"))?;
    let name = c_name();
    // SAFETY: two NUL-terminated strings and a one-byte value, all alive for the call.
    let rc = unsafe { libc::lsetxattr(path.as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the directory `dir` carries the mark (always false for a process that cannot read
/// `trusted.` attributes, i.e. one that is not root).
pub fn is_marked(dir: &Path) -> bool {
    let (Some(path), name) = (c_path(dir), c_name()) else {
        return false;
    };
    // SAFETY: two NUL-terminated strings; a null buffer of size 0 asks for the value's size only.
    let rc = unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    rc >= 0
}

/// Marks each of `trees`, ignoring a filesystem that cannot be marked (the store's record still
/// covers the tree then).
pub fn mark_all<'a>(trees: impl IntoIterator<Item = &'a Path>) {
    for t in trees {
        let _ = mark(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_directory_is_seen_and_an_unmarked_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        mark(&a).unwrap();
        assert_eq!(is_marked(&a), nix::unistd::geteuid().is_root());
        assert!(!is_marked(&b));
        assert!(!is_marked(&dir.path().join("missing")));
    }
}
