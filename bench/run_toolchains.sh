#!/usr/bin/env bash
# What the runner's toolchains cost a `ralph run` (`--toolchain auto`, the default: the per-user
# toolchains on the runner's PATH are granted read-only to every round, and their trees scanned
# for unix sockets) on a state directory that has run before, as a user's
# ~/.local/state/ralph has: the scan then reuses the listings the last run kept
# (`socket-listings`) after a stat of each directory instead of listing it. One 1-round job
# (workspace-write), against the same job with `--toolchain none`, interleaved
# (bench/interleave.py: every command once per round, in turn), medians.
#
# Usage: bench/run_toolchains.sh
# N=30 rounds of runs; RALPH=path measures that binary instead of this tree's; BASELINE=path
# measures another build (e.g. the one before a change) in the same run, as its own rows.
# STATE_FS=ext4 puts the state dirs and the workspace on a fresh loop-mounted ext4 (root only).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-30}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
baseline=${BASELINE:-}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/toolchains-XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work
if [ "${STATE_FS:-}" = ext4 ]; then
    . bench/fresh_ext4.sh
    fresh_ext4 "$work.fs" 2G
    trap 'rm -rf "$work" "$work.fs"/*; umount "$work.fs"; rm -rf "$work.fs.img" "$work.fs"' EXIT
    root=$work.fs
fi
mkdir -p "$root/ws" "$work/agent"
printf '%s\n' "printf '%s' '{\"status\":\"continue\",\"summary\":\"bench\",\"evidence\":[],\"nextSteps\":[\"again\"],\"blocker\":\"\"}' > \"\$RALPH_REPORT_FILE\"" \
    > "$work/agent/agent.sh"
run_cmd() { # binary toolchain state
    echo "$1 run --objective bench --workspace $root/ws --state-dir $root/$3 --read $work/agent --mode workspace-write --max-rounds 1 --toolchain $2 --agent-cmd '. $work/agent/agent.sh' >/dev/null 2>&1; test \$? = 2"
}
named=()
for side in ralph baseline; do
    bin=$ralph
    if [ "$side" = baseline ]; then
        [ -n "$baseline" ] || continue
        bin=$baseline
    fi
    for tc in auto none; do
        # The state directory's first run lists everything and keeps the listings: not timed.
        bash -c "$(run_cmd "$bin" "$tc" "state-$side-$tc")"
        named+=("$side-$tc=$(run_cmd "$bin" "$tc" "state-$side-$tc")")
    done
done
kept=$(stat -c %s "$root/state-ralph-auto/socket-listings" 2>/dev/null || echo 0)
echo "kept listings: $kept bytes ($root/state-ralph-auto/socket-listings)" >&2
SHELL_CMDS=1 JSON="$work/h.json" python3 bench/interleave.py "$n" "${named[@]}" >&2
python3 - "$work/h.json" <<'PY'
import json, sys
data = {r["command"]: r["median"] for r in json.load(open(sys.argv[1]))["results"]}
print("| build | `--toolchain auto` | `--toolchain none` | what auto adds |")
print("|---|---|---|---|")
for side in ["baseline", "ralph"]:
    if f"{side}-auto" not in data:
        continue
    a, n = data[f"{side}-auto"], data[f"{side}-none"]
    label = "this tree" if side == "ralph" else "baseline"
    print(f"| {label} | {a*1e3:.2f} ms | {n*1e3:.2f} ms | {(a-n)*1e3:.2f} ms |")
if "baseline-auto" in data:
    print(f"\nthis tree / baseline, auto: {data['ralph-auto']/data['baseline-auto']:.2f}x")
PY
