//! The systemd units pass `systemd-analyze verify` without a single message, and the service's
//! exposure (`systemd-analyze security --offline=true`) is 3.0 or better (lower is better).
//! The unit is checked as shipped, with `ExecStart` pointed at the binary under test.

use crate::common;

use std::path::PathBuf;
use std::process::Command;

fn unit_under_test(dir: &std::path::Path) -> PathBuf {
    let shipped = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../systemd/ralph.service"),
    )
    .unwrap();
    assert!(
        shipped.contains("ExecStart=/usr/local/bin/ralph serve"),
        "the unit's ExecStart changed; update this test"
    );
    let unit = dir.join("ralph.service");
    std::fs::write(
        &unit,
        shipped.replace(
            "/usr/local/bin/ralph",
            common::ralph_bin().to_str().unwrap(),
        ),
    )
    .unwrap();
    unit
}

fn analyze() -> Command {
    // Debian's systemd package; .ci/setup installs it. Not a kernel feature: never skipped.
    Command::new("systemd-analyze")
}

#[test]
fn the_units_verify_without_any_message() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_under_test(dir.path());
    let out = analyze()
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze is needed (apt-get install systemd)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // verify reports unknown keys as warnings with exit status 0: the output must be empty.
    assert!(
        out.status.success() && text.trim().is_empty(),
        "systemd-analyze verify:\n{text}"
    );
    for (name, needle) in [
        ("ralph.sysusers", "u ralph"),
        ("ralph.tmpfiles", "/srv/ralph"),
    ] {
        let text = std::fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../systemd")
                .join(name),
        )
        .unwrap();
        assert!(text.contains(needle), "{name}");
    }
}

#[test]
fn the_service_exposure_is_3_or_better() {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_under_test(dir.path());
    let out = analyze()
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze is needed");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text
        .lines()
        .rev()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_else(|| panic!("no score in:\n{text}"));
    let score: f64 = last
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap();
    assert!(score <= 3.0, "exposure {score} is over 3.0:\n{text}");
}
