//! Build facts for `ralph --version`: the commit the binary was built from.
//!
//! The commit comes from `RALPH_BUILD_COMMIT` when set (a packager building from a tarball), else
//! from `git` when the source is a git checkout, else `unknown`. Cargo re-runs this script only
//! when HEAD or the branch it points to moves, so it costs nothing on an ordinary rebuild.

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

fn main() {
    println!("cargo:rerun-if-env-changed=RALPH_BUILD_COMMIT");
    let commit = match std::env::var("RALPH_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
                let dir = PathBuf::from(dir);
                println!("cargo:rerun-if-changed={}", dir.join("HEAD").display());
                if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    println!("cargo:rerun-if-changed={}", dir.join(&head_ref).display());
                }
                if let Some(common) = git(&["rev-parse", "--git-common-dir"]) {
                    let common = PathBuf::from(common);
                    println!(
                        "cargo:rerun-if-changed={}",
                        common.join("packed-refs").display()
                    );
                    if let Some(head_ref) = git(&["symbolic-ref", "-q", "HEAD"]) {
                        println!("cargo:rerun-if-changed={}", common.join(head_ref).display());
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
