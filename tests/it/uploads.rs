//! Uploaded workspaces (SPEC §11), end to end: a real `ralph serve`, real git, scripted
//! agents. A project uploaded with `ralph submit --upload DIR` is fixed by its agent and
//! verified; its `result.patch` (binary and untracked files included) applies to a fresh copy
//! of DIR and makes its test pass; every job of a batch gets its own copy. Hostile tar streams
//! sent as raw HTTP bodies are refused naming the entry and the rule, with nothing written
//! outside and nothing kept; a `read` token cannot upload; an unknown upload id is refused at
//! submission; unused uploads are removed after `upload_retention`, used ones are not.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::fix_project::{assert_fixed, fixer, patch_of, tests_pass, write_failing_project};
use common::git_server::git;
use common::server::{Server, parse_response};
use common::{complete_report, ralph_bin, wait_until};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(120);

/// The failing project with a `.git` of its own (uploaded too, for the agent), everything
/// committed.
fn failing_project(w: &Path) {
    std::fs::create_dir_all(w).unwrap();
    write_failing_project(w);
    git(w, &["init", "-q", "-b", "main"]);
    git(w, &["add", "-A"]);
    git(w, &["commit", "-qm", "base"]);
}

/// What `<state>/uploads` holds (names), none when it does not exist.
fn uploads(s: &Server) -> Vec<String> {
    std::fs::read_dir(s.state.join("uploads"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every path under `root` whose file name is `name` (symlinks not followed).
fn find_named(root: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&p) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_name() == name {
                found.push(path.clone());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    found
}

/// One raw `POST /v1/uploads` with `body`; the status and the JSON answer.
fn post_upload(s: &Server, token: &str, body: &[u8]) -> (u16, Value) {
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let head = format!(
        "POST /v1/uploads HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/x-tar\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    // The server may answer (and stop reading) before the whole body is sent.
    let _ = c.write_all(body);
    let mut resp = Vec::new();
    let _ = c.read_to_end(&mut resp);
    let r = parse_response(&resp);
    (r.status, r.json())
}

/// A raw ustar header block: the name and link target written as given (no checks, so `..`
/// and absolute paths can be made), `kind` its type byte, `size` its content length.
fn header(name: &[u8], kind: u8, link: &[u8], size: u64) -> Vec<u8> {
    let mut h = vec![0u8; 512];
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0001750\0");
    h[116..124].copy_from_slice(b"0001750\0");
    h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link);
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    h
}

/// One entry: its header and its content padded to a block.
fn entry(name: &[u8], kind: u8, link: &[u8], data: &[u8]) -> Vec<u8> {
    let mut e = header(name, kind, link, data.len() as u64);
    e.extend_from_slice(data);
    e.resize(e.len().div_ceil(512) * 512, 0);
    e
}

/// A tar stream of `entries`, ended.
fn tar(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut t: Vec<u8> = entries.concat();
    t.extend_from_slice(&[0u8; 1024]);
    t
}

#[test]
fn an_uploaded_project_is_fixed_and_its_patch_applies_to_a_fresh_copy() {
    let s = Server::new("");
    let project = s.dir.path().join("project");
    failing_project(&project);
    let agent = fixer(&s, "echo run >> runs\n");
    let agents = s.agents.to_str().unwrap().to_owned();
    let job_flags = [
        "--objective",
        "make the tests pass",
        "--agent-cmd",
        agent.to_str().unwrap(),
        "--read",
        &agents,
        "--verify",
        "sh test.sh",
        "--retry-backoff",
        "10ms",
        "--kill-grace",
        "1s",
    ];
    let mut args = vec!["submit", "--upload", project.to_str().unwrap()];
    args.extend(job_flags);
    let out = s.ralph(&args);
    out.expect_code(0);
    assert!(
        out.stderr.contains("uploaded") && out.stderr.contains("entries"),
        "{}",
        out.stderr
    );
    let id = out.stdout.trim().to_owned();
    let j = s.wait_finished(&id, LIMIT);
    assert_eq!(j["outcome"], "complete", "{j}\n{}", s.log_text());
    assert_eq!(j["reason"], "verified", "{j}");
    assert_eq!(j["spec"]["source"]["kind"], "upload", "{j}");
    // The base commit is journalled (no repository, no ref) and shown.
    let prov = s.events_of(&id, "workspace_provisioned");
    assert_eq!(prov.len(), 1, "{prov:?}");
    assert!(prov[0].get("repo").is_none_or(Value::is_null), "{prov:?}");
    let base = prov[0]["commit"].as_str().unwrap().to_owned();
    assert_eq!(j["base_commit"], base.as_str());
    // The workspace is the runner's copy; the uploaded `.git` is in it for the agent, unused by
    // the runner (its HEAD is the project's, not the runner's base).
    let ws = s.state.join("workspaces").join(&id);
    assert!(ws.join(".git").join("HEAD").is_file());
    assert_eq!(
        git(&ws, &["rev-parse", "HEAD"]),
        git(&project, &["rev-parse", "HEAD"])
    );
    assert_ne!(git(&project, &["rev-parse", "HEAD"]), base);
    let patch = patch_of(&s, &id);
    let text = String::from_utf8_lossy(&patch);
    for name in [
        "add.sh",
        "NOTES.md",
        "new.bin",
        "data.bin",
        "obsolete.txt",
        "runs",
    ] {
        assert!(
            text.contains(&format!("b/{name}")) || text.contains(&format!("a/{name}")),
            "{name} missing:\n{text}"
        );
    }
    assert!(text.contains("GIT binary patch"), "{text}");
    assert!(
        !text.contains(".git/"),
        "the uploaded .git is not in the result:\n{text}"
    );
    // A fresh copy of DIR fails its test; with the patch applied it passes.
    let fresh = s.dir.path().join("fresh");
    let ok = Command::new("cp")
        .args(["-a", project.to_str().unwrap(), fresh.to_str().unwrap()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    assert!(!tests_pass(&fresh));
    let patch_file = s.dir.path().join("result.patch");
    std::fs::write(&patch_file, &patch).unwrap();
    git(&fresh, &["apply", patch_file.to_str().unwrap()]);
    assert_fixed(&fresh);
    // The project on the client was not touched.
    assert!(!tests_pass(&project));

    // A batch with one --upload: every job gets its own copy (each counts one run).
    let file = s.dir.path().join("batch.toml");
    let job = format!(
        "[[job]]\nobjective = \"x\"\nagent_cmd = \"{}\"\nread = [\"{agents}\"]\nretry_backoff = \"10ms\"\n",
        agent.display()
    );
    std::fs::write(&file, format!("{job}{job}")).unwrap();
    let out = s.ralph(&[
        "submit",
        file.to_str().unwrap(),
        "--upload",
        project.to_str().unwrap(),
    ]);
    out.expect_code(0);
    let ids: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    assert_eq!(ids.len(), 2, "{}", out.stdout);
    for id in &ids {
        assert_eq!(s.wait_finished(id, LIMIT)["outcome"], "complete");
        let ws = s.state.join("workspaces").join(id);
        assert_eq!(std::fs::read_to_string(ws.join("runs")).unwrap(), "run\n");
        assert_eq!(
            std::fs::read_to_string(ws.join("add.sh")).unwrap(),
            "echo $(($1 + $2))\n"
        );
    }
    assert_eq!(uploads(&s).len(), 2, "{:?}", uploads(&s));

    // --upload and a workspace of the job's own exclude each other, named before any upload.
    let before = uploads(&s);
    let out = s.ralph(&[
        "submit",
        "--upload",
        project.to_str().unwrap(),
        "--workspace",
        s.root.to_str().unwrap(),
        "--objective",
        "x",
    ]);
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("--workspace"), "{}", out.stderr);
    let bad = s.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "[[job]]\nobjective = \"x\"\nworkspace = \"{}\"\n",
            s.root.display()
        ),
    )
    .unwrap();
    let out = s.ralph(&[
        "submit",
        bad.to_str().unwrap(),
        "--upload",
        project.to_str().unwrap(),
    ]);
    assert_eq!(out.code, 64, "{}", out.stderr);
    assert!(out.stderr.contains("job[0].workspace"), "{}", out.stderr);
    assert_eq!(uploads(&s), before);
}

/// A hostile upload: what it is, its tar stream, the status, rule and entry of its refusal.
type Case<'a> = (&'a str, Vec<u8>, u16, &'a str, Option<&'a str>);

#[test]
fn hostile_uploads_are_refused_naming_the_rule_and_nothing_is_kept() {
    let s = Server::new("[limits]\nmax_upload_bytes = 1048576\nmax_upload_files = 50\n");
    let token = s.token();
    let abs = s.dir.path().join("abs-canary");
    let abs_name = abs.to_str().unwrap().as_bytes().to_vec();
    let many: Vec<Vec<u8>> = (0..60)
        .map(|i| entry(format!("f{i}").as_bytes(), b'0', b"", b"x"))
        .collect();
    let cases: Vec<Case> = vec![
        (
            "parent dir",
            tar(&[entry(b"../escape-canary", b'0', b"", b"pwned")]),
            400,
            "upload.parent_dir",
            Some("../escape-canary"),
        ),
        (
            "absolute path",
            tar(&[entry(&abs_name, b'0', b"", b"pwned")]),
            400,
            "upload.absolute_path",
            abs.to_str(),
        ),
        (
            "symlink to /etc, then a file through it",
            tar(&[
                entry(b"etc", b'2', b"/etc", b""),
                entry(b"etc/ralph-canary", b'0', b"", b"pwned"),
            ]),
            400,
            "upload.link_absolute",
            Some("etc"),
        ),
        (
            "a ..-chain out",
            tar(&[
                entry(b"a/", b'5', b"", b""),
                entry(b"a/up", b'2', b"../../../..", b""),
                entry(b"a/up/chain-canary", b'0', b"", b"pwned"),
            ]),
            400,
            "upload.link_outside",
            Some("a/up"),
        ),
        (
            "a file through an inside link",
            tar(&[
                entry(b"sub/", b'5', b"", b""),
                entry(b"l", b'2', b"sub", b""),
                entry(b"l/through-canary", b'0', b"", b"pwned"),
            ]),
            400,
            "upload.through_link",
            Some("l/through-canary"),
        ),
        (
            "a char device",
            tar(&[entry(b"null", b'3', b"", b"")]),
            400,
            "upload.special_file",
            Some("null"),
        ),
        (
            "a tar bomb over max_upload_bytes",
            tar(&[entry(b"bomb", b'0', b"", &vec![0u8; 2 << 20])]),
            413,
            "limits.max_upload_bytes",
            Some("bomb"),
        ),
        (
            "too many files",
            tar(&many),
            413,
            "limits.max_upload_files",
            Some("f50"),
        ),
    ];
    for (what, body, status, rule, entry_name) in cases {
        let (code, answer) = post_upload(&s, &token, &body);
        assert_eq!(code, status, "{what}: {answer}");
        let err = &answer["error"];
        assert_eq!(err["rule"], rule, "{what}: {answer}");
        if let Some(e) = entry_name {
            assert_eq!(err["entry"], e, "{what}: {answer}");
        }
        assert!(
            err["message"]
                .as_str()
                .unwrap()
                .starts_with("failed to unpack"),
            "{what}: {answer}"
        );
        assert!(uploads(&s).is_empty(), "{what}: {:?}", uploads(&s));
    }
    // Nothing was written outside: no canary anywhere under the test's directory, /etc or /.
    for name in ["escape-canary", "chain-canary", "through-canary", "pwned"] {
        assert!(find_named(s.dir.path(), name).is_empty(), "{name}");
    }
    assert!(!abs.exists());
    assert!(!Path::new("/etc/ralph-canary").exists());
    assert!(!Path::new("/chain-canary").exists());
    // Not a tar stream, or nothing at all: 400.
    let (code, answer) = post_upload(&s, &token, b"this is not a tar stream at all, no");
    assert_eq!(code, 400, "{answer}");
    let (code, answer) = post_upload(&s, &token, b"");
    assert_eq!(code, 400, "{answer}");
    assert!(uploads(&s).is_empty(), "{:?}", uploads(&s));
    // A good one is kept, answered with its id and size.
    let (code, answer) = post_upload(
        &s,
        &token,
        &tar(&[
            entry(b"d/", b'5', b"", b""),
            entry(b"d/f.txt", b'0', b"", b"hello"),
            entry(b"d/l", b'2', b"f.txt", b""),
        ]),
    );
    assert_eq!(code, 201, "{answer}");
    assert_eq!(answer["files"], 3, "{answer}");
    assert_eq!(answer["bytes"], 5, "{answer}");
    let id = answer["upload"].as_str().unwrap();
    let tree = s.state.join("uploads").join(id).join("tree");
    assert_eq!(
        std::fs::read_to_string(tree.join("d/f.txt")).unwrap(),
        "hello"
    );
    assert_eq!(
        std::fs::read_link(tree.join("d/l")).unwrap(),
        Path::new("f.txt")
    );
}

#[test]
fn a_read_token_cannot_upload_and_an_unknown_upload_is_refused_at_submission() {
    let s = Server::new("");
    let out = s.ralph(&["token", "create", "reader", "--scope", "read"]);
    out.expect_code(0);
    let reader = out.stdout.trim().to_owned();
    let (code, answer) = post_upload(&s, &reader, &tar(&[entry(b"a", b'0', b"", b"a")]));
    assert_eq!(code, 403, "{answer}");
    assert_eq!(answer["error"]["scope"], "submit", "{answer}");
    assert!(uploads(&s).is_empty());
    // Through the CLI with that token: refused, nothing submitted.
    let project = s.dir.path().join("p");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("a"), "a").unwrap();
    let out = Command::new(ralph_bin())
        .args([
            "submit",
            "--upload",
            project.to_str().unwrap(),
            "--objective",
            "x",
        ])
        .env("RALPH_SERVER", s.url())
        .env("RALPH_TOKEN", &reader)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`submit` scope"), "{stderr}");
    // An id the server never handed out.
    let agent = s.agent("done.sh", "exit 0");
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(
            &json!({"job": [{
                "objective": "x",
                "upload": "0190b4d1-0000-7000-8000-000000000000",
                "agent_cmd": agent.display().to_string(),
            }]})
            .to_string(),
        ),
    );
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["field"], "job[0].upload", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no upload"),
        "{body}"
    );
    let (_, list) = s.api("GET", "/v1/jobs", None);
    assert_eq!(list["jobs"].as_array().unwrap().len(), 0, "{list}");
    let made = std::fs::read_dir(s.state.join("workspaces"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(made, 0);
}

#[test]
fn unused_uploads_are_removed_after_their_retention_and_used_ones_stay() {
    let s = Server::new("[provision]\nupload_retention = \"1s\"\n");
    let token = s.token();
    let upload = |content: &[u8]| {
        let (code, answer) = post_upload(&s, &token, &tar(&[entry(b"f", b'0', b"", content)]));
        assert_eq!(code, 201, "{answer}");
        answer["upload"].as_str().unwrap().to_owned()
    };
    // A job whose round waits for `go` names the first upload.
    let used = upload(b"used");
    let agent = s.agent(
        "wait.sh",
        &format!(
            "while [ ! -e go ]; do sleep 0.05; done\necho '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("went")
        ),
    );
    let (code, body) = s.api(
        "POST",
        "/v1/jobs",
        Some(
            &json!({"job": [{
                "objective": "wait",
                "upload": used,
                "agent_cmd": agent.display().to_string(),
                "read": [s.agents],
            }]})
            .to_string(),
        ),
    );
    assert_eq!(code, 201, "{body}");
    let id = body["jobs"][0]["id"].as_str().unwrap().to_owned();
    let ws = s.state.join("workspaces").join(&id);
    wait_until("the round to run in the copy", LIMIT, || {
        ws.join("f").is_file() && !s.events_of(&id, "round_spawned").is_empty()
    });
    // A second, unused upload goes once it is a second old; the used one (older) stays.
    let unused = upload(b"unused");
    let dir = |u: &str| s.state.join("uploads").join(u);
    wait_until("the unused upload to be removed", LIMIT, || {
        !dir(&unused).exists()
    });
    assert!(dir(&used).join("tree").join("f").is_file());
    // The service logs the removal just after it: waited for, not read once.
    let said = format!("upload {unused} removed (upload_retention");
    wait_until("the removal to be logged", LIMIT, || {
        s.log_text().contains(&said)
    });
    // Once the job has ended, the first goes too; the job's copy stays.
    std::fs::write(ws.join("go"), "").unwrap();
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "complete");
    wait_until("the used upload to be removed", LIMIT, || {
        !dir(&used).exists()
    });
    assert_eq!(std::fs::read_to_string(ws.join("f")).unwrap(), "used");
}

