#!/usr/bin/env bash
# Sandbox start-up cost: `ralph sandbox exec --mode workspace-write -- /bin/true` against
# `/bin/true` alone and against bubblewrap with every namespace unshared, in one hyperfine run.
# Two bubblewrap baselines: the minimal one of the issue (`--ro-bind / /`: the whole host visible,
# read-only), and one that builds the same filesystem view as ralph's workspace-write mode (a
# tmpfs root with only the system trees, the workspace, private /tmp and HOME, a minimal /dev, own
# /proc, secrets masked, `.ralph/` read-only) — without what bubblewrap cannot do here (Landlock,
# seccomp, a pids cgroup, a reaping init that forwards signals).
#
# Usage: bench/sandbox_overhead.sh   (needs hyperfine and bubblewrap: apt-get install hyperfine bubblewrap)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-200}
cargo build --release --quiet
ralph=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
ws=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench-XXXXXX")
trap 'rm -rf "$ws"' EXIT
json=$ws.json
mkdir -p "$ws/.ralph"
same_view="bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --tmpfs / \
 --ro-bind /usr /usr --ro-bind /etc /etc --ro-bind-try /opt /opt \
 --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --ro-bind /sys/devices/system/cpu /sys/devices/system/cpu --ro-bind /sys/fs/cgroup /sys/fs/cgroup \
 --bind $ws $ws --tmpfs /tmp --tmpfs /home/agent --dev /dev --proc /proc --ro-bind $ws/.ralph $ws/.ralph \
 --ro-bind /dev/null /etc/shadow --ro-bind /dev/null /etc/gshadow --tmpfs /etc/ssl/private --remount-ro / /bin/true"
$same_view
hyperfine -N --style basic --warmup 20 --runs "$runs" --export-json "$json" \
    -n true "/bin/true" \
    -n bwrap "bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc /bin/true" \
    -n bwrap-same-view "$same_view" \
    -n ralph-workspace-write "$ralph sandbox exec --mode workspace-write --workspace $ws -- /bin/true" \
    -n ralph-read-only "$ralph sandbox exec --mode read-only --workspace $ws -- /bin/true" \
    -n ralph-full-access "$ralph sandbox exec --mode full-access --workspace $ws -- /bin/true" >&2
python3 - "$json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
t, b, v = r["true"]["median"], r["bwrap"]["median"], r["bwrap-same-view"]["median"]
print("| command | median | ± stddev | vs /bin/true | vs bwrap | vs bwrap, same view |")
print("|---|---|---|---|---|---|")
for name in ["true", "bwrap", "bwrap-same-view", "ralph-workspace-write", "ralph-read-only", "ralph-full-access"]:
    x = r[name]
    print(f"| {name} | {x['median']*1e3:.2f} ms | {x['stddev']*1e3:.2f} ms | {x['median']/t:.1f}× | {x['median']/b:.2f}× | {x['median']/v:.2f}× |")
PY
