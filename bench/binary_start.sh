#!/usr/bin/env bash
# What the release binary's debug info costs each process start (issue 30, item 5): the release
# `ralph` as `cargo build --release` leaves it (with `debug = "line-tables-only"`) against the
# same binary with its DWARF split off as `packaging/build-release` ships it (`objcopy
# --strip-debug`: symbols kept), in one hyperfine run: `ralph --version` (one process) and
# `ralph sandbox exec --mode workspace-write -- /bin/true` (the runner, its sandbox helper and
# init: the binary is exec'd three times), medians and ratios.
#
# Usage: bench/binary_start.sh   (needs hyperfine, objcopy; RUNS=, RALPH_BIN= a release binary)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-300}
if [ -z "${RALPH_BIN:-}" ]; then cargo build --release --locked --quiet --bin ralph; fi
built=${RALPH_BIN:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ralph-bench-bin-XXXXXX")
trap 'rm -rf "$root"' EXIT
# Both on the same filesystem, both fresh copies in the page cache.
full=$root/ralph-full
stripped=$root/ralph-stripped
cp "$built" "$full"
objcopy --strip-debug "$built" "$stripped"
mkdir "$root/ws"
json=$root/h.json
hyperfine -N --style basic --warmup 20 --runs "$runs" --export-json "$json" \
    -n "version full" "$full --version" \
    -n "version stripped" "$stripped --version" \
    -n "sandbox full" "$full sandbox exec --mode workspace-write --workspace $root/ws -- /bin/true" \
    -n "sandbox stripped" "$stripped sandbox exec --mode workspace-write --workspace $root/ws -- /bin/true" >&2
python3 - "$json" "$(stat -c %s "$full")" "$(stat -c %s "$stripped")" <<'PY'
import json, sys
r = {x["command"]: x["median"] * 1000 for x in json.load(open(sys.argv[1]))["results"]}
full, stripped = int(sys.argv[2]), int(sys.argv[3])
print(f"| binary | size | `ralph --version` | `sandbox exec -- /bin/true` (workspace-write) |")
print("|---|---|---|---|")
print(f"| release as built (line tables) | {full/1048576:.0f} MiB | {r['version full']:.2f} ms | {r['sandbox full']:.2f} ms |")
print(f"| DWARF split off (as shipped) | {stripped/1048576:.0f} MiB | {r['version stripped']:.2f} ms ({r['version stripped']/r['version full']:.2f}×) | {r['sandbox stripped']:.2f} ms ({r['sandbox stripped']/r['sandbox full']:.2f}×) |")
PY
