//! One bare mirror per repository under `<state-dir>/mirrors`: cloned once, fetched again when a
//! job needs a ref (a commit it already holds needs no fetch). Per-job workspaces share its
//! objects ([`super::clone`]), so a job costs a checkout, not a download. A mirror is the
//! runner's: rounds may read its objects, never write them. Concurrent jobs of one repository
//! take turns through a lock file beside it.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::ProvisionError;
use super::config::{ProvisionConfig, base64};
use super::git::{self, Git};

/// The mirrors' directory.
pub fn mirrors_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("mirrors")
}

/// A stable 64-bit FNV-1a hash (the mirror's name must not change between builds).
fn fnv1a(text: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The mirror of `url`: a readable slug of its last path part and a hash of the whole URL.
pub fn mirror_dir(state_dir: &Path, url: &str) -> PathBuf {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .trim_end_matches(".git");
    let slug: String = last
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(40)
        .collect();
    let slug = if slug.is_empty() || slug.starts_with('.') {
        "repo".to_owned()
    } else {
        slug
    };
    mirrors_dir(state_dir).join(format!("{slug}-{:016x}.git", fnv1a(url)))
}

/// The runner's credential for `url` as git configuration (through the environment, never on
/// a command line).
pub fn credential_config(
    config: &ProvisionConfig,
    url: &str,
) -> Result<Vec<(String, String)>, ProvisionError> {
    let Some(c) = config.credential_for(url) else {
        return Ok(Vec::new());
    };
    let mut pairs = Vec::new();
    if let Some(file) = &c.token_file {
        let token = std::fs::read_to_string(file).map_err(|source| ProvisionError::Credential {
            repo: url.to_owned(),
            path: file.clone(),
            source,
        })?;
        let user = c.username.as_deref().unwrap_or("x-access-token");
        let basic = base64(format!("{user}:{}", token.trim()).as_bytes());
        pairs.push((
            format!("http.{}.extraHeader", c.prefix),
            format!("Authorization: Basic {basic}"),
        ));
    }
    if let Some(key) = &c.ssh_key {
        pairs.push((
            "core.sshCommand".to_owned(),
            format!(
                "ssh -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes",
                key.display().to_string().replace('\'', "")
            ),
        ));
    }
    Ok(pairs)
}

/// An exclusive lock on one mirror, held while it is fetched and read.
#[derive(Debug)]
pub struct MirrorLock {
    _file: std::fs::File,
}

/// Takes the lock of the mirror `dir` (waits for it).
pub fn lock(dir: &Path) -> Result<MirrorLock, ProvisionError> {
    let path = dir.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| ProvisionError::io("open the mirror lock", &path, e))?;
    // SAFETY: `file` is an open descriptor owned here; flock only operates on it.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    if rc != 0 {
        return Err(ProvisionError::io(
            "lock the mirror",
            &path,
            std::io::Error::last_os_error(),
        ));
    }
    Ok(MirrorLock { _file: file })
}

/// The commit `git_ref` (or HEAD) names in the mirror, if it holds it.
fn resolve(dir: &Path, git_ref: Option<&str>) -> Option<String> {
    let name = format!("{}^{{commit}}", git_ref.unwrap_or("HEAD"));
    git::at(dir)
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &name,
        ])
        .line()
        .ok()
        .filter(|c| c.len() >= 40 && c.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Whether `git_ref` is a full commit id (then a mirror that holds it needs no fetch).
fn is_commit_id(git_ref: Option<&str>) -> bool {
    git_ref.is_some_and(|r| {
        (r.len() == 40 || r.len() == 64) && r.chars().all(|c| c.is_ascii_hexdigit())
    })
}

/// A mirror brought up to date for `git_ref`, and the commit the ref names.
#[derive(Debug)]
pub struct Fetched {
    /// The mirror.
    pub dir: PathBuf,
    /// The resolved commit.
    pub commit: String,
    /// The lock, held until the workspace is cloned from it.
    pub lock: MirrorLock,
}

/// What the mirror `dir`'s pack directory looks like (identity, change times): a pack made in
/// it changes them.
fn packs_seen(dir: &Path) -> Option<(u64, i64, i64, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir.join("objects").join("pack")).ok()?;
    Some((
        m.ino(),
        m.mtime(),
        m.mtime_nsec(),
        m.ctime(),
        m.ctime_nsec(),
    ))
}

