#!/usr/bin/env bash
# Sandbox start-up cost: `ralph sandbox exec --mode workspace-write -- /bin/true` against
# `/bin/true` alone and against bubblewrap with every namespace unshared, in one hyperfine run.
#
# Usage: bench/sandbox_overhead.sh   (needs hyperfine and bubblewrap: apt-get install hyperfine bubblewrap)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-200}
cargo build --release --quiet
ralph=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-XXXXXX")
trap 'rm -rf "$ws"' EXIT
json=$ws.json
hyperfine -N --style basic --warmup 20 --runs "$runs" --export-json "$json" \
    -n true "/bin/true" \
    -n bwrap "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true" \
    -n ralph-workspace-write "$ralph sandbox exec --mode workspace-write --workspace $ws -- /bin/true" \
    -n ralph-read-only "$ralph sandbox exec --mode read-only --workspace $ws -- /bin/true" \
    -n ralph-full-access "$ralph sandbox exec --mode full-access --workspace $ws -- /bin/true" >&2
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
t, b = r["true"]["median"], r["bwrap"]["median"]
print("| command | median | ± stddev | vs /bin/true | vs bwrap |")
print("|---|---|---|---|---|")
for name in ["true", "bwrap", "ralph-workspace-write", "ralph-read-only", "ralph-full-access"]:
    x = r[name]
    print(f"| {name} | {x['median']*1e3:.2f} ms | {x['stddev']*1e3:.2f} ms | {x['median']/t:.1f}× | {x['median']/b:.2f}× |")
PY
