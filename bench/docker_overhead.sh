#!/usr/bin/env bash
# Container round overhead of the docker backend: `ralph sandbox exec --backend docker --mode
# workspace-write -- true` against a bare `docker run --rm IMAGE true`, in one hyperfine run
# (target: within 1.2x of the bare run). Run as root, two more lines show what a root runner's
# steps add: `ralph-docker` is on a root-owned workspace (idmapped for the agent user),
# `ralph-docker-owned` on one owned by uid 1000 (no idmap), `ralph-docker-gateway` the same
# idmapped round with `--network gateway` (the init's listeners handed over, the egress proxy
# served).
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
owned=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-owned-XXXXXX")
trap 'rm -rf "$ws" "$owned"' EXIT
extra=()
if [ "$(id -u)" = 0 ]; then
    chown 1000:1000 "$owned"
    extra=(-n ralph-docker-owned "$ralph sandbox exec --backend docker --image $image --mode workspace-write --workspace $owned -- true"
           -n ralph-docker-gateway "$ralph sandbox exec --backend docker --image $image --mode workspace-write --workspace $ws --allow-host 127.0.0.1:9 -- true")
fi
exec=(sandbox exec --backend docker --image "$image" --mode workspace-write)
hyperfine -N --style basic --warmup 3 --runs "$runs" --export-json "$json" \
    -n docker-run "$docker run --rm $image true" \
    -n ralph-docker "$ralph ${exec[*]} --workspace $ws -- true" "${extra[@]}" >&2
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
d = r["docker-run"]
print("| command | mean | ± stddev | median | vs docker run (mean) |")
print("|---|---|---|---|---|")
for name in ["docker-run", "ralph-docker", "ralph-docker-owned", "ralph-docker-gateway"]:
    if name not in r:
        continue
    x = r[name]
    print(f"| {name} | {x['mean']*1e3:.0f} ms | {x['stddev']*1e3:.0f} ms | {x['median']*1e3:.0f} ms | {x['mean']/d['mean']:.2f}× |")
PY
