#!/usr/bin/env bash
# Runner overhead per round: `ralph run` with an agent that only writes a report, against
# spawning that same agent directly, both measured in this run with hyperfine.
#
# Per-round cost is the slope between a short and a long job (so the fixed start-up of
# `ralph run` — opening the store, creating the job — is not counted as per-round cost):
#   per_round = (T(long) - T(short)) / (long - short)
# and the same slope for a shell loop that spawns the agent directly.
#
# Usage: bench/round_overhead.sh [MODE]   (MODE defaults to full-access: the runner's own cost;
#        pass workspace-write to include the native sandbox set-up)
# STATE_ROOT puts the state dirs elsewhere (e.g. /dev/shm, to take the disk's fsync latency out).
# PROJECT_FILES=N makes the workspace a git project of N files (100 per directory, one commit),
# so that the per-round host-boundary steps (walks of the workspace, snapshot of `.git/hooks`)
# have real work.
# TOOLCHAIN=none|auto passes `--toolchain` (default: ralph's own default, auto: the runner's
# per-user toolchains are granted to every round and their trees scanned for sockets).
# AGENT_SLEEP=S makes the agent sleep S seconds before it writes its report, on both sides, as a
# real agent thinks between rounds (the kernel's lazily kept state then goes cold between rounds,
# as it does for a real job: the back-to-back default hides such costs).
# STATE_FS=ext4 puts the state dirs and the workspace on a fresh loop-mounted ext4 made with
# mkfs's defaults (root only).
# INTERLEAVE=N measures with bench/interleave.py instead of hyperfine: N rounds, each running
# every command once in turn (this VM's speed drifts by 10-20 % within minutes, which moves
# hyperfine's blocks of runs apart; interleaved, the drift hits every command alike).
# RALPH=path measures that binary instead of this tree's; BASELINE=path measures another build
# (e.g. a copy of the one before a change) in the same hyperfine run, as its own rows.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-full-access}
short=${SHORT:-10}
long=${LONG:-110}
runs=${RUNS:-10}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
baseline=${BASELINE:-}
# Outside /tmp, like real state dirs (~/.local/state/ralph) and checkouts.
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/round-XXXXXX")
trap 'rm -rf "$work" "${STATE_ROOT:-$work}"/state-*' EXIT
if [ "${STATE_FS:-}" = ext4 ]; then
    # A fresh ext4 for the state dirs and the workspace (bench/fresh_ext4.sh says why).
    . bench/fresh_ext4.sh
    fresh_ext4 "$work.fs" 4G
    trap 'rm -rf "$work" "$work.fs"/*; umount "$work.fs"; rm -rf "$work.fs.img" "$work.fs"' EXIT
    mkdir -p "$work.fs/state"
    export STATE_ROOT=$work.fs/state
fi
state_root=${STATE_ROOT:-$work}
ws=$work/ws
if [ "${STATE_FS:-}" = ext4 ]; then ws=$work.fs/ws; fi
mkdir -p "$ws" "$work/direct" "$work/agent" "$state_root"
if [ -n "${PROJECT_FILES:-}" ]; then
    (cd "$ws" && git init -q && for i in $(seq 1 "$PROJECT_FILES"); do
        d="src/m$((i / 1000))/d$((i / 100))"; mkdir -p "$d"; echo "line $i" > "$d/f$i.txt"; done \
        && git add -A && git -c user.email=b@e -c user.name=bench commit -qm init)
fi
# The agent: one printf into the report file. Both sides run it as `/bin/sh -c '. agent.sh'`.
{ [ -n "${AGENT_SLEEP:-}" ] && echo "sleep $AGENT_SLEEP"; cat <<'SH'
printf '%s' '{"status":"continue","summary":"bench","evidence":[],"nextSteps":["again"],"blocker":""}' > "$RALPH_REPORT_FILE"
SH
} > "$work/agent/agent.sh"
ralph_cmd() { # rounds [binary]
    echo "${2:-$ralph} run --objective bench --workspace $ws --state-dir $state_root/state-$1 --read $work/agent --mode $mode --max-rounds $1 ${TOOLCHAIN:+--toolchain $TOOLCHAIN} --agent-cmd '. $work/agent/agent.sh' >/dev/null 2>&1; test \$? = 2"
}
direct_cmd() { # rounds
    echo "for i in \$(seq $1); do RALPH_REPORT_FILE=$work/direct/report.json /bin/sh -c '. $work/agent/agent.sh'; done"
}
extra=()
if [ -n "$baseline" ]; then
    extra=(-n "baseline-$short" "$(ralph_cmd "$short" "$baseline")"
           -n "baseline-$long" "$(ralph_cmd "$long" "$baseline")")
fi
if [ -n "${INTERLEAVE:-}" ]; then
    named=("ralph-$short=$(ralph_cmd "$short")" "ralph-$long=$(ralph_cmd "$long")")
    if [ -n "$baseline" ]; then
        named+=("baseline-$short=$(ralph_cmd "$short" "$baseline")"
                "baseline-$long=$(ralph_cmd "$long" "$baseline")")
    fi
    named+=("direct-$short=$(direct_cmd "$short")" "direct-$long=$(direct_cmd "$long")")
    SHELL_CMDS=1 PREPARE="rm -rf $state_root/state-*; sync" JSON="$work/h.json" \
        python3 bench/interleave.py "$INTERLEAVE" "${named[@]}" >&2
else
    hyperfine --style basic --warmup 1 --runs "$runs" --export-json "$work/h.json" \
        --prepare "rm -rf $state_root/state-*; sync" \
        -n "ralph-$short" "$(ralph_cmd "$short")" \
        -n "ralph-$long" "$(ralph_cmd "$long")" \
        "${extra[@]}" \
        -n "direct-$short" "$(direct_cmd "$short")" \
        -n "direct-$long" "$(direct_cmd "$long")" >&2
fi
python3 - "$work/h.json" "$short" "$long" "$mode" <<'PY'
import json, sys
data = {r["command"]: r for r in json.load(open(sys.argv[1]))["results"]}
short, long, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def slope(name):
    a, b = data[f"{name}-{short}"]["median"], data[f"{name}-{long}"]["median"]
    return (b - a) / (long - short)
d = slope("direct")
print(f"| build | mode | ralph per round | direct spawn per round | runner overhead per round | ratio | `ralph run` start-up |")
print(f"|---|---|---|---|---|---|---|")
for name in ["baseline", "ralph"]:
    if f"{name}-{short}" not in data:
        continue
    r = slope(name)
    start = data[f"{name}-{short}"]["median"] - short * r
    label = "this tree" if name == "ralph" else "baseline"
    print(f"| {label} | {mode} | {r*1e3:.2f} ms | {d*1e3:.2f} ms | {(r-d)*1e3:.2f} ms | {r/d:.1f}x | {start*1e3:.1f} ms |")
PY
