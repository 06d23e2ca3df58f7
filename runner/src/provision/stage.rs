//! Staging a workspace's files as a tree of the runner's repository, the way a result (and an
//! upload's base) is taken, so that no single path a round left can fail it: the base tree is
//! read into a throwaway index (a layered workspace's merged into a copy of its base tree's
//! index, whose stat data spares hashing the unchanged files: [`super::stat_seed`]), the
//! changes are listed ([`super::changes`]: untracked ones too, `.gitignore` respected, `.git`
//! never; only under the roots a layered workspace's upper layer names, when it names them:
//! [`super::layer_changes`]), each is
//! probed without following a link and judged ([`judge`]: a path git refuses, a nested
//! repository, a file over [`MAX_PATCH_FILE`], a FIFO, socket or device, an unreadable file
//! are skipped), the rest is added by path (`git update-index --add --remove --replace
//! --stdin`: no pathspec magic), a batch git still refuses is split until the refused path is
//! found, and whatever git left out after all is found by listing the changes again. Every
//! skipped path is reported ([`Skipped`]); the rest of the work is in the tree. Every git here
//! runs under the memory bound ([`super::git_bound`]).

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{Seek, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::git::{self, Git, GitError};
use super::git_bound::Bound;
use super::patch_status::{SkipReason, Skipped};
use super::{ProvisionError, changes, git_path, private_git_dir, stat_seed};

/// The largest file a patch takes (100 MiB): a bigger one is skipped and reported, never
/// read. A binary diff of a changed file holds about six times it in git's memory (measured:
/// 600 MiB for 100 MiB), within [`super::git_bound::GIT_MEMORY`].
pub const MAX_PATCH_FILE: u64 = 100 << 20;

/// Entries of the workspace looked at for FIFOs, sockets and devices, at most (a tree bigger
/// than this is not searched further; git never takes such files anyway).
const WALK_ENTRIES: usize = 1_000_000;

/// Runs of `git update-index` while isolating the paths git refuses, at most; paths of a
/// batch still refused after that are skipped as refused.
const ISOLATE_RUNS: u32 = 64;

/// What a staging may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageLimits {
    /// The largest file taken, in bytes.
    pub max_file: u64,
}

impl Default for StageLimits {
    fn default() -> Self {
        StageLimits {
            max_file: MAX_PATCH_FILE,
        }
    }
}

/// The commit a staging starts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Base<'a> {
    /// Its id.
    pub commit: &'a str,
    /// An index of exactly the commit's entries that the runner made itself from the base
    /// tree ([`super::base_tree::staging_index`]): copied as it is, with no merge, its stat
    /// data trusted as far as the [`StatTrust`] says.
    pub staged: Option<(&'a Path, StatTrust)>,
    /// An index whose stat data is kept for the entries where it names the commit's blob
    /// ([`stat_seed`]); its content never decides what is staged. Used when there is no
    /// `staged` index (or it cannot be copied).
    pub stat_seed: Option<&'a Path>,
    /// The paths outside of which the workspace is the commit's checkout, unchanged
    /// ([`super::layer_changes::roots`]): git looks for changes only there. `None`: everywhere.
    pub roots: Option<&'a [Vec<u8>]>,
}

/// Where the stat data of a staging index may decide that a file is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatTrust {
    /// Everywhere: every change the job made is newer than the index's stat data (its layers
    /// were made after the index: [`super::layered::BaseFile::StagingIndex`]).
    Everywhere,
    /// Only outside the roots (where the workspace is its base tree itself): the entries under
    /// them have their stat data cleared after the copy, so git reads those files.
    OutsideRoots,
}

/// A staged workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    /// The tree of its files.
    pub tree: String,
    /// The paths left out of it.
    pub skipped: Skipped,
}

/// What a path of the workspace is, seen without following a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Nothing is there (a deletion).
    Gone,
    /// A leading directory of it is a symbolic link: the link's own entry stands for it.
    BeyondLink,
    /// A regular file of `size` bytes; `readable` by the runner.
    File {
        /// Its size.
        size: u64,
        /// Whether the runner can open it.
        readable: bool,
    },
    /// A symbolic link.
    Link,
    /// A directory.
    Dir,
    /// A FIFO, socket or device.
    Special,
    /// It could not be looked at (a leading directory the runner cannot search).
    Unreadable,
}

/// What to do with one listed path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to git.
    Add,
    /// Leave it to the entry that stands for it.
    Pass,
    /// Leave it out, for this reason.
    Skip(SkipReason),
}

