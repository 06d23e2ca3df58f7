//! The host's caches: `<state-dir>/caches/<key-hash>/<path-name>`, beside each entry's `lock`
//! (flock: shared while a copy is taken out, exclusive while an entry is swapped or removed),
//! `used` (its modification time: when a job last used it) and `key.txt` (the path and key, for
//! people). An entry is only ever replaced whole: the new tree is built in `.tmp-<uuid>` and
//! renamed in; a run that dies half-way leaves a `.tmp-`/`.old-` directory that [`CacheStore::prune`]
//! removes. Sizes are apparent bytes (`st_size`), measured without following a link.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use ralph_sandbox::beneath::tree;
use serde::Serialize;

use super::CacheError;
use super::copy::{Copied, copy_tree};
use super::key::CacheEntry;

/// The store's directory below a state dir.
pub const CACHES_DIR: &str = "caches";

/// The caches of one host.
#[derive(Clone, Debug)]
pub struct CacheStore {
    root: PathBuf,
}

/// An entry as listed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Listed {
    /// `<key-hash>`.
    pub hash: String,
    /// Its size in bytes (all of its paths).
    pub bytes: u64,
    /// Seconds since it was last used.
    pub idle_secs: u64,
}

/// What a prune removed (or would remove, in a dry run).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PruneReport {
    /// Whether nothing was removed on purpose.
    pub dry_run: bool,
    /// Entries removed.
    pub removed: Vec<Listed>,
    /// Bytes removed in all.
    pub bytes: u64,
    /// Bytes the caches hold after it.
    pub kept_bytes: u64,
    /// Entries in use (locked) or that could not be removed, with why.
    pub skipped: Vec<String>,
}

/// A held `flock`, released when dropped (with the descriptor).
struct Lock {
    _file: File,
}

impl Lock {
    fn take(path: &Path, exclusive: bool, wait: bool) -> Result<Option<Lock>, CacheError> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| CacheError::io("open", path, e))?;
        let mut op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        if !wait {
            op |= libc::LOCK_NB;
        }
        // SAFETY: `f` is an open descriptor owned here; flock only reads it.
        let rc = unsafe { libc::flock(f.as_raw_fd(), op) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if !wait && e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Ok(None);
            }
            return Err(CacheError::io("lock", path, e));
        }
        Ok(Some(Lock { _file: f }))
    }
}

fn temp_name(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::now_v7().simple())
}

