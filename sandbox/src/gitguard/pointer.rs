//! Where a `.git` file (`gitdir: PATH`) or a `commondir` file (`PATH`) sends git, resolved
//! lexically inside the tree — never by following anything on disk. A pointer is left in place
//! only when it lands on a git directory the same walk found (so its surfaces are checked too),
//! and every directory that a `..` steps out of is a real directory (so the kernel would resolve
//! it the same way); anything else is treated as pointing elsewhere.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::beneath::{self, Found, Kind, TreePath};

/// The path of a `.git` file's `gitdir:` line, as git reads it (`gitdir: ` at the start, the
/// rest up to trailing `\n`/`\r`); `None` when git would refuse the file.
pub fn gitfile_target(content: &[u8]) -> Option<&[u8]> {
    let rest = content.strip_prefix(b"gitdir: ")?;
    let t = trim_newlines(rest);
    (!t.is_empty() && !t.contains(&0)).then_some(t)
}

/// The path in a `commondir` file, as git reads it (trailing `\n`/`\r` removed).
pub fn commondir_target(content: &[u8]) -> Option<&[u8]> {
    let t = trim_newlines(content);
    (!t.is_empty() && !t.contains(&0)).then_some(t)
}

fn trim_newlines(mut b: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r'] = b {
        b = rest;
    }
    b
}

/// `target` read from a file in the directory `base` (below `root`), as a path below `root`;
/// `None` when it leaves the tree or a `..` steps out of something that is not a real
/// directory.
pub fn resolve(root: &Path, base: &Path, target: &[u8]) -> Option<PathBuf> {
    let t = Path::new(OsStr::from_bytes(target));
    let (mut stack, rest): (Vec<OsString>, &Path) = if t.is_absolute() {
        (Vec::new(), t.strip_prefix(root).ok()?)
    } else {
        (
            base.components()
                .map(|c| c.as_os_str().to_owned())
                .collect(),
            t,
        )
    };
    for c in rest.components() {
        match c {
            Component::Normal(n) => stack.push(n.to_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                let here: PathBuf = stack.iter().collect();
                let real_dir = match TreePath::new(root, &here) {
                    Ok(tp) => matches!(
                        beneath::inspect(&tp),
                        Ok(Found::Exists(st)) if st.kind == Kind::Dir
                    ),
                    // The root itself: stepping out of it leaves the tree.
                    Err(_) => false,
                };
                if !real_dir {
                    return None;
                }
                stack.pop();
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(stack.iter().collect())
}
