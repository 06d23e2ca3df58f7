#!/usr/bin/env bash
# The dashboard's queue page at scale (issue 32): `ralph serve` with N queued jobs behind 4
# running ones, the pages a browser loads, their server time (the `Server-Timing` header: until
# the answer's head, i.e. the whole page for these unstreamed pages) and the wall time a client
# sees on loopback, p50 and p99 of REQS requests each:
#   - /ui/jobs (the first page), ?state=queued, ?label=k=v (a label 1 job in 1,000 carries),
#     ?submitted_by=NAME (a token that submitted 1 job in 1,000), a page deep in the queue
#     (?before=the id in the middle), a job's page, the health page;
#   - the baseline, same run, same server: GET /v1/jobs with the same filter (the API's JSON of
#     the same 50 jobs), and /healthz (the floor of a request).
# Usage: N=100000 bench/ui_queue.sh   (RALPH=path: that binary; DATABASE_URL=postgres://...)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
BATCH=${BATCH:-1000}
REQS=${REQS:-100}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet -p ralph; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/uiq-XXXXXX")
cleanup() {
    pkill -KILL -f "$work/config.toml" 2>/dev/null || true
    pkill -KILL -f "sleep 9292" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
python3 - "$ralph" "$work" "$N" "$BATCH" "$REQS" "${DATABASE_URL:-}" <<'PY'
import concurrent.futures, http.client, json, os, socket, subprocess, sys, time

ralph, work, N, BATCH, REQS, db = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]), sys.argv[6]
root, state = f"{work}/root", f"{work}/state"
os.makedirs(f"{root}/agents")
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
db_line = f'database_url = "{db}"\n' if db else ""
open(f"{work}/config.toml", "w").write(
    f'listen = "127.0.0.1:{port}"\nstate_dir = "{state}"\n{db_line}max_concurrent_jobs = 4\n'
    f'[limits]\nworkspace_roots = ["{root}"]\n')
open(f"{root}/agents/hang.sh", "w").write("#!/bin/sh\nexec sleep 9292\n")
os.chmod(f"{root}/agents/hang.sh", 0o755)
server = subprocess.Popen([ralph, "serve", "--config", f"{work}/config.toml"],
                          stdout=subprocess.DEVNULL, stderr=open(f"{work}/serve.log", "a"))
deadline = time.monotonic() + 60
while True:
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/readyz")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    if server.poll() is not None or time.monotonic() > deadline:
        sys.exit("ralph serve did not start:\n" + open(f"{work}/serve.log").read()[-2000:])
    time.sleep(0.01)
admin = open(f"{state}/token").read().strip()

def call(method, path, body=None, token=admin):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    h = {"Authorization": f"Bearer {token}"}
    if body is not None:
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    return r.status, r.getheader("server-timing"), data

# A second token submits 1 job in 1,000 (the submitted_by filter's needle).
st, _, data = call("POST", "/v1/tokens", json.dumps({"name": "needle", "scopes": ["submit", "read"]}))
assert st == 201, data
needle = json.loads(data)["token"]

def job(i):
    ws = f"{root}/ws{i % 64}"
    os.makedirs(ws, exist_ok=True)
    j = {"objective": f"job {i}", "workspace": ws, "agent_cmd": f"{root}/agents/hang.sh",
         "read": [f"{root}/agents"], "name": f"job-{i}", "labels": {"team": f"t{i % 7}"}}
    if i % 1000 == 500:
        j["labels"]["rare"] = "yes"
    return j

def submit(start):
    jobs = [job(i) for i in range(start, min(start + BATCH, N))]
    st, _, data = call("POST", "/v1/jobs", json.dumps({"job": jobs}))
    assert st == 201, data[:500]
    for i in range(start, min(start + BATCH, N)):
        if i % 1000 == 999:
            st, _, data = call("POST", "/v1/jobs", json.dumps({"job": [job(i)]}), token=needle)
            assert st == 201, data[:500]

t0 = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    list(ex.map(submit, range(0, N, BATCH)))
fill = time.monotonic() - t0
st, _, data = call("GET", f"/v1/jobs?state=queued&limit=1")
first = json.loads(data)["jobs"][0]["id"]
# The id in the middle of the queue, for a deep page.
st, _, data = call("GET", f"/v1/jobs?limit=1000")
ids = [j["id"] for j in json.loads(data)["jobs"]]
before = ids[-1]
for _ in range(N // 2000):
    st, _, data = call("GET", f"/v1/jobs?limit=1000&before={before}")
    page = json.loads(data)["jobs"]
    if not page:
        break
    before = page[-1]["id"]

def measure(path, token=admin):
    server_ms, wall_ms = [], []
    for _ in range(REQS):
        t = time.perf_counter()
        st, timing, data = call("GET", path, token=token)
        wall_ms.append((time.perf_counter() - t) * 1000)
        assert st == 200, (path, st, data[:300])
        if timing:
            server_ms.append(float(timing.split("dur=")[1]))
    def q(v, p):
        v = sorted(v)
        return v[min(len(v) - 1, int(len(v) * p))] if v else float("nan")
    return q(server_ms, 0.5), q(server_ms, 0.99), q(wall_ms, 0.5), q(wall_ms, 0.99), len(data)

cases = [
    ("queue, first page", "/ui/jobs", "/v1/jobs"),
    ("state=queued", "/ui/jobs?state=queued", "/v1/jobs?state=queued"),
    ("label=rare=yes (1 in 1,000)", "/ui/jobs?label=rare%3Dyes", "/v1/jobs?label=rare%3Dyes"),
    ("submitted_by (1 in 1,000)", "/ui/jobs?submitted_by=needle", "/v1/jobs?submitted_by=needle"),
    ("a page half-way down", f"/ui/jobs?before={before}", f"/v1/jobs?before={before}"),
    ("a job's page", f"/ui/jobs/{first}", f"/v1/jobs/{first}"),
    ("health", "/ui/health", "/healthz"),
]
print(f"{N} queued jobs (+4 running), filled in {fill:.1f} s; {REQS} requests each")
print("| page | server p50 | server p99 | wall p50 | wall p99 | bytes | baseline (API) wall p50 | wall p99 | ratio p50 |")
print("|---|---|---|---|---|---|---|---|---|")
for name, ui, api in cases:
    s50, s99, w50, w99, size = measure(ui)
    _, _, b50, b99, _ = measure(api)
    print(f"| {name} | {s50:.1f} ms | {s99:.1f} ms | {w50:.1f} ms | {w99:.1f} ms | {size} | {b50:.1f} ms | {b99:.1f} ms | {w50 / b50:.2f}× |")
rss = [l for l in open(f"/proc/{server.pid}/status") if l.startswith(("VmRSS", "VmHWM"))]
print("server:", " ".join(l.split(":")[0] + " " + " ".join(l.split()[1:]) for l in rss))
server.kill()
PY
