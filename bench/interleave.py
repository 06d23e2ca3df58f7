#!/usr/bin/env python3
"""Interleaved A/B of whole commands: each round runs every command once, in turn, so drift of
the machine between hyperfine's blocks of runs (a few tenths of a ms here) hits all alike.

Usage: bench/interleave.py N name=command...
  SLEEP=S       sleeps S seconds before each run (cold)
  SHELL_CMDS=1  runs each command with `bash -c` (redirections, quotes) instead of splitting it
  PREPARE=C     runs the shell command C before each run, untimed (as hyperfine's --prepare)
  JSON=F        also writes the medians to F, shaped as hyperfine's --export-json
  SHUFFLE=1     runs the commands of each round in a random order (seeded: the same every time)
                instead of as given: what a command leaves for the kernel to finish behind it
                (a network namespace's or cgroup's teardown, writeback) then slows each of the
                others alike, not always the one given after it
Example:
  bench/interleave.py 200 "old=/tmp/ralph-old sandbox exec --workspace $ws -- /bin/true" \\
      "new=target/x86_64-unknown-linux-gnu/release/ralph sandbox exec --workspace $ws -- /bin/true"
"""
import json
import os
import random
import statistics
import subprocess
import sys
import time

shell = os.environ.get("SHELL_CMDS") == "1"
cmds = {
    k: (["bash", "-c", v] if shell else v.split())
    for k, v in (a.split("=", 1) for a in sys.argv[2:])
}
n = int(sys.argv[1])
res = {k: [] for k in cmds}
sleep = float(os.environ.get("SLEEP", "0"))
prepare = os.environ.get("PREPARE")
order = list(cmds.items())
shuffle = random.Random(30) if os.environ.get("SHUFFLE") == "1" else None
for _ in range(n):
    if shuffle:
        shuffle.shuffle(order)
    for k, c in order:
        if prepare:
            subprocess.run(["bash", "-c", prepare], check=False)
        if sleep:
            time.sleep(sleep)
        t = time.perf_counter()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        res[k].append(time.perf_counter() - t)
out = []
for k, v in res.items():
    v.sort()
    q = lambda f: 1e3 * v[int(f * (len(v) - 1))]
    print(f"{k:12s} median {q(0.5):.2f} ms  p25 {q(0.25):.2f}  p75 {q(0.75):.2f}  mean {1e3 * statistics.mean(v):.2f}")
    out.append({"command": k, "median": statistics.median(v), "mean": statistics.mean(v),
                "stddev": statistics.stdev(v) if len(v) > 1 else 0.0})
if os.environ.get("JSON"):
    with open(os.environ["JSON"], "w") as f:
        json.dump({"results": out}, f)