/// The policy, as one pure step: what becomes of `path` (as `git ls-files` lists it; a
/// trailing `/` marks a nested repository) seen as `probe`.
pub fn judge(path: &[u8], probe: Probe, limits: &StageLimits) -> Verdict {
    if path.ends_with(b"/") {
        return Verdict::Skip(SkipReason::NestedRepository);
    }
    if git_path::refused(path, probe == Probe::Link) {
        return Verdict::Skip(SkipReason::GitPath);
    }
    match probe {
        Probe::BeyondLink => Verdict::Pass,
        Probe::Gone | Probe::Link | Probe::Dir => Verdict::Add,
        Probe::File { size, .. } if size > limits.max_file => Verdict::Skip(SkipReason::TooLarge),
        Probe::File {
            readable: false, ..
        }
        | Probe::Unreadable => Verdict::Skip(SkipReason::Unreadable),
        Probe::File { .. } => Verdict::Add,
        Probe::Special => Verdict::Skip(SkipReason::SpecialFile),
    }
}

/// The runner's git over `workspace`, with its own repository and `index`, bounded.
fn over(workspace: &Path, index: &Path, bound: &Bound) -> Git {
    git::at(&private_git_dir(workspace))
        .env("GIT_WORK_TREE", workspace)
        .env("GIT_INDEX_FILE", index)
        .current_dir(workspace)
        .config("core.bare=false")
        // A file is unchanged only if its change time is too (no round can set that back).
        .config("core.trustctime=true")
        .config("core.checkStat=default")
        .bounded(bound)
}

/// Writes the workspace's files as a tree of the runner's repository: a fresh `index` (from
/// `base`'s tree when given, else empty), every change added but the paths that cannot be
/// (reported in [`Staged::skipped`]). The workspace's own `.git` is neither read nor touched.
pub fn stage(
    workspace: &Path,
    base: Option<Base<'_>>,
    index: &Path,
    limits: &StageLimits,
    bound: &Bound,
) -> Result<Staged, ProvisionError> {
    let _ = std::fs::remove_file(index);
    let git = || over(workspace, index, bound);
    let roots = base.and_then(|b| b.roots);
    if let Some(base) = base {
        read_base(&git, index, &base)?;
        // Stat data for the unchanged files, so listing the changes (twice) hashes each file
        // at most once more. Its failure only costs time. With roots, git never looks at the
        // files outside them, and hashes the few inside at most once more anyway.
        if roots.is_none()
            && let Err(e @ GitError::OutOfMemory { .. }) =
                git().args(["update-index", "-q", "--refresh"]).run()
        {
            return Err(e.into());
        }
    }
    let listed = changes::list(&git, roots)?;
    let mut skipped = Skipped::default();
    let mut reported: HashSet<Vec<u8>> = HashSet::new();
    let mut adds: Vec<Vec<u8>> = Vec::new();
    let mut dirs = DirCache::default();
    for path in &listed {
        let probe = dirs.probe(workspace, path);
        match judge(path, probe, limits) {
            Verdict::Add => adds.push(path.clone()),
            Verdict::Pass => {}
            Verdict::Skip(reason) => {
                let detail = match (reason, probe) {
                    (SkipReason::TooLarge, Probe::File { size, .. }) => Some(format!(
                        "{size} bytes, over the {} a file of a patch may be",
                        limits.max_file
                    )),
                    _ => None,
                };
                skipped.add(path, reason, detail);
                reported.insert(path.clone());
            }
        }
    }
    for path in specials(workspace, &git, roots)? {
        if reported.insert(path.clone()) {
            skipped.add(&path, SkipReason::SpecialFile, None);
        }
    }
    let (refused, _) = isolate(&git, &adds)?;
    // Whatever git left out after all (a path it ignored, a batch it kept refusing).
    for path in changes::list(&git, roots)? {
        if reported.insert(path.clone()) {
            let detail = refused
                .get(&path)
                .cloned()
                .unwrap_or_else(|| "git did not stage it".to_owned());
            skipped.add(&path, SkipReason::GitRefused, Some(detail));
        }
    }
    let tree = git().args(["write-tree"]).line()?;
    Ok(Staged { tree, skipped })
}

