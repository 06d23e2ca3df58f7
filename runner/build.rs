//! Build facts for `ralph --version`: the commit the binary was built from.
//!
//! The commit comes from `RALPH_BUILD_COMMIT` when set (a packager building from a tarball), else
//! from `git` when the source is a git checkout, else `unknown`. Cargo re-runs this script only
//! when HEAD or the branch it points to moves, so it costs nothing on an ordinary rebuild. Only
//! files that exist are watched: cargo takes a missing one as changed on every build (a checkout
//! without `packed-refs` rebuilt and relinked the whole runner and its tests each time).

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// Re-run this script when `path` changes; `path` exists (cargo takes a missing one as changed
/// on every build).
fn watch(path: &std::path::Path) {
    println!("cargo:rerun-if-changed={}", path.display());
}

fn main() {
    println!("cargo:rerun-if-env-changed=RALPH_BUILD_COMMIT");
    let commit = match std::env::var("RALPH_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
                let dir = PathBuf::from(dir);
                let common = git(&["rev-parse", "--git-common-dir"]).map(PathBuf::from);
                let head_ref = git(&["symbolic-ref", "-q", "HEAD"]);
                watch(&dir.join("HEAD"));
                if let Some(head_ref) = &head_ref {
                    // A branch's commit is its loose ref or, once packed, its line in
                    // `packed-refs`; the loose ref may not exist yet, so its folder is watched
                    // (creating the file there changes the folder).
                    for base in std::iter::once(&dir).chain(common.as_ref()) {
                        let loose = base.join(head_ref);
                        if loose.exists() {
                            watch(&loose);
                        } else if let Some(parent) = loose.parent().filter(|p| p.is_dir()) {
                            watch(parent);
                        }
                    }
                }
                for base in std::iter::once(&dir).chain(common.as_ref()) {
                    let packed = base.join("packed-refs");
                    if packed.exists() {
                        watch(&packed);
                    }
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    let date = git(&["log", "-1", "--format=%cs", "HEAD"]).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=RALPH_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=RALPH_BUILD_DATE={date}");
}
