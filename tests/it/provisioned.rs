//! Workspaces the runner provisions (SPEC §11), end to end with real git: a bare repository
//! served on loopback by `git daemon`, a real `ralph serve`, scripted agents. A `repo` job is
//! cloned through the runner's mirror, fixed by its agent and verified; its `result.patch`
//! (binary and untracked files included) applies to a fresh clone and makes the tests pass;
//! `push` lands a branch where allowed; a repository outside `allowed_repos`, a bad ref and a
//! hostile `.git/config` are handled; a resumed job keeps its workspace; retention removes it.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fix_project::{
    assert_fixed, fixer, patch_of, ralph_diff, tests_pass, write_failing_project,
};
use common::git_server::{GitServer, git};
use common::server::Server;
use common::{complete_report, wait_until};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);

fn server_for(g: &GitServer, extra_limits: &str) -> Server {
    Server::new(&format!(
        "[limits]\nallowed_repos = [\"git://127.0.0.1:{}/\"]\n{extra_limits}",
        g.port
    ))
}

fn repo_job(s: &Server, agent: &Path, url: &str, extra: Value) -> Value {
    let mut j = json!({
        "objective": "make the tests pass",
        "repo": url,
        "agent_cmd": agent.display().to_string(),
        "read": [s.agents],
        "retry_backoff": "10ms",
        "kill_grace": "1s",
    });
    for (k, v) in extra.as_object().unwrap() {
        j[k] = v.clone();
    }
    j
}

fn submit(s: &Server, jobs: Vec<Value>) -> (u16, Value) {
    s.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": jobs }).to_string()),
    )
}

fn submit_one(s: &Server, job: Value) -> String {
    let (code, body) = submit(s, vec![job]);
    assert_eq!(code, 201, "{body}");
    body["jobs"][0]["id"].as_str().unwrap().to_owned()
}

/// Whether this runner can mount overlays (a root runner; the kernel has overlayfs).
fn overlays_possible() -> bool {
    let root = nix::unistd::geteuid().is_root();
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if !root || !fs.contains("overlay") {
        eprintln!(
            "skipping the overlay layout: {}",
            if root {
                "this kernel has no overlayfs"
            } else {
                "only a root runner mounts overlays"
            }
        );
        return false;
    }
    true
}

#[test]
fn a_repo_job_is_fixed_and_its_patch_applies_to_a_fresh_clone() {
    fix_and_apply("clone");
}

#[test]
fn an_overlay_workspace_is_fixed_its_patch_applies_and_the_shared_tree_is_untouched() {
    if overlays_possible() {
        fix_and_apply("overlay");
    }
}