/// Reads `base`'s tree into the fresh `index`: a copy of the runner's staging index of the
/// commit where there is one; else merged into a copy of its stat seed where there is one (`git
/// read-tree -m` of one tree: every entry is the commit's, the seed's stat data kept where it
/// names the same blob; a seed git will not merge is dropped); else into an empty one.
fn read_base(git: &dyn Fn() -> Git, index: &Path, base: &Base<'_>) -> Result<(), ProvisionError> {
    if let Some((staged, trust)) = base.staged {
        if stat_seed::copy(staged, index).is_ok()
            && (trust == StatTrust::Everywhere || forget_stat_under_roots(git, base)?)
        {
            return Ok(());
        }
        let _ = std::fs::remove_file(index);
    }
    if let Some(seed) = base.stat_seed {
        if stat_seed::copy(seed, index).is_ok() {
            match git()
                .args(["read-tree", "-m", "--end-of-options", base.commit])
                .run()
            {
                Ok(ran) if ran.status.success() => return Ok(()),
                Err(e @ GitError::OutOfMemory { .. }) => return Err(e.into()),
                _ => {}
            }
        }
        let _ = std::fs::remove_file(index);
    }
    git()
        .args(["read-tree", "--end-of-options", base.commit])
        .output()?;
    Ok(())
}

/// Clears the stat data of the index's entries under `base`'s roots (`git ls-tree` of the
/// commit under them, fed to `git update-index --index-info`, which makes each entry anew with
/// none), so that git reads those files rather than trust their stat data. Whether it did;
/// without roots it cannot.
fn forget_stat_under_roots(git: &dyn Fn() -> Git, base: &Base<'_>) -> Result<bool, ProvisionError> {
    let Some(roots) = base.roots else {
        return Ok(false);
    };
    if roots.is_empty() {
        return Ok(true);
    }
    let listed = match git()
        .env("GIT_LITERAL_PATHSPECS", "1")
        .args([
            "ls-tree",
            "-r",
            "-z",
            "--full-tree",
            "--end-of-options",
            base.commit,
            "--",
        ])
        .args(roots.iter().map(|r| OsStr::from_bytes(r)))
        .run()
    {
        Ok(ran) if ran.status.success() => ran.stdout,
        Err(e @ GitError::OutOfMemory { .. }) => return Err(e.into()),
        _ => return Ok(false),
    };
    if listed.is_empty() {
        return Ok(true);
    }
    let io = |e| ProvisionError::io("write the entries to reset", Path::new("(temp)"), e);
    let mut list = tempfile::tempfile().map_err(io)?;
    list.write_all(&listed).map_err(io)?;
    list.rewind().map_err(io)?;
    match git()
        .stdin_file(list)
        .args(["update-index", "-z", "--index-info"])
        .run()
    {
        Ok(ran) => Ok(ran.status.success()),
        Err(e @ GitError::OutOfMemory { .. }) => Err(e.into()),
        Err(_) => Ok(false),
    }
}

/// Adds `paths` to the index by path, isolating the ones git refuses: those, with git's
/// message, and how many times git ran.
pub(crate) fn isolate(
    git: &dyn Fn() -> Git,
    paths: &[Vec<u8>],
) -> Result<(HashMap<Vec<u8>, String>, u32), ProvisionError> {
    let mut refused = HashMap::new();
    let mut runs = 0;
    add(git, paths, &mut runs, &mut refused)?;
    Ok((refused, runs))
}

/// Adds `paths` to the index by path; a run git refuses is split (or the path it names taken
/// out) until the refused paths are found, recorded in `refused` with git's message.
fn add(
    git: &dyn Fn() -> Git,
    paths: &[Vec<u8>],
    runs: &mut u32,
    refused: &mut HashMap<Vec<u8>, String>,
) -> Result<(), ProvisionError> {
    let mut paths: Vec<Vec<u8>> = paths.to_vec();
    while !paths.is_empty() {
        *runs += 1;
        let ran = update_index(git, &paths)?;
        if ran.status.success() {
            return Ok(());
        }
        let message = last_line(&ran.stderr);
        if paths.len() == 1 || *runs >= ISOLATE_RUNS {
            for p in paths {
                refused.insert(p, message.clone());
            }
            return Ok(());
        }
        // git names the path it could not process: take it out and go on with the rest.
        if let Some(at) = named_path(&ran.stderr, &paths) {
            let p = paths.remove(at);
            refused.insert(p, message);
            continue;
        }
        let rest = paths.split_off(paths.len() / 2);
        add(git, &paths, runs, refused)?;
        paths = rest;
    }
    Ok(())
}

