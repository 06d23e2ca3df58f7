//! The docker backend used by a user the engine's socket does not admit (issue 27: the unit's
//! `User=ralph` without the `docker` group): refused with exit 69, saying which group to join.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use common::ralph_bin;

/// `ralph ARGS` as `nobody` in `dir`.
fn as_nobody(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new("runuser")
        .args(["-u", "nobody", "--"])
        .arg(ralph_bin())
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn a_user_outside_the_socket_group_is_told_to_join_it() {
    if !common::docker::ready("docker_socket") {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("docker_socket: skipped: running as another user (nobody) needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    if !as_nobody(dir.path(), &["--version"]).status.success() {
        eprintln!(
            "docker_socket: skipped: `nobody` cannot run the built ralph (its directory is private)"
        );
        return;
    }
    let out = as_nobody(
        dir.path(),
        &["sandbox", "exec", "--backend", "docker", "--", "true"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains("Permission denied")
            && stderr.contains("may not open the socket")
            && stderr.contains("SupplementaryGroups=docker"),
        "{stderr}"
    );
}