/// The fixer's job on a workspace of `layout` (`workspace_layout`), its result checked on the
/// host.
fn fix_and_apply(layout: &str) {
    let g = GitServer::start();
    let base = g.create("proj.git", write_failing_project);
    let s = server_for(
        &g,
        &format!("\n[provision]\nworkspace_layout = \"{layout}\"\n"),
    );
    let agent = fixer(&s, "");
    let id = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"ref": "main", "verify": "sh test.sh"}),
        ),
    );
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    assert_eq!(j["reason"], "verified", "{j}");
    // The base commit is journalled and shown.
    let prov = s.events_of(&id, "workspace_provisioned");
    assert_eq!(prov.len(), 1, "{prov:?}");
    assert_eq!(prov[0]["commit"], base.as_str());
    assert_eq!(prov[0]["layout"], layout, "{prov:?}");
    assert_eq!(j["base_commit"], base.as_str());
    // The workspace is the runner's, under its state dir; the mirror beside it.
    let ws = s.state.join("workspaces").join(&id);
    if layout == "clone" {
        assert!(ws.join("add.sh").is_file());
    } else {
        overlay_holds_only_the_changes(&s, &ws, &base);
    }
    assert_eq!(
        std::fs::read_dir(s.state.join("mirrors"))
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "git"))
            .count(),
        1
    );
    // The patch, from the server and from the local store, byte for byte the same.
    let patch = patch_of(&s, &id);
    let (code, local, err) = ralph_diff(&s, &["--state-dir", s.state.to_str().unwrap(), &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(patch, local);
    let text = String::from_utf8_lossy(&patch);
    for name in ["add.sh", "NOTES.md", "new.bin", "data.bin", "obsolete.txt"] {
        assert!(
            text.contains(&format!("b/{name}")) || text.contains(&format!("a/{name}")),
            "{name} missing:\n{text}"
        );
    }
    assert!(text.contains("GIT binary patch"), "{text}");
    // A fresh clone fails its tests; with the patch applied they pass, files as the agent left.
    let fresh = g.dir.path().join("fresh");
    g.fresh_clone("proj.git", &fresh);
    assert!(!tests_pass(&fresh));
    let patch_file = g.dir.path().join("result.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    git(&fresh, &["apply", "--index", patch_file.to_str().unwrap()]);
    assert_fixed(&fresh);
    // The workspace's own index and HEAD were not touched by the runner's patch.
    if layout == "clone" {
        assert_eq!(git(&ws, &["rev-parse", "HEAD"]), base);
        assert!(git(&ws, &["status", "--porcelain"]).contains("?? NOTES.md"));
    }
    // The API serves the same bytes.
    let (status, body) = s
        .raw(
            "GET",
            &format!("/v1/jobs/{id}/patch"),
            Some(&s.token()),
            None,
            None,
        )
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(body.len(), patch.len());
    // A second job of the same repository, submitted with flags, reuses the mirror (no second
    // clone of it).
    let out = s.ralph(&[
        "submit",
        "--objective",
        "again",
        "--repo",
        &g.url("proj.git"),
        "--ref",
        "main",
        "--agent-cmd",
        agent.to_str().unwrap(),
        "--read",
        s.agents.to_str().unwrap(),
    ]);
    out.expect_code(0);
    let id2 = out.stdout.trim().to_owned();
    assert_eq!(s.wait_finished(&id2, LIMIT)["outcome"], "complete");
    assert_eq!(
        std::fs::read_dir(s.state.join("mirrors"))
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "git"))
            .count(),
        1
    );
}

/// A finished overlay workspace on the host: unmounted (an empty mount point); its upper layer
/// holds exactly what the agent changed (no `.git`: the runner's patch never wrote there); the
/// base tree every job at this commit shares is as the commit has it.
fn overlay_holds_only_the_changes(s: &Server, ws: &Path, base: &str) {
    use std::os::unix::fs::FileTypeExt;
    assert_eq!(std::fs::read_dir(ws).unwrap().count(), 0, "still mounted");
    let upper = ws.with_extension("layer").join("upper");
    let mut changed: Vec<String> = std::fs::read_dir(&upper)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    changed.sort();
    assert_eq!(
        changed,
        // `.ralph`: the sandbox's placeholder for its protected (policy) path.
        [
            ".ralph",
            "NOTES.md",
            "add.sh",
            "data.bin",
            "new.bin",
            "obsolete.txt"
        ],
        "the upper layer holds only the changes"
    );
    // The deletion is a whiteout, not a removal in the shared tree.
    assert!(
        std::fs::symlink_metadata(upper.join("obsolete.txt"))
            .unwrap()
            .file_type()
            .is_char_device()
    );
    let (trees, beside): (Vec<PathBuf>, Vec<PathBuf>) = std::fs::read_dir(s.state.join("mirrors"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "trees"))
        .flat_map(|t| std::fs::read_dir(t).unwrap().map(|e| e.unwrap().path()))
        .partition(|p| p.is_dir());
    assert_eq!(trees.len(), 1, "{trees:?}");
    let tree = &trees[0];
    // Beside it only the runner's files of that tree: its listings (made as it was put in
    // place), and its staging index and quiet listings when a job took it a second or more
    // after it was made (a busy machine's checkout can straddle a second).
    let name = tree.file_name().unwrap().to_str().unwrap();
    let mut kinds: Vec<&str> = beside
        .iter()
        .map(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.strip_prefix(name)
                .and_then(|k| k.strip_prefix('.'))
                .unwrap_or_else(|| panic!("{n} beside {name}"))
        })
        .collect();
    kinds.sort_unstable();
    assert!(kinds.contains(&"lower"), "{kinds:?}");
    assert!(
        kinds.iter().all(|k| ["index", "lower", "walk"].contains(k)),
        "{kinds:?}"
    );
    assert!(
        tree.file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(base),
        "{tree:?}"
    );
    assert_eq!(
        std::fs::read_to_string(tree.join("add.sh")).unwrap(),
        "echo $(($1 - $2))\n"
    );
    assert!(tree.join("obsolete.txt").is_file() && !tree.join("NOTES.md").exists());
    assert_eq!(
        git(tree, &["-c", "safe.directory=*", "status", "--porcelain"]),
        ""
    );
}