/// Clones or fetches the mirror of `url` and resolves `git_ref` in it.
pub fn fetch(
    state_dir: &Path,
    config: &ProvisionConfig,
    url: &str,
    git_ref: Option<&str>,
) -> Result<Fetched, ProvisionError> {
    let dir = mirror_dir(state_dir, url);
    let parent = mirrors_dir(state_dir);
    std::fs::create_dir_all(&parent)
        .map_err(|e| ProvisionError::io("create the mirrors directory", &parent, e))?;
    let lock = lock(&dir)?;
    let secrets = credential_config(config, url)?;
    if !dir.join("objects").is_dir() {
        let tmp = dir.with_extension("tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp)
                .map_err(|e| ProvisionError::io("remove a half-made mirror", &tmp, e))?;
        }
        Git::new()
            .secret_config(&secrets)
            .args(["clone", "--mirror", "--quiet", "--", url])
            .args([&tmp])
            .output()?;
        std::fs::rename(&tmp, &dir).map_err(|e| ProvisionError::io("move the mirror", &dir, e))?;
    } else if !(is_commit_id(git_ref) && resolve(&dir, git_ref).is_some()) {
        let packs = packs_seen(&dir);
        git::at(&dir)
            .secret_config(&secrets)
            // Objects always arrive as a pack, and git's automatic maintenance runs only
            // after a fetch that brought some (below): not a `git maintenance` per job.
            .config("fetch.unpackLimit=1")
            .config("maintenance.auto=false")
            .args(["fetch", "--prune", "--quiet", "--", url, "+refs/*:refs/*"])
            .output()?;
        if packs_seen(&dir) != packs {
            // What git does after a fetch: a gc, a repack, only past its own thresholds.
            if let Err(e) = git::at(&dir)
                .args(["maintenance", "run", "--auto", "--quiet"])
                .output()
            {
                tracing::debug!(error = %e, "workspaces: the mirror's maintenance failed: {e}");
            }
        }
    }
    let commit = resolve(&dir, git_ref).ok_or_else(|| ProvisionError::NoSuchRef {
        repo: url.to_owned(),
        git_ref: git_ref.unwrap_or("HEAD").to_owned(),
    })?;
    Ok(Fetched { dir, commit, lock })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    #[test]
    fn a_fetch_that_brings_objects_brings_a_pack_and_one_that_does_not_changes_nothing() {
        let d = tempfile::tempdir().unwrap();
        let work = d.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("a.txt"), "a\n").unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "one"]);
        let url = work.display().to_string();
        let state = d.path().join("state");
        let config = ProvisionConfig::default();
        let first = fetch(&state, &config, &url, Some("main")).unwrap();
        let mirror = first.dir.clone();
        drop(first.lock);
        let before = packs_seen(&mirror);
        assert!(before.is_some());
        // Nothing new upstream: the pack directory is as it was.
        let same = fetch(&state, &config, &url, Some("main")).unwrap();
        drop(same.lock);
        assert_eq!(packs_seen(&mirror), before);
        // A new commit: it arrives as a pack (no loose object), and resolves.
        std::fs::write(work.join("b.txt"), "b\n").unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-qm", "two"]);
        let head = git(&work, &["rev-parse", "HEAD"]);
        // (A clone from a path copies the objects as they are: loose here.)
        let loose = git(&mirror, &["count-objects", "-v"]);
        let next = fetch(&state, &config, &url, Some("main")).unwrap();
        assert_eq!(next.commit, head);
        drop(next.lock);
        assert_ne!(packs_seen(&mirror), before);
        let counted = git(&mirror, &["count-objects", "-v"]);
        let line = |text: &str, key: &str| {
            text.lines()
                .find(|l| l.starts_with(key))
                .map(str::to_owned)
                .unwrap()
        };
        assert_eq!(line(&counted, "count:"), line(&loose, "count:"));
        assert_eq!(line(&counted, "in-pack:"), "in-pack: 3", "{counted}");
    }

    #[test]
    fn mirror_names_are_stable_and_safe() {
        let s = Path::new("/s");
        let a = mirror_dir(s, "git://127.0.0.1:9418/team/proj.git");
        assert!(a.starts_with("/s/mirrors"));
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("proj-") && name.ends_with(".git"),
            "{name}"
        );
        assert_ne!(a, mirror_dir(s, "git://127.0.0.1:9418/other/proj.git"));
        let b = mirror_dir(s, "https://h/../../etc");
        assert!(b.starts_with("/s/mirrors") && b.parent() == Some(Path::new("/s/mirrors")));
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
    }
}
