//! A small tmpfs mounted for one test, for the full-disk cases (unmounted when dropped).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::PathBuf;

/// A small tmpfs mounted for one test (unmounted when dropped).
pub struct SmallDisk {
    _dir: tempfile::TempDir,
    /// Where it is mounted.
    pub path: PathBuf,
}

impl SmallDisk {
    /// A tmpfs of `size` (`20m`); `None` (said) where this process may not mount one. Root
    /// always can: there a failure fails the test.
    pub fn mount(test: &str, size: &str) -> Option<Self> {
        let dir = tempfile::Builder::new()
            .prefix("ralph-small-disk-")
            .tempdir()
            .unwrap();
        let path = dir.path().canonicalize().unwrap();
        match nix::mount::mount(
            Some("tmpfs"),
            &path,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={size},mode=0755").as_str()),
        ) {
            Ok(()) => Some(Self { _dir: dir, path }),
            Err(e) => {
                assert!(
                    !nix::unistd::geteuid().is_root(),
                    "{test}: root cannot mount a tmpfs: {e}"
                );
                eprintln!("{test}: skipped: mounting a tmpfs needs root ({e})");
                None
            }
        }
    }

    /// Fills the disk from the host (a file `name` grown until it takes no more).
    pub fn fill(&self, name: &str) -> PathBuf {
        let p = self.path.join(name);
        let mut f = std::fs::File::create(&p).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        // The last page too.
        while f.write_all(&chunk[..512]).is_ok() {}
        p
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
    }
}
