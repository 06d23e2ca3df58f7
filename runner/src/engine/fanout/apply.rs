//! The winner's changes applied to the job's workspace (SPEC §13): the workspace is made to hold
//! what the winning attempt's copy holds, entry by entry, and nothing else changes. What the
//! copy left as it was (the same kind, content, link target, and the mode the copy gave it) is
//! not touched; a changed or new file is written beside its place and renamed over it; a link
//! is made as a link (its target never read); an entry the winner removed is removed (a
//! directory with everything in it, never following a link). Entries a copy leaves out
//! (fifos, sockets, devices) and the runner's own placeholders (an empty directory at a
//! protected path the workspace lacks) are left alone.
//!
//! Both trees are quiescent: every attempt has ended (its processes gone with its sandbox), and
//! the workspace is under the job's lock. Every file of the copy is still opened with
//! `O_NOFOLLOW`, and no walk descends into a link on either side.

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::cache::copy::kept_mode;
use crate::store::event::AppliedChanges;

/// Why the changes could not be applied (the workspace may hold part of them).
#[derive(Debug, thiserror::Error)]
#[error("{call} `{}`: {source}", path.display())]
pub struct ApplyError {
    /// What failed.
    pub call: &'static str,
    /// Where.
    pub path: PathBuf,
    /// Why.
    pub source: std::io::Error,
}

fn io<'a>(call: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ApplyError + 'a {
    move |source| ApplyError {
        call,
        path: path.to_owned(),
        source,
    }
}

/// What an entry is, as far as a copy carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Link,
    /// Not copied (fifo, socket, device).
    Other,
}

fn kind(m: &fs::Metadata) -> Kind {
    let t = m.file_type();
    if t.is_dir() {
        Kind::Dir
    } else if t.is_file() {
        Kind::File
    } else if t.is_symlink() {
        Kind::Link
    } else {
        Kind::Other
    }
}

/// What the walks share: the two roots and how entries are made.
struct Apply<'a> {
    winner: &'a Path,
    workspace: &'a Path,
    placeholders: &'a [PathBuf],
    owner: Option<(u32, u32)>,
    out: AppliedChanges,
}

/// Makes `workspace` hold what `winner` holds (module doc), comparing every entry of both.
/// `placeholders`: protected paths (relative). `owner`: who owns what is made (a root runner's,
/// the workspace's owner).
pub fn apply(
    winner: &Path,
    workspace: &Path,
    placeholders: &[PathBuf],
    owner: Option<(u32, u32)>,
) -> Result<AppliedChanges, ApplyError> {
    let mut a = Apply::new(winner, workspace, placeholders, owner);
    a.full(PathBuf::new())?;
    Ok(a.out)
}

/// [`apply`] for a winner that is an overlay on `workspace` (mounted at `winner`, its upper
/// layer `upper`): only what the upper layer holds can differ, so only that is visited — a
/// whiteout is an entry the winner removed, an opaque directory one it replaced (compared
/// whole), any other entry is compared through the mounted view as [`apply`] does.
pub fn apply_overlay(
    winner: &Path,
    upper: &Path,
    workspace: &Path,
    placeholders: &[PathBuf],
    owner: Option<(u32, u32)>,
) -> Result<AppliedChanges, ApplyError> {
    let mut a = Apply::new(winner, workspace, placeholders, owner);
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let u_dir = upper.join(&rel);
        for e in fs::read_dir(&u_dir).map_err(io("read", &u_dir))? {
            let name = e.map_err(io("read", &u_dir))?.file_name();
            let (u, o) = (u_dir.join(&name), workspace.join(&rel).join(&name));
            let um = fs::symlink_metadata(&u).map_err(io("stat", &u))?;
            if is_whiteout(&um) {
                if let Some(m) = stat_opt(&o)? {
                    if kind(&m) != Kind::Other {
                        remove(&o, &m)?;
                        a.out.removed += 1;
                    }
                }
                continue;
            }
            let r = rel.join(&name);
            if a.entry(&r)? {
                if is_opaque(&u) {
                    a.full(r)?;
                } else {
                    stack.push(r);
                }
            }
        }
    }
    Ok(a.out)
}

/// A whiteout: a character device 0/0 in an upper layer.
fn is_whiteout(m: &fs::Metadata) -> bool {
    use std::os::unix::fs::FileTypeExt;
    m.file_type().is_char_device() && m.rdev() == 0
}

/// An opaque directory of an upper layer: the lower layer's entries under it are hidden.
fn is_opaque(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 4];
    // SAFETY: a NUL-terminated path and a buffer of the length given, alive for the call.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    n == 1 && buf[0] == b'y'
}

