#!/usr/bin/env bash
# The syscall allow-list's cost (issue 28 item 3): round start-up (`ralph sandbox exec -- /bin/true`)
# and a syscall-heavy command (200 000 getppid() calls from /usr/bin/python3), with this tree's ralph (the
# allow-list) against a ralph built from a commit before it (the deny list only), natively
# (workspace-write, read-only, full-access) and on docker (workspace-write, full-access), in one
# hyperfine run per backend. No switch in ralph selects the filter: the old filter is the old
# binary.
#
# Usage: OLD_RALPH=/path/to/ralph-before-the-allow-list bench/seccomp_overhead.sh
#   RALPH (default: a release build of this tree), RUNS (default 100), DOCKER_RUNS (default 20).
#   Build the old binary with e.g. `git worktree add /tmp/old 6ad5c90 && cd /tmp/old &&
#   cargo build --release -p ralph --bin ralph`. Needs hyperfine (apt-get install hyperfine).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-100}
docker_runs=${DOCKER_RUNS:-20}
if [ -z "${RALPH:-}" ]; then
    cargo build --release --quiet -p ralph --bin ralph
    RALPH=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
fi
: "${OLD_RALPH:?set OLD_RALPH to a ralph built before the allow-list}"
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-XXXXXX")
trap 'rm -rf "$ws" "$ws".*.json' EXIT
loop="/usr/bin/python3 -c 'import os
for _ in range(200000): os.getppid()'"
native=()
for m in workspace-write read-only full-access; do
    native+=(-n "new $m true" "$RALPH sandbox exec --mode $m --workspace $ws -- /bin/true")
    native+=(-n "old $m true" "$OLD_RALPH sandbox exec --mode $m --workspace $ws -- /bin/true")
done
native+=(-n "new workspace-write getppid" "$RALPH sandbox exec --mode workspace-write --workspace $ws -- sh -c \"$loop\"")
native+=(-n "old workspace-write getppid" "$OLD_RALPH sandbox exec --mode workspace-write --workspace $ws -- sh -c \"$loop\"")
native+=(-n "no sandbox getppid" "sh -c \"$loop\"")
hyperfine -N --style basic --warmup 5 --runs "$runs" --export-json "$ws.native.json" "${native[@]}" >&2
files=("$ws.native.json")
if docker info >/dev/null 2>&1; then
    d=()
    for m in workspace-write full-access; do
        d+=(-n "docker new $m true" "$RALPH sandbox exec --backend docker --mode $m --workspace $ws -- /bin/true")
        d+=(-n "docker old $m true" "$OLD_RALPH sandbox exec --backend docker --mode $m --workspace $ws -- /bin/true")
    done
    d+=(-n "docker new workspace-write getppid" "$RALPH sandbox exec --backend docker --mode workspace-write --workspace $ws -- sh -c \"$loop\"")
    d+=(-n "docker old workspace-write getppid" "$OLD_RALPH sandbox exec --backend docker --mode workspace-write --workspace $ws -- sh -c \"$loop\"")
    hyperfine -N --style basic --warmup 2 --runs "$docker_runs" --export-json "$ws.docker.json" "${d[@]}" >&2
    files+=("$ws.docker.json")
fi
python3 - "${files[@]}" <<'PY'
import json, sys
r = {}
for f in sys.argv[1:]:
    r.update({x["command"]: x for x in json.load(open(f))["results"]})
print("| command | old (deny list) median | new (allow-list) median | new − old |")
print("|---|---|---|---|")
for name in sorted({k.replace("new ", "").replace("old ", "") for k in r if " new " in f" {k}" or " old " in f" {k}"}):
    new = next(v for k, v in r.items() if k.replace("new ", "") == name and "new" in k)
    old = next(v for k, v in r.items() if k.replace("old ", "") == name and "old" in k)
    d = (new["median"] - old["median"]) * 1e3
    print(f"| {name} | {old['median']*1e3:.2f} ms ± {old['stddev']*1e3:.2f} | {new['median']*1e3:.2f} ms ± {new['stddev']*1e3:.2f} | {d:+.2f} ms |")
if "no sandbox getppid" in r:
    print(f"| getppid loop, no sandbox | {r['no sandbox getppid']['median']*1e3:.2f} ms | | |")
PY
