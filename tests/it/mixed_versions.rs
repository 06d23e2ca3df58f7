//! Mixed versions (issue 27): a store written by a newer ralph (its schema version above this
//! binary's, as the newer binary records it) is refused by every command, with exit 64 and a
//! message saying what to do, and left as it is; in a PostgreSQL fleet a host started before a
//! newer host migrated the schema keeps running jobs (a job holding an event it does not know
//! is listed; reading its journal fails naming the event), and refuses to start again.

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::server::{Server, job};
use common::test_db::TestDatabase;
use common::tls_serve::{Serve, tempdir};
use common::{Output, complete_report, ralph_bin};
use serde_json::json;

fn ralph(args: &[&str]) -> Output {
    let out = Command::new(ralph_bin())
        .args(args)
        .env_remove("RALPH_SERVER")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What every refusal says: the version found, who wrote it, what to do.
fn says_newer(text: &str, found: i64) {
    assert!(
        text.contains(&format!(
            "has schema version {found}, written by a newer ralph"
        )) && text.contains("run that newer ralph")
            && text.contains("never migrated down"),
        "{text}"
    );
}

#[test]
fn a_sqlite_store_from_a_newer_ralph_is_refused_by_every_command() {
    let dir = tempdir();
    let state = dir.path().join("state");
    drop(ralph_runner::store::Store::open_sqlite(&state).unwrap());
    let db = state.join("ralph.db");
    // What a newer ralph's schema change records.
    rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let state_arg = state.display().to_string();

    let out = ralph(&["jobs", "--state-dir", &state_arg]);
    assert_eq!(out.code, 64, "{out:?}");
    says_newer(&out.stderr, 99);
    let out = ralph(&[
        "run",
        "--state-dir",
        &state_arg,
        "--workspace",
        dir.path().to_str().unwrap(),
        "--objective",
        "x",
        "--agent-cmd",
        "true",
    ]);
    assert_eq!(out.code, 64, "{out:?}");
    says_newer(&out.stderr, 99);
    let mut s = Serve::spawn(dir, "127.0.0.1", "");
    assert_eq!(s.wait_exit(), 64, "{}", s.log_text());
    says_newer(&s.log_text(), 99);
    // Nothing was migrated down or rewritten.
    let version: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, 99);
}

#[test]
fn an_older_fleet_host_keeps_running_jobs_after_a_newer_one_migrates_and_refuses_to_restart() {
    let Some(db) = TestDatabase::create("mixed_versions") else {
        return;
    };
    let a = Server::with_database("", &db.url);
    // A newer ralph starts on another host and migrates the shared schema one version up.
    let mut admin = postgres::Client::connect(&db.url, postgres::NoTls).unwrap();
    let newer: i32 = admin
        .query_one(
            "UPDATE ralph_schema SET version = version + 1 RETURNING version",
            &[],
        )
        .unwrap()
        .get(0);

    // The host started before keeps working: a job submitted to it runs to the end.
    let agent = a.agent(
        "done.sh",
        &format!(
            "echo '{}' > \"$RALPH_REPORT_FILE\"",
            complete_report("done")
        ),
    );
    let ws = a.workspace("w");
    let (code, created) = a.api(
        "POST",
        "/v1/jobs",
        Some(&json!({ "job": [job(&ws, &agent, json!({}))] }).to_string()),
    );
    assert_eq!(code, 201, "{created}");
    let id = created["jobs"][0]["id"].as_str().unwrap().to_owned();
    let done = a.wait_finished(&id, Duration::from_secs(60));
    assert_eq!(done["outcome"], "complete", "{done}");

    // A job journalled by a newer ralph may hold an event this one does not know: it is still
    // listed, and reading its journal says which event it cannot decode.
    let last: i64 = admin
        .query_one("SELECT last_seq FROM jobs WHERE id = $1", &[&id])
        .unwrap()
        .get(0);
    admin
        .execute(
            "INSERT INTO events (job_id, seq, at, type, data) VALUES ($1, $2, $3, 'from_a_newer_ralph', $4)",
            &[&id, &(last + 1), &"2026-12-02T12:00:00.000Z", &r#"{"type":"from_a_newer_ralph"}"#],
        )
        .unwrap();
    admin
        .execute(
            "UPDATE jobs SET last_seq = $2 WHERE id = $1",
            &[&id, &(last + 1)],
        )
        .unwrap();
    let (code, list) = a.api("GET", "/v1/jobs", None);
    assert_eq!(code, 200, "{list}");
    assert!(list.to_string().contains(&id), "{list}");
    let (code, shown) = a.api("GET", &format!("/v1/jobs/{id}"), None);
    assert_eq!(code, 500, "{shown}");
    assert!(
        shown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed to decode event")
            && shown.to_string().contains("from_a_newer_ralph"),
        "{shown}"
    );

    // A host (re)started on this binary now: refused before it takes any work.
    let mut b = Serve::spawn(
        tempdir(),
        "127.0.0.1",
        &format!("database_url = \"{}\"\n", db.url),
    );
    assert_eq!(b.wait_exit(), 64, "{}", b.log_text());
    says_newer(&b.log_text(), i64::from(newer));
    let version: i32 = admin
        .query_one("SELECT version FROM ralph_schema", &[])
        .unwrap()
        .get(0);
    assert_eq!(version, newer);
}
