//! The agent skeleton in `docs/agents.md` works as printed (issue 12, item 2): the test takes the
//! `sh` block under "### The report" verbatim, saves it outside the workspace, and runs a real
//! job with it — failing tests first (`continue`, a valid report), then passing ones (`complete`,
//! verified by the same test script). An agent written from the docs passes validation.

use crate::common;

use std::os::unix::fs::PermissionsExt;

use common::{Fixture, Ralph, TEST_MODE};

/// The first ```sh block after `### The report` in docs/agents.md.
fn skeleton() -> String {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/agents.md")).unwrap();
    let section = &doc[doc.find("### The report").expect("the report section")..];
    let start = section.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let end = section[start..].find("```").unwrap();
    section[start..start + end].to_owned()
}

#[test]
fn the_documented_agent_skeleton_runs_as_printed() {
    let f = Fixture::new();
    let agents = f.root.path().join("my-agents");
    std::fs::create_dir_all(&agents).unwrap();
    let agent = agents.join("skeleton.sh");
    std::fs::write(&agent, skeleton()).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The project: its tests fail once, then pass (standing in for the agent's work between
    // round 1 and round 2).
    let tests = f.ws.join("run-tests.sh");
    std::fs::write(
        &tests,
        "#!/bin/sh\nif [ -e .failed-once ]; then exit 0; fi\ntouch .failed-once\necho 'FAIL: test_x' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&tests, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Ralph::new()
        .args([
            "run",
            "--objective",
            "make the tests pass",
            "--json",
            "--mode",
            TEST_MODE,
        ])
        .arg("--workspace")
        .arg(&f.ws)
        .arg("--state-dir")
        .arg(&f.state)
        .arg("--read")
        .arg(&agents)
        .arg("--agent-cmd")
        .arg(&agent)
        .args(["--verify", "./run-tests.sh", "--max-rounds", "4"])
        .output();
    out.expect_code(0);
    let j = out.json();
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["rounds"], 2, "{j}");
    assert_eq!(j["retries"], 0, "every report was valid: {j}");
    let events = f.events(&out.job_id());
    let reports: Vec<&str> = events
        .iter()
        .filter(|(t, _)| t == "round_finished")
        .map(|(_, e)| e["result"]["kind"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(reports, ["reported", "reported"], "{events:?}");
}
