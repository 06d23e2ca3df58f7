//! A job's result files kept in a shared (PostgreSQL) store, so that every host of a fleet can
//! answer for them (SPEC §11): when a job ends, the host that ran it copies its artifact
//! directory's files into the store's `job_files` table, within documented bounds, before the
//! job is journalled finished. `GET /v1/jobs/{id}/patch`, `…/rounds/{K}/logs` and
//! `…/artifacts` answer from there on a host that does not hold the files.
//!
//! Bounds (docs/operations.md, "Results on a fleet"): `result.patch` up to [`PATCH_BOUND`],
//! every other file up to [`FILE_BOUND`] (a longer log is kept as its first [`FILE_BOUND`]
//! bytes, flagged), at most [`JOB_BOUND`] and [`MAX_FILES`] files per job; a file over its
//! bound (the patch) or past the job's budget is listed with its size but not kept, and the
//! answer for it names the host that holds it. The private `home/` and `tmp/` of a round are
//! never kept. The SQLite store (one host) keeps nothing: its files are on its own disk.

use std::io::Read;
use std::path::Path;

/// The largest `result.patch` kept whole in the store (16 MiB).
pub const PATCH_BOUND: u64 = 16 << 20;

/// The most of any other file kept in the store (1 MiB; a longer log is kept as its head).
pub const FILE_BOUND: u64 = 1 << 20;

/// The most kept in the store for one job (32 MiB).
pub const JOB_BOUND: u64 = 32 << 20;

/// The most files of one job listed in the store.
pub const MAX_FILES: usize = 4096;

/// The name of a job's patch among its files.
pub const PATCH_NAME: &str = "result.patch";

/// One file of a job's artifact directory, as the store keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobFile {
    /// Its path under the job's directory (`rounds/1/1/stdout.log`).
    pub name: String,
    /// Its size on the disk of the host that wrote it.
    pub bytes: u64,
    /// What the store keeps of it: all of it, its first [`FILE_BOUND`] bytes (`data.len() <
    /// bytes`), or nothing (`None`: over its bound or the job's).
    pub data: Option<Vec<u8>>,
}

impl JobFile {
    /// Whether the store keeps less than the whole file.
    pub fn truncated(&self) -> bool {
        self.data
            .as_ref()
            .is_some_and(|d| u64::try_from(d.len()).unwrap_or(u64::MAX) < self.bytes)
    }
}

/// The files of the job directory `job_dir` as the store keeps them (see the module doc): the
/// patch first, then the rest by name. Unreadable entries are left out; no link is followed.
pub fn collect(job_dir: &Path) -> Vec<JobFile> {
    let mut found: Vec<(String, u64)> = Vec::new();
    walk(job_dir, "", 0, &mut found);
    found.sort_by(|a, b| (a.0 != PATCH_NAME, a.0.as_str()).cmp(&(b.0 != PATCH_NAME, b.0.as_str())));
    found.truncate(MAX_FILES);
    let mut budget = JOB_BOUND;
    found
        .into_iter()
        .map(|(name, bytes)| {
            let keep = if name == PATCH_NAME {
                (bytes <= PATCH_BOUND).then_some(bytes)
            } else {
                Some(bytes.min(FILE_BOUND))
            };
            let data = keep
                .filter(|k| *k <= budget)
                .and_then(|k| read_head(&job_dir.join(&name), k));
            if let Some(d) = &data {
                budget = budget.saturating_sub(u64::try_from(d.len()).unwrap_or(u64::MAX));
            }
            JobFile { name, bytes, data }
        })
        .collect()
}

/// The files of the job directory `job_dir` and their sizes, by name (nothing read).
pub fn list(job_dir: &Path) -> Vec<JobFile> {
    let mut found: Vec<(String, u64)> = Vec::new();
    walk(job_dir, "", 0, &mut found);
    found.sort();
    found.truncate(MAX_FILES);
    found
        .into_iter()
        .map(|(name, bytes)| JobFile {
            name,
            bytes,
            data: Some(Vec::new()),
        })
        .collect()
}

/// The first `n` bytes of the regular file `path` (not through a link).
fn read_head(path: &Path, n: u64) -> Option<Vec<u8>> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let mut data = Vec::new();
    f.take(n).read_to_end(&mut data).ok()?;
    Some(data)
}

fn walk(dir: &Path, prefix: &str, depth: u32, found: &mut Vec<(String, u64)>) {
    if depth > 8 || found.len() > MAX_FILES {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let Ok(meta) = entry.metadata() else { continue };
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        if meta.is_dir() {
            if name != "home" && name != "tmp" {
                walk(&entry.path(), &rel, depth + 1, found);
            }
        } else if meta.is_file() {
            found.push((rel, meta.len()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_comes_first_and_logs_are_kept_up_to_their_bound() {
        let dir = tempfile::tempdir().unwrap();
        let round = dir.path().join("rounds/1/1");
        std::fs::create_dir_all(round.join("home")).unwrap();
        std::fs::write(round.join("home/secret"), "x").unwrap();
        std::fs::write(
            round.join("stdout.log"),
            vec![b'a'; (FILE_BOUND + 10) as usize],
        )
        .unwrap();
        std::fs::write(round.join("stderr.log"), "err\n").unwrap();
        std::fs::write(dir.path().join(PATCH_NAME), "diff\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", round.join("link")).unwrap();
        let files = collect(dir.path());
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [PATCH_NAME, "rounds/1/1/stderr.log", "rounds/1/1/stdout.log"]
        );
        assert_eq!(files[0].data.as_deref(), Some(&b"diff\n"[..]));
        assert!(!files[1].truncated());
        assert!(files[2].truncated());
        assert_eq!(files[2].bytes, FILE_BOUND + 10);
        assert_eq!(
            files[2].data.as_ref().map(Vec::len),
            Some(FILE_BOUND as usize)
        );
    }
}
