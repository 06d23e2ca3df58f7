//! The pure path rules of an upload: an entry's path is relative and never climbs (`..`), and
//! a symlink's target stays beneath the workspace.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use super::Rule;

/// An entry's path split into its components (no empty, `.` or `..` component).
pub(super) type Components = Vec<OsString>;

/// Splits an entry's raw path into components, refusing absolute paths, `..` and NUL bytes.
/// `a//b/./c/` is `[a, b, c]`; `.` and `./` are the empty path (the workspace itself).
pub(super) fn components(raw: &[u8]) -> Result<Components, Rule> {
    if raw.first() == Some(&b'/') {
        return Err(Rule::AbsolutePath);
    }
    if raw.contains(&0) {
        return Err(Rule::NulByte);
    }
    let mut out = Vec::new();
    for part in raw.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(Rule::ParentDir),
            name => out.push(OsString::from_vec(name.to_vec())),
        }
    }
    Ok(out)
}

/// One step of a symlink's target, as the kernel would take it from the link's directory.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Into the named entry.
    Down(OsString),
    /// Up to the parent of the directory reached so far.
    Up,
}

/// Checks a symlink target lexically from the link's parent directory (`parent`, components
/// beneath the workspace) and returns its steps. Refuses empty, absolute and NUL targets and
/// any target whose `..` climbs above the workspace.
///
/// Lexical checking is exact only when every component a `..` climbs out of is a real
/// directory (not a symlink): the caller checks that on disk for each [`Step::Up`].
pub(super) fn link_steps(parent: &[OsString], target: &[u8]) -> Result<Vec<Step>, Rule> {
    if target.is_empty() {
        return Err(Rule::EmptyLinkTarget);
    }
    if target.first() == Some(&b'/') {
        return Err(Rule::LinkAbsolute);
    }
    if target.contains(&0) {
        return Err(Rule::NulByte);
    }
    let mut depth = parent.len();
    let mut steps = Vec::new();
    for part in target.split(|b| *b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                depth = depth.checked_sub(1).ok_or(Rule::LinkOutside)?;
                steps.push(Step::Up);
            }
            name => {
                depth += 1;
                steps.push(Step::Down(OsString::from_vec(name.to_vec())));
            }
        }
    }
    Ok(steps)
}

/// Shows a raw path for messages (lossy UTF-8).
pub(super) fn shown(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn comps(raw: &str) -> Result<Vec<String>, Rule> {
        components(raw.as_bytes()).map(|c| {
            c.into_iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect()
        })
    }

    #[test]
    fn hostile_paths_are_refused() {
        assert_eq!(comps("/etc/passwd"), Err(Rule::AbsolutePath));
        assert_eq!(comps("../x"), Err(Rule::ParentDir));
        assert_eq!(comps("a/../../x"), Err(Rule::ParentDir));
        assert_eq!(comps("a/.."), Err(Rule::ParentDir));
        assert_eq!(comps("a\0b"), Err(Rule::NulByte));
    }

    #[test]
    fn ordinary_paths_are_split() {
        assert_eq!(comps("a//b/./c/").unwrap(), ["a", "b", "c"]);
        assert_eq!(comps("./").unwrap(), Vec::<String>::new());
        assert_eq!(comps(".git/HEAD").unwrap(), [".git", "HEAD"]);
    }

    #[test]
    fn link_targets_stay_beneath() {
        let parent = [OsString::from("a")];
        assert_eq!(link_steps(&parent, b"/etc"), Err(Rule::LinkAbsolute));
        assert_eq!(
            link_steps(&parent, b"../../outside"),
            Err(Rule::LinkOutside)
        );
        assert_eq!(link_steps(&[], b".."), Err(Rule::LinkOutside));
        assert_eq!(link_steps(&parent, b""), Err(Rule::EmptyLinkTarget));
        assert_eq!(link_steps(&parent, b"../b/c").unwrap().len(), 3);
        assert_eq!(link_steps(&[], b"x/../y").unwrap().len(), 3);
    }
}