#[test]
fn a_job_cannot_change_the_base_tree_the_next_job_at_its_commit_gets() {
    if !overlays_possible() {
        return;
    }
    let g = GitServer::start();
    let base = g.create("proj.git", write_failing_project);
    let s = server_for(&g, "\n[provision]\nworkspace_layout = \"overlay\"\n");
    // The first job rewrites what it can: a tracked file in place (same inode, `>>`), a
    // deletion, a commit (index, refs, objects), the origin, and it tries to unmount its
    // workspace to reach what is under it.
    let poison = s.agent(
        "poison.sh",
        &format!(
            "echo poison >> test.sh\nrm add.sh\ngit -c user.name=a -c user.email=a@a commit -qam poison\ngit remote set-url origin /evil\numount -l . 2>/dev/null; umount . 2>/dev/null\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("poisoned")
        ),
    );
    let first = submit_one(&s, repo_job(&s, &poison, &g.url("proj.git"), json!({})));
    assert_eq!(s.wait_finished(&first, LIMIT)["outcome"], "complete");
    // The second job at the same commit sees the commit as it is: its verify checks it.
    let clean = s.agent(
        "clean.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("looked")
        ),
    );
    let verify = format!(
        "test \"$(git rev-parse HEAD)\" = {base} && git diff --quiet HEAD && test -f add.sh && ! grep -q poison test.sh && test \"$(git remote get-url origin)\" = {}",
        g.url("proj.git")
    );
    let second = submit_one(
        &s,
        repo_job(&s, &clean, &g.url("proj.git"), json!({"verify": verify})),
    );
    let j = s.wait_finished(&second, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["reason"], "verified", "{j}");
    // Both stood on one base tree, which is as the commit has it; the first job's result is
    // its own.
    let lowers: Vec<String> = [&first, &second]
        .iter()
        .map(|id| {
            std::fs::read_to_string(
                s.state
                    .join("workspaces")
                    .join(format!("{id}.layer"))
                    .join("lower"),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(lowers[0], lowers[1]);
    let tree = PathBuf::from(lowers[0].trim_end());
    assert_eq!(
        git(&tree, &["-c", "safe.directory=*", "status", "--porcelain"]),
        ""
    );
    assert_eq!(
        git(&tree, &["-c", "safe.directory=*", "rev-parse", "HEAD"]),
        base
    );
    let patch = patch_of(&s, &first);
    let text = String::from_utf8_lossy(&patch);
    assert!(
        text.contains("+poison") && text.contains("deleted file mode"),
        "{text}"
    );
}

/// A project whose shared tree has directories a few levels deep.
fn write_deep_project(w: &Path) {
    write_failing_project(w);
    for d in ["src/a/b/c", "src/a/d", "docs/x", "docs/y"] {
        std::fs::create_dir_all(w.join(d)).unwrap();
        std::fs::write(w.join(d).join("notes.txt"), d).unwrap();
    }
}

#[test]
fn a_layered_workspace_s_walks_find_what_a_round_makes_deep_in_the_shared_tree() {
    if !overlays_possible() {
        return;
    }
    let g = GitServer::start();
    g.create("deep.git", write_deep_project);
    let s = server_for(&g, "\n[provision]\nworkspace_layout = \"overlay\"\n");
    // What the round makes deep in directories only the shared tree had: a repository whose
    // configuration would run a command on the host, a `.git` file pointing out of the tree.
    let marker = s.state.parent().unwrap().join("fsmonitor-ran");
    let deep = s.agent(
        "deep.sh",
        &format!(
            "git init -q src/a/b/c/r && git -C src/a/b/c/r config core.fsmonitor 'touch {m}'\nprintf 'gitdir: /etc\\n' > docs/y/.git\necho '{r}' > \"$RALPH_REPORT_FILE\"",
            m = marker.display(),
            r = complete_report("nested")
        ),
    );
    let id = submit_one(&s, repo_job(&s, &deep, &g.url("deep.git"), json!({})));
    let j = s.wait_finished(&id, LIMIT);
    // The tree's first job: its rounds walked their overlay through its layers, from the
    // listing of every directory of the tree made as it was put in place.
    let lower = std::fs::read_to_string(
        s.state
            .join("workspaces")
            .join(format!("{id}.layer"))
            .join("lower"),
    )
    .unwrap();
    let tree = PathBuf::from(lower.trim_end());
    let listings = tree.with_file_name(format!(
        "{}.lower",
        tree.file_name().unwrap().to_string_lossy()
    ));
    assert!(
        listings.is_file(),
        "the tree's listings at {}",
        listings.display()
    );
    let sanitized = s.events_of(&id, "workspace_sanitized");
    let rels: Vec<&str> = sanitized
        .iter()
        .flat_map(|e| e["repositories"].as_array().unwrap())
        .filter_map(|r| r["rel"].as_str())
        .collect();
    for want in ["src/a/b/c/r/.git", "docs/y/.git"] {
        assert!(rels.contains(&want), "{want} not in {rels:?}: {j}");
    }
    assert!(
        !marker.exists(),
        "the nested repository's command ran on the host"
    );
}

#[test]
fn a_docker_round_works_in_an_overlay_workspace() {
    if !overlays_possible()
        || !common::docker::ready("a_docker_round_works_in_an_overlay_workspace")
    {
        return;
    }
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(
        &g,
        &format!(
            "allowed_images = [\"{}\"]\n[provision]\nworkspace_layout = \"overlay\"\n",
            common::docker::IMAGE
        ),
    );
    let agent = fixer(&s, "");
    let id = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"backend": "docker", "image": common::docker::IMAGE, "verify": "sh test.sh"}),
        ),
    );
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    assert_eq!(j["reason"], "verified", "{j}");
    assert_eq!(
        s.events_of(&id, "workspace_provisioned")[0]["layout"],
        "overlay"
    );
    let ws = s.state.join("workspaces").join(&id);
    let upper = ws.with_extension("layer").join("upper");
    assert_eq!(
        std::fs::read_to_string(upper.join("add.sh")).unwrap(),
        "echo $(($1 + $2))\n"
    );
    let patch = patch_of(&s, &id);
    assert!(String::from_utf8_lossy(&patch).contains("+echo $(($1 + $2))"));
}

