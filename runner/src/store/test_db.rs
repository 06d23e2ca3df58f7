//! Test support (compiled into the store's unit tests and, by path, into the end-to-end tests):
//! a throwaway PostgreSQL database per test, created on the server named by
//! `RALPH_TEST_DATABASE_URL` (default [`DEFAULT_URL`], the role and database `.ci/setup` makes)
//! and dropped when the value is dropped, so tests run in parallel without sharing tables.
//!
//! Without a reachable server a test is skipped with the reason printed; under `CI` it fails.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};

/// Where the tests find PostgreSQL unless `RALPH_TEST_DATABASE_URL` says otherwise.
pub const DEFAULT_URL: &str = "postgres://ralph_test:ralph_test@localhost/ralph_test";

/// A database that exists for one test.
#[derive(Debug)]
pub struct TestDatabase {
    /// Connection string of the new database.
    pub url: String,
    admin_url: String,
    name: String,
}

impl TestDatabase {
    /// Creates a fresh database, or returns `None` (saying why) when no server is reachable and
    /// `CI` is not set.
    pub fn create(label: &str) -> Option<Self> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let admin_url =
            std::env::var("RALPH_TEST_DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
        let mut admin = match postgres::Client::connect(&admin_url, postgres::NoTls) {
            Ok(c) => c,
            Err(e) => {
                let why = format!(
                    "no PostgreSQL at RALPH_TEST_DATABASE_URL or its default ({e}); run .ci/setup"
                );
                if std::env::var_os("CI").is_some() {
                    panic!("{why}");
                }
                eprintln!("skipping {label}: {why}");
                return None;
            }
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!(
            "ralph_test_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("failed to create database {name}: {e:?}"));
        Some(Self {
            url: with_dbname(&admin_url, &name),
            admin_url,
            name,
        })
    }

    /// A plain client on the test database (for what the store does not offer, e.g. tampering).
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url, postgres::NoTls).unwrap()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// `url` pointing at database `name` (URL form, or a `key=value` string).
pub fn with_dbname(url: &str, name: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return format!("{url} dbname={name}");
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let query = tail.find('?').map_or("", |q| &tail[q..]);
    format!("{}{authority}/{name}{query}", &url[..scheme_end])
}
