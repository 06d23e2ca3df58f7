//! A cache's key and the store entry it selects: the job's `cache_key` text, or by default a
//! digest of the lock files [`lock_files`] names that lie at the top of the workspace. The
//! entry is `<key-hash>/<path-name>`, the hash taken over the key text and the path, so two
//! paths never share an entry.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::CachePath;

/// The most of one lock file read into the digest (a longer one counts by its first bytes and
/// its size).
const LOCK_FILE_BOUND: u64 = 64 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LockFiles {
    files: Vec<String>,
}

/// The lock files a default key is derived from (`lock_files.toml`).
pub fn lock_files() -> Vec<String> {
    toml::from_str::<LockFiles>(include_str!("lock_files.toml"))
        .map(|l| l.files)
        .unwrap_or_default()
}

/// Where a key came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeySource {
    /// The job's `cache_key`.
    Given,
    /// The lock files found (their names), or none.
    LockFiles(Vec<String>),
}

/// One cache of a job, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The path in the round's HOME.
    pub path: CachePath,
    /// The key text.
    pub key: String,
    /// Where it came from.
    pub source: KeySource,
    /// `<key-hash>`: 32 hex digits.
    pub hash: String,
}

impl CacheEntry {
    /// The entry's path below the store's root: `<key-hash>/<path-name>`.
    pub fn rel_dir(&self) -> String {
        format!("{}/{}", self.hash, self.path.entry_name())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The digest text of the lock files of `workspace` (and which were found): each found file's
/// name, size and SHA-256, in the list's order. No link is followed.
pub fn lock_digest(workspace: &Path) -> (String, Vec<String>) {
    let mut text = String::from("lock files:");
    let mut found = Vec::new();
    for name in lock_files() {
        let p = workspace.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
        let read = open_nofollow(&p).and_then(|f| {
            let mut buf = Vec::new();
            f.take(LOCK_FILE_BOUND).read_to_end(&mut buf)?;
            Ok(buf)
        });
        match read {
            Ok(buf) => ctx.update(&buf),
            // Unreadable: counted by its size alone.
            Err(_) => ctx.update(b"unreadable"),
        }
        text.push_str(&format!(
            " {name}={}:{}",
            meta.len(),
            hex(ctx.finish().as_ref())
        ));
        found.push(name);
    }
    if found.is_empty() {
        text.push_str(" none");
    }
    (text, found)
}

fn open_nofollow(p: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
}

/// The entry of `path` keyed by `given` (the job's `cache_key`) or the lock files of
/// `workspace`, within `scope`: the name of the service token that submitted the job (`None`
/// for `ralph run`), so that one submitter's set-up never writes what another's job reads.
pub fn entry_for(
    path: &CachePath,
    given: Option<&str>,
    workspace: &Path,
    scope: Option<&str>,
) -> CacheEntry {
    let (key, source) = match given {
        Some(k) => (k.to_owned(), KeySource::Given),
        None => {
            let (text, found) = lock_digest(workspace);
            (text, KeySource::LockFiles(found))
        }
    };
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(b"ralph cache v1\n");
    if let Some(s) = scope {
        ctx.update(b"submitted by ");
        ctx.update(s.as_bytes());
        ctx.update(b"\n");
    }
    ctx.update(key.as_bytes());
    ctx.update(b"\n");
    ctx.update(path.rel().as_bytes());
    let hash = hex(&ctx.finish().as_ref()[..16]);
    CacheEntry {
        path: path.clone(),
        key,
        source,
        hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_key_follows_the_lock_files_and_not_the_checkout() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let p = CachePath::parse("~/.npm").unwrap();
        // Nothing: one key per path.
        let none = entry_for(&p, None, a.path(), None);
        assert_eq!(none.source, KeySource::LockFiles(Vec::new()));
        assert_eq!(none.hash.len(), 32);
        for d in [a.path(), b.path()] {
            std::fs::write(d.join("package-lock.json"), "{\"v\":1}").unwrap();
            std::fs::write(d.join("README"), d.display().to_string()).unwrap();
        }
        let ea = entry_for(&p, None, a.path(), None);
        let eb = entry_for(&p, None, b.path(), None);
        assert_eq!(ea, eb, "two checkouts of one project hit one entry");
        assert_ne!(ea.hash, none.hash);
        assert_eq!(
            ea.source,
            KeySource::LockFiles(vec!["package-lock.json".into()])
        );
        std::fs::write(b.path().join("package-lock.json"), "{\"v\":2}").unwrap();
        assert_ne!(entry_for(&p, None, b.path(), None).hash, ea.hash);
        // Another path, the same lock files: another entry.
        let pip = CachePath::parse("~/.cache/pip").unwrap();
        assert_ne!(entry_for(&pip, None, a.path(), None).hash, ea.hash);
        // A link is not followed.
        let c = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            a.path().join("package-lock.json"),
            c.path().join("Cargo.lock"),
        )
        .unwrap();
        assert_eq!(entry_for(&p, None, c.path(), None).hash, none.hash);
        // A given key: the workspace does not matter.
        let g = entry_for(&p, Some("deps-v3"), a.path(), None);
        assert_eq!(g, entry_for(&p, Some("deps-v3"), c.path(), None));
        assert_eq!(g.source, KeySource::Given);
        assert_eq!(g.rel_dir(), format!("{}/.npm", g.hash));
        // Another submitter's job never shares it.
        let other = entry_for(&p, Some("deps-v3"), a.path(), Some("team-b"));
        assert_ne!(other.hash, g.hash);
        assert_ne!(
            other.hash,
            entry_for(&p, Some("deps-v3"), a.path(), Some("team-c")).hash
        );
    }

    #[test]
    fn the_lock_file_list_is_read() {
        let l = lock_files();
        for n in ["Cargo.lock", "package-lock.json", "poetry.lock", "go.sum"] {
            assert!(l.iter().any(|x| x == n), "{n}: {l:?}");
        }
    }
}