#[test]
fn a_killed_runners_overlay_is_unmounted_at_start_and_a_resume_mounts_it_again() {
    if !overlays_possible() {
        return;
    }
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let mut s = server_for(&g, "\n[provision]\nworkspace_layout = \"overlay\"\n");
    // The first run leaves a file and hangs; the resumed run finds it and fixes the project.
    let agent = s.agent(
        "hang.sh",
        &format!(
            "if [ -e step1 ]; then sed -i 's/-/+/' add.sh; echo '{}' > \"$RALPH_REPORT_FILE\"; else touch step1; exec sleep 600; fi",
            complete_report("second run"),
        ),
    );
    let id = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"verify": "sh test.sh"}),
        ),
    );
    let ws = s.state.join("workspaces").join(&id);
    let upper = ws.with_extension("layer").join("upper");
    wait_until("the first round to write step1", LIMIT, || {
        upper.join("step1").exists()
    });
    assert!(ws.join("add.sh").is_file(), "mounted while the job runs");
    s.kill9();
    // The killed runner's mount is still there.
    assert!(ws.join("add.sh").is_file());
    s.start();
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "interrupted", "{j}");
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        0,
        "start-up recovery unmounts it"
    );
    assert!(s.log_text().contains("1 workspace overlay(s) unmounted"));
    let out = s.ralph(&["resume", &id]);
    out.expect_code(0);
    wait_until("the resumed job to finish", LIMIT, || {
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        j["state"] == "finished" && j["outcome"] != "interrupted"
    });
    let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(j["outcome"], "complete", "{j}");
    assert_eq!(j["reason"], "verified", "{j}");
    assert!(upper.join("step1").exists() && upper.join("add.sh").exists());
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        0,
        "unmounted again"
    );
}

