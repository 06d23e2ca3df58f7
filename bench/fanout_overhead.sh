#!/usr/bin/env bash
# What fan-out (`--attempts N`, SPEC §13) costs per attempt on a workspace of FILES files
# (default 10,000 in 100 directories, ~10 lines each, a git repository with its history), for
# both layouts of a root runner: a copy (a root-owned workspace: its rounds see it idmapped, which
# overlayfs does not take) and an overlay (the workspace owned by an unprivileged user, here
# nobody). Per attempt: the time to make its workspace and the bytes copied (from the job's
# `attempts_started` event) and the disk it takes while the job runs (a copy: du of the
# workspace; an overlay: its upper layer, what the attempt wrote), and the job's wall time with
# `--attempts N` (default 4) against `--attempts 1`, both with an agent that changes one file and
# completes at once and `--verify true`, measured in the same run (hyperfine, RUNS each). The
# plain anchor is what a user would otherwise do before running N agents: `cp -a` of the
# workspace N times.
#
# Usage: bench/fanout_overhead.sh   (needs git, python3, hyperfine; N=, FILES=, RUNS=, RALPH_BIN=)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-4}
files=${FILES:-10000}
runs=${RUNS:-5}
if [ -z "${RALPH_BIN:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH_BIN:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ralph-bench-fanout-XXXXXX")
trap 'rm -rf "$root"' EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
ws=$root/ws
mkdir -p "$ws" "$root/agents" "$root/cp"
git -C "$ws" init -q -b main
python3 - "$ws" "$files" <<'PY'
import os, sys
ws, files = sys.argv[1], int(sys.argv[2])
for i in range(files):
    d = os.path.join(ws, f"d{i % 100:02}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.txt"), "w") as f:
        f.write("".join(f"line {j} of file {i}\n" for j in range(10)))
PY
# No detached auto-gc repacking the objects while the bench copies them.
git -C "$ws" config gc.auto 0
git -C "$ws" add -A && git -C "$ws" commit -qm c0
printf '#!/bin/sh\necho "$PWD" > out.txt\necho %s > "$RALPH_REPORT_FILE"\n' \
    "'{\"status\":\"complete\",\"summary\":\"ok\",\"evidence\":[\"x\"],\"nextSteps\":[],\"blocker\":\"\"}'" \
    > "$root/agents/done.sh"
chmod +x "$root/agents/done.sh"
chmod 755 "$root"
measure() {  # $1: label; the workspace's owner is set by the caller
state=$root/state-$1
run() {
    "$ralph" run --objective x --workspace "$ws" --state-dir "$state" --read "$root/agents" \
        --agent-cmd "$root/agents/done.sh" --verify true --json --attempts "$1"
}
# One fan-out job, for the per-attempt figures.
id=$(run "$n" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
"$ralph" show "$id" --state-dir "$state" --json > "$root/show.json"
python3 - "$root/show.json" <<'PY' > "$root/attempts.txt"
import json, statistics, sys
a = json.load(open(sys.argv[1]))["attempts"]
print(len(a), a[0]["layout"], a[0]["files"], a[0]["bytes"], statistics.median(x["copy_ms"] for x in a))
PY
read -r count layout copied_files copied_bytes copy_ms < "$root/attempts.txt"
if [ "$layout" = overlay ]; then disk_kb=$(( $(stat -c %s "$ws/out.txt") / 1024 + 8 )); else disk_kb=$(du -sk "$ws" | cut -f1); fi
hyperfine --style basic --runs "$runs" --warmup 1 --export-json "$root/h.json" \
    -n "attempts 1" "$ralph run --objective x --workspace $ws --state-dir $state --read $root/agents --agent-cmd $root/agents/done.sh --verify true --json --attempts 1 > /dev/null" \
    -n "attempts $n" "$ralph run --objective x --workspace $ws --state-dir $state --read $root/agents --agent-cmd $root/agents/done.sh --verify true --json --attempts $n > /dev/null" \
    -n "cp -a x$n" "rm -rf $root/cp && mkdir $root/cp && for i in \$(seq $n); do cp -a $ws $root/cp/\$i; done" \
    > /dev/null
python3 - "$root/h.json" "$n" "$count" "$layout" "$copied_files" "$copied_bytes" "$copy_ms" "$disk_kb" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))["results"]
n, count, layout, files, nbytes, copy_ms, disk_kb = sys.argv[2:]
med = {r["command"]: r["median"] * 1000 for r in h}
one, fan, cp = med["attempts 1"], med[f"attempts {n}"], med[f"cp -a x{n}"]
made = f"{int(files):,} files, {int(nbytes)/1048576:.1f} MiB copied" if layout == "copy" else "a mount, nothing copied"
print(f"| {layout} | {count} | {made}, {float(copy_ms):.0f} ms | {int(disk_kb):,} KiB | {one:.0f} ms | {fan:.0f} ms ({fan/one:.2f}×) | {(fan-one)/int(n):.0f} ms | {cp:.0f} ms |")
PY
}
echo "| layout | attempts | each attempt's workspace (median) | disk per attempt | \`--attempts 1\` | \`--attempts $n\` | extra per attempt | \`cp -a\` ×$n (anchor) |"
echo "|---|---|---|---|---|---|---|---|"
measure copy
chown -R 65534:65534 "$ws"
measure overlay
