//! The network namespace of a `ralph sandbox exec` command with the network off: its own (made on
//! a thread of the supervisor while the rest is set up, and entered by the sandbox's init), with
//! loopback up, and no descriptor of it reaching the command; with `--network full`, the host's. Runs as any user (as root, and
//! through user namespaces as the unprivileged `ralph-ci`).

use crate::common::Ralph;

/// What the command saw: its network namespace, whether `127.0.0.1` is a local address (only
/// when `lo` is up), and the targets of its open descriptors.
const PROBE: &str = "readlink /proc/self/ns/net; \
     if grep -q '127.0.0.1' /proc/net/fib_trie; then echo lo-up; else echo lo-down; fi; \
     for f in /proc/self/fd/*; do echo \"fd $(readlink \"$f\")\"; done";

#[test]
fn the_command_has_its_own_network_namespace_with_loopback_up_and_no_descriptor_of_it() {
    let ws = tempfile::tempdir().unwrap();
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    for mode in ["workspace-write", "read-only"] {
        let out = Ralph::new()
            .args(["sandbox", "exec", "--mode", mode, "--workspace"])
            .arg(ws.path())
            .args(["--", "/bin/sh", "-c", PROBE])
            .output();
        out.expect_code(0);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert!(lines.len() >= 2, "{mode}: {}\n{}", out.stdout, out.stderr);
        assert!(lines[0].starts_with("net:["), "{mode}: {}", out.stdout);
        assert_ne!(
            lines[0],
            host_ns.to_string_lossy(),
            "{mode}: the command is in the host's network namespace"
        );
        assert_eq!(
            lines[1], "lo-up",
            "{mode}: loopback is down: {}",
            out.stdout
        );
        for fd in lines.iter().filter(|l| l.starts_with("fd ")) {
            assert!(
                !fd.contains("net:[") && !fd.contains("user:["),
                "{mode}: a namespace's descriptor reached the command: {fd}"
            );
        }
    }
}

/// `--network full` keeps the host's namespace: none is made.
#[test]
fn with_the_network_on_the_command_is_in_the_hosts_network_namespace() {
    let ws = tempfile::tempdir().unwrap();
    let host_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    let out = Ralph::new()
        .args(["sandbox", "exec", "--network", "full", "--workspace"])
        .arg(ws.path())
        .args(["--", "/bin/sh", "-c", "readlink /proc/self/ns/net"])
        .output();
    out.expect_code(0);
    assert_eq!(
        out.stdout.trim(),
        host_ns.to_string_lossy(),
        "{}",
        out.stderr
    );
}