fn stat_opt(p: &Path) -> Result<Option<fs::Metadata>, ApplyError> {
    match fs::symlink_metadata(p) {
        Ok(m) => Ok(Some(m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("stat", p)(e)),
    }
}

impl<'a> Apply<'a> {
    fn new(
        winner: &'a Path,
        workspace: &'a Path,
        placeholders: &'a [PathBuf],
        owner: Option<(u32, u32)>,
    ) -> Self {
        Apply {
            winner,
            workspace,
            placeholders,
            owner,
            out: AppliedChanges::default(),
        }
    }

    /// Every entry below `rel` (a directory on both sides), compared.
    fn full(&mut self, rel: PathBuf) -> Result<(), ApplyError> {
        let mut stack = vec![rel];
        while let Some(rel) = stack.pop() {
            let (w_dir, o_dir) = (self.winner.join(&rel), self.workspace.join(&rel));
            let mut names: Vec<std::ffi::OsString> = Vec::new();
            for e in fs::read_dir(&o_dir).map_err(io("read", &o_dir))? {
                names.push(e.map_err(io("read", &o_dir))?.file_name());
            }
            let mut w_names: Vec<std::ffi::OsString> = Vec::new();
            for e in fs::read_dir(&w_dir).map_err(io("read", &w_dir))? {
                w_names.push(e.map_err(io("read", &w_dir))?.file_name());
            }
            // What the winner no longer has goes first (a name may change kind).
            for name in &names {
                if w_names.contains(name) {
                    continue;
                }
                let o = o_dir.join(name);
                let m = fs::symlink_metadata(&o).map_err(io("stat", &o))?;
                if kind(&m) == Kind::Other {
                    continue;
                }
                remove(&o, &m)?;
                self.out.removed += 1;
            }
            for name in &w_names {
                let r = rel.join(name);
                if self.entry(&r)? {
                    stack.push(r);
                }
            }
        }
        Ok(())
    }

    /// Makes the workspace's entry `r` what the winner's is; returns whether it is a directory
    /// to descend into.
    fn entry(&mut self, r: &Path) -> Result<bool, ApplyError> {
        let (w, o) = (self.winner.join(r), self.workspace.join(r));
        let wm = fs::symlink_metadata(&w).map_err(io("stat", &w))?;
        let om = stat_opt(&o)?;
        let owner = self.owner;
        match kind(&wm) {
            Kind::Other => Ok(false),
            Kind::Dir => {
                match &om {
                    Some(m) if kind(m) == Kind::Dir => {
                        if m.mode() & 0o777 != wm.mode() & 0o777
                            && kept_mode(m.mode(), true) != wm.mode() & 0o777
                        {
                            set_mode(&o, wm.mode())?;
                            self.out.written += 1;
                        }
                    }
                    _ => {
                        if om.is_none() && self.placeholders.iter().any(|p| p == r) && is_empty(&w)?
                        {
                            return Ok(false);
                        }
                        if let Some(m) = &om {
                            remove(&o, m)?;
                        }
                        fs::create_dir(&o).map_err(io("create", &o))?;
                        set_mode(&o, wm.mode())?;
                        chown(&o, owner)?;
                        self.out.written += 1;
                    }
                }
                Ok(true)
            }
            Kind::File => {
                let same = match &om {
                    Some(m) if kind(m) == Kind::File => {
                        m.len() == wm.len()
                            && (wm.mode() & 0o777 == m.mode() & 0o777
                                || wm.mode() & 0o777 == kept_mode(m.mode(), false))
                            && same_content(&w, &o)?
                    }
                    _ => false,
                };
                if !same {
                    self.out.bytes += replace_file(&w, &o, wm.mode(), owner)?;
                    self.out.written += 1;
                }
                Ok(false)
            }
            Kind::Link => {
                let target = fs::read_link(&w).map_err(io("readlink", &w))?;
                let same = match &om {
                    Some(m) if kind(m) == Kind::Link => {
                        fs::read_link(&o).map_err(io("readlink", &o))? == target
                    }
                    _ => false,
                };
                if !same {
                    if let Some(m) = om.as_ref().filter(|m| kind(m) == Kind::Dir) {
                        remove(&o, m)?;
                    }
                    let tmp = temp_name(&o);
                    std::os::unix::fs::symlink(&target, &tmp).map_err(io("symlink", &tmp))?;
                    if let Some((u, g)) = owner {
                        std::os::unix::fs::lchown(&tmp, Some(u), Some(g))
                            .map_err(io("chown", &tmp))?;
                    }
                    fs::rename(&tmp, &o).map_err(io("rename", &o))?;
                    self.out.written += 1;
                }
                Ok(false)
            }
        }
    }
}

fn is_empty(dir: &Path) -> Result<bool, ApplyError> {
    Ok(fs::read_dir(dir).map_err(io("read", dir))?.next().is_none())
}

fn set_mode(p: &Path, mode: u32) -> Result<(), ApplyError> {
    fs::set_permissions(p, fs::Permissions::from_mode(mode & 0o777)).map_err(io("chmod", p))
}

fn chown(p: &Path, owner: Option<(u32, u32)>) -> Result<(), ApplyError> {
    match owner {
        Some((u, g)) => std::os::unix::fs::lchown(p, Some(u), Some(g)).map_err(io("chown", p)),
        None => Ok(()),
    }
}

/// Removes `p` whatever it is (a link itself, never its target).
fn remove(p: &Path, m: &fs::Metadata) -> Result<(), ApplyError> {
    if kind(m) == Kind::Dir {
        fs::remove_dir_all(p).map_err(io("remove", p))
    } else {
        fs::remove_file(p).map_err(io("remove", p))
    }
}

fn temp_name(o: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".ralph-apply-");
    name.push(o.file_name().unwrap_or_default());
    o.with_file_name(name)
}

