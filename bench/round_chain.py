#!/usr/bin/env python3
"""Where a round's time goes between two agents: the chain of a `ralph run` round, read from
kernel tracepoints (no instrumentation in ralph), per build, interleaved.

For each round after the first, from the previous round's agent leaving to this round's agent
starting (`gap`), in order along the chain:
  a      the agent exits -> its helper (the round's supervisor) exits: the init's report, the
         checks after the run, the result written
  b      the helper exits -> the runner sends the next round's order to its standby: the result
         read, the records, the next round's directories, prompt and plan
  lag    the order sent -> the standby receives it (0 when it was already waiting in recvmsg)
  c      the standby receives the order -> the agent's execve: the supervisor's set-up, the
         init's view, the go-ahead (which also waits for `round_started`'s flush), the command's
         confinement
  flush  the runner's fdatasync in that stretch (round_started), and how long after the order
         was received it ended (`flush_end`: > c means the flush, not the set-up, held the go)
Medians over every round of every job (`gap` over all of them; the rest over the rounds whose
helper was a standby given an order: `direct` counts the others, whose helper was started for the
round itself); the agent is `/bin/sh -c '. agent.sh'` (its exec and exit
are the round's ends). Needs root and perf.

Usage: bench/round_chain.py JOBS ROUNDS STATE_ROOT WORKSPACE AGENT_DIR name=binary...
  SHUFFLE=1  runs the builds of each job round in a random (seeded) order
"""
import os
import random
import statistics
import subprocess
import sys
import tempfile

EVENTS = ",".join([
    "sched:sched_process_exec",
    "sched:sched_process_fork",
    "sched:sched_process_exit",
    "syscalls:sys_enter_sendmsg",
    "syscalls:sys_exit_recvmsg",
    "syscalls:sys_enter_fdatasync",
    "syscalls:sys_exit_fdatasync",
])


def record(binary, state, ws, agent_dir, rounds):
    with tempfile.NamedTemporaryFile(suffix=".data") as data:
        cmd = [
            "perf", "record", "-q", "-a", "-o", data.name, "-e", EVENTS, "--",
            binary, "run", "--objective", "bench", "--workspace", ws, "--state-dir", state,
            "--read", agent_dir, "--mode", "workspace-write", "--max-rounds", str(rounds),
            "--toolchain", "none", "--agent-cmd", f". {agent_dir}/agent.sh",
        ]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        out = subprocess.run(
            ["perf", "script", "-i", data.name, "-F", "comm,pid,tid,time,event,trace"],
            capture_output=True, text=True, check=True,
        ).stdout
    events = []
    for line in out.splitlines():
        # "comm pid/tid time: event: trace" -- comm may hold spaces: split from the right side
        # of the pid/tid field.
        parts = line.split()
        idx = next((i for i, p in enumerate(parts) if "/" in p and p.replace("/", "").isdigit()), None)
        if idx is None or idx + 2 >= len(parts):
            continue
        pid, tid = (int(x) for x in parts[idx].split("/"))
        t = float(parts[idx + 1].rstrip(":"))
        ev = parts[idx + 2].rstrip(":")
        events.append((t, pid, tid, ev, " ".join(parts[idx + 3:])))
    events.sort()
    return events, binary