#[test]
fn a_repo_outside_allowed_repos_is_refused_naming_the_rule_and_nothing_is_made() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    let agent = fixer(&s, "");
    for url in [
        format!("git://127.0.0.2:{}/proj.git", g.port),
        format!("git://127.0.0.1:{}/../srv/proj.git", g.port),
        format!("git://127.0.0.1:{}0/proj.git", g.port),
    ] {
        let (code, body) = submit(&s, vec![repo_job(&s, &agent, &url, json!({}))]);
        assert_eq!(code, 403, "{url}: {body}");
        assert_eq!(body["error"]["rule"], "limits.allowed_repos", "{body}");
        assert_eq!(body["error"]["field"], "job[0].repo", "{body}");
    }
    // Through the CLI: the rule is named on stderr.
    let file = s.dir.path().join("bad.toml");
    std::fs::write(
        &file,
        format!(
            "[[job]]\nobjective = \"x\"\nrepo = \"https://example.com/x.git\"\nagent_cmd = \"{}\"\n",
            agent.display()
        ),
    )
    .unwrap();
    let out = s.ralph(&["submit", file.to_str().unwrap()]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("allowed_repos"), "{}", out.stderr);
    // `workspace` and `repo` exclude each other; `push` is refused unless allowed.
    let ws = s.workspace("w");
    let (code, body) = submit(
        &s,
        vec![repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"workspace": ws}),
        )],
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "job[0].repo", "{body}");
    let (code, body) = submit(
        &s,
        vec![repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"push": "ralph/x"}),
        )],
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(body["error"]["rule"], "limits.allow_push", "{body}");
    // Nothing was provisioned for any of them.
    let made = std::fs::read_dir(s.state.join("workspaces"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(made, 0);
    assert!(!s.state.join("mirrors").exists());
}

#[test]
fn a_clone_failure_is_a_job_error_before_any_round() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    let agent = fixer(&s, "");
    let bad_ref = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"ref": "no-such-branch"}),
        ),
    );
    let missing = submit_one(&s, repo_job(&s, &agent, &g.url("missing.git"), json!({})));
    for (id, words) in [(&bad_ref, "no-such-branch"), (&missing, "missing.git")] {
        let j = s.wait_finished(id, LIMIT);
        assert_eq!(j["outcome"], "error", "{j}");
        assert_eq!(j["reason"], "provision_failed", "{j}");
        assert_eq!(j["rounds"], 0, "{j}");
        let msg = j["message"].as_str().unwrap();
        assert!(msg.starts_with("failed to clone"), "{msg}");
        assert!(msg.contains(words), "{msg}");
        assert!(s.events_of(id, "round_started").is_empty());
        let (code, _, err) = ralph_diff(&s, &[id]);
        assert_ne!(code, 0);
        assert!(err.contains("no result.patch"), "{err}");
    }
}

#[test]
fn push_lands_the_result_on_the_branch() {
    let g = GitServer::start();
    let base = g.create("proj.git", write_failing_project);
    let s = server_for(&g, "allow_push = true\n");
    let agent = fixer(&s, "");
    let id = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"push": "ralph/fix", "verify": "sh test.sh"}),
        ),
    );
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let written = s.events_of(&id, "result_written");
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0]["error"].is_null(), "{written:?}");
    let bare = g.bare("proj.git");
    let pushed = git(&bare, &["rev-parse", "refs/heads/ralph/fix"]);
    assert!(written[0]["pushed"].as_str().unwrap().starts_with(&pushed));
    assert_eq!(git(&bare, &["rev-parse", "ralph/fix^"]), base);
    assert_eq!(git(&bare, &["rev-parse", "main"]), base, "main untouched");
    let fresh = g.dir.path().join("pushed");
    git(
        g.dir.path(),
        &[
            "clone",
            "-q",
            "-b",
            "ralph/fix",
            &g.url("proj.git"),
            fresh.to_str().unwrap(),
        ],
    );
    assert!(tests_pass(&fresh));
    assert!(fresh.join("new.bin").is_file());
}

