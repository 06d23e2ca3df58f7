#!/usr/bin/env bash
# Start-up cost of the host-boundary steps (issues 9 and 16): `ralph sandbox exec -- /bin/true`
# of this checkout against the same command of a baseline ralph built from an earlier commit
# (before the steps existed), both in one hyperfine run, with bubblewrap building the same view
# as a yardstick. The new steps per run: protected paths resolved without following symlinks,
# their snapshot, the socket scan, the git inventory before and after, two tmpfs scratch mounts,
# and for a root runner on a root-owned workspace the agent user's idmapped workspace (a user
# namespace per run).
#
# Usage: BASELINE=/path/to/old/ralph bench/boundary_overhead.sh
#   e.g.  git worktree add /tmp/base e5fcd0d && (cd /tmp/base && cargo build --release)
#         BASELINE=/tmp/base/target/x86_64-unknown-linux-gnu/release/ralph bench/boundary_overhead.sh
# Run as root (the idmapped case needs a root runner). Needs hyperfine and bubblewrap.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${BASELINE:?set BASELINE to a ralph binary built from the commit to compare with}"
runs=${RUNS:-200}
cargo build --release --quiet
ralph=$PWD/target/x86_64-unknown-linux-gnu/release/ralph
root_ws=$(mktemp -d /var/tmp/ralph-bench-XXXXXX)
user_ws=$(mktemp -d /var/tmp/ralph-bench-XXXXXX)
trap 'rm -rf "$root_ws" "$user_ws" "$root_ws.json"' EXIT
# A workspace like a small project: a git repository with a few files.
for ws in "$root_ws" "$user_ws"; do
    mkdir -p "$ws/src" "$ws/tests"
    for i in $(seq 1 50); do echo "x = $i" > "$ws/src/m$i.py"; done
    git -C "$ws" init -q && git -C "$ws" -c user.name=b -c user.email=b@b add -A \
        && git -C "$ws" -c user.name=b -c user.email=b@b commit -qm init
done
owner=$(id -u ralph-ci 2>/dev/null || id -u nobody)
chown -R "$owner" "$user_ws"
same_view="bwrap --unshare-all --die-with-parent --new-session --cap-drop ALL --tmpfs / \
 --ro-bind /usr /usr --ro-bind /etc /etc --ro-bind-try /opt /opt \
 --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
 --ro-bind /sys/devices/system/cpu /sys/devices/system/cpu --ro-bind /sys/fs/cgroup /sys/fs/cgroup \
 --bind $root_ws $root_ws --tmpfs /tmp --tmpfs /home/agent --dev /dev --proc /proc \
 --ro-bind $root_ws/.git/hooks $root_ws/.git/hooks --ro-bind $root_ws/.git/config $root_ws/.git/config \
 --ro-bind /dev/null /etc/shadow --ro-bind /dev/null /etc/gshadow --tmpfs /etc/ssl/private --remount-ro / /bin/true"
$same_view
hyperfine -N --style basic --warmup 20 --runs "$runs" --export-json "$root_ws.json" \
    -n bwrap-same-view "$same_view" \
    -n baseline-root-ws "$BASELINE sandbox exec --workspace $root_ws -- /bin/true" \
    -n ralph-root-ws "$ralph sandbox exec --workspace $root_ws -- /bin/true" \
    -n baseline-user-ws "$BASELINE sandbox exec --workspace $user_ws -- /bin/true" \
    -n ralph-user-ws "$ralph sandbox exec --workspace $user_ws -- /bin/true" >&2
python3 - "$root_ws.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
v = r["bwrap-same-view"]["median"]
print("| command (workspace-write) | median | vs bwrap, same view | vs baseline |")
print("|---|---|---|---|")
for name, base in [("bwrap-same-view", None), ("baseline-root-ws", None), ("ralph-root-ws", "baseline-root-ws"),
                   ("baseline-user-ws", None), ("ralph-user-ws", "baseline-user-ws")]:
    m = r[name]["median"]
    vs = f"{m / r[base]['median']:.2f}× (+{(m - r[base]['median']) * 1000:.2f} ms)" if base else ""
    print(f"| {name} | {m * 1000:.2f} ms | {m / v:.2f}× | {vs} |")
PY
