#!/usr/bin/env bash
# What the git check of a workspace-write run costs (sandbox/src/gitguard.rs: one walk of every
# writable tree before the run and one after it). A workspace of 100,000 files in 10,100
# directories (100 × 100 directories of 10 files, plus a repository at the top and 20 nested
# ones) against an empty workspace, both through `ralph sandbox exec -- /bin/true`, and against
# `find WS -name .git` (a walk of the same tree that, like the check, reads directories and
# stats nothing) — all in one hyperfine run, warm page cache (as for consecutive rounds).
#
# Per round, the check costs `ralph, 100k files` − `ralph, empty`: two walks, plus reading the
# surfaces of the repositories found.
#
# Usage: bench/git_check_overhead.sh   (needs hyperfine and git: apt-get install hyperfine git)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-30}
cargo build --release --quiet
ralph=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ralph-bench-git-XXXXXX")
trap 'rm -rf "$root"' EXIT
ws=$root/ws
empty=$root/empty
mkdir -p "$ws" "$empty"
python3 - "$ws" <<'PY'
import os, sys
ws = sys.argv[1]
for a in range(100):
    for b in range(100):
        d = os.path.join(ws, f"d{a:02}", f"e{b:02}")
        os.makedirs(d)
        for c in range(10):
            with open(os.path.join(d, f"f{c}.txt"), "w") as f:
                f.write("x\n")
PY
git -C "$ws" init -q
for i in $(seq 1 20); do git -C "$ws/d$(printf %02d "$i")" init -q; done
find "$ws" -type f | wc -l | xargs echo "files:" >&2
find "$ws" -type d | wc -l | xargs echo "directories:" >&2
json=$root/result.json
hyperfine -N --style basic --warmup 3 --runs "$runs" --export-json "$json" \
    -n find "find $ws -name .git" \
    -n ralph-empty "$ralph sandbox exec --mode workspace-write --workspace $empty -- /bin/true" \
    -n ralph-100k "$ralph sandbox exec --mode workspace-write --workspace $ws -- /bin/true" >&2
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
f, e, w = r["find"]["median"], r["ralph-empty"]["median"], r["ralph-100k"]["median"]
print("| command | median | ± stddev |")
print("|---|---|---|")
for name in ["find", "ralph-empty", "ralph-100k"]:
    x = r[name]
    print(f"| {name} | {x['median']*1e3:.1f} ms | {x['stddev']*1e3:.1f} ms |")
check = w - e
print()
print(f"git check per run (two walks): {check*1e3:.1f} ms; per walk {check/2*1e3:.1f} ms = {check/2/f:.2f}× `find -name .git`")
PY