#[test]
fn a_hostile_git_config_runs_nothing_on_the_host_when_the_result_is_written() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    let marker = s.dir.path().join("pwned");
    let m = marker.display();
    // The round rewrites its repository's config and attributes to run commands in any git
    // that reads them: fsmonitor, hooks, a clean filter, a textconv and an external diff.
    let agent = s.agent(
        "hostile.sh",
        &format!(
            "cat >> .git/config <<'X'\n[core]\n\tfsmonitor = touch {m}-fsmonitor\n\thooksPath = .git/evil\n[filter \"evil\"]\n\tclean = touch {m}-clean\n\tprocess = touch {m}-process\n[diff \"evil\"]\n\ttextconv = touch {m}-textconv\n\tcommand = touch {m}-diffcmd\n[diff]\n\texternal = touch {m}-external\nX\nprintf '* filter=evil diff=evil\\n' > .gitattributes\nmkdir -p .git/evil .git/hooks\nprintf '#!/bin/sh\\ntouch {m}-hook\\n' > .git/evil/pre-commit\nchmod +x .git/evil/pre-commit\ncp .git/evil/pre-commit .git/hooks/post-index-change\nsed -i 's/-/+/' add.sh\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let id = submit_one(&s, repo_job(&s, &agent, &g.url("proj.git"), json!({})));
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}");
    let patch = patch_of(&s, &id);
    let text = String::from_utf8_lossy(&patch);
    assert!(text.contains("+echo $(($1 + $2))"), "{text}");
    assert!(text.contains(".gitattributes"), "{text}");
    let found: Vec<_> = std::fs::read_dir(s.dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("pwned"))
        .collect();
    assert!(
        found.is_empty(),
        "the host ran the round's commands: {found:?}"
    );
}

#[test]
fn a_resumed_job_keeps_its_workspace() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    // The first run's round leaves a file and fails; the resumed run finds it.
    let agent = s.agent(
        "twice.sh",
        &format!(
            "if [ -e step1 ]; then sed -i 's/-/+/' add.sh; echo '{}' > \"$RALPH_REPORT_FILE\"; else touch step1; exit 3; fi",
            complete_report("second run"),
        ),
    );
    let id = submit_one(
        &s,
        repo_job(&s, &agent, &g.url("proj.git"), json!({"round_retries": 0})),
    );
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "round-failed");
    let out = s.ralph(&["resume", &id]);
    out.expect_code(0);
    wait_until("the resumed job to finish", LIMIT, || {
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        j["outcome"] == "complete"
    });
    assert_eq!(s.events_of(&id, "workspace_provisioned").len(), 1);
    assert_eq!(s.events_of(&id, "result_written").len(), 2);
    let patch = patch_of(&s, &id);
    let text = String::from_utf8_lossy(&patch);
    assert!(
        text.contains("b/step1") && text.contains("+echo $(($1 + $2))"),
        "{text}"
    );
}

#[test]
fn workspace_retention_removes_the_workspace_but_not_the_patch() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = Server::new(&format!(
        "[provision]\nworkspace_retention = \"1s\"\n[limits]\nallowed_repos = [\"git://127.0.0.1:{}/\"]\n",
        g.port
    ));
    let agent = fixer(&s, "");
    let id = submit_one(&s, repo_job(&s, &agent, &g.url("proj.git"), json!({})));
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    let patch = patch_of(&s, &id);
    let ws = s.state.join("workspaces").join(&id);
    wait_until("the workspace to be removed", LIMIT, || !ws.exists());
    assert!(
        !s.state
            .join("workspaces")
            .join(format!("{id}.git"))
            .exists()
    );
    // The log line follows the removal: wait for it too (the service may not have written it yet).
    wait_until("the removal to be logged", LIMIT, || {
        s.log_text()
            .contains("provisioned workspace removed (workspace_retention)")
    });
    let again = patch_of(&s, &id);
    assert_eq!(again, patch);
}

#[test]
fn the_workspace_budget_removes_finished_workspaces_when_a_job_ends() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = Server::new(&format!(
        "[provision]\nworkspace_budget = \"1\"\n[limits]\nallowed_repos = [\"git://127.0.0.1:{}/\"]\n",
        g.port
    ));
    let agent = fixer(&s, "");
    let id = submit_one(&s, repo_job(&s, &agent, &g.url("proj.git"), json!({})));
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    let ws = s.state.join("workspaces").join(&id);
    wait_until("the workspace to be removed", LIMIT, || !ws.exists());
    // The log line follows the removal: wait for it too (the service may not have written it yet).
    wait_until("the removal to be logged", LIMIT, || {
        s.log_text()
            .contains("provisioned workspace removed (workspace_budget)")
    });
    let patch = patch_of(&s, &id);
    assert!(String::from_utf8_lossy(&patch).contains("b/NOTES.md"));
}

