#!/usr/bin/env bash
# Sandbox start-up cost: `ralph sandbox exec --mode workspace-write -- /bin/true` against
# `/bin/true` alone and against bubblewrap with every namespace unshared, in one hyperfine run.
# Two bubblewrap baselines: the minimal one of the issue (`--ro-bind / /`: the whole host visible,
# read-only), and one that builds the same filesystem view as ralph's workspace-write mode (a
# tmpfs root with only the system trees, the workspace, private /tmp and HOME, a minimal /dev, own
# /proc, secrets masked, `.ralph/` read-only) — without what bubblewrap cannot do here (Landlock,
# seccomp, a pids cgroup, a reaping init that forwards signals).
#
# Each ralph line runs on two workspaces: an empty one, and a git project of 50 files (`git init`,
# git's sample hooks, one commit), where the host-boundary steps have real work (the snapshot of
# `.git/hooks` and `.git/config`, the git check's walks, the socket scan). bwrap's same view is
# measured on both too. BASELINE=path adds the same ralph lines for another build (e.g. a copy of
# the one before a change), in the same hyperfine run.
#
# INTERLEAVE=N measures with bench/interleave.py instead (N rounds, each command once per round;
# SHUFFLE=1 shuffles each round's order).
#
# COLD=S sleeps S seconds before each timed run (hyperfine --prepare), as a round starts seconds
# after the last: state the kernel keeps only briefly (e.g. the fast path of the cgroup
# threadgroup lock, one RCU grace period) is then gone, as in real use; back to back hides it.
#
# Usage: bench/sandbox_overhead.sh   (needs hyperfine and bubblewrap: apt-get install hyperfine bubblewrap)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-200}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
baseline=${BASELINE:-}
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-XXXXXX")
proj=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-proj-XXXXXX")
trap 'rm -rf "$ws" "$proj"' EXIT
json=$ws.json
mkdir -p "$ws/.ralph" "$proj/.ralph"
(cd "$proj" && git init -q && for i in $(seq 1 50); do mkdir -p "d$((i % 5))"; echo "file $i" > "d$((i % 5))/f$i.txt"; done \
    && git add -A && git -c user.email=b@e -c user.name=bench commit -qm init)
view() { # workspace
    echo "bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --tmpfs / \
 --ro-bind /usr /usr --ro-bind /etc /etc --ro-bind-try /opt /opt \
 --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --ro-bind /sys/devices/system/cpu /sys/devices/system/cpu --ro-bind /sys/fs/cgroup /sys/fs/cgroup \
 --bind $1 $1 --tmpfs /tmp --tmpfs /home/agent --dev /dev --proc /proc --ro-bind $1/.ralph $1/.ralph \
 --ro-bind /dev/null /etc/shadow --ro-bind /dev/null /etc/gshadow --tmpfs /etc/ssl/private --remount-ro / /bin/true"
}
same_view=$(view "$ws")
proj_view=$(view "$proj" | sed "s#--ro-bind $proj/.ralph $proj/.ralph#--ro-bind $proj/.ralph $proj/.ralph --ro-bind $proj/.git/hooks $proj/.git/hooks --ro-bind $proj/.git/config $proj/.git/config#")
$same_view
$proj_view
extra=()
if [ -n "$baseline" ]; then
    extra=(-n baseline-workspace-write "$baseline sandbox exec --mode workspace-write --workspace $ws -- /bin/true"
           -n baseline-workspace-write-git50 "$baseline sandbox exec --mode workspace-write --workspace $proj -- /bin/true"
           -n baseline-read-only "$baseline sandbox exec --mode read-only --workspace $ws -- /bin/true")
fi
cold=()
if [ -n "${COLD:-}" ]; then cold=(--prepare "sleep $COLD"); fi
named=(-n true "/bin/true"
    -n bwrap "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true"
    -n bwrap-same-view "$same_view"
    -n bwrap-same-view-git50 "$proj_view"
    -n ralph-workspace-write "$ralph sandbox exec --mode workspace-write --workspace $ws -- /bin/true"
    -n ralph-read-only "$ralph sandbox exec --mode read-only --workspace $ws -- /bin/true"
    -n ralph-full-access "$ralph sandbox exec --mode full-access --workspace $ws -- /bin/true"
    -n ralph-workspace-write-git50 "$ralph sandbox exec --mode workspace-write --workspace $proj -- /bin/true"
    "${extra[@]}")
if [ -n "${INTERLEAVE:-}" ]; then
    # INTERLEAVE=N: N rounds through bench/interleave.py, each running every command once (in a
    # shuffled order with SHUFFLE=1), so the VM's drift between hyperfine's blocks hits all alike.
    pairs=()
    for ((i = 0; i < ${#named[@]}; i += 3)); do pairs+=("${named[i+1]}=${named[i+2]}"); done
    JSON="$json" SLEEP="${COLD:-0}" python3 bench/interleave.py "$INTERLEAVE" "${pairs[@]}" >&2
else
    hyperfine -N --style basic --warmup 20 --runs "$runs" --export-json "$json" "${cold[@]}" \
        "${named[@]}" >&2
fi
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
t, b, v = r["true"]["median"], r["bwrap"]["median"], r["bwrap-same-view"]["median"]
v50 = r["bwrap-same-view-git50"]["median"]
print("| command | median | ± stddev | vs /bin/true | vs bwrap | vs bwrap, same view (same workspace) |")
print("|---|---|---|---|---|---|")
names = ["true", "bwrap", "bwrap-same-view", "bwrap-same-view-git50", "ralph-workspace-write",
         "ralph-workspace-write-git50", "ralph-read-only", "ralph-full-access",
         "baseline-workspace-write", "baseline-workspace-write-git50", "baseline-read-only"]
for name in names:
    if name not in r:
        continue
    x = r[name]
    same = v50 if name.endswith("git50") else v
    print(f"| {name} | {x['median']*1e3:.2f} ms | {x['stddev']*1e3:.2f} ms | {x['median']/t:.1f}× | {x['median']/b:.2f}× | {x['median']/same:.2f}× |")
PY
