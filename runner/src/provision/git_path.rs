//! Which workspace paths git refuses to put in an index, as pure rules: the ones of git's own
//! `verify_path` with `core.protectNTFS` and `core.protectHFS` on (the runner pins both on
//! where it stages a result, so a patch applies on any client's git). A round may leave such a
//! path (`.GIT/config`, `sub/.Git/hooks/x`, `git~1`, `.gitmodules` as a link); the result is
//! staged without it and it is reported ([`super::patch_status::SkipReason::GitPath`]). git
//! stays the judge: a path these rules let through and git still refuses is found after
//! staging and reported too.

/// Code points HFS+ ignores when it compares names (git's `next_hfs_char`): a name that is
/// `.git` once they are dropped is `.git` on a Mac.
fn hfs_ignorable(c: char) -> bool {
    matches!(
        c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}'
    )
}

/// Whether `component` is `name` (ASCII, lowercase) once HFS+-ignorable code points are
/// dropped, case-insensitively.
fn is_hfs(component: &[u8], name: &str) -> bool {
    let Ok(text) = std::str::from_utf8(component) else {
        return false;
    };
    let mut kept = text.chars().filter(|c| !hfs_ignorable(*c));
    let mut want = name.chars();
    loop {
        match (kept.next(), want.next()) {
            (None, None) => return true,
            (Some(k), Some(w)) if k.to_ascii_lowercase() == w => {}
            _ => return false,
        }
    }
}

/// An 8.3 short name of a dot-file on NTFS: `stem~N`, N in `digits`.
struct Short {
    stem: &'static str,
    digits: std::ops::RangeInclusive<u8>,
}

/// `.git`'s short name (git checks `git~1` only).
const GIT_SHORT: [Short; 1] = [Short {
    stem: "git",
    digits: b'1'..=b'1',
}];

/// `.gitmodules`'s short names: `gitmod~1`…`~4`, and git's hashed `gi7eba~1`…`~9`.
const GITMODULES_SHORT: [Short; 2] = [
    Short {
        stem: "gitmod",
        digits: b'1'..=b'4',
    },
    Short {
        stem: "gi7eba",
        digits: b'1'..=b'9',
    },
];

/// Whether `component` is an NTFS spelling of `.NAME` (`long`): the name or one of its
/// `short` names, followed only by spaces and dots up to its end or a `:` (an alternate data
/// stream).
fn is_ntfs(component: &[u8], long: &str, short: &[Short]) -> bool {
    let lower: Vec<u8> = component.iter().map(u8::to_ascii_lowercase).collect();
    let rest = lower
        .strip_prefix(b".")
        .and_then(|r| r.strip_prefix(long.as_bytes()))
        .or_else(|| {
            short.iter().find_map(|s| {
                let (digit, rest) = lower
                    .strip_prefix(s.stem.as_bytes())?
                    .strip_prefix(b"~")?
                    .split_first()?;
                s.digits.contains(digit).then_some(rest)
            })
        });
    let Some(rest) = rest else {
        return false;
    };
    for &c in rest {
        match c {
            b':' => return true,
            b' ' | b'.' => {}
            _ => return false,
        }
    }
    true
}

/// Whether git refuses `path` (relative, `/`-separated, as `git ls-files` lists it) in an
/// index; `link`: it is a symbolic link (`.gitmodules` may not be one).
pub fn refused(path: &[u8], link: bool) -> bool {
    if path.is_empty() {
        return true;
    }
    let components: Vec<&[u8]> = path.split(|b| *b == b'/').collect();
    let last = components.len() - 1;
    for (i, component) in components.iter().enumerate() {
        if component.is_empty() || *component == b"." || *component == b".." {
            return true;
        }
        // A backslash separates names on NTFS: every part after one is checked like a name.
        for part in component.split(|b| *b == b'\\') {
            if part.eq_ignore_ascii_case(b".git")
                || is_ntfs(part, "git", &GIT_SHORT)
                || is_hfs(part, ".git")
            {
                return true;
            }
            if link
                && i == last
                && (part.eq_ignore_ascii_case(b".gitmodules")
                    || is_ntfs(part, "gitmodules", &GITMODULES_SHORT)
                    || is_hfs(part, ".gitmodules"))
            {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_in_any_case_or_spelling_at_any_depth_is_refused() {
        for p in [
            ".git",
            ".GIT/config",
            "sub/.Git/hooks/x",
            "a/b/.gIt",
            "git~1/config",
            "GIT~1",
            ".git /cfg",
            ".git. . ./x",
            ".git::$INDEX_ALLOCATION/x",
            "a\\.git\\config",
            ".g\u{200c}it/config",
            ".\u{feff}GIT",
            "a//b",
            "/abs",
            "a/../b",
            "./a",
            "a/",
        ] {
            assert!(refused(p.as_bytes(), false), "{p:?} should be refused");
        }
    }

    #[test]
    fn ordinary_names_pass_even_when_close_to_git() {
        for p in [
            "a.txt",
            ".gitignore",
            ".gitattributes",
            ".gitmodules",
            ".github/workflows/ci.yml",
            ".gitx/y",
            "git/x",
            "x.git",
            "git~2",
            "back\\slash",
            "...",
            "dir/.gitkeep",
        ] {
            assert!(!refused(p.as_bytes(), false), "{p:?} should pass");
        }
        assert!(!refused(b"caf\xc3\xa9/\xff\xfe", false));
    }

    #[test]
    fn gitmodules_may_not_be_a_link_in_any_spelling() {
        for p in [
            ".gitmodules",
            "sub/.GITMODULES",
            "gitmod~1",
            ".gitmodules ",
            "gi7eba~9",
        ] {
            assert!(refused(p.as_bytes(), true), "{p:?}");
            assert!(!refused(p.as_bytes(), false), "{p:?}");
        }
        assert!(!refused(b".gitignore", true));
    }
}