fn is_hash(name: &str) -> bool {
    name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

impl CacheStore {
    /// The store of the state dir `state_dir`.
    pub fn new(state_dir: &Path) -> Self {
        Self {
            root: state_dir.join(CACHES_DIR),
        }
    }

    /// Its directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn key_dir(&self, e: &CacheEntry) -> PathBuf {
        self.root.join(&e.hash)
    }

    fn make_dir(p: &Path) -> Result<(), CacheError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(p)
            .map_err(|e| CacheError::io("create", p, e))
    }

    /// Copies the entry of `e` to `dst` (which must not exist), its entries given to `owner`:
    /// `Ok(None)` when there is none (a miss; `dst` is not made).
    pub fn restore(
        &self,
        e: &CacheEntry,
        dst: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<Option<Copied>, CacheError> {
        let dir = self.key_dir(e);
        let src = dir.join(e.path.entry_name());
        if !src.is_dir() {
            return Ok(None);
        }
        let Some(_lock) = Lock::take(&dir.join("lock"), false, true)? else {
            return Ok(None);
        };
        // Removed while this waited for the lock: a miss.
        if !fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir()) {
            return Ok(None);
        }
        let copied = copy_tree(&src, dst, owner)?;
        let _ = touch(&dir.join("used"));
        Ok(Some(copied))
    }

    /// Keeps the tree at `src` as the entry of `e`: copied to a temporary directory, renamed
    /// in place of the old entry (if any). Returns what was kept.
    pub fn save(&self, e: &CacheEntry, src: &Path) -> Result<Copied, CacheError> {
        let dir = self.key_dir(e);
        Self::make_dir(&dir)?;
        let tmp = dir.join(temp_name(".tmp-"));
        let copied = match copy_tree(src, &tmp, None) {
            Ok(c) => c,
            Err(err) => {
                let _ = tree::remove_tree(&tmp);
                return Err(err);
            }
        };
        let name = dir.join(e.path.entry_name());
        let old = dir.join(temp_name(".old-"));
        {
            let _lock = Lock::take(&dir.join("lock"), true, true)?;
            if fs::symlink_metadata(&name).is_ok() {
                fs::rename(&name, &old).map_err(|x| CacheError::io("rename", &name, x))?;
            }
            fs::rename(&tmp, &name).map_err(|x| CacheError::io("rename", &tmp, x))?;
            let _ = fs::write(
                dir.join("key.txt"),
                format!("path {}\nkey {}\n", e.path, e.key),
            );
            let _ = touch(&dir.join("used"));
        }
        tree::remove_tree(&old)?;
        Ok(copied)
    }

    /// Every entry (key directory), its size and idle time.
    pub fn list(&self) -> Result<Vec<Listed>, CacheError> {
        let rd = match fs::read_dir(&self.root) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(CacheError::io("read", &self.root, e)),
        };
        let now = SystemTime::now();
        let mut out = Vec::new();
        for d in rd {
            let d = d.map_err(|e| CacheError::io("read", &self.root, e))?;
            let name = d.file_name().to_string_lossy().into_owned();
            let p = d.path();
            if !is_hash(&name) || !fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let bytes = tree::measure(&p)?.map_or(0, |t| t.bytes);
            let used = fs::metadata(p.join("used"))
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            out.push(Listed {
                hash: name,
                bytes,
                idle_secs: now.duration_since(used).unwrap_or_default().as_secs(),
            });
        }
        Ok(out)
    }

    /// The bytes the caches hold.
    pub fn total_bytes(&self) -> u64 {
        self.list()
            .map(|l| l.iter().map(|e| e.bytes).sum())
            .unwrap_or(0)
    }

    /// Removes the entries idle for at least `older_than` (no age rule with `None`; every one
    /// with zero), then the
    /// least recently used until the rest fit `budget`. An entry a job is copying (locked) is
    /// left; so are half-written `.tmp-`/`.old-` trees of a live save, but ones older than an
    /// hour (their runner died) go.
    pub fn prune(
        &self,
        older_than: Option<Duration>,
        budget: Option<u64>,
        dry_run: bool,
    ) -> Result<PruneReport, CacheError> {
        let mut list = self.list()?;
        // Least recently used first.
        list.sort_by_key(|e| std::cmp::Reverse(e.idle_secs));
        let mut total: u64 = list.iter().map(|e| e.bytes).sum();
        let mut r = PruneReport {
            dry_run,
            ..PruneReport::default()
        };
        for e in list {
            let old = older_than.is_some_and(|t| e.idle_secs >= t.as_secs());
            let over = budget.is_some_and(|b| total > b);
            if !old && !over {
                continue;
            }
            if !dry_run {
                let dir = self.root.join(&e.hash);
                match self.remove_entry(&dir) {
                    Ok(true) => {}
                    Ok(false) => {
                        r.skipped.push(format!("{}: in use", e.hash));
                        continue;
                    }
                    Err(err) => {
                        r.skipped.push(format!("{}: {err}", e.hash));
                        continue;
                    }
                }
            }
            total = total.saturating_sub(e.bytes);
            r.bytes += e.bytes;
            r.removed.push(e);
        }
        if !dry_run {
            self.sweep_leftovers(&mut r);
        }
        r.kept_bytes = total;
        Ok(r)
    }

    /// Removes one key directory under its exclusive lock: `false` when a job holds it.
    fn remove_entry(&self, dir: &Path) -> Result<bool, CacheError> {
        let Some(_lock) = Lock::take(&dir.join("lock"), true, false)? else {
            return Ok(false);
        };
        let rd = fs::read_dir(dir).map_err(|e| CacheError::io("read", dir, e))?;
        for d in rd.flatten() {
            if d.file_name() != "lock" {
                tree::remove_tree(&d.path())?;
            }
        }
        let _ = fs::remove_file(dir.join("lock"));
        let _ = fs::remove_dir(dir);
        Ok(true)
    }

    /// `.tmp-`/`.old-` trees left by a save whose runner died (older than an hour).
    fn sweep_leftovers(&self, r: &mut PruneReport) {
        let Ok(rd) = fs::read_dir(&self.root) else {
            return;
        };
        let hour = Duration::from_secs(3600);
        for d in rd.flatten().map(|d| d.path()) {
            let Ok(inner) = fs::read_dir(&d) else {
                continue;
            };
            for t in inner.flatten() {
                let n = t.file_name().to_string_lossy().into_owned();
                let stale = t
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|m| m.elapsed().ok())
                    .is_some_and(|age| age > hour);
                if (n.starts_with(".tmp-") || n.starts_with(".old-")) && stale {
                    if let Err(e) = tree::remove_tree(&t.path()) {
                        r.skipped.push(format!("{}: {e}", t.path().display()));
                    }
                }
            }
        }
    }
}

