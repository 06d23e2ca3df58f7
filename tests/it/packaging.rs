//! What ships besides the runner: man pages generated from the CLI, and a `--version` that names
//! the commit and the backends.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// Renders a page with man(1), warnings on; returns the text and whatever it warned.
fn render(page: &Path) -> (String, String) {
    let out = Command::new("man")
        .args(["--warnings", "-l"])
        .arg(page)
        .env("MANWIDTH", "100")
        .env("MANPAGER", "cat")
        .env("LC_ALL", "C.UTF-8")
        .output()
        .expect("man(1) is installed by .ci/setup");
    assert!(out.status.success(), "{out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The long flags a command's `--help` lists.
fn long_flags(args: &[&str]) -> BTreeSet<String> {
    let out = Command::new(common::ralph_bin())
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("--"))
        .map(|w| {
            w.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
                .split(['=', '<', ','])
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

#[test]
fn man_pages_cover_every_command_and_flag_and_render_without_warnings() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(common::ralph_bin())
        .args(["man", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let pages: BTreeSet<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for page in [
        "ralph.1",
        "ralph-run.1",
        "ralph-serve.1",
        "ralph-submit.1",
        "ralph-jobs.1",
        "ralph-show.1",
        "ralph-logs.1",
        "ralph-wait.1",
        "ralph-cancel.1",
        "ralph-resume.1",
        "ralph-doctor.1",
        "ralph-sandbox-exec.1",
        "ralph-agent-list.1",
        "ralph-man.1",
    ] {
        assert!(pages.contains(page), "{page} missing from {pages:?}");
    }
    assert!(
        !pages.iter().any(|p| p.contains("help")),
        "clap's help command has no page: {pages:?}"
    );
    for page in &pages {
        let (text, warnings) = render(&dir.path().join(page));
        assert!(warnings.trim().is_empty(), "{page}: {warnings}");
        assert!(text.contains("SYNOPSIS"), "{page}: {text}");
    }
    // Every flag of `ralph run --help` is in ralph-run(1).
    let (run_page, _) = render(&dir.path().join("ralph-run.1"));
    let flags = long_flags(&["run"]);
    assert!(
        flags.contains("max-rounds") && flags.len() > 20,
        "{flags:?}"
    );
    for flag in flags {
        assert!(
            run_page.contains(&format!("--{flag}")),
            "--{flag} missing from ralph-run(1)"
        );
    }
    // Without --dir, ralph(1) on stdout, and it lists the commands.
    let out = Command::new(common::ralph_bin())
        .arg("man")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let page = dir.path().join("stdout.1");
    std::fs::write(&page, &out.stdout).unwrap();
    let (text, warnings) = render(&page);
    assert!(warnings.trim().is_empty(), "{warnings}");
    for cmd in ["run", "serve", "submit", "sandbox", "doctor", "man"] {
        assert!(text.contains(&format!("ralph-{cmd}(1)")), "{cmd}: {text}");
    }
    // A directory that cannot be made is a usage error naming it.
    let out = Command::new(common::ralph_bin())
        .args(["man", "--dir", "/proc/self/nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("/proc/self/nope"));
}

#[test]
fn version_names_the_commit_and_the_backends() {
    let out = Command::new(common::ralph_bin())
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("ralph {}", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    let commit = lines
        .iter()
        .find_map(|l| l.strip_prefix("commit: "))
        .unwrap_or_else(|| panic!("no commit line: {text}"));
    // Built from a git checkout (CI clones), the commit is HEAD's.
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    if head.status.success() {
        let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
        assert!(commit.starts_with(&head), "{commit} vs HEAD {head}");
    }
    let backends = lines
        .iter()
        .find_map(|l| l.strip_prefix("backends: "))
        .unwrap_or_else(|| panic!("no backends line: {text}"));
    assert!(
        backends.contains("native") && backends.contains("docker"),
        "{text}"
    );
    // -V stays one line for scripts.
    let out = Command::new(common::ralph_bin())
        .arg("-V")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("ralph {}", env!("CARGO_PKG_VERSION"))
    );
}
