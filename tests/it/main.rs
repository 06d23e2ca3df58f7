//! The end-to-end tests: one test binary, a module per area (a file each), sharing the harness
//! in `common` and the escape matrix's machinery in `escape`. They run the real `ralph` binary
//! (and `ralph-probe`) against real sandboxes, databases, Docker engines and agent CLIs.
//!
//! One binary rather than one per file: each would link the whole runner again, which cost most
//! of an incremental test build. Run one area with its module path as the filter, e.g.
//! `cargo test --test it loop_outcomes::`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[macro_use]
mod escape;

mod agent_clis;
mod agent_presets;
mod agent_skeleton;
mod boundary_matrix;
mod builtin_agent;
mod caches;
mod ci_examples;
mod ci_reports;
mod dashboard;
mod dashboard_http;
mod demo;
mod disk_full;
mod docker_backend;
mod docker_escape;
mod docker_leftovers;
mod docker_socket;
mod docker_stats;
mod environment;
mod fault_injection;
mod fleet_results;
mod gateway_agents;
mod gateway_egress;
mod gateway_hostile;
mod gateway_netns;
mod git_boundary;
mod held_start;
mod host_boundary;
mod job_history;
mod kill_grace;
mod live_output;
mod loop_outcomes;
mod metrics;
mod mixed_versions;
mod model_server;
mod network_tls;
mod network_tokens;
mod open_files;
mod packaging;
mod path_flags;
mod postgres_pool;
mod postgres_service;
mod postgres_tls;
mod power_loss;
mod process_tree;
mod provisioned;
mod prune;
mod readme_tour;
mod report_contract;
mod run_crash;
mod sandbox_cpus;
mod sandbox_escape;
mod sandbox_limits;
mod sandbox_netns;
mod service;
mod service_crash;
mod service_gateway;
mod service_input;
mod service_logs;
mod setup_step;
mod socket_listings;
mod standby_helper;
mod state_bounds;
mod systemd_units;
mod task_jobs;
mod terminal_output;
mod tls_setup;
mod toolchains;
mod uploads;
mod webhooks;
mod workloads;
mod workspace_lock;
