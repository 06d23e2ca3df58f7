//! The project the provisioned-workspace tests give their agents (`tests/it/provisioned.rs`,
//! `tests/it/uploads.rs`): `add.sh` subtracts, so `test.sh` fails; a binary file and a file to
//! delete. The agent that fixes it, `ralph diff`, and the check that a tree holds the fix.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use super::server::Server;
use super::{complete_report, ralph_bin};

/// Writes the failing project into `w`.
pub fn write_failing_project(w: &Path) {
    std::fs::write(w.join("add.sh"), "echo $(($1 - $2))\n").unwrap();
    std::fs::write(w.join("test.sh"), "test \"$(sh add.sh 2 3)\" = 5\n").unwrap();
    std::fs::write(w.join("data.bin"), [0u8, 1, 2, 0xff, 0xfe, 0]).unwrap();
    std::fs::write(w.join("obsolete.txt"), "old\n").unwrap();
}

/// The agent that fixes it: edits a file, changes a binary one, adds an untracked text and
/// binary file, deletes one, runs the shell lines `also` (each ending in a newline), and
/// reports complete.
pub fn fixer(s: &Server, also: &str) -> PathBuf {
    s.agent(
        "fix.sh",
        &format!(
            "sed -i 's/-/+/' add.sh\nprintf 'notes\\n' > NOTES.md\nprintf '\\000\\001\\377\\376bin' > new.bin\nprintf '\\377\\000changed' > data.bin\nrm obsolete.txt\n{also}echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("fixed add")
        ),
    )
}

/// Whether the project's test passes in `dir`.
pub fn tests_pass(dir: &Path) -> bool {
    Command::new("sh")
        .arg("test.sh")
        .current_dir(dir)
        .status()
        .unwrap()
        .success()
}

/// `dir` holds the fixer's result: the test passes, the files are as the agent left them.
pub fn assert_fixed(dir: &Path) {
    assert!(tests_pass(dir));
    assert_eq!(
        std::fs::read(dir.join("new.bin")).unwrap(),
        b"\x00\x01\xff\xfebin"
    );
    assert_eq!(
        std::fs::read(dir.join("data.bin")).unwrap(),
        b"\xff\x00changed"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("NOTES.md")).unwrap(),
        "notes\n"
    );
    assert!(!dir.join("obsolete.txt").exists());
}

/// `ralph diff ARGS` as bytes (the patch is not necessarily UTF-8): exit code, stdout, stderr.
/// Against the server unless `args` has `--state-dir`.
pub fn ralph_diff(s: &Server, args: &[&str]) -> (i32, Vec<u8>, String) {
    let mut cmd = Command::new(ralph_bin());
    cmd.arg("diff").args(args).env_remove("RALPH_SERVER");
    if !args.contains(&"--state-dir") {
        cmd.env("RALPH_SERVER", s.url())
            .env("RALPH_TOKEN", s.token());
    }
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The patch of job `id` from the server (`ralph diff ID` must succeed).
pub fn patch_of(s: &Server, id: &str) -> Vec<u8> {
    let (code, patch, err) = ralph_diff(s, &[id]);
    assert_eq!(code, 0, "{err}");
    patch
}