/// One `git update-index --add --remove --replace -z --stdin` of `paths` (NUL-separated, from a
/// file; `--replace`: a file or link where a directory was, or the reverse, replaces the
/// entries in its way, as `git add` does), with git's NTFS and HFS+ path protections on; how
/// it ended.
fn update_index(git: &dyn Fn() -> Git, paths: &[Vec<u8>]) -> Result<git::Ran, ProvisionError> {
    let io = |e| ProvisionError::io("write the list of paths to stage", Path::new("(temp)"), e);
    let mut list = tempfile::tempfile().map_err(io)?;
    for p in paths {
        list.write_all(p).map_err(io)?;
        list.write_all(b"\0").map_err(io)?;
    }
    list.rewind().map_err(io)?;
    Ok(git()
        .config("core.protectNTFS=true")
        .config("core.protectHFS=true")
        .stdin_file(list)
        .args([
            "update-index",
            "--add",
            "--remove",
            "--replace",
            "-z",
            "--stdin",
        ])
        .run()?)
}

/// Which of `paths` git's `fatal: Unable to process path P` names, if that is how it ended:
/// the message must run to the end of stderr, and its first occurrence whose rest is one of
/// `paths` wins (a path's own text may hold the message, never before git's own one).
fn named_path(stderr: &[u8], paths: &[Vec<u8>]) -> Option<usize> {
    const PREFIX: &[u8] = b"fatal: Unable to process path ";
    let end = stderr.strip_suffix(b"\n").unwrap_or(stderr);
    (0..end.len().saturating_sub(PREFIX.len() - 1))
        .filter(|at| end[*at..].starts_with(PREFIX))
        .find_map(|at| {
            let rest = &end[at + PREFIX.len()..];
            paths.iter().position(|p| p.as_slice() == rest)
        })
}

/// git's last `error:` line (else its last line), printable.
fn last_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let line = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("error:"))
        .or(lines.last())
        .map_or("git refused it", |l| l.trim());
    super::patch_status::escape_path(line.as_bytes())
}

/// The workspace's directories already seen to be real ones (not links).
#[derive(Debug, Default)]
struct DirCache {
    real: HashSet<PathBuf>,
}

impl DirCache {
    /// Looks at `path` of `workspace` without following any link on the way.
    fn probe(&mut self, workspace: &Path, path: &[u8]) -> Probe {
        let rel = Path::new(OsStr::from_bytes(path));
        let mut dir = workspace.to_path_buf();
        if let Some(parent) = rel.parent() {
            for c in parent.components() {
                dir.push(c);
                if self.real.contains(&dir) {
                    continue;
                }
                match std::fs::symlink_metadata(&dir) {
                    Ok(m) if m.file_type().is_symlink() => return Probe::BeyondLink,
                    Ok(m) if m.is_dir() => {
                        self.real.insert(dir.clone());
                    }
                    Ok(_) => return Probe::Gone,
                    Err(e) if gone(&e) => return Probe::Gone,
                    Err(_) => return Probe::Unreadable,
                }
            }
        }
        let full = workspace.join(rel);
        let meta = match std::fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) if gone(&e) => return Probe::Gone,
            Err(_) => return Probe::Unreadable,
        };
        let t = meta.file_type();
        if t.is_symlink() {
            Probe::Link
        } else if t.is_dir() {
            Probe::Dir
        } else if t.is_file() {
            let readable = std::fs::File::options()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&full)
                .is_ok();
            Probe::File {
                size: meta.len(),
                readable,
            }
        } else {
            Probe::Special
        }
    }
}

fn gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR))
}