def chain(events, binary):
    runner = next((p for t, p, _, e, x in events
                   if e == "sched:sched_process_exec" and f"filename={binary} " in x + " "), None)
    helpers = {p for t, p, _, e, x in events
               if e == "sched:sched_process_exec" and "filename=/proc/self/exe" in x}
    # Standbys forked by the zygote (no exec of their own): children of an exec'd helper that
    # receive an order (a round's init, also a child of a helper, never does).
    forked = {int(x.split("child_pid=")[1].split()[0]): p for t, p, _, e, x in events
              if e == "sched:sched_process_fork" and p in helpers}
    receivers = {p for t, p, tid, e, x in events
                 if e == "syscalls:sys_exit_recvmsg" and p == tid}
    standbys = {c for c in forked if c in receivers}
    # The zygote itself receives requests, not orders: not a helper of any round.
    helpers = (helpers | standbys) - {forked[c] for c in standbys}
    agents = {}
    rows = []
    flush_start = None
    flushes = []
    for t, pid, tid, e, x in events:
        if e == "sched:sched_process_exec" and "filename=/bin/sh " in x + " ":
            agents[pid] = t
        if e == "syscalls:sys_enter_fdatasync" and pid == runner:
            flush_start = t
        if e == "syscalls:sys_exit_fdatasync" and pid == runner and flush_start is not None:
            flushes.append((flush_start, t))
            flush_start = None
    # Walk the rounds: each agent exec after the first closes one chain.
    marks = []
    for t, pid, tid, e, x in events:
        if e == "sched:sched_process_exit" and pid in agents and "group_dead=true" in x \
                and pid == tid:
            marks.append(("agent_exit", t))
        elif e == "sched:sched_process_exit" and pid in helpers and "group_dead=true" in x \
                and pid == tid and x.startswith("comm=exe"):
            marks.append(("helper_exit", t))
        elif e == "syscalls:sys_enter_sendmsg" and tid == runner:
            marks.append(("order", t))
        elif e == "syscalls:sys_exit_recvmsg" and pid in helpers and pid == tid:
            marks.append(("received", t))
        elif e == "sched:sched_process_exec" and pid in agents and agents[pid] == t:
            marks.append(("agent_exec", t))
    state = {}
    for name, t in marks:
        if name == "agent_exit":
            state = {"agent_exit": t}
        elif state and name not in state:
            # Each step counts only after the one before it on the chain.
            order = ["agent_exit", "helper_exit", "order", "received", "agent_exec"]
            i = order.index(name)
            if order[i - 1] in state:
                state[name] = t
        if name == "agent_exec" and state and "agent_exec" not in state:
            # A round whose helper was not a standby given an order (started for the round
            # itself): only its gap counts.
            rows.append({"gap": t - state["agent_exit"], "direct": 1.0})
            state = {}
            continue
        if "agent_exec" in state:
            s = state
            fl = [f for f in flushes if s["helper_exit"] <= f[0] <= s["agent_exec"]]
            rows.append({
                "gap": s["agent_exec"] - s["agent_exit"],
                "a": s["helper_exit"] - s["agent_exit"],
                "b": s["order"] - s["helper_exit"],
                "lag": max(0.0, s["received"] - s["order"]),
                "c": s["agent_exec"] - s["received"],
                "flush": sum(f[1] - f[0] for f in fl),
                "flush_end": (max(f[1] for f in fl) - s["received"]) if fl else 0.0,
                "direct": 0.0,
            })
            state = {}
    return rows


def main():
    jobs, rounds = int(sys.argv[1]), int(sys.argv[2])
    state_root, ws, agent_dir = sys.argv[3], sys.argv[4], sys.argv[5]
    builds = dict(a.split("=", 1) for a in sys.argv[6:])
    rows = {k: [] for k in builds}
    order = list(builds.items())
    shuffle = random.Random(30) if os.environ.get("SHUFFLE") == "1" else None
    for j in range(jobs):
        if shuffle:
            shuffle.shuffle(order)
        for name, binary in order:
            state = os.path.join(state_root, f"state-{name}")
            events, b = record(binary, state, ws, agent_dir, rounds)
            rows[name].extend(chain(events, b))
    keys = ["gap", "a", "b", "lag", "c", "flush", "flush_end"]
    print("build".ljust(12) + "rounds  direct" + "".join(k.rjust(10) for k in keys)
          + "   (medians, ms; gap's mean in brackets)")
    for name in builds:
        r = rows[name]
        if not r:
            print(f"{name.ljust(12)}no round measured")
            continue
        ordered = [x for x in r if not x["direct"]]
        med = [statistics.median(x["gap"] for x in r) * 1000] + [
            statistics.median(x[k] for x in ordered) * 1000 if ordered else float("nan")
            for k in keys[1:]
        ]
        direct = sum(1 for x in r if x["direct"])
        mean = statistics.mean(x["gap"] for x in r) * 1000
        print(name.ljust(12) + str(len(r)).rjust(6) + str(direct).rjust(8)
              + "".join(f"{m:10.2f}" for m in med) + f"   [{mean:.2f}]")


if __name__ == "__main__":
    main()
