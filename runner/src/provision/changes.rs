//! The changes of a workspace against a staging's index ([`super::stage`]): untracked files
//! (not `.gitignore`d; a nested repository as `dir/`), then modified and deleted ones (content,
//! mode or kind: a file whose stat data alone moved is no change), each once, in git's order.
//!
//! Everywhere: `git ls-files --others --modified --deleted --exclude-standard`, which stats every
//! entry of the index. Under roots ([`super::layer_changes`]): `git status --porcelain=v2`
//! limited by literal pathspecs, which stats and refreshes only the entries under them (`ls-files`
//! stats every entry before it matches a pathspec); its worktree column and its untracked lines
//! are the same listing. Submodules are judged by their commit alone (`--ignore-submodules=dirty`,
//! as `ls-files` does): git never runs in a nested repository a round wrote.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::ProvisionError;
use super::git::Git;

/// Everything that changed, looking everywhere (`roots` `None`) or only under `roots`.
pub fn list(
    git: &dyn Fn() -> Git,
    roots: Option<&[Vec<u8>]>,
) -> Result<Vec<Vec<u8>>, ProvisionError> {
    let mut seen = HashSet::new();
    let mut keep = |p: &[u8]| !p.is_empty() && seen.insert(p.to_vec());
    let Some(roots) = roots else {
        let out = git()
            .args([
                "ls-files",
                "-z",
                "--others",
                "--modified",
                "--deleted",
                "--exclude-standard",
            ])
            .output()?;
        return Ok(out
            .split(|b| *b == 0)
            .filter(|p| keep(p))
            .map(<[u8]>::to_vec)
            .collect());
    };
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    let out = git()
        .env("GIT_LITERAL_PATHSPECS", "1")
        .args([
            "status",
            "--porcelain=v2",
            "-z",
            "--untracked-files=all",
            "--ignored=no",
            "--no-renames",
            "--ignore-submodules=dirty",
            "--",
        ])
        .args(roots.iter().map(|r| OsStr::from_bytes(r)))
        .output()?;
    let (untracked, changed) = parse_status(&out)?;
    Ok(untracked
        .into_iter()
        .chain(changed)
        .filter(|p| keep(p))
        .collect())
}

/// Paths, as git prints them.
type Paths = Vec<Vec<u8>>;

/// The untracked paths and the paths whose worktree differs from the index, from `git status
/// --porcelain=v2 -z` output.
fn parse_status(out: &[u8]) -> Result<(Paths, Paths), ProvisionError> {
    let bad = |record: &[u8]| ProvisionError::State {
        action: "read the workspace's changes",
        message: format!(
            "git status printed a record it should not have: `{}`",
            String::from_utf8_lossy(&record[..record.len().min(120)])
        ),
    };
    let (mut untracked, mut changed) = (Vec::new(), Vec::new());
    let mut records = out.split(|b| *b == 0).filter(|r| !r.is_empty());
    while let Some(record) = records.next() {
        // Fields before the path: `1 XY sub mH mI mW hH hI`, `2 ... Xscore` (then the original
        // path as the next record), `u XY sub m1 m2 m3 mW h1 h2 h3`.
        let fields = match record.first() {
            Some(b'?') => {
                untracked.push(record.get(2..).ok_or_else(|| bad(record))?.to_vec());
                continue;
            }
            Some(b'1') => 8,
            Some(b'2') => 9,
            Some(b'u') => 10,
            _ => return Err(bad(record)),
        };
        let mut parts = record.splitn(fields + 1, |b| *b == b' ');
        let xy = parts.nth(1).ok_or_else(|| bad(record))?;
        let path = parts.nth(fields - 2).ok_or_else(|| bad(record))?;
        if record[0] == b'2' {
            records.next();
        }
        if xy.len() != 2 {
            return Err(bad(record));
        }
        if xy[1] != b'.' || record[0] == b'u' {
            changed.push(path.to_vec());
        }
    }
    Ok((untracked, changed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_records_give_the_untracked_and_the_worktree_changes() {
        let out = b"1 AM N... 000000 100644 100644 0000 4286 README.md\0\
1 A. N... 000000 100644 100644 0000 5385 src/same name.rs\0\
1 .D N... 100644 100644 000000 5385 5385 gone.txt\0\
2 .M N... 100644 100644 100644 aa bb R100 new path\0old path\0\
u UU N... 100644 100644 100644 100644 a b c both.txt\0\
? NOTES.md\0? nested/\0";
        let (untracked, changed) = parse_status(out).unwrap();
        assert_eq!(untracked, [b"NOTES.md".to_vec(), b"nested/".to_vec()]);
        assert_eq!(
            changed,
            [
                b"README.md".to_vec(),
                b"gone.txt".to_vec(),
                b"new path".to_vec(),
                b"both.txt".to_vec()
            ]
        );
    }

    #[test]
    fn a_record_git_should_not_print_is_an_error_naming_it() {
        for out in [&b"! ignored\0"[..], b"1 AM\0", b"x y\0"] {
            let e = parse_status(out).unwrap_err().to_string();
            assert!(e.contains("git status printed"), "{e}");
        }
    }
}
