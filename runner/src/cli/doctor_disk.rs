//! `ralph doctor`'s check of the state directory's disk: whether it has room for the runner's
//! reserve and the margin a round needs to start ([`ralph_runner::store::reserve`]). On a disk
//! with less, rounds do not start and running jobs close `interrupted` (reason `disk_full`).

use std::path::{Path, PathBuf};

use ralph_runner::store::reserve::{REPLENISH_MARGIN, RESERVE_BYTES, RESERVE_FILE, free_bytes};

/// The state directory's disk, as checked.
#[derive(Debug)]
pub(super) struct StateDisk {
    /// The state directory.
    pub dir: PathBuf,
    /// Its disk's free bytes (`None`: unknown, `status` says why).
    pub free: Option<u64>,
    /// Whether a round could start there.
    pub ok: bool,
    /// "ok: …" or the reason, with what to do.
    pub status: String,
}

impl StateDisk {
    /// Checks the disk of `dir` (or of its nearest existing parent, before the first run).
    pub(super) fn check(dir: &Path) -> Self {
        let probe = dir
            .ancestors()
            .find(|p| p.exists())
            .unwrap_or(Path::new("/"));
        let reserved = dir
            .join(RESERVE_FILE)
            .metadata()
            .is_ok_and(|m| m.is_file() && m.len() >= RESERVE_BYTES);
        let need = REPLENISH_MARGIN + if reserved { 0 } else { RESERVE_BYTES };
        let (free, ok, status) = match free_bytes(probe) {
            Ok(free) if free >= need => (
                Some(free),
                true,
                format!(
                    "ok: {} free{}",
                    mib(free),
                    if reserved { ", reserve in place" } else { "" }
                ),
            ),
            Ok(free) => (
                Some(free),
                false,
                format!(
                    "{} free, less than the {} a round needs to start ({} MiB reserve{} and {} MiB to spare): rounds will not start and running jobs close `interrupted` (disk_full); free space on that disk",
                    mib(free),
                    mib(need),
                    RESERVE_BYTES >> 20,
                    if reserved { ", in place," } else { "" },
                    REPLENISH_MARGIN >> 20
                ),
            ),
            Err(e) => (
                None,
                false,
                format!("cannot tell the free space of `{}`: {e}", probe.display()),
            ),
        };
        Self {
            dir: dir.to_owned(),
            free,
            ok,
            status,
        }
    }

    /// The `state_dir` object of `ralph doctor --json`.
    pub(super) fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "path": self.dir,
            "free_bytes": self.free,
            "ok": self.ok,
            "status": self.status,
        })
    }
}

/// Bytes in MiB, one decimal.
fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_with_room_is_ok_and_a_missing_dir_is_checked_on_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let d = StateDisk::check(&dir.path().join("not/yet"));
        // The test machine's temporary disk has more than 12 MiB free.
        assert!(d.ok, "{d:?}");
        assert!(d.status.starts_with("ok: "), "{d:?}");
        assert!(d.free.is_some());
        assert_eq!(d.json()["ok"], true);
    }
}
