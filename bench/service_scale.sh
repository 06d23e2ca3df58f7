#!/usr/bin/env bash
# The service at scale (issue 30, item 3): `ralph serve` with N queued jobs behind 4 running ones.
#
# Measured, in this order, on one server (SQLite in the state dir; DATABASE_URL=postgres://...
# for PostgreSQL):
#   - submitting N jobs as batch files of BATCH jobs (POST /v1/jobs), 4 clients at once: jobs/s;
#   - the server's RSS with N queued (VmRSS, and VmHWM: the peak);
#   - GET /v1/jobs latency (p50, p99 of REQS requests each): unfiltered, ?state=queued,
#     ?label=k=v (a label 1 job in 1,000 carries), ?state=queued&label=...;
#   - one-job submissions at RATE req/s for SECONDS s while the 4 jobs run: p50, p99;
#   - a restart after `kill -9`: until /readyz answers 200;
#   - the state dir's bytes per job;
#   - on PostgreSQL, the floor under a submission: pgbench committing one INSERT of a job-sized
#     row per transaction at RATE/s for SECONDS s on 4 connections (the pool's default size),
#     in the same database, before the server starts (p50, p99 from pgbench's per-transaction log).
# The baseline each latency is read against is the same request on an empty server, measured in
# this run (the ratio column).
#
# Usage: N=1000000 bench/service_scale.sh   (N defaults to 100000; RALPH=path: that binary)
# WORKSPACES=K spreads the jobs over K workspaces (default 100); WORKSPACES=$N gives each job its
# own, as a CI pipeline's checkouts or provisioned jobs have: the store then knows N writable
# trees.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
BATCH=${BATCH:-1000}
REQS=${REQS:-200}
RATE=${RATE:-500}
SECONDS_AT_RATE=${SECONDS_AT_RATE:-10}
WORKSPACES=${WORKSPACES:-100}
# RALPH=path measures that binary instead (e.g. a copy of the one before a change).
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet -p ralph; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/scale-XXXXXX")
cleanup() {
    pkill -KILL -f "$work/config.toml" 2>/dev/null || true
    pkill -KILL -f "sleep 9191" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
python3 - "$ralph" "$work" "$N" "$BATCH" "$REQS" "$RATE" "$SECONDS_AT_RATE" "$WORKSPACES" "${DATABASE_URL:-}" <<'PY'
import concurrent.futures, http.client, json, os, signal, socket, subprocess, sys, threading, time

ralph, work, N, BATCH, REQS, RATE, SECS, WORKSPACES, db = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:9]), sys.argv[9]
root, state = f"{work}/root", f"{work}/state"
os.makedirs(f"{root}/agents")
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
db_line = f'database_url = "{db}"\n' if db else ""
open(f"{work}/config.toml", "w").write(
    f'listen = "127.0.0.1:{port}"\nstate_dir = "{state}"\n{db_line}max_concurrent_jobs = 4\n'
    f'[limits]\nworkspace_roots = ["{root}"]\nmax_rounds = 256\n')
open(f"{root}/agents/hang.sh", "w").write("#!/bin/sh\nexec sleep 9191\n")
os.chmod(f"{root}/agents/hang.sh", 0o755)

server = None
def start():
    global server
    server = subprocess.Popen([ralph, "serve", "--config", f"{work}/config.toml"],
                              stdout=subprocess.DEVNULL, stderr=open(f"{work}/serve.log", "a"))
    t0 = time.monotonic()
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return time.monotonic() - t0
        except OSError:
            pass
        if server.poll() is not None:
            sys.exit("ralph serve exited:\n" + open(f"{work}/serve.log").read()[-2000:])
        time.sleep(0.005)

