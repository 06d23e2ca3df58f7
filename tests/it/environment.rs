//! Nothing of the runner's environment reaches the agent except the allowlist, the round
//! variables and what `--env` names (SPEC §4).

use crate::common;

use std::collections::BTreeMap;

use common::*;

#[test]
fn only_the_allowlist_reaches_the_agent() {
    let f = Fixture::new();
    // In the `sh -c` of --agent-cmd, /proc/$$/environ is exactly the environment the runner
    // passed to execve, before the shell adds anything of its own (such as PWD).
    let report = f.data("r.json", complete_report("env dumped").as_bytes());
    let cmd = format!(
        "tr '\\0' '\\n' < /proc/$$/environ > env.txt; cp '{}' \"$RALPH_REPORT_FILE\"",
        report.display()
    );
    // Toolchains off: exactly the allowlist (the toolchain variables are the next test's).
    let out = f
        .run_cmd(&cmd)
        .args(["--env", "MY_PASSED_TOKEN", "--toolchain", "none"])
        .env("AWS_SECRET_ACCESS_KEY", "AKIA-super-secret")
        .env("GITHUB_TOKEN", "ghp_secret")
        .env("MY_PASSED_TOKEN", "passed-value")
        .env("LANG", "C.UTF-8")
        .output();
    out.expect_code(0);
    let env: BTreeMap<String, String> = f
        .read_ws("env.txt")
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    let names: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "GIT_CONFIG_SYSTEM",
            "HOME",
            "LANG",
            "MY_PASSED_TOKEN",
            "PATH",
            "RALPH_ATTEMPT",
            "RALPH_HANDOFF_FILE",
            "RALPH_JOB_ID",
            "RALPH_MAX_ROUNDS",
            "RALPH_PROMPT_FILE",
            "RALPH_REPORT_FILE",
            "RALPH_ROUND",
            "RALPH_USAGE_FILE",
            "RALPH_WORKSPACE",
            "TERM",
            "TMPDIR"
        ]
    );
    let raw = f.read_ws("env.txt");
    assert!(!raw.contains("AKIA-super-secret") && !raw.contains("ghp_secret"));
    assert_eq!(env["MY_PASSED_TOKEN"], "passed-value");
    assert_eq!(env["RALPH_ROUND"], "1");
    assert_eq!(env["RALPH_MAX_ROUNDS"], "20");
    assert_eq!(env["RALPH_WORKSPACE"], f.ws.display().to_string());
    let job_dir = out.json()["artifacts"].as_str().unwrap().to_owned();
    assert!(
        env["HOME"].starts_with(&job_dir),
        "private HOME per round: {}",
        env["HOME"]
    );
    assert!(env["TMPDIR"].starts_with(&job_dir));
    assert!(
        !env["RALPH_REPORT_FILE"].starts_with(&f.ws.display().to_string()),
        "round files live outside the workspace"
    );
}

