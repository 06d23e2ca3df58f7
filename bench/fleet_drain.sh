#!/usr/bin/env bash
# A fleet draining a queue (issue 30, item 3): K `ralph serve` hosts on one PostgreSQL database
# run JOBS short jobs; is a host of three as fast as a host alone (no lock convoy)?
#
# Each run gets a fresh database (created and dropped here, as the role of ADMIN_URL) and K
# hosts, each with its own state dir and port and `max_concurrent_jobs` = C. One batch of JOBS
# task jobs (`/bin/true`, full-access, a workspace each) is posted to the first host; the hosts
# claim from the shared queue. Measured per run, from the journal in the database:
#   - the drain: first job_submitted to last job_finished; jobs/s in total, per host, and in the
#     steady middle (the 10th to the 90th percentile of the finishes);
#   - which host ran each job (job_started's runner pid);
#   - pg_stat_activity sampled every SAMPLE_MS during the drain: of the fleet's connections, how
#     many were in a statement or a transaction (the time spent in the database), and on what
#     they waited (Lock = another session's row/advisory lock: the convoy this looks for;
#     IO/WALSync, LWLock/WAL*: the commit's flush);
#   - pg_stat_database: commits and rollbacks (a lost claim race rolls back).
# Configurations, interleaved, REPS each: K=1 with C; K=3 with C (the same hosts, three of them);
# K=3 with C/3 (the same total concurrency: on one machine the three hosts share its CPUs, so
# this one isolates the store's contention from the CPU sharing).
#
# STATEMENT_LOG=1 (root, local server): also logs every statement of the bench database
# (log_min_duration_statement = 0, log_lock_waits with deadlock_timeout = 5ms) and summarises the
# claims from the server's log: calls, lost races, time per claim, lock waits.
#
# Usage: bench/fleet_drain.sh   (JOBS=1000 C=6 REPS=3; ADMIN_URL=postgres://role:pw@host/db with
# CREATEDB; RALPH=path: that binary; CONFIGS="1:6 3:6 3:2" to choose)
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-1000}
C=${C:-6}
REPS=${REPS:-3}
SAMPLE_MS=${SAMPLE_MS:-20}
ADMIN_URL=${ADMIN_URL:-postgres://ralph_test:ralph_test@localhost:5432/ralph_test}
CONFIGS=${CONFIGS:-"1:$C 3:$C 3:$((C / 3 > 0 ? C / 3 : 1))"}
PG_LOG=${PG_LOG:-/var/log/postgresql/postgresql-15-main.log}
if [ -z "${RALPH:-}" ]; then cargo build --release --quiet -p ralph; fi
ralph=${RALPH:-$PWD/target/x86_64-unknown-linux-gnu/release/ralph}
mkdir -p "$PWD/target/bench"
work=$(mktemp -d "$PWD/target/bench/fleet-XXXXXX")
cleanup() {
    pkill -KILL -f "$work/host" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
python3 - "$ralph" "$work" "$JOBS" "$REPS" "$SAMPLE_MS" "$ADMIN_URL" "$CONFIGS" \
    "${STATEMENT_LOG:-}" "$PG_LOG" <<'PY'
import collections, http.client, json, os, re, signal, socket, statistics, subprocess, sys, threading, time
from urllib.parse import urlsplit, urlunsplit

ralph, work, JOBS, REPS, SAMPLE_MS, admin, configs, stmt_log, pg_log = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
    [tuple(map(int, c.split(":"))) for c in sys.argv[7].split()], sys.argv[8] == "1", sys.argv[9])
root = f"{work}/root"
os.makedirs(root)

def url_of(db):
    u = urlsplit(admin); return urlunsplit((u.scheme, u.netloc, "/" + db, u.query, ""))

def psql(url, sql):
    return subprocess.run(["psql", url, "-XAtq", "-F", "|", "-v", "ON_ERROR_STOP=1", "-c", sql],
                          check=True, capture_output=True, text=True).stdout

def superuser(sql):
    subprocess.run(["su", "postgres", "-c", f"psql -XAtq -v ON_ERROR_STOP=1 -c \"{sql}\""],
                   check=True, capture_output=True, text=True)

class Sampler(threading.Thread):
    """pg_stat_activity of the bench database every SAMPLE_MS, through one psql session."""
    def __init__(self, url):
        super().__init__(daemon=True)
        self.p = subprocess.Popen(["psql", url, "-XAtq", "-F", "|"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, bufsize=1)
        self.stop, self.samples, self.states = False, 0, collections.Counter()
    def run(self):
        q = ("SELECT state, coalesce(wait_event_type, '-') || '/' || coalesce(wait_event, '-') "
             "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
             "AND application_name <> 'psql';\nSELECT 'END';\n")
        while not self.stop:
            t0 = time.monotonic()
            self.p.stdin.write(q)
            rows = []
            while (line := self.p.stdout.readline().strip()) != "END":
                rows.append(line)
            self.samples += 1
            for r in rows:
                state, wait = r.split("|", 1)
                # `idle`: the pool's connection waits for ralph; anything else is time in the DB.
                self.states["idle" if state == "idle" else f"{state}: {wait}"] += 1
            time.sleep(max(0, SAMPLE_MS / 1e3 - (time.monotonic() - t0)))
        self.p.stdin.close(); self.p.wait()

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start_host(n, url, c):
    d = f"{work}/host{n}"
    os.makedirs(d)
    port = free_port()
    open(f"{d}/config.toml", "w").write(
        f'listen = "127.0.0.1:{port}"\nstate_dir = "{d}/state"\ndatabase_url = "{url}"\n'
        f'max_concurrent_jobs = {c}\n[limits]\nworkspace_roots = ["{root}"]\nmax_mode = "full-access"\n')
    p = subprocess.Popen([ralph, "serve", "--config", f"{d}/config.toml"],
                         stdout=subprocess.DEVNULL, stderr=open(f"{d}/serve.log", "w"))
    return {"p": p, "port": port, "dir": d}

def ready(h):
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        try:
            c = http.client.HTTPConnection("127.0.0.1", h["port"], timeout=5)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        if h["p"].poll() is not None:
            sys.exit("ralph serve exited:\n" + open(f"{h['dir']}/serve.log").read()[-2000:])
        time.sleep(0.02)
    sys.exit("ralph serve not ready in 60 s")

def stop(h):
    h["p"].send_signal(signal.SIGTERM)
    try: h["p"].wait(30)
    except subprocess.TimeoutExpired: h["p"].kill(); h["p"].wait()

def stats(url):
    return tuple(map(int, psql(url, "SELECT xact_commit, xact_rollback FROM pg_stat_database "
                                     "WHERE datname = current_database()").split("|")))

def pct(xs, p):
    xs = sorted(xs); return xs[min(len(xs) - 1, int(len(xs) * p / 100))]

def ts(s):
    # RFC 3339 with a Z or offset, as the journal writes it: seconds since the epoch.
    from datetime import datetime
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()

def claims_from_log(db, start):
    """The bench database's statements in the server's log since byte `start`."""
    out = {"claim_ms": [], "claims": 0, "lock_waits": 0, "statements": 0, "by_kind": collections.Counter()}
    with open(pg_log, errors="replace") as f:
        f.seek(start)
        text = f.read()
    pat = re.compile(r"@" + re.escape(db) + r" LOG:  duration: ([0-9.]+) ms  (?:execute [^:]*|statement): (.*)")
    for line in text.splitlines():
        if f"@{db} " not in line:
            continue
        if "still waiting for" in line or "acquired ShareLock" in line or "acquired ExclusiveLock" in line:
            if "still waiting for" in line: out["lock_waits"] += 1
            continue
        m = pat.search(line)
        if not m:
            continue
        ms, sql = float(m.group(1)), m.group(2).strip()
        out["statements"] += 1
        out["by_kind"][" ".join(sql.split()[:4])[:60]] += 1
        if sql.startswith("UPDATE jobs SET state = 'running'"):
            out["claims"] += 1; out["claim_ms"].append(ms)
    return out

def job(i):
    ws = f"{root}/ws{i}"
    os.makedirs(ws, exist_ok=True)
    return {"objective": "bench", "workspace": ws, "agent_cmd": "/bin/true", "kind": "task",
            "mode": "full-access"}

def one(k, c, rep):
    db = f"fleet_{os.getpid()}_{k}_{c}_{rep}"
    psql(admin, f"CREATE DATABASE {db}")
    url = url_of(db)
    log_at = 0
    if stmt_log:
        for s in ["log_min_duration_statement = 0", "log_lock_waits = on", "deadlock_timeout = '5ms'"]:
            superuser(f"ALTER DATABASE {db} SET {s}")
        log_at = os.path.getsize(pg_log)
    hosts = []
    try:
        hosts = [start_host(n, url, c) for n in range(k)]
        for h in hosts: ready(h)
        token = open(f"{hosts[0]['dir']}/state/token").read().strip()
        before = stats(url)
        sampler = Sampler(url); sampler.start()
        body = json.dumps({"job": [job(i) for i in range(JOBS)]})
        conn = http.client.HTTPConnection("127.0.0.1", hosts[0]["port"], timeout=300)
        conn.request("POST", "/v1/jobs", body=body,
                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        r = conn.getresponse(); data = r.read()
        if r.status >= 300:
            sys.exit(f"POST /v1/jobs: {r.status} {data[:300]!r}")
        t_deadline = time.monotonic() + 600
        while int(psql(url, "SELECT count(*) FROM jobs WHERE state <> 'finished'")) > 0:
            if time.monotonic() > t_deadline: sys.exit("the fleet did not drain in 600 s")
            time.sleep(0.1)
        sampler.stop = True; sampler.join()
        after = stats(url)
        rows = psql(url, """
            SELECT s.at, f.at, (st.data::jsonb -> 'runner' ->> 'pid'), j.outcome
            FROM jobs j JOIN events s ON s.job_id = j.id AND s.type = 'job_submitted'
                        JOIN events st ON st.job_id = j.id AND st.type = 'job_started'
                        JOIN events f ON f.job_id = j.id AND f.type = 'job_finished'""").split("\n")
        rows = [r.split("|") for r in rows if r]
        if len(rows) != JOBS:
            sys.exit(f"{len(rows)} finished jobs in the journal, not {JOBS}")
        bad = collections.Counter(r[3] for r in rows if r[3] != "complete")
        if bad:
            sys.exit(f"jobs not successful: {dict(bad)}\n" + open(f"{hosts[0]['dir']}/serve.log").read()[-2000:])
        submitted = min(ts(r[0]) for r in rows)
        finishes = sorted(ts(r[1]) for r in rows)
        drain = finishes[-1] - submitted
        lo, hi = finishes[JOBS // 10], finishes[JOBS * 9 // 10]
        per_host = collections.Counter(r[2] for r in rows)
        in_db = sum(v for s, v in sampler.states.items() if s != "idle")
        res = {"k": k, "c": c, "drain": drain, "rate": JOBS / drain,
               "steady": (JOBS * 8 // 10) / (hi - lo),
               "per_host": sorted(per_host.values(), reverse=True),
               "commits": after[0] - before[0], "rollbacks": after[1] - before[1],
               "samples": sampler.samples, "states": sampler.states,
               "in_db": in_db / max(1, sampler.samples), "conns": sum(sampler.states.values()) / max(1, sampler.samples)}
        if stmt_log:
            res["log"] = claims_from_log(db, log_at)
        return res
    finally:
        for h in hosts: stop(h)
        subprocess.run(["rm", "-rf"] + [h["dir"] for h in hosts])
        psql(admin, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")

results = collections.defaultdict(list)
for rep in range(REPS):
    for k, c in configs:
        r = one(k, c, rep)
        results[(k, c)].append(r)
        print(f"# rep {rep}: K={k} C={c}: {r['drain']:.1f} s, {r['rate']:.1f} jobs/s "
              f"(steady {r['steady']:.1f}), per host {r['per_host']}, in the DB {r['in_db']:.2f} "
              f"of {r['conns']:.1f} connections, rollbacks {r['rollbacks']}", file=sys.stderr, flush=True)

med = statistics.median
single = [v for (k, c), v in results.items() if k == 1]
base = med(r["rate"] for r in single[0]) if single else None
print(f"### {JOBS:,} short jobs drained by a fleet on one PostgreSQL database ({REPS} runs each, medians)\n")
print("| hosts × max_concurrent_jobs | drain | jobs/s (total) | jobs/s per host | per host vs 1 host | steady jobs/s (10–90 %) | jobs per host (run 1) | time in the DB (busy connections of all) | rollbacks |")
print("|---|---|---|---|---|---|---|---|---|")
for (k, c), rs in results.items():
    rate = med(r["rate"] for r in rs)
    ratio = f"{rate / k / base:.2f}x" if base else "-"
    print(f"| {k} × {c} | {med(r['drain'] for r in rs):.1f} s | {rate:.1f} | {rate / k:.1f} | {ratio} | "
          f"{med(r['steady'] for r in rs):.1f} | {' / '.join(map(str, rs[0]['per_host']))} | "
          f"{med(r['in_db'] for r in rs):.2f} of {med(r['conns'] for r in rs):.1f} | {med(r['rollbacks'] for r in rs):.0f} |")
print("\nWhat the fleet's connections were doing (pg_stat_activity, share of samples × connections, all runs):\n")
print("| hosts × C | " + " | ".join(["idle (waiting for ralph)", "in a statement: no wait", "waiting on a lock (Lock/*)",
                                     "waiting on the WAL flush (IO/WALSync, LWLock/WAL*)", "idle in transaction (a round trip)", "other"]) + " |")
print("|---|---|---|---|---|---|---|")
for (k, c), rs in results.items():
    tot = collections.Counter()
    for r in rs: tot.update(r["states"])
    n = sum(tot.values()) or 1
    cols = collections.Counter()
    for s, v in tot.items():
        if s == "idle": cols[0] += v
        elif s.startswith("active") and s.endswith("-/-"): cols[1] += v
        elif ": Lock/" in s: cols[2] += v
        elif "WALSync" in s or "WALWrite" in s or "LWLock/WAL" in s: cols[3] += v
        elif s.startswith("idle in transaction"): cols[4] += v
        else: cols[5] += v
    print(f"| {k} × {c} | " + " | ".join(f"{cols[i] / n * 100:.1f} %" for i in range(6)) + " |")
print("\nEvery wait seen (all runs): " + ", ".join(
    f"{s} {v}" for s, v in sum((collections.Counter(r['states']) for rs in results.values() for r in rs),
                               collections.Counter()).most_common() if s != "idle"))
if stmt_log:
    print("\nThe server's statement log (log_min_duration_statement = 0; lock waits over 5 ms logged):\n")
    print("| hosts × C | statements per job | claims (lost) | claim UPDATE p50 / p99 / max | lock waits > 5 ms |")
    print("|---|---|---|---|---|")
    for (k, c), rs in results.items():
        lg = rs[0]["log"]
        cm = lg["claim_ms"] or [0]
        print(f"| {k} × {c} | {lg['statements'] / JOBS:.1f} | {lg['claims']} ({lg['claims'] - JOBS}) | "
              f"{pct(cm, 50):.2f} / {pct(cm, 99):.2f} / {max(cm):.2f} ms | {lg['lock_waits']} |")
    lg = next(iter(results.values()))[0]["log"]
    print("\nStatements of the first configuration, by their first words: " +
          ", ".join(f"`{s}` {v}" for s, v in lg["by_kind"].most_common(12)))
PY
