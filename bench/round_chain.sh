#!/usr/bin/env bash
# Where a `ralph run` round's time goes, from one agent's exit to the next agent's exec, read from
# kernel tracepoints (bench/round_chain.py says what each column is). Complements
# bench/round_overhead.sh, whose per-round slope says how much and this says where: the steps
# of the chain one after the other, and whether the go-ahead waited on the set-up or on the
# flush of `round_started`.
#
# Usage: bench/round_chain.sh          (root, perf; a fresh loop-mounted ext4 for state and
#                                        workspace, as round_overhead.sh's STATE_FS=ext4)
# JOBS=N ROUNDS=R   jobs per build and rounds per job (default 4 x 30)
# AGENT_SLEEP=S     the agent sleeps S seconds first, as a real one thinks (caches go cold)
# RALPH=path        measures that binary instead of this tree's; BASELINE=path measures another
#                   build in the same run, jobs interleaved (SHUFFLE=1: in a seeded random order)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ] || ! command -v perf >/dev/null; then
    echo "round_chain.sh: needs root and perf (apt-get install linux-perf)" >&2
    exit 2
fi
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/chain-XXXXXX")
. bench/fresh_ext4.sh
fresh_ext4 "$work.fs" 2G
trap 'rm -rf "$work" "$work.fs"/*; umount "$work.fs"; rm -rf "$work.fs.img" "$work.fs"' EXIT
mkdir -p "$work.fs/ws" "$work.fs/state" "$work/agent"
{ [ -n "${AGENT_SLEEP:-}" ] && echo "sleep $AGENT_SLEEP"; cat <<'SH'
printf '%s' '{"status":"continue","summary":"bench","evidence":[],"nextSteps":["again"],"blocker":""}' > "$RALPH_REPORT_FILE"
SH
} > "$work/agent/agent.sh"
builds=("this=$ralph")
if [ -n "${BASELINE:-}" ]; then builds+=("baseline=$BASELINE"); fi
python3 bench/round_chain.py "${JOBS:-4}" "${ROUNDS:-30}" "$work.fs/state" "$work.fs/ws" \
    "$work/agent" "${builds[@]}"
