#!/usr/bin/env python3
"""Interleaved A/B of whole commands: each round runs every command once, in turn, so drift of
the machine between hyperfine's blocks of runs (a few tenths of a ms here) hits all alike.

Usage: bench/interleave.py N name=command... (SLEEP=S sleeps S seconds before each run: cold)
Example:
  bench/interleave.py 200 "old=/tmp/ralph-old sandbox exec --workspace $ws -- /bin/true" \\
      "new=target/x86_64-unknown-linux-gnu/release/ralph sandbox exec --workspace $ws -- /bin/true"
"""
import os
import statistics
import subprocess
import sys
import time

cmds = {k: v.split() for k, v in (a.split("=", 1) for a in sys.argv[2:])}
n = int(sys.argv[1])
res = {k: [] for k in cmds}
sleep = float(os.environ.get("SLEEP", "0"))
for _ in range(n):
    for k, c in cmds.items():
        if sleep:
            time.sleep(sleep)
        t = time.perf_counter()
        subprocess.run(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        res[k].append(time.perf_counter() - t)
for k, v in res.items():
    v.sort()
    q = lambda f: 1e3 * v[int(f * (len(v) - 1))]
    print(f"{k:12s} median {q(0.5):.2f} ms  p25 {q(0.25):.2f}  p75 {q(0.75):.2f}  mean {1e3 * statistics.mean(v):.2f}")