def floor():
    """pgbench: one INSERT + COMMIT per transaction at RATE/s, 4 connections; (p50, p99, tps)."""
    def sql(q): subprocess.run(["psql", db, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", q], check=True, capture_output=True)
    sql("CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, at text, data text)")
    open(f"{work}/floor.sql", "w").write("INSERT INTO bench_floor (at, data) VALUES (now()::text, repeat('x', 600));\n")
    subprocess.run(["pgbench", "-n", "-R", str(RATE), "-T", str(SECS), "-c", "4", "-j", "2", "-l",
                    "--log-prefix", f"{work}/floor", "-f", f"{work}/floor.sql", db],
                   check=True, capture_output=True, cwd=work)
    sql("DROP TABLE bench_floor")
    us = [int(l.split()[2]) for f in os.listdir(work) if f.startswith("floor.") and f != "floor.sql"
          for l in open(f"{work}/{f}")]
    us.sort()
    return us[len(us) // 2] / 1e6, us[min(len(us) - 1, len(us) * 99 // 100)] / 1e6, len(us) / SECS

floor_rate = floor() if db else None
start()
token = open(f"{state}/token").read().strip()
H = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
local = threading.local()
def call(method, path, body=None, fail=True):
    # A kept-alive connection idle past the server's header_read_timeout is answered 408 and
    # closed: such a connection is replaced (and the request sent again) before timing counts.
    if time.monotonic() - getattr(local, "used", 0) > 1:
        local.c = None
    c = getattr(local, "c", None)
    if c is None:
        c = local.c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    t0 = time.perf_counter()
    try:
        c.request(method, path, body=body, headers=H)
        r = c.getresponse(); data = r.read()
    except OSError:
        local.c = None
        raise
    dt = time.perf_counter() - t0
    local.used = time.monotonic()
    if r.status >= 300:
        if fail:
            sys.exit(f"{method} {path}: {r.status} {data[:300]!r}")
        return None, data
    return dt, data

def job(i, agent="/bin/true"):
    ws = f"{root}/ws{i % WORKSPACES}"
    os.makedirs(ws, exist_ok=True)
    return {"objective": "bench", "workspace": ws, "agent_cmd": agent, "kind": "task",
            "labels": {"shard": str(i % 1000), "team": "infra"}}

def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(len(xs) * p / 100))]

queries = {"unfiltered": "/v1/jobs?limit=50",
           "state=queued": "/v1/jobs?state=queued&limit=50",
           "label (1 in 1,000)": "/v1/jobs?label=shard%3D7&limit=50",
           "state+label": "/v1/jobs?state=queued&label=shard%3D7&limit=50"}
def latencies():
    out = {}
    for name, q in queries.items():
        xs = [call("GET", q)[0] for _ in range(REQS)]
        out[name] = (pct(xs, 50), pct(xs, 99))
    return out

def at_rate():
    """RATE one-job POSTs a second for SECS s, 32 clients; a request not yet sent when SECS s
    (and 5 more) have passed is dropped, so a server that cannot keep up ends the phase too:
    the achieved rate says how far it fell behind, its latencies are those of what it served."""
    xs, errors, lock = [], [0], threading.Lock()
    body = json.dumps({"job": [job(10**9)]})
    t0 = time.monotonic()
    def one():
        if time.monotonic() > t0 + SECS + 5:
            return
        dt, _ = call("POST", "/v1/jobs", body, fail=False)
        with lock:
            if dt is None: errors[0] += 1
            else: xs.append(dt)
    with concurrent.futures.ThreadPoolExecutor(32) as ex:
        futs = []
        for k in range(RATE * SECS):
            time.sleep(max(0, t0 + k / RATE - time.monotonic()))
            futs.append(ex.submit(one))
        for f in futs: f.result()
        achieved = len(xs) / (time.monotonic() - t0)
    return pct(xs, 50), pct(xs, 99), achieved, errors[0]

# The 4 running jobs, then the baseline on an (almost) empty server.
running = []
for i in range(4):
    os.makedirs(f"{root}/run{i}")
    running.append(job(i, f"{root}/agents/hang.sh") | {"read": [f"{root}/agents"], "workspace": f"{root}/run{i}"})
call("POST", "/v1/jobs", json.dumps({"job": running}))
base = latencies()
base_rate = at_rate()

# N queued jobs, as batch files, 4 clients at once.
bodies = (json.dumps({"job": [job(i) for i in range(k, min(N, k + BATCH))]}) for k in range(0, N, BATCH))
t0 = time.monotonic()
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    list(ex.map(lambda b: call("POST", "/v1/jobs", b), bodies))
submit_s = time.monotonic() - t0
status = dict(l.split(":", 1) for l in open(f"/proc/{server.pid}/status") if ":" in l)
rss, hwm = int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024
big = latencies()
big_rate = at_rate()
server.send_signal(signal.SIGKILL); server.wait()
restart_s = start()
state_bytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(state) for f in fs)
server.send_signal(signal.SIGKILL); server.wait()

store = "PostgreSQL" if db else "SQLite"
print(f"### {N:,} queued jobs behind 4 running ({store}), {min(N, WORKSPACES):,} workspaces\n")
print(f"- submitted as {N // BATCH} batch files of {BATCH}: {submit_s:.1f} s ({N / submit_s:,.0f} jobs/s)")
print(f"- server RSS with them queued: {rss:.0f} MiB (peak {hwm:.0f} MiB)")
print(f"- restart after `kill -9` until /readyz 200: {restart_s * 1e3:.0f} ms")
print(f"- state: in the database\n" if db else
      f"- state dir: {state_bytes / 2**20:.0f} MiB, {state_bytes / (N + 4):,.0f} bytes per job\n")
print("| request | empty: p50 / p99 | with N queued: p50 / p99 | p99 ratio |")
print("|---|---|---|---|")
for name in queries:
    (a50, a99), (b50, b99) = base[name], big[name]
    print(f"| GET {name} | {a50*1e3:.1f} / {a99*1e3:.1f} ms | {b50*1e3:.1f} / {b99*1e3:.1f} ms | {b99/a99:.1f}x |")
if floor_rate:
    print(f"| floor: pgbench, one INSERT + COMMIT at {RATE}/s, 4 connections (achieved {floor_rate[2]:.0f}) | {floor_rate[0]*1e3:.1f} / {floor_rate[1]*1e3:.1f} ms | | |")
print(f"| POST one job at {RATE}/s (achieved {base_rate[2]:.0f} / {big_rate[2]:.0f}; errors {base_rate[3]} / {big_rate[3]}) | {base_rate[0]*1e3:.1f} / {base_rate[1]*1e3:.1f} ms | {big_rate[0]*1e3:.1f} / {big_rate[1]*1e3:.1f} ms | {big_rate[1]/base_rate[1]:.1f}x |")
PY