/// `GET /v1/jobs/{id}/patch` as a raw response (status, lower-cased head, body).
fn patch_response(s: &Server, id: &str) -> common::server::RawResponse {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        c,
        "GET /v1/jobs/{id}/patch HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {}\r\n\r\n",
        s.token()
    )
    .unwrap();
    let mut resp = Vec::new();
    c.read_to_end(&mut resp).unwrap();
    common::server::parse_response(&resp)
}

/// Issue 25: a round that fixes the test and also leaves paths git refuses (`.GIT/config`,
/// `sub/.Git/hooks/x` made the runner's whole `git add` fail: a `complete` job with an empty
/// patch that `ralph diff` called never provisioned), a FIFO and a 300 MiB sparse file. The
/// patch holds the fix and applies to a fresh clone; the refused paths are named in
/// `result_written`, in the job's result (`partial`) and by `ralph diff` on stderr; the
/// runner's git never loaded the big file.
#[test]
fn paths_git_refuses_are_skipped_and_named_and_the_fix_is_in_the_patch() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    let agent = fixer(
        &s,
        "mkdir -p .GIT sub/.Git/hooks\necho '[core]' > .GIT/config\necho x > sub/.Git/hooks/x\nmkfifo pipe\ntruncate -s 300M huge.img\necho s > secret.txt\nchmod 000 secret.txt\n",
    );
    // A file no one may read: a root runner reads it anyway (it is in the patch); an
    // unprivileged one cannot (skipped as unreadable).
    let root = nix::unistd::geteuid().is_root();
    let id = submit_one(
        &s,
        repo_job(
            &s,
            &agent,
            &g.url("proj.git"),
            json!({"verify": "sh test.sh"}),
        ),
    );
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let mut want = vec![
        (".GIT/config", "git_path"),
        ("huge.img", "too_large"),
        ("pipe", "special_file"),
    ];
    if !root {
        want.push(("secret.txt", "unreadable"));
    }
    want.push(("sub/.Git/hooks/x", "git_path"));
    let total = want.len();
    let named = |v: &Value| -> Vec<(String, String)> {
        let mut n: Vec<(String, String)> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["path"].as_str().unwrap().to_owned(),
                    p["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        n.sort();
        n
    };
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, r)| ((*p).to_owned(), (*r).to_owned()))
        .collect();
    // The journal names them.
    let written = s.events_of(&id, "result_written");
    assert_eq!(written.len(), 1, "{written:?}");
    let w = &written[0];
    assert_eq!(w["patch"], "partial", "{w}");
    assert_eq!(w["skipped_total"], total, "{w}");
    assert_eq!(named(&w["skipped"]), want, "{w}");
    // The runner's git children (their peak resident memory, measured by wait4) never held
    // the 300 MiB file: well under the 100 MiB a patch's file may be, and under the bound.
    let rss = w["git_max_rss"].as_u64().unwrap();
    assert!(rss > 0 && rss < 100 << 20, "git's peak: {rss} bytes");
    // The job's result says so.
    assert_eq!(j["patch"]["state"], "partial", "{j}");
    assert_eq!(j["patch"]["skipped_total"], total, "{j}");
    assert_eq!(named(&j["patch"]["skipped"]), want, "{j}");
    let out = s.ralph(&["show", "--json", &id]);
    out.expect_code(0);
    let shown: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(shown["patch"]["state"], "partial", "{shown}");
    let logs = s.ralph(&["logs", &id]);
    logs.expect_code(0);
    assert!(
        logs.stdout.contains("result.patch written in part") && logs.stdout.contains(".GIT/config"),
        "{}",
        logs.stdout
    );
    // `ralph diff`: the patch on stdout, the skipped paths on stderr.
    let (code, patch, err) = ralph_diff(&s, &[&id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("partial") && err.contains(&format!("{total} path(s)")),
        "{err}"
    );
    for (p, _) in &want {
        assert!(err.contains(p.as_str()), "{p} not named: {err}");
    }
    assert!(!err.contains("never provisioned"), "{err}");
    let (code, local, err) = ralph_diff(&s, &["--state-dir", s.state.to_str().unwrap(), &id]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(local, patch);
    assert!(
        err.contains("partial") && err.contains(".GIT/config"),
        "{err}"
    );
    // The API flags it.
    let r = patch_response(&s, &id);
    assert_eq!(r.status, 200);
    assert!(r.head.contains("x-ralph-patch: partial"), "{}", r.head);
    assert!(
        r.head.contains(&format!("x-ralph-patch-skipped: {total}")),
        "{}",
        r.head
    );
    // The real work is there: the patch applies to a fresh clone and makes the test pass.
    let fresh = g.dir.path().join("fresh");
    g.fresh_clone("proj.git", &fresh);
    assert!(!tests_pass(&fresh));
    let patch_file = g.dir.path().join("result.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    git(&fresh, &["apply", "--index", patch_file.to_str().unwrap()]);
    assert_fixed(&fresh);
    assert!(!fresh.join(".GIT").exists() && !fresh.join("huge.img").exists());
    assert!(!fresh.join("sub").exists() && !fresh.join("pipe").exists());
    assert_eq!(fresh.join("secret.txt").exists(), root);
}

/// Issue 25: a patch that cannot be built at all (the mirror whose objects the runner's
/// repository reads is removed while the round runs, as an operator freeing disk would) says
/// so: in `result_written` and the job's result (`failed`, `git_failed`, git's error), and in
/// `ralph diff` (exit 70, "could not be built", never "never provisioned") and the API
/// (`404 patch_failed`). The job's outcome stays the rounds'.
#[test]
fn a_patch_that_cannot_be_built_says_so_in_the_result_and_in_ralph_diff() {
    let g = GitServer::start();
    g.create("proj.git", write_failing_project);
    let s = server_for(&g, "");
    let go = s.agents.join("go");
    let agent = s.agent(
        "slow-fix.sh",
        &format!(
            "sed -i 's/-/+/' add.sh\ntouch ready\ni=0\nwhile [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            go.display(),
            complete_report("fixed add")
        ),
    );
    let id = submit_one(&s, repo_job(&s, &agent, &g.url("proj.git"), json!({})));
    let ws = s.state.join("workspaces").join(&id);
    wait_until("the round to have fixed the project", LIMIT, || {
        ws.join("ready").exists()
    });
    let mirrors: Vec<PathBuf> = std::fs::read_dir(s.state.join("mirrors"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    std::fs::remove_dir_all(&mirrors[0]).unwrap();
    std::fs::write(&go, "").unwrap();
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    let written = s.events_of(&id, "result_written");
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(written[0]["patch"], "failed", "{written:?}");
    assert_eq!(written[0]["failure"], "git_failed", "{written:?}");
    let error = written[0]["error"].as_str().unwrap();
    assert!(error.contains("git read-tree"), "{error}");
    assert_eq!(j["patch"]["state"], "failed", "{j}");
    assert_eq!(j["patch"]["error"], error, "{j}");
    let logs = s.ralph(&["logs", &id]);
    assert!(
        logs.stdout.contains("result.patch not written"),
        "{}",
        logs.stdout
    );
    let (code, patch, err) = ralph_diff(&s, &[&id]);
    assert_eq!(code, 70, "{err}");
    assert!(patch.is_empty());
    assert!(
        err.contains("the result patch could not be built (git_failed)")
            && err.contains("git read-tree"),
        "{err}"
    );
    assert!(!err.contains("never provisioned"), "{err}");
    let (code, _, err) = ralph_diff(&s, &["--state-dir", s.state.to_str().unwrap(), &id]);
    assert_eq!(code, 70, "{err}");
    assert!(err.contains("could not be built"), "{err}");
    let r = patch_response(&s, &id);
    assert_eq!(r.status, 404);
    assert!(r.body.contains("\"patch_failed\""), "{}", r.body);
    // Nothing stale stands for it.
    assert!(!s.state.join("jobs").join(&id).join("result.patch").exists());
}
