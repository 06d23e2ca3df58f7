//! Paths a run must leave absent (e.g. `.git/commondir`, which would point git elsewhere): after
//! the run's process tree is gone, whatever it created there is removed and reported.

use std::path::PathBuf;

/// Removes each of `paths` that now exists (a symlink itself, never its target) and says what
/// was done, one line per path, for the run's violations.
pub fn remove_created(paths: &[PathBuf]) -> Vec<String> {
    let mut violations = Vec::new();
    for p in paths {
        let Ok(meta) = std::fs::symlink_metadata(p) else {
            continue;
        };
        let removed = if meta.is_dir() {
            std::fs::remove_dir_all(p)
        } else {
            std::fs::remove_file(p)
        };
        violations.push(match removed {
            Ok(()) => format!(
                "`{}` was created during the run and has been removed",
                p.display()
            ),
            Err(e) => format!(
                "`{}` was created during the run and could not be removed: {e}",
                p.display()
            ),
        });
    }
    violations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_paths_are_removed_and_reported_and_symlinks_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let target = d.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), "x").unwrap();
        let file = d.path().join("commondir");
        std::fs::write(&file, "/elsewhere").unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let never = d.path().join("never");
        let v = remove_created(&[file.clone(), link.clone(), never]);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("has been removed"));
        assert!(!file.exists() && std::fs::symlink_metadata(&link).is_err());
        assert!(
            target.join("keep").exists(),
            "the link's target is untouched"
        );
    }
}
