//! A directory tree copied without following a link: directories, regular files and symlinks
//! (as links, their targets never read) are copied; anything else (fifos, sockets, devices) is
//! left out and counted. Modes keep their permission bits only (no setuid, setgid or sticky
//! bit), the owner always able to read and write what it owns. With `owner`, every entry made
//! is given to those ids (a root runner's round must be able to write its copy).
//!
//! Sources are quiescent: a store entry (the runner's), or the directory a finished set-up
//! wrote (its processes are gone with its pid namespace). Every file is still opened with
//! `O_NOFOLLOW`, so a link swapped in cannot make the copy read outside the tree.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::CacheError;

/// What a copy made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Copied {
    /// Regular files and links made.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Entries left out (not a directory, regular file or link).
    pub skipped: u64,
}

/// Copies the tree at `src` to `dst`, which must not exist.
pub fn copy_tree(src: &Path, dst: &Path, owner: Option<(u32, u32)>) -> Result<Copied, CacheError> {
    let meta = fs::symlink_metadata(src).map_err(|e| CacheError::io("stat", src, e))?;
    if !meta.is_dir() {
        return Err(CacheError::io(
            "copy",
            src,
            std::io::Error::other("not a directory (a link is never followed)"),
        ));
    }
    let mut out = Copied::default();
    make_dir(dst, meta.mode(), owner)?;
    let mut stack: Vec<(PathBuf, PathBuf)> = vec![(src.to_path_buf(), dst.to_path_buf())];
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    while let Some((from, to)) = stack.pop() {
        // An entry removed between the listing and its copy (another process of the host
        // tidying the tree, such as a detached `git gc`) is left out, counted as skipped.
        let entries = match fs::read_dir(&from) {
            Err(e) if gone(&e) && from != src => {
                out.skipped += 1;
                continue;
            }
            r => r.map_err(|e| CacheError::io("read", &from, e))?,
        };
        for entry in entries {
            let entry = entry.map_err(|e| CacheError::io("read", &from, e))?;
            let (s, d) = (entry.path(), to.join(entry.file_name()));
            let m = match fs::symlink_metadata(&s) {
                Err(e) if gone(&e) => {
                    out.skipped += 1;
                    continue;
                }
                r => r.map_err(|e| CacheError::io("stat", &s, e))?,
            };
            let t = m.file_type();
            if t.is_dir() {
                make_dir(&d, m.mode(), owner)?;
                stack.push((s, d));
            } else if t.is_file() {
                out.bytes += copy_file(&s, &d, m.mode(), owner)?;
                out.files += 1;
            } else if t.is_symlink() {
                let target = fs::read_link(&s).map_err(|e| CacheError::io("readlink", &s, e))?;
                std::os::unix::fs::symlink(&target, &d)
                    .map_err(|e| CacheError::io("symlink", &d, e))?;
                if let Some((u, g)) = owner {
                    std::os::unix::fs::lchown(&d, Some(u), Some(g))
                        .map_err(|e| CacheError::io("chown", &d, e))?;
                }
                out.files += 1;
            } else {
                out.skipped += 1;
            }
        }
    }
    Ok(out)
}

/// Permission bits kept: rwx for all, the owner's read and write always.
pub fn kept_mode(mode: u32, dir: bool) -> u32 {
    (mode & 0o777) | if dir { 0o700 } else { 0o600 }
}

fn make_dir(d: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<(), CacheError> {
    fs::create_dir(d).map_err(|e| CacheError::io("create", d, e))?;
    fs::set_permissions(d, fs::Permissions::from_mode(kept_mode(mode, true)))
        .map_err(|e| CacheError::io("chmod", d, e))?;
    if let Some((u, g)) = owner {
        std::os::unix::fs::lchown(d, Some(u), Some(g))
            .map_err(|e| CacheError::io("chown", d, e))?;
    }
    Ok(())
}

fn copy_file(s: &Path, d: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<u64, CacheError> {
    let mut from = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(s)
    {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        r => r.map_err(|e| CacheError::io("open", s, e))?,
    };
    if !from
        .metadata()
        .map_err(|e| CacheError::io("stat", s, e))?
        .is_file()
    {
        return Ok(0);
    }
    let mut to: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(d)
        .map_err(|e| CacheError::io("create", d, e))?;
    let n = std::io::copy(&mut from, &mut to).map_err(|e| CacheError::io("copy", s, e))?;
    to.set_permissions(fs::Permissions::from_mode(kept_mode(mode, false)))
        .map_err(|e| CacheError::io("chmod", d, e))?;
    if let Some((u, g)) = owner {
        std::os::unix::fs::fchown(&to, Some(u), Some(g))
            .map_err(|e| CacheError::io("chown", d, e))?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_copied_links_as_links_and_special_bits_dropped() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        fs::create_dir_all(src.join("a/b")).unwrap();
        fs::write(src.join("a/b/f"), "hello").unwrap();
        fs::set_permissions(src.join("a/b/f"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::write(t.path().join("outside"), "secret").unwrap();
        std::os::unix::fs::symlink(t.path().join("outside"), src.join("link")).unwrap();
        nix::unistd::mkfifo(&src.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let dst = t.path().join("dst");
        let c = copy_tree(&src, &dst, None).unwrap();
        assert_eq!(
            c,
            Copied {
                files: 2,
                bytes: 5,
                skipped: 1
            }
        );
        assert_eq!(fs::read_to_string(dst.join("a/b/f")).unwrap(), "hello");
        let mode = fs::metadata(dst.join("a/b/f")).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o755);
        assert!(fs::symlink_metadata(dst.join("link")).unwrap().is_symlink());
        assert_eq!(
            fs::read_link(dst.join("link")).unwrap(),
            t.path().join("outside")
        );
        assert!(!dst.join("fifo").exists());
        // The destination must be new; a source that is a link is refused.
        assert!(copy_tree(&src, &dst, None).is_err());
        std::os::unix::fs::symlink(&src, t.path().join("srclink")).unwrap();
        assert!(copy_tree(&t.path().join("srclink"), &t.path().join("d2"), None).is_err());
    }
}
