//! The Docker engine and image the docker-backend tests need, and the rule for skipping: a test
//! may skip only when `CI` is unset and there is no engine (or no image), and then says why; in
//! CI (`CI` set) a missing engine or image fails the test.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};

/// The image the tests use (built by `images/build-offline.sh`).
pub const IMAGE: &str = "ralph-agent-base:latest";

/// The docker CLI, if installed.
pub fn cli() -> Option<&'static str> {
    ["/usr/bin/docker", "/usr/local/bin/docker"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_file())
}

fn engine_problem() -> Option<String> {
    let Some(docker) = cli() else {
        return Some("no docker CLI (apt-get install docker.io)".into());
    };
    let ok = |args: &[&str]| {
        Command::new(docker)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&["version"]) {
        return Some("no Docker engine answers (start dockerd; .ci/setup does)".into());
    }
    if !ok(&["image", "inspect", IMAGE]) {
        return Some(format!(
            "the engine has no image {IMAGE} (images/build-offline.sh builds it)"
        ));
    }
    None
}

/// Whether the docker tests can run; prints why not. Panics in CI when they cannot.
pub fn ready(test: &str) -> bool {
    match engine_problem() {
        None => true,
        Some(why) if std::env::var_os("CI").is_some() => {
            panic!("{test}: CI is set but the docker backend cannot be tested: {why}")
        }
        Some(why) => {
            eprintln!("{test}: skipped (CI unset): {why}");
            false
        }
    }
}

/// Runs the docker CLI and returns its stdout.
pub fn docker(args: &[&str]) -> String {
    let out = Command::new(cli().expect("docker CLI"))
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ids of the containers (any state) with label `key=value`.
pub fn containers_with_label(key: &str, value: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-aq",
        "--no-trunc",
        "--filter",
        &format!("label={key}={value}"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Ids of the *running* containers with label `key=value`.
pub fn running_containers_with_label(key: &str, value: &str) -> Vec<String> {
    docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        "status=running",
        "--filter",
        &format!("label={key}={value}"),
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}
