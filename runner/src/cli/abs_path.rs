//! A path given on the command line, made absolute against the current directory for what is
//! sent, stored or printed: `.` components dropped (`/tmp/x/./upl` is `/tmp/x/upl`); `..` kept,
//! since a symlink makes `a/b/..` differ from `a`.

use std::path::{Path, PathBuf};

/// `path` joined to `base` (unless absolute), without `.` components.
pub fn absolute(base: &Path, path: &Path) -> PathBuf {
    base.join(path).components().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_are_dropped_and_dot_dots_kept() {
        let base = Path::new("/tmp/x");
        assert_eq!(absolute(base, Path::new("./upl")), Path::new("/tmp/x/upl"));
        assert_eq!(absolute(base, Path::new(".")), Path::new("/tmp/x"));
        assert_eq!(absolute(base, Path::new("a/./b/")), Path::new("/tmp/x/a/b"));
        assert_eq!(absolute(base, Path::new("../y")), Path::new("/tmp/x/../y"));
        assert_eq!(absolute(base, Path::new("/srv/./w")), Path::new("/srv/w"));
        assert_eq!(
            absolute(Path::new("/tmp/./x/."), Path::new("f")),
            Path::new("/tmp/x/f")
        );
    }
}
