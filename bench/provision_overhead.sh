#!/usr/bin/env bash
# What provisioning a `repo` job's workspace costs (runner/src/provision: a mirror per
# repository fetched for each job's ref; then, with the overlay layout, a base tree per commit
# made once and per job an overlay mount of it plus the runner's own result repository; with
# the clone layout, per job `git clone --shared --no-checkout` of the mirror and a detached
# checkout) against a plain `git clone` per job, for JOBS jobs (default 50) on one repository of FILES files (default 10,000, in
# 100 directories, ~10 lines each, 20 commits of history) served by `git daemon` on loopback.
#
# ralph's side is measured through a real `ralph serve`: JOBS `repo` jobs whose agent reports
# complete at once; the time is each job's `workspace_provisioned.duration_ms` (from the
# journal: fetch/resolve in the mirror + clone + checkout + result repository), the disk is
# `du` of `<state>/workspaces/<id>` and `<id>.git` (the mirror counted once, apart). The plain
# side: JOBS sequential `git clone git://…` into fresh directories, timed and measured with du.
#
# Usage: bench/provision_overhead.sh   (needs git, python3, curl; JOBS=, FILES=, RALPH_BIN=,
#        LAYOUT=auto|overlay|clone: `[provision] workspace_layout`; overlay needs root)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${JOBS:-50}
files=${FILES:-10000}
# RALPH_BIN: a ralph binary to use instead of a release build (the time measured is git's).
if [ -z "${RALPH_BIN:-}" ]; then cargo build --release --quiet; fi
ralph=${RALPH_BIN:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
root=$(mktemp -d "${TMPDIR:-/var/tmp}/ralph-bench-prov-XXXXXX")
cleanup() {
    [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null || true
    [ -n "${daemon_pid:-}" ] && kill "$daemon_pid" 2>/dev/null || true
    rm -rf "$root"
}
trap cleanup EXIT
export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=b GIT_AUTHOR_EMAIL=b@b GIT_COMMITTER_NAME=b GIT_COMMITTER_EMAIL=b@b
work=$root/work
mkdir -p "$work" "$root/srv" "$root/plain" "$root/agents"
git -C "$work" init -q -b main
python3 - "$work" "$files" <<'PY'
import os, sys
work, files = sys.argv[1], int(sys.argv[2])
for i in range(files):
    d = os.path.join(work, f"d{i % 100:02}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i}.txt"), "w") as f:
        f.write("".join(f"line {j} of file {i}\n" for j in range(10)))
PY
git -C "$work" add -A && git -C "$work" commit -qm c0
for c in $(seq 1 19); do
    for i in $(seq 0 49); do echo "change $c" >> "$work/d$(printf %02d $i)/f$i.txt"; done
    git -C "$work" commit -qam "c$c"
done
git clone -q --bare "$work" "$root/srv/proj.git"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
git daemon --export-all --base-path="$root/srv" --listen=127.0.0.1 --port="$port" --reuseaddr &
daemon_pid=$!
url="git://127.0.0.1:$port/proj.git"
for _ in $(seq 100); do git ls-remote "$url" >/dev/null 2>&1 && break; sleep 0.1; done

# Plain: a git clone per job.
start=$(date +%s.%N)
for i in $(seq 1 "$jobs"); do git clone -q "$url" "$root/plain/$i"; done
end=$(date +%s.%N)
plain_ms=$(python3 -c "print(round(($end - $start) * 1000 / $jobs, 1))")
plain_kb=$(du -sk "$root/plain/2" | cut -f1)

# ralph: JOBS repo jobs through a real server.
printf '#!/bin/sh\necho %s > "$RALPH_REPORT_FILE"\n' \
    "'{\"status\":\"complete\",\"summary\":\"ok\",\"evidence\":[\"x\"],\"nextSteps\":[],\"blocker\":\"\"}'" \
    > "$root/agents/done.sh"
chmod +x "$root/agents/done.sh"
state=$root/state
sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$root/config.toml" <<TOML
listen = "127.0.0.1:$sport"
state_dir = "$state"
max_concurrent_jobs = 1
[limits]
workspace_roots = ["$root/agents"]
allowed_repos = ["git://127.0.0.1:$port/"]
[provision]
workspace_layout = "${LAYOUT:-auto}"
TOML
"$ralph" serve --config "$root/config.toml" 2>"$root/serve.log" &
serve_pid=$!
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$sport/healthz" >/dev/null && break; sleep 0.1; done
python3 - "$jobs" "$url" "$root/agents" > "$root/jobs.json" <<'PY'
import json, sys
n, url, agents = int(sys.argv[1]), sys.argv[2], sys.argv[3]
print(json.dumps({"job": [{"objective": f"job {i}", "repo": url, "ref": "main",
    "agent_cmd": f"{agents}/done.sh", "read": [agents]} for i in range(n)]}))
PY
token=$(cat "$state/token")
curl -sf -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    --data-binary @"$root/jobs.json" "http://127.0.0.1:$sport/v1/jobs" > "$root/ids.json"
python3 - "$root/ids.json" "$sport" "$token" "$state" "$plain_ms" "$plain_kb" <<'PY'
import json, os, subprocess, sys, time, urllib.request
ids = [j["id"] for j in json.load(open(sys.argv[1]))["jobs"]]
port, token, state = sys.argv[2], sys.argv[3], sys.argv[4]
plain_ms, plain_kb = float(sys.argv[5]), int(sys.argv[6])
def get(path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {token}"})
    return urllib.request.urlopen(req).read().decode()
deadline = time.time() + 1800
for i in ids:
    while json.loads(get(f"/v1/jobs/{i}"))["state"] != "finished":
        assert time.time() < deadline, "jobs did not finish"
        time.sleep(0.2)
ms = []
for i in ids:
    evs = [json.loads(l) for l in get(f"/v1/jobs/{i}/events").splitlines() if l]
    p = [e for e in evs if e["type"] == "workspace_provisioned"]
    assert p, f"job {i} was not provisioned: {evs[-1]}"
    ms.append(p[0]["duration_ms"])
def du(p):
    return int(subprocess.check_output(["du", "-sk", p]).split()[0])
ws = os.path.join(state, "workspaces")
def du_opt(p):
    return du(p) if os.path.exists(p) else 0
# Per job: the workspace (a clone's checkout; an empty mount point for an overlay), its upper
# layer and the runner's result repository. The mirror and the base trees are shared: apart.
per_job = [du(os.path.join(ws, i)) + du(os.path.join(ws, i + ".git")) + du_opt(os.path.join(ws, i + ".layer")) for i in ids[1:]]
mdir = os.path.join(state, "mirrors")
mirror = sum(du(os.path.join(mdir, m)) for m in os.listdir(mdir) if m.endswith(".git"))
trees = sum(du(os.path.join(mdir, m)) for m in os.listdir(mdir) if m.endswith(".trees"))
layouts = set()
for i in ids:
    evs = [json.loads(l) for l in get(f"/v1/jobs/{i}/events").splitlines() if l]
    layouts |= {e.get("layout", "?") for e in evs if e["type"] == "workspace_provisioned"}
later = sorted(ms[1:])
med = later[len(later) // 2]
kb = sorted(per_job)[len(per_job) // 2]
print(f"jobs: {len(ids)}, files: {os.environ.get('FILES', '10000')}")
print(f"plain git clone:      {plain_ms:8.1f} ms/job   {plain_kb:8d} KiB/job")
print(f"layout: {', '.join(sorted(layouts))}")
print(f"ralph, first job:     {ms[0]:8d} ms       (mirror {mirror} KiB, base trees {trees} KiB, once)")
print(f"ralph, later (median):{med:8d} ms/job   {kb:8d} KiB/job")
print(f"ratio time: {med / plain_ms:.2f}x   ratio disk: {kb / plain_kb:.2f}x")
PY
