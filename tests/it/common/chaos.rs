//! What the fault-injection tests check over every job once the faults are over: the journal's
//! ordering property, each run of the job closed by one `job_finished`, every agent execution
//! (logged by the agent in `<ws>/executions`) journalled once, and nothing left on disk.
//! Each check returns the problems it found (empty: it holds), so a test can count them all
//! before it fails.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::server::executions;

/// The ordering property of a journal: `seq` strictly increasing from 1 without gaps, and `at`
/// never going backwards in `seq` order.
pub fn order_violations(id: &str, events: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let seq = e["seq"].as_u64().unwrap_or(0);
        if seq != i as u64 + 1 {
            out.push(format!("{id}: event #{} has seq {seq}", i + 1));
        }
    }
    for w in events.windows(2) {
        let (a, b) = (
            w[0]["at"].as_str().unwrap_or(""),
            w[1]["at"].as_str().unwrap_or(""),
        );
        if b < a {
            out.push(format!(
                "{id}: seq {} ({}) at {b} is earlier than seq {} ({}) at {a}",
                w[1]["seq"], w[1]["type"], w[0]["seq"], w[0]["type"]
            ));
        }
    }
    out
}

/// Each run of a finished job ends in exactly one `job_finished`: the journal ends with one, and
/// there is one per run (the first, and one per `resumed`).
pub fn finish_violations(id: &str, events: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    let finished = events
        .iter()
        .filter(|e| e["type"] == "job_finished")
        .count();
    let resumed = events.iter().filter(|e| e["type"] == "resumed").count();
    if finished != 1 + resumed {
        out.push(format!(
            "{id}: {finished} job_finished for {} run(s)",
            1 + resumed
        ));
    }
    if events.last().is_none_or(|e| e["type"] != "job_finished") {
        out.push(format!(
            "{id}: the journal does not end with job_finished (last: {})",
            events.last().map_or(Value::Null, |e| e["type"].clone())
        ));
    }
    out
}

/// Rounds that ran without a journal record (lost: no `round_started`, or never closed by a
/// `round_finished`) and rounds that ran more than once (duplicated), from the agent's log in
/// `ws` against the journal.
pub fn execution_violations(id: &str, ws: &Path, events: &[Value]) -> (Vec<String>, Vec<String>) {
    let key = |e: &Value| {
        (
            e["round"].as_u64().unwrap_or(0),
            e["attempt"].as_u64().unwrap_or(0),
        )
    };
    let started: BTreeSet<(u64, u64)> = events
        .iter()
        .filter(|e| e["type"] == "round_started")
        .map(key)
        .collect();
    let finished: BTreeSet<(u64, u64)> = events
        .iter()
        .filter(|e| e["type"] == "round_finished")
        .map(key)
        .collect();
    let (mut lost, mut duplicated) = (Vec::new(), Vec::new());
    for (k, n) in executions(ws) {
        if n > 1 {
            duplicated.push(format!("{id}: round/attempt {k:?} ran {n} times"));
        }
        if !started.contains(&k) {
            lost.push(format!(
                "{id}: round/attempt {k:?} ran without round_started"
            ));
        } else if !finished.contains(&k) {
            lost.push(format!(
                "{id}: round/attempt {k:?} ran and was never closed by round_finished"
            ));
        }
    }
    (lost, duplicated)
}

/// Per-attempt private `home/` and `tmp/` directories left under `<state>/jobs/<id>/rounds/`.
pub fn leftover_private_dirs(state: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let children = |p: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(p)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    for job in children(&state.join("jobs")) {
        for round in children(&job.join("rounds")) {
            for attempt in children(&round) {
                for name in ["home", "tmp"] {
                    let p = attempt.join(name);
                    if p.exists() {
                        out.push(p);
                    }
                }
            }
        }
    }
    out
}

/// xorshift64: random fault moments, reproducible from a printed seed.
pub struct Rng(pub u64);

impl Rng {
    /// The seed from `var` when set, else from the clock.
    pub fn from_env(var: &str) -> Self {
        let seed = std::env::var(var)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos() as u64
                    | 1
            });
        println!("{var}={seed}");
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}
