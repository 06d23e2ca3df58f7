#!/usr/bin/env bash
# Container round overhead of the docker backend: `ralph sandbox exec --backend docker --mode
# workspace-write -- true` against a bare `docker run --rm IMAGE true`, in one hyperfine run
# (target: within 1.2x of the bare run).
#
# Usage: bench/docker_overhead.sh   (needs hyperfine, a Docker engine and the image:
#        apt-get install hyperfine; .ci/setup starts the engine and builds the image)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-30}
image=${IMAGE:-ralph-agent-base:latest}
docker=${DOCKER:-docker}   # the CLI of the baseline (e.g. DOCKER=/usr/bin/docker)
cargo build --release --quiet
ralph=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-XXXXXX")
trap 'rm -rf "$ws"' EXIT
json=$ws.json
hyperfine -N --style basic --warmup 3 --runs "$runs" --export-json "$json" \
    -n docker-run "$docker run --rm $image true" \
    -n ralph-docker "$ralph sandbox exec --backend docker --image $image --mode workspace-write --workspace $ws -- true" >&2
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
d = r["docker-run"]
print("| command | mean | ± stddev | median | vs docker run (mean) |")
print("|---|---|---|---|---|")
for name in ["docker-run", "ralph-docker"]:
    x = r[name]
    print(f"| {name} | {x['mean']*1e3:.0f} ms | {x['stddev']*1e3:.0f} ms | {x['median']*1e3:.0f} ms | {x['mean']/d['mean']:.2f}× |")
PY