#[test]
fn a_resumed_upload_job_keeps_its_workspace() {
    let s = Server::new("");
    let project = s.dir.path().join("project");
    std::fs::create_dir(&project).unwrap();
    std::fs::write(project.join("add.sh"), "echo $(($1 - $2))\n").unwrap();
    // The first run's round leaves a file and fails; the resumed run finds it.
    let agent = s.agent(
        "twice.sh",
        &format!(
            "if [ -e step1 ]; then sed -i 's/-/+/' add.sh; echo '{}' > \"$RALPH_REPORT_FILE\"; else touch step1; exit 3; fi",
            complete_report("second run"),
        ),
    );
    let out = s.ralph(&[
        "submit",
        "--upload",
        project.to_str().unwrap(),
        "--objective",
        "x",
        "--agent-cmd",
        agent.to_str().unwrap(),
        "--read",
        s.agents.to_str().unwrap(),
        "--round-retries",
        "0",
    ]);
    out.expect_code(0);
    let id = out.stdout.trim().to_owned();
    assert_eq!(s.wait_finished(&id, LIMIT)["outcome"], "round-failed");
    s.ralph(&["resume", &id]).expect_code(0);
    wait_until("the resumed job to finish", LIMIT, || {
        let (_, j) = s.api("GET", &format!("/v1/jobs/{id}"), None);
        j["outcome"] == "complete"
    });
    assert_eq!(s.events_of(&id, "workspace_provisioned").len(), 1);
    let text = String::from_utf8_lossy(&patch_of(&s, &id)).into_owned();
    assert!(
        text.contains("b/step1") && text.contains("+echo $(($1 + $2))"),
        "{text}"
    );
}

/// Paths are echoed as they are meant (issue 27): `DIR/./x` is shown as `DIR/x`.
#[test]
fn an_upload_path_is_echoed_without_dot_components() {
    let dir = tempfile::tempdir().unwrap();
    let given = format!("{}/./nothing-here/.", dir.path().display());
    let out = Command::new(ralph_bin())
        .args(["submit", "--upload", &given, "--objective", "x"])
        .args(["--server", "http://127.0.0.1:9"])
        .env("RALPH_TOKEN", "unused")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--upload `{}`",
            dir.path().join("nothing-here").display()
        )) && !stderr.contains("/./"),
        "{stderr}"
    );
}
