#!/usr/bin/env bash
# What a finished job leaves in the state directory, and what retention brings it back to
# (issue 30, item 3): N `ralph run` jobs of ROUNDS rounds each (a shell agent that reports
# `continue` and then `complete`), one after the other in one state directory, measured after
# SMALL and after N jobs (so the directory's fixed part, its 8 MiB disk reserve among it, is not
# counted: per job is the slope), then again after `ralph prune --older-than 1s`.
#
# Each figure twice: the bytes the files hold (apparent size) and the disk they take (blocks: a
# small file takes a whole 4 KiB block), for the store (ralph.db), its WAL (SQLite reuses it
# from its start after each checkpoint: it stays at its high-water mark, it does not grow with
# the jobs), the jobs' own directories (`jobs/`), and the rest.
#
# Usage: N=1000 bench/state_bytes.sh   (RALPH=path measures that binary instead of this tree's;
#        STATE_FS=ext4 puts the state directory on a fresh loop-mounted ext4, root only)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-1000}
small=${SMALL:-100}
rounds=${ROUNDS:-2}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet -p ralph; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/state-bytes-XXXXXX")
trap 'rm -rf "$work"' EXIT
state=$work/state
if [ "${STATE_FS:-}" = ext4 ]; then
    . bench/fresh_ext4.sh
    fresh_ext4 "$work.fs" 2G
    trap 'rm -rf "$work"; umount "$work.fs"; rm -rf "$work.fs.img" "$work.fs"' EXIT
    state=$work.fs/state
fi
mkdir -p "$work/ws" "$work/agent"
cat > "$work/agent/agent.sh" <<'SH'
if [ -e .bench-round ]; then
    rm .bench-round
    printf '%s' '{"status":"complete","summary":"finished the bench task","evidence":["a line of evidence"],"nextSteps":[],"blocker":""}' > "$RALPH_REPORT_FILE"
else
    touch .bench-round
    echo "round output on stdout"
    printf '%s' '{"status":"continue","summary":"half way","evidence":["did the first half"],"nextSteps":["do the second half"],"blocker":""}' > "$RALPH_REPORT_FILE"
fi
SH
job() {
    "$ralph" run --objective "bench: a two-round job" --workspace "$work/ws" --state-dir "$state" \
        --read "$work/agent" --mode workspace-write --toolchain none --max-rounds "$rounds" \
        --agent-cmd ". $work/agent/agent.sh" >/dev/null 2>&1 || true
}
measure() { # label
    python3 - "$state" "$1" <<'PY'
import os, sys
state, label = sys.argv[1], sys.argv[2]
def walk(paths):
    apparent = disk = files = 0
    for p in paths:
        if os.path.isfile(p):
            st = os.lstat(p); apparent += st.st_size; disk += st.st_blocks * 512; files += 1
            continue
        for d, dirs, fs in os.walk(p):
            for name in fs + dirs:
                st = os.lstat(os.path.join(d, name))
                apparent += st.st_size if name in fs else 0
                disk += st.st_blocks * 512; files += name in fs
            st = os.lstat(d); disk += st.st_blocks * 512
    return apparent, disk, files
top = [os.path.join(state, e) for e in os.listdir(state)]
db = [os.path.join(state, "ralph.db")]
wal = [p for p in top if os.path.basename(p) in ("ralph.db-wal", "ralph.db-shm")]
jobs = [os.path.join(state, "jobs")]
rest = [p for p in top if p not in db + wal + jobs]
print(label, *(x for part in (db, wal, jobs, rest) for x in walk(part)))
PY
}
for i in $(seq "$small"); do job; done
sync; measure small > "$work/m"
for i in $(seq $((n - small))); do job; done
sync; measure all >> "$work/m"
sleep 1.1
"$ralph" prune --older-than 1s --state-dir "$state" >/dev/null
sync; measure pruned >> "$work/m"
python3 - "$work/m" "$n" "$small" "$rounds" <<'PY'
import sys
rows = {l.split()[0]: list(map(int, l.split()[1:])) for l in open(sys.argv[1])}
n, small, rounds = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = ["the store (ralph.db)", "its WAL (ralph.db-wal, -shm; reused, not grown)", "the jobs' directories (jobs/)", "the rest"]
def part(after, i):
    """Per job: the slope between SMALL and N jobs; after the prune, which took every job's
    artifacts (the first SMALL's too), `jobs/` is what is left of all N, divided by N."""
    if after == "pruned" and i == 2:
        return [rows[after][3 * i + k] / n for k in range(3)]
    return [(rows[after][3 * i + k] - rows["small"][3 * i + k]) / (n - small) for k in range(3)]
print(f"| per finished job ({rounds} rounds; {small} to {n} jobs) | bytes held | disk taken | files |")
print("|---|---|---|---|")
for after, label in [("all", "as finished"), ("pruned", "after `ralph prune`")]:
    tot = [0, 0, 0]
    for i, name in enumerate(names):
        per = part(after, i)
        tot = [t + p for t, p in zip(tot, per)]
        print(f"| {label}: {name} | {per[0]:,.0f} | {per[1]:,.0f} | {per[2]:.2f} |")
    print(f"| **{label}: all** | **{tot[0]:,.0f}** | **{tot[1]:,.0f}** | {tot[2]:.2f} |")
print()
for k in ["small", "all", "pruned"]:
    r = rows[k]
    print(f"{k}: store {r[0]:,} B held / {r[1]:,} B disk; WAL {r[3]:,} / {r[4]:,}; jobs/ {r[6]:,} / {r[7]:,} in {r[8]:,} files; rest {r[9]:,} / {r[10]:,}")
PY