fn touch(p: &Path) -> std::io::Result<()> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(p)?;
    f.set_modified(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CachePath, entry_for};

    fn entry(key: &str, path: &str) -> CacheEntry {
        entry_for(
            &CachePath::parse(path).unwrap(),
            Some(key),
            Path::new("/nonexistent"),
            None,
        )
    }

    #[test]
    fn an_entry_is_saved_whole_restored_as_a_copy_and_replaced_whole() {
        let t = tempfile::tempdir().unwrap();
        let s = CacheStore::new(t.path());
        let e = entry("k", "~/.npm");
        assert!(
            s.restore(&e, &t.path().join("miss"), None)
                .unwrap()
                .is_none()
        );
        assert!(!t.path().join("miss").exists());
        let src = t.path().join("src");
        fs::create_dir_all(src.join("d")).unwrap();
        fs::write(src.join("d/pkg.tgz"), "v1").unwrap();
        assert_eq!(s.save(&e, &src).unwrap().bytes, 2);
        let out = t.path().join("out");
        assert_eq!(s.restore(&e, &out, None).unwrap().unwrap().files, 1);
        // A write to the copy is the copy's.
        fs::write(out.join("d/pkg.tgz"), "poisoned").unwrap();
        let again = t.path().join("again");
        s.restore(&e, &again, None).unwrap().unwrap();
        assert_eq!(fs::read_to_string(again.join("d/pkg.tgz")).unwrap(), "v1");
        // Replaced whole: what the new tree lacks is gone.
        let src2 = t.path().join("src2");
        fs::create_dir_all(&src2).unwrap();
        fs::write(src2.join("other"), "v2").unwrap();
        s.save(&e, &src2).unwrap();
        let third = t.path().join("third");
        s.restore(&e, &third, None).unwrap().unwrap();
        assert!(!third.join("d").exists());
        assert_eq!(fs::read_to_string(third.join("other")).unwrap(), "v2");
        let names: Vec<String> = fs::read_dir(s.root().join(&e.hash))
            .unwrap()
            .map(|d| d.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with(".tmp-") || n.starts_with(".old-")),
            "no leftovers: {names:?}"
        );
        assert_eq!(s.total_bytes(), 2 + "path ~/.npm\nkey k\n".len() as u64);
    }

    #[test]
    fn prune_removes_idle_entries_then_the_least_recently_used_over_the_budget() {
        let t = tempfile::tempdir().unwrap();
        let s = CacheStore::new(t.path());
        let src = t.path().join("src");
        fs::create_dir_all(&src).unwrap();
        fs::write(src.join("f"), vec![0u8; 1000]).unwrap();
        let (a, b, c) = (
            entry("a", "~/.npm"),
            entry("b", "~/.npm"),
            entry("c", "~/.npm"),
        );
        for (e, age) in [(&a, 300), (&b, 200), (&c, 0)] {
            s.save(e, &src).unwrap();
            let used = s.root().join(&e.hash).join("used");
            File::options()
                .write(true)
                .open(&used)
                .unwrap()
                .set_modified(SystemTime::now() - Duration::from_secs(age))
                .unwrap();
        }
        let dry = s.prune(Some(Duration::from_secs(250)), None, true).unwrap();
        assert_eq!(dry.removed.len(), 1);
        assert!(s.root().join(&a.hash).exists(), "a dry run removes nothing");
        // Over a budget of two entries' worth: the oldest goes first.
        let r = s
            .prune(Some(Duration::from_secs(10_000)), Some(2100), false)
            .unwrap();
        assert_eq!(
            r.removed.iter().map(|l| l.hash.clone()).collect::<Vec<_>>(),
            vec![a.hash.clone()]
        );
        assert!(!s.root().join(&a.hash).exists());
        assert!(s.root().join(&b.hash).exists());
        // A locked entry is left.
        let _held = Lock::take(&s.root().join(&b.hash).join("lock"), false, true).unwrap();
        let r = s.prune(Some(Duration::ZERO), None, false).unwrap();
        assert_eq!(r.removed.len(), 1, "{r:?}");
        assert_eq!(r.skipped.len(), 1, "{r:?}");
        assert!(s.root().join(&b.hash).exists());
    }
}
