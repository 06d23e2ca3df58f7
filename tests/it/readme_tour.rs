//! The README's tour, run verbatim: every ```sh block after a `<!-- readme-tour: run -->` marker
//! runs with bash (`set -euo pipefail`) from the checkout, with the built `ralph` first on PATH
//! and a fresh HOME, exactly as a newcomer would paste it.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

const MARKER: &str = "<!-- readme-tour: run -->";

/// The marked blocks, in order.
fn tour_blocks(readme: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = readme;
    while let Some(at) = rest.find(MARKER) {
        rest = &rest[at + MARKER.len()..];
        let open = rest
            .find("```sh\n")
            .expect("a ```sh block after the marker");
        assert!(
            rest[..open].trim().is_empty(),
            "the marker must sit right above its block"
        );
        let body = &rest[open + "```sh\n".len()..];
        let close = body.find("\n```").expect("the block is closed");
        blocks.push(body[..close].to_owned());
        rest = &body[close..];
    }
    blocks
}

fn run_block(root: &Path, home: &Path, tmp: &Path, block: &str) -> (i32, String, String) {
    let bin_dir: PathBuf = common::ralph_bin().parent().unwrap().to_owned();
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("set -euo pipefail\n{block}"))
        .current_dir(root)
        .env_clear()
        .env(
            "PATH",
            format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", bin_dir.display()),
        )
        .env("HOME", home)
        .env("TMPDIR", tmp)
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_readme_tour_runs_verbatim() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let root = root.canonicalize().unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = tour_blocks(&readme);
    assert_eq!(blocks.len(), 2, "the tour's blocks: {blocks:#?}");
    // HOME and TMPDIR under /var/tmp: a fresh user's, not inside the checkout or a protected tree.
    let home = tempfile::tempdir_in("/var/tmp").unwrap();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let status_before = git_status(&root);

    // The job: complete, verified, and in the local history afterwards.
    let (code, stdout, stderr) = run_block(&root, home.path(), tmp.path(), &blocks[0]);
    assert_eq!(
        code, 0,
        "tour block failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // `ralph run --json` prints the result object first, then `ralph jobs` its table.
    let result: serde_json::Value = serde_json::Deserializer::from_str(&stdout)
        .into_iter()
        .next()
        .and_then(Result::ok)
        .unwrap_or_else(|| panic!("no JSON result on stdout:\n{stdout}"));
    assert_eq!(result["outcome"], "complete", "{result}");
    let id = result["job_id"].as_str().unwrap();
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&id[..8]) || l.contains(id)),
        "`ralph jobs --state-dir` does not list {id}:\n{stdout}"
    );
    assert!(
        home.path().join(".local/state/ralph").is_dir(),
        "the embedded default state dir"
    );

    // The sandbox block: the command ran, and the read-only write was refused on the host.
    let (code, stdout, stderr) = run_block(&root, home.path(), tmp.path(), &blocks[1]);
    assert_eq!(
        code, 0,
        "sandbox block failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(stdout.contains("hello from "), "{stdout}");
    assert!(stdout.contains("refused: read-only"), "{stdout}");
    assert!(
        !root.join("owned").exists(),
        "a read-only round wrote the checkout"
    );
    // The checkout is as it was (the demo works on a copy).
    assert_eq!(git_status(&root), status_before);
}

fn git_status(root: &Path) -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--ignored=no"])
        .current_dir(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
