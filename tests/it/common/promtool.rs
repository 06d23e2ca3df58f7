//! `promtool check metrics`, the reference check of Prometheus exposition text.

use std::io::Write;
use std::process::{Command, Stdio};

/// `promtool check metrics` on `text`: exit 0 and no findings.
pub fn promtool_check(text: &str) {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) if std::env::var_os("CI").is_none() => {
            eprintln!("SKIP promtool check: promtool not found ({e}); `.ci/setup` installs it");
            return;
        }
        Err(e) => panic!("promtool is required in CI: {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && findings.trim().is_empty(),
        "promtool check metrics: {}\n{findings}\n--- input ---\n{text}",
        out.status
    );
}