/// SPEC §12: with `--toolchain auto` (the default) the only variables added are the journalled
/// toolchain grant's (roots, versions, redirects into the private HOME), each with the value
/// journalled; the runner's secrets still do not pass. A fake rustup home makes the grant
/// non-empty on any host.
#[test]
fn toolchain_variables_are_exactly_the_journalled_grants() {
    use std::os::unix::fs::PermissionsExt;
    let f = Fixture::new();
    let tc = f.root.path().join("tc");
    std::fs::create_dir_all(tc.join("cargo/bin")).unwrap();
    std::fs::create_dir_all(tc.join("rustup/toolchains")).unwrap();
    let rustup = tc.join("cargo/bin/rustup");
    std::fs::write(&rustup, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&rustup, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tc = tc.canonicalize().unwrap();
    let report = f.data("r.json", complete_report("env dumped").as_bytes());
    let cmd = format!(
        "tr '\\0' '\\n' < /proc/$$/environ > env.txt; cp '{}' \"$RALPH_REPORT_FILE\"",
        report.display()
    );
    let out = f
        .run_cmd(&cmd)
        .env("AWS_SECRET_ACCESS_KEY", "AKIA-super-secret")
        .env(
            "PATH",
            &format!(
                "{}:/usr/local/bin:/usr/bin:/bin",
                tc.join("cargo/bin").display()
            ),
        )
        .env("RUSTUP_HOME", tc.join("rustup").to_str().unwrap())
        .env("CARGO_HOME", tc.join("cargo").to_str().unwrap())
        // Set by cargo's rustup proxy for this test; empty is unset for the grant.
        .env("RUSTUP_TOOLCHAIN", "")
        .env("RUSTUP_AUTO_INSTALL", "")
        .output();
    out.expect_code(0);
    let env: BTreeMap<String, String> = f
        .read_ws("env.txt")
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    let granted = f
        .events(&out.job_id())
        .into_iter()
        .find(|(t, _)| t == "toolchain_granted")
        .map(|(_, e)| e)
        .expect("toolchain_granted");
    let vars = granted["variables"].as_object().unwrap();
    assert_eq!(
        vars.keys().map(String::as_str).collect::<Vec<_>>(),
        ["CARGO_HOME", "RUSTUP_HOME"],
        "{granted}"
    );
    let home = env["HOME"].clone();
    for (k, v) in vars {
        let v = v.as_str().unwrap().replace("$HOME", &home);
        assert_eq!(env.get(k), Some(&v), "{k}");
    }
    let allow = [
        "GIT_CONFIG_SYSTEM",
        "HOME",
        "LANG",
        "PATH",
        "RALPH_ATTEMPT",
        "RALPH_HANDOFF_FILE",
        "RALPH_JOB_ID",
        "RALPH_MAX_ROUNDS",
        "RALPH_PROMPT_FILE",
        "RALPH_REPORT_FILE",
        "RALPH_ROUND",
        "RALPH_USAGE_FILE",
        "RALPH_WORKSPACE",
        "TERM",
        "TMPDIR",
    ];
    for k in env.keys() {
        assert!(
            allow.contains(&k.as_str()) || vars.contains_key(k),
            "`{k}` reached the agent"
        );
    }
    assert!(!f.read_ws("env.txt").contains("AKIA-super-secret"));
}

#[test]
fn the_prompt_is_on_stdin_and_in_the_prompt_file() {
    let f = Fixture::new();
    let agent = f.agent(
        "prompt.sh",
        &format!("cat > stdin.txt\ncp \"$RALPH_PROMPT_FILE\" file.txt\necho '{}' > \"$RALPH_REPORT_FILE\"", complete_report("ok")),
    );
    f.run(&agent).output().expect_code(0);
    let stdin = f.read_ws("stdin.txt");
    assert!(stdin.contains("test objective"));
    assert!(stdin.contains("round 1 of at most 20"));
    assert_eq!(stdin, f.read_ws("file.txt"));
}

/// Bytes that are not UTF-8 where a round's text is made (its environment, its prompt, its
/// command line) are refused by name, escaped, before anything runs: never passed on lossily.
mod not_utf8 {
    use super::common::{self, Fixture, Ralph, complete_report};
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;

    /// `ralph sandbox exec --workspace ws`, flags and the command to add.
    fn sandbox_exec(ws: &Path) -> Ralph {
        Ralph::new()
            .args(["sandbox", "exec", "--workspace"])
            .arg(ws)
    }

    /// Asserts `stderr` shows `escaped` (the bytes as `\xFF`) and no raw byte that was not text.
    fn shows_escaped(stderr: &str, escaped: &str) {
        assert!(stderr.contains(escaped), "{escaped} not named:\n{stderr}");
        assert!(
            !stderr.contains('\u{fffd}') && !stderr.contains('\u{1b}'),
            "a raw byte reached stderr:\n{stderr}"
        );
    }

    #[test]
    fn an_env_variable_whose_value_is_not_text_is_named_not_called_unset() {
        let f = Fixture::new();
        let cmd = format!(
            "touch ran; echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("x")
        );
        let mut c = f.run_cmd(&cmd).args(["--env", "MY_BYTES"]).command();
        c.env("MY_BYTES", OsStr::from_bytes(b"a\xffb"));
        let out = common::output_of(c);
        out.expect_code(64);
        assert!(
            out.stderr.contains("`--env MY_BYTES`") && out.stderr.contains("not UTF-8"),
            "{}",
            out.stderr
        );
        assert!(!out.stderr.contains("is not set"), "{}", out.stderr);
        assert!(!f.ws.join("ran").exists(), "the agent ran");

        let mut c = sandbox_exec(&f.ws)
            .args(["--env", "MY_BYTES", "--", "/bin/sh", "-c", "touch ran"])
            .command();
        c.env("MY_BYTES", OsStr::from_bytes(b"a\xffb"));
        let out = common::output_of(c);
        out.expect_code(64);
        assert!(out.stderr.contains("not UTF-8"), "{}", out.stderr);
        assert!(!f.ws.join("ran").exists(), "the command ran");
    }

    #[test]
    fn a_workspace_whose_path_is_not_text_is_refused_for_a_job() {
        let f = Fixture::new();
        let ws = f.root.path().join(OsStr::from_bytes(b"w\xff\x1b[31mx"));
        std::fs::create_dir(&ws).unwrap();
        let cmd = format!(
            "touch ran; echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("x")
        );
        let out = f.run_at(&ws, &f.state, &cmd).output();
        out.expect_code(64);
        assert!(out.stderr.contains("workspace"), "{}", out.stderr);
        shows_escaped(&out.stderr, r"\xFF\u{1b}[31mx");
        assert!(!ws.join("ran").exists(), "the agent ran");
    }

    #[test]
    fn a_state_directory_whose_path_is_not_text_is_refused_before_it_is_made() {
        let f = Fixture::new();
        let state = f.root.path().join(OsStr::from_bytes(b"st\xff\x1b[31m"));
        let out = f.run_at(&f.ws, &state, "touch ran").output();
        out.expect_code(64);
        assert!(out.stderr.contains("state directory"), "{}", out.stderr);
        shows_escaped(&out.stderr, r"st\xFF\u{1b}[31m");
        assert!(!state.exists(), "the state directory was made");
        assert!(!f.ws.join("ran").exists(), "the agent ran");
        // Through a link whose own name is text: the directory it resolves to is refused too.
        std::fs::create_dir(&state).unwrap();
        let link = f.root.path().join("state-link");
        std::os::unix::fs::symlink(&state, &link).unwrap();
        let out = f.run_at(&f.ws, &link, "touch ran").output();
        out.expect_code(64);
        shows_escaped(&out.stderr, r"st\xFF\u{1b}[31m");
        assert_eq!(
            std::fs::read_dir(&state).unwrap().count(),
            0,
            "something was made"
        );
        assert!(!f.ws.join("ran").exists(), "the agent ran");
    }

    #[test]
    fn a_text_flag_given_bytes_that_are_not_text_is_named_and_nothing_runs() {
        let f = Fixture::new();
        let out = Ralph::new()
            .args(["run", "--objective", "o", "--workspace"])
            .arg(&f.ws)
            .arg("--state-dir")
            .arg(&f.state)
            .arg("--agent-cmd")
            .arg(OsStr::from_bytes(b"touch ran; a\xff\x1b[31m"))
            .output();
        out.expect_code(64);
        assert!(out.stderr.contains("argument 9,"), "{}", out.stderr);
        assert!(
            out.stderr.contains("(after `--agent-cmd`)"),
            "{}",
            out.stderr
        );
        shows_escaped(&out.stderr, r"a\xFF\u{1b}[31m");
        assert!(!f.state.exists(), "the state directory was made");
        assert!(!f.ws.join("ran").exists(), "the agent ran");
    }

    #[test]
    fn sandbox_exec_names_an_argument_that_is_not_text_and_runs_nothing() {
        let f = Fixture::new();
        let out = sandbox_exec(&f.ws)
            .args(["--", "/bin/sh", "-c", "touch ran", "sh"])
            .arg(OsStr::from_bytes(b"a\xff\x1b[31m"))
            .output();
        out.expect_code(64);
        assert!(
            out.stderr.contains("argument 5 of the command"),
            "{}",
            out.stderr
        );
        shows_escaped(&out.stderr, r"a\xFF\u{1b}[31m");
        assert!(!f.ws.join("ran").exists(), "the command ran");
    }

    #[test]
    fn sandbox_exec_in_a_workspace_whose_path_is_not_text_leaves_it_unnamed_not_misnamed() {
        let f = Fixture::new();
        let ws = f.root.path().join(OsStr::from_bytes(b"w\xffx"));
        std::fs::create_dir(&ws).unwrap();
        let out = sandbox_exec(&ws)
            .args([
                "--",
                "/bin/sh",
                "-c",
                "echo \"[${RALPH_WORKSPACE-unset}]\" > seen",
            ])
            .output();
        out.expect_code(0);
        assert_eq!(
            std::fs::read_to_string(ws.join("seen")).unwrap(),
            "[unset]\n"
        );
        assert!(
            out.stderr.contains("RALPH_WORKSPACE is not set"),
            "{}",
            out.stderr
        );
        shows_escaped(&out.stderr, r"w\xFFx");
    }
}
