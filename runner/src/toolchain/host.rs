//! What detection may ask of the host: a few read-only filesystem questions behind a narrow
//! trait, so the rules stay pure data over it (tests build real trees in temporary directories,
//! or fake the trait where a tree cannot be made).

use std::path::{Path, PathBuf};

/// Read-only questions about the runner's filesystem.
pub trait HostFs {
    /// The path with every symlink resolved (`None`: it does not resolve).
    fn canonicalize(&self, p: &Path) -> Option<PathBuf>;
    /// A directory (following symlinks).
    fn is_dir(&self, p: &Path) -> bool;
    /// A regular file (following symlinks).
    fn is_file(&self, p: &Path) -> bool;
    /// A regular file with an execute bit (following symlinks).
    fn is_executable(&self, p: &Path) -> bool;
    /// At most `limit` bytes of a regular file, as text (`None`: unreadable or not a file).
    fn read_small(&self, p: &Path, limit: usize) -> Option<String>;
    /// The names in a directory (at most `limit`, unsorted; empty when unreadable).
    fn list(&self, p: &Path, limit: usize) -> Vec<String>;
    /// Whether two paths are the same file (device and inode).
    fn same_file(&self, a: &Path, b: &Path) -> bool;
}

/// The real filesystem.
#[derive(Clone, Copy, Debug, Default)]
pub struct RealFs;

impl HostFs for RealFs {
    fn canonicalize(&self, p: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(p).ok()
    }

    fn is_dir(&self, p: &Path) -> bool {
        p.is_dir()
    }

    fn is_file(&self, p: &Path) -> bool {
        p.is_file()
    }

    fn is_executable(&self, p: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    fn read_small(&self, p: &Path, limit: usize) -> Option<String> {
        use std::io::Read;
        let f = std::fs::File::open(p).ok()?;
        if !f.metadata().ok()?.is_file() {
            return None;
        }
        let mut buf = Vec::new();
        f.take(limit as u64).read_to_end(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf).into_owned())
    }

    fn list(&self, p: &Path, limit: usize) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(p) else {
            return Vec::new();
        };
        rd.flatten()
            .take(limit)
            .filter_map(|e| e.file_name().into_string().ok())
            .collect()
    }

    fn same_file(&self, a: &Path, b: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
}
