//! The ralph runner library: the Ralph loop and task jobs, the report contract, the journal,
//! and the agents. The `ralph` binary (`src/main.rs`, `src/cli/`) is a thin layer over it; this
//! library knows nothing of the command line.
//!
//! - [`report`]: the handoff contract (SPEC §2).
//! - [`job`]: the immutable job request and its outcomes (SPEC §3).
//! - [`engine`]: the fixed orchestration of rounds, retries, verify and budgets (SPEC §3–4).
//! - [`store`]: append-only journals and their projections (SPEC §8).
//! - [`agent`]: what runs in a round.
//! - [`usage`]: token usage lines (SPEC §4).
//! - [`gateway`]: the per-job model gateway and egress proxy (SPEC §9).
//! - [`ci`]: JUnit and Markdown reports of a finished job for CI systems.
//! - [`provision`]: workspaces the runner provisions (safe unpacking of uploads, SPEC §11).
//! - [`toolchain`]: the runner's per-user toolchains granted to a round (SPEC §12).
//! - [`cache`]: caches kept across jobs, written only by a set-up that passed (SPEC §12).
//! - [`webhook`]: signed deliveries of a job's end to a receiver (SPEC §13).
//!
//! # Test strategy
//!
//! Pure rules (report validation, units, projections, prompt, environment) are unit-tested
//! beside the code. Everything that spawns processes is tested end to end in the repository's
//! `tests/` by driving the real `ralph` binary with scripted agents.

pub mod agent;
pub mod builtin;
pub mod cache;
pub mod ci;
pub mod client;
pub mod client_tls;
pub mod engine;
pub mod gateway;
pub mod host;
pub mod job;
pub mod logging;
pub mod metrics;
pub mod provision;
pub mod report;
pub mod service;
pub mod store;
pub mod toolchain;
pub mod usage;
pub mod util;
pub mod webhook;
