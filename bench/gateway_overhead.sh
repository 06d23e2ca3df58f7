#!/usr/bin/env bash
# Model gateway overhead: requests sent through `ralph_runner::gateway::serve_model` against the
# same requests sent straight to the upstream, all in one process on loopback (example
# runner/examples/gateway_bench.rs: a mock upstream in axum, the gateway in front of it, and a
# reqwest client with one HTTP/1.1 keep-alive connection per path, like an agent CLI).
#
# Measures, each against the direct baseline of the same run:
#   - latency p50/p90/p99 (request sent → whole response read) of an SSE stream (Responses API,
#     10 events with usage) and of a JSON reply (Chat Completions), N requests per path after a
#     warm-up, interleaved in blocks so both paths see the same machine state; the gateway's
#     added latency is gateway − direct;
#   - time to first byte of a stream whose upstream pauses DELAY ms after its first event (the
#     gateway must pass the first event on at once, not buffer it);
#   - RSS (/proc/self/status VmRSS, VmHWM) of a fresh process at idle and with STREAMS streams
#     held open, direct and through the gateway: the difference per stream is the gateway's cost.
#
# Usage: bench/gateway_overhead.sh [--json] [--n 2000] [--warmup 200] [--block 100]
#                                  [--delay-ms 200] [--ttfb-n 20] [--streams 50]
# Targets: under 1 ms added at p50; first byte not delayed by buffering.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet --example gateway_bench
exec target/x86_64-unknown-linux-gnu/release/examples/gateway_bench "$@"