/// The FIFOs, sockets and devices of the workspace git would otherwise pass over in silence
/// (not under a `.git`, not in a nested repository, not `.gitignore`d), as relative paths; with
/// `roots`, only under them (none of which is inside a nested repository or a link).
fn specials(
    workspace: &Path,
    git: &dyn Fn() -> Git,
    roots: Option<&[Vec<u8>]>,
) -> Result<Vec<Vec<u8>>, ProvisionError> {
    let mut found = Vec::new();
    let mut stack: Vec<Vec<u8>> = Vec::new();
    match roots {
        None => stack.push(Vec::new()),
        Some(roots) => {
            for root in roots {
                if root.split(|b| *b == b'/').any(|c| c == b".git") {
                    continue;
                }
                let Ok(meta) = std::fs::symlink_metadata(workspace.join(OsStr::from_bytes(root)))
                else {
                    continue;
                };
                let t = meta.file_type();
                if t.is_dir() {
                    stack.push(root.clone());
                } else if t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device()
                {
                    found.push(root.clone());
                }
            }
        }
    }
    let mut seen = 0usize;
    'walk: while let Some(rel) = stack.pop() {
        let dir = workspace.join(OsStr::from_bytes(&rel));
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let entries: Vec<_> = entries.flatten().collect();
        // A directory with a `.git` of its own is a nested repository: git lists it as one.
        if !rel.is_empty() && entries.iter().any(|e| e.file_name() == ".git") {
            continue;
        }
        for e in entries {
            seen += 1;
            if seen > WALK_ENTRIES {
                break 'walk;
            }
            let name = e.file_name();
            if name == ".git" {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            let mut path = rel.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(name.as_bytes());
            if t.is_dir() {
                stack.push(path);
            } else if t.is_fifo() || t.is_socket() || t.is_block_device() || t.is_char_device() {
                found.push(path);
            }
        }
    }
    if found.is_empty() {
        return Ok(found);
    }
    // The `.gitignore`d ones are not the patch's business.
    let io = |e| ProvisionError::io("write the list of paths to check", Path::new("(temp)"), e);
    let mut list = tempfile::tempfile().map_err(io)?;
    for p in &found {
        list.write_all(p).map_err(io)?;
        list.write_all(b"\0").map_err(io)?;
    }
    list.rewind().map_err(io)?;
    let ran = git()
        .stdin_file(list)
        .args(["check-ignore", "-z", "--stdin", "--no-index"])
        .run()?;
    let ignored: HashSet<&[u8]> = ran.stdout.split(|b| *b == 0).collect();
    found.retain(|p| !ignored.contains(p.as_slice()));
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_skips_what_git_refuses_or_cannot_hold_and_adds_the_rest() {
        let l = StageLimits { max_file: 100 };
        let file = |size, readable| Probe::File { size, readable };
        let skip = |r| Verdict::Skip(r);
        for (path, probe, want) in [
            ("a.txt", file(10, true), Verdict::Add),
            ("a.txt", file(100, true), Verdict::Add),
            ("big.bin", file(101, true), skip(SkipReason::TooLarge)),
            ("secret", file(1, false), skip(SkipReason::Unreadable)),
            ("d/x", Probe::Unreadable, skip(SkipReason::Unreadable)),
            ("gone.txt", Probe::Gone, Verdict::Add),
            ("link", Probe::Link, Verdict::Add),
            ("was-a-file", Probe::Dir, Verdict::Add),
            ("link/inside", Probe::BeyondLink, Verdict::Pass),
            ("fifo", Probe::Special, skip(SkipReason::SpecialFile)),
            ("nested/", Probe::Dir, skip(SkipReason::NestedRepository)),
            (".GIT/config", file(1, true), skip(SkipReason::GitPath)),
            ("sub/.Git/hooks/x", file(1, true), skip(SkipReason::GitPath)),
            // The name decides before the size: it could never be staged.
            (".git~1/big", file(1000, true), skip(SkipReason::TooLarge)),
            ("git~1/big", file(1000, true), skip(SkipReason::GitPath)),
            (".gitmodules", Probe::Link, skip(SkipReason::GitPath)),
            (".gitmodules", file(1, true), Verdict::Add),
        ] {
            assert_eq!(judge(path.as_bytes(), probe, &l), want, "{path} {probe:?}");
        }
    }

    #[test]
    fn the_path_git_could_not_process_is_read_from_its_message() {
        let paths: Vec<Vec<u8>> = vec![b"a".to_vec(), b"d/f".to_vec()];
        assert_eq!(
            named_path(
                b"error: f: unsupported file type\nfatal: Unable to process path d/f\n",
                &paths
            ),
            Some(1)
        );
        assert_eq!(named_path(b"fatal: something else\n", &paths), None);
        // A path whose name holds the message names itself, not the other path.
        let tricky: Vec<Vec<u8>> = vec![
            b"a".to_vec(),
            b"x\nfatal: Unable to process path a".to_vec(),
        ];
        assert_eq!(
            named_path(
                b"error: x\nfatal: Unable to process path a: unsupported file type\nfatal: Unable to process path x\nfatal: Unable to process path a\n",
                &tricky
            ),
            Some(1)
        );
        assert_eq!(
            last_line(b"error: f: unsupported file type\nfatal: Unable to process path f\n"),
            "error: f: unsupported file type"
        );
    }
}