/// Writes the copy's file `w` beside `o` and renames it over `o` (a directory there is removed
/// first). Returns the bytes written.
fn replace_file(
    w: &Path,
    o: &Path,
    mode: u32,
    owner: Option<(u32, u32)>,
) -> Result<u64, ApplyError> {
    if fs::symlink_metadata(o).is_ok_and(|m| m.is_dir()) {
        fs::remove_dir_all(o).map_err(io("remove", o))?;
    }
    let mut from = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(w)
        .map_err(io("open", w))?;
    let tmp = temp_name(o);
    let _ = fs::remove_file(&tmp);
    let mut to: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    let n = std::io::copy(&mut from, &mut to).map_err(io("copy", w))?;
    to.set_permissions(fs::Permissions::from_mode(mode & 0o777))
        .map_err(io("chmod", &tmp))?;
    if let Some((u, g)) = owner {
        std::os::unix::fs::fchown(&to, Some(u), Some(g)).map_err(io("chown", &tmp))?;
    }
    to.sync_all().map_err(io("sync", &tmp))?;
    drop(to);
    fs::rename(&tmp, o).map_err(io("rename", o))?;
    Ok(n)
}

/// Whether two regular files hold the same bytes (the copy's opened without following).
fn same_content(w: &Path, o: &Path) -> Result<bool, ApplyError> {
    let mut a = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(w)
        .map_err(io("open", w))?;
    let mut b = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(o)
        .map_err(io("open", o))?;
    let (mut x, mut y) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = read_full(&mut a, &mut x).map_err(io("read", w))?;
        let m = read_full(&mut b, &mut y).map_err(io("read", o))?;
        if n != m || x[..n] != y[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = f.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree(root: &Path, files: &[(&str, &str)]) {
        for (p, c) in files {
            let p = root.join(p);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, c).unwrap();
        }
    }

    #[test]
    fn the_workspace_gets_exactly_the_winners_changes() {
        let d = tempfile::tempdir().unwrap();
        let (ws, copy) = (d.path().join("ws"), d.path().join("copy"));
        tree(
            &ws,
            &[
                ("a.txt", "a"),
                ("b.txt", "b"),
                ("dir/c.txt", "c"),
                ("keep.txt", "k"),
                ("gone/x", "x"),
            ],
        );
        fs::set_permissions(ws.join("keep.txt"), fs::Permissions::from_mode(0o444)).unwrap();
        symlink("a.txt", ws.join("link")).unwrap();
        crate::cache::copy::copy_tree(&ws, &copy, None).unwrap();
        // The winner: a.txt changed, b.txt removed, new file, a link retargeted, a dir
        // replaced by a file, a file made executable, an empty placeholder left.
        fs::write(copy.join("a.txt"), "A").unwrap();
        fs::remove_file(copy.join("b.txt")).unwrap();
        fs::write(copy.join("dir/new.txt"), "new").unwrap();
        fs::remove_file(copy.join("link")).unwrap();
        symlink("/etc/passwd", copy.join("link")).unwrap();
        fs::remove_dir_all(copy.join("gone")).unwrap();
        fs::write(copy.join("gone"), "now a file").unwrap();
        fs::set_permissions(copy.join("dir/c.txt"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::create_dir(copy.join(".env")).unwrap();
        let got = apply(&copy, &ws, &[PathBuf::from(".env")], None).unwrap();
        assert_eq!(fs::read_to_string(ws.join("a.txt")).unwrap(), "A");
        assert!(!ws.join("b.txt").exists());
        assert_eq!(fs::read_to_string(ws.join("dir/new.txt")).unwrap(), "new");
        assert_eq!(
            fs::read_link(ws.join("link")).unwrap(),
            PathBuf::from("/etc/passwd")
        );
        assert_eq!(fs::read_to_string(ws.join("gone")).unwrap(), "now a file");
        assert_eq!(
            fs::metadata(ws.join("dir/c.txt")).unwrap().mode() & 0o777,
            0o755
        );
        // Untouched: the read-only file the copy made writable, and the placeholder.
        assert_eq!(
            fs::metadata(ws.join("keep.txt")).unwrap().mode() & 0o777,
            0o444
        );
        assert!(!ws.join(".env").exists());
        assert_eq!((got.written, got.removed), (5, 1), "{got:?}");
        // Nothing left behind.
        let names: Vec<_> = fs::read_dir(&ws)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.to_string_lossy().starts_with(".ralph-apply-"))
        );
        // Applying again changes nothing.
        let again = apply(&copy, &ws, &[PathBuf::from(".env")], None).unwrap();
        assert_eq!(again, AppliedChanges::default());
    }

    /// Every entry below `a` and `b`: kind, mode bits, content or link target.
    fn listing(root: &Path) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            for e in fs::read_dir(root.join(&rel)).unwrap() {
                let r = rel.join(e.unwrap().file_name());
                let p = root.join(&r);
                let m = fs::symlink_metadata(&p).unwrap();
                let what = match kind(&m) {
                    Kind::Dir => {
                        stack.push(r.clone());
                        format!("dir {:o}", m.mode() & 0o777)
                    }
                    Kind::File => format!(
                        "file {:o} {}",
                        m.mode() & 0o777,
                        fs::read_to_string(&p).unwrap()
                    ),
                    Kind::Link => format!("link {}", fs::read_link(&p).unwrap().display()),
                    Kind::Other => "other".into(),
                };
                out.push((r, what));
            }
        }
        out.sort();
        out
    }

    /// Through a real overlay (root only): what the winner changed through the mount — a file
    /// changed and chmodded, one removed, a directory replaced whole (opaque), a file replaced
    /// by a directory, a new tree — reaches the workspace by the upper layer's walk alone, and
    /// the workspace then lists exactly as the winner's view.
    #[test]
    fn an_overlay_winner_is_applied_from_its_upper_layer() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: mounting an overlay needs root");
            return;
        }
        let d = tempfile::tempdir_in("/var/tmp").unwrap();
        let (ws, view) = (d.path().join("ws"), d.path().join("view"));
        tree(
            &ws,
            &[
                ("a.txt", "a"),
                ("b.txt", "b"),
                ("keep/k", "k"),
                ("swap/x", "x"),
                ("swap/y", "y"),
                ("f", "file"),
            ],
        );
        fs::create_dir(&view).unwrap();
        crate::provision::layered::create(&view, &ws).unwrap();
        if let Err(e) = crate::provision::layered::mount(&view) {
            eprintln!("skipped: no overlay here: {e}");
            return;
        }
        fs::write(view.join("a.txt"), "A").unwrap();
        fs::set_permissions(view.join("a.txt"), fs::Permissions::from_mode(0o755)).unwrap();
        fs::remove_file(view.join("b.txt")).unwrap();
        fs::remove_dir_all(view.join("swap")).unwrap();
        fs::create_dir(view.join("swap")).unwrap();
        fs::write(view.join("swap/z"), "z").unwrap();
        fs::remove_file(view.join("f")).unwrap();
        tree(&view, &[("f/inside", "now a dir"), ("new/deep/n", "n")]);
        symlink("a.txt", view.join("link")).unwrap();
        let upper = crate::provision::layered::layer_dir(&view).join("upper");
        let got = apply_overlay(&view, &upper, &ws, &[], None);
        let expected = listing(&view);
        crate::provision::layered::remove(&view).unwrap();
        let got = got.unwrap();
        assert_eq!(listing(&ws), expected);
        assert!(!ws.join("swap/x").exists() && ws.join("swap/z").exists());
        assert_eq!(fs::read_to_string(ws.join("keep/k")).unwrap(), "k");
        assert!(got.removed >= 2, "{got:?}");
    }

    #[test]
    fn a_link_in_the_winner_is_never_followed() {
        let d = tempfile::tempdir().unwrap();
        let (ws, copy, outside) = (
            d.path().join("ws"),
            d.path().join("copy"),
            d.path().join("outside"),
        );
        tree(&ws, &[("sub/f", "1")]);
        tree(&outside, &[("secret", "s")]);
        crate::cache::copy::copy_tree(&ws, &copy, None).unwrap();
        // The winner replaced a directory by a link to outside the tree.
        fs::remove_dir_all(copy.join("sub")).unwrap();
        symlink(&outside, copy.join("sub")).unwrap();
        apply(&copy, &ws, &[], None).unwrap();
        assert!(
            fs::symlink_metadata(ws.join("sub"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // The outside tree was neither read into the workspace nor changed.
        assert_eq!(fs::read_to_string(outside.join("secret")).unwrap(), "s");
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
    }
}
