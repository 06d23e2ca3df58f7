#!/usr/bin/env bash
# What the store's set of writable trees costs a `ralph run` as it grows (issue 30, the twelfth
# pass): a store names every workspace and `write` directory its jobs ever had (a runner that
# ran 100,000 provisioned jobs, or CI checkouts in their own directories, knows 100,000), and a
# round's path check and a submission ask it which trees hold the job's paths.
#
# Each build runs the same job in two copies of one state directory: one whose store knows one
# tree (the job's own workspace), one whose store knows TREES more (rows added to its
# `writable_trees` table, the paths of workspaces that no longer exist). Per round is the slope
# between SHORT and LONG rounds; all commands interleaved (bench/interleave.py, SHUFFLE=1).
#
# Usage: TREES=100000 BASELINE=/path/to/old/ralph bench/store_trees.sh
#        (RALPH=path measures that binary instead of this tree's; INTERLEAVE=N rounds, 15)
set -euo pipefail
cd "$(dirname "$0")/.."
trees=${TREES:-100000}
short=${SHORT:-1}
long=${LONG:-10}
rounds=${INTERLEAVE:-15}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet -p ralph; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
baseline=${BASELINE:-}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/trees-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/ws" "$work/agent"
cat > "$work/agent/agent.sh" <<'SH'
printf '%s' '{"status":"continue","summary":"bench","evidence":[],"nextSteps":["again"],"blocker":""}' > "$RALPH_REPORT_FILE"
SH
run() { # binary state-dir rounds
    echo "$1 run --objective bench --workspace $work/ws --state-dir $2 --read $work/agent --mode workspace-write --toolchain none --max-rounds $3 --agent-cmd '. $work/agent/agent.sh' >/dev/null 2>&1; test \$? = 2"
}
# The seed: one job run, then the big copy's extra trees.
bash -c "$(run "$ralph" "$work/seed-1" 1)"
cp -a "$work/seed-1" "$work/seed-big"
python3 - "$work/seed-big/ralph.db" "$trees" <<'PY'
import sqlite3, sys
db, n = sys.argv[1], int(sys.argv[2])
c = sqlite3.connect(db)
c.executemany("INSERT OR IGNORE INTO writable_trees VALUES (?)",
              ((f"/srv/ralph/state/workspaces/0193a1b2-{i:012d}",) for i in range(n)))
c.commit()
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
print(f"store trees: {c.execute('SELECT count(*) FROM writable_trees').fetchone()[0]:,}", file=sys.stderr)
PY
named=()
builds=("ralph=$ralph")
if [ -n "$baseline" ]; then builds+=("baseline=$baseline"); fi
for b in "${builds[@]}"; do
    name=${b%%=*} bin=${b#*=}
    for s in 1 big; do
        for r in "$short" "$long"; do
            cp -a "$work/seed-$s" "$work/$name-$s-$r"
            named+=("$name-$s-$r=$(run "$bin" "$work/$name-$s-$r" "$r")")
        done
    done
done
SHUFFLE=1 SHELL_CMDS=1 JSON="$work/h.json" python3 bench/interleave.py "$rounds" "${named[@]}" >&2
python3 - "$work/h.json" "$short" "$long" "$trees" <<'PY'
import json, sys
data = {r["command"]: r["median"] for r in json.load(open(sys.argv[1]))["results"]}
short, long, trees = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
print("| build | store's trees | `ralph run`, 1 round | per round |")
print("|---|---|---|---|")
for name in ["baseline", "ralph"]:
    for s, label in [("1", "1"), ("big", f"{trees + 1:,}")]:
        a, b = data.get(f"{name}-{s}-{short}"), data.get(f"{name}-{s}-{long}")
        if a is None:
            continue
        per = (b - a) / (long - short)
        print(f"| {'this tree' if name == 'ralph' else 'baseline'} | {label} | {a*1e3:.1f} ms | {per*1e3:.2f} ms |")
PY
