"""Where the CPU of ``evalkit run``'s own process goes per request when sender processes send (``--client-processes``):
its event loop and each of its threads, in µs of CPU per request.

    python -m benchmarks.bench_parent_cpu [--processes 2] [--sizes 10000,30000] [--rounds 3] [--json FILE]

With several senders, every answer still passes through this one process (it builds and keys the requests, hands
them out, gets the answers back, has them scored and stores them): its CPU per request is the part more senders do
not spread. It is not a hard bound on the rate: its threads run beside each other where they do not hold the GIL
(reading and writing the pipes), and the cost per request measured at this light load is higher than under a heavy
one, where each wake-up handles more answers (docs/benchmarks/archive/gpu-leases.md, 2026-12-07 evening). Two
bundled test servers in ``--fast`` mode answer ``evalkit run random`` (32-token prompts, 16-token answers, 256 in
flight), once per size and round after a discarded warm run. The CLI runs in a wrapper that, at exit, reads the CPU
time of each thread (``time.thread_time`` as each ends, /proc for those still running); the figure per request is
the median difference between the largest and the smallest size divided by the requests between them, so that
start-up, planning and the summary's fixed part cancel out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from evalkit.testing.server import SubprocessServer

# the CLI, run with each thread's CPU seconds written as JSON to argv[1] at exit (threads named by role: a pool's or
# a numbered thread's suffix dropped)
WRAPPER = """
import atexit, collections, json, os, resource, runpy, sys, threading, time
out = sys.argv.pop(1)
spent = collections.Counter()
_run = threading.Thread.run
def role(name):
    return name.split("_")[0].rstrip("0123456789-") or name
def run(self):
    try:
        _run(self)
    finally:
        spent[role(self.name)] += time.thread_time()
threading.Thread.run = run
def write():
    ticks = os.sysconf("SC_CLK_TCK")
    names = {t.native_id: t.name for t in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            f = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile (its time is in spent)
            continue
        spent[role(names.get(int(tid), "other"))] += (int(f[11]) + int(f[12])) / ticks
    r = resource.getrusage(resource.RUSAGE_SELF)
    spent["(process)"] = r.ru_utime + r.ru_stime
    open(out, "w").write(json.dumps(spent))
atexit.register(write)
runpy.run_module("evalkit.cli", run_name="__main__", alter_sys=True)
"""


def run_once(ends: list[str], size: int, n: int, out: Path) -> dict[str, float]:
    """One ``evalkit run`` of ``size`` requests over ``n`` senders: CPU seconds by thread role."""
    cpu = out.with_suffix(".cpu.json")
    cmd = [sys.executable, "-c", WRAPPER, str(cpu), "run", "random", *ends, "--num-prompts", str(size),
           "--random-input-len", "32", "--random-output-len", "16", "--concurrency", "256",
           "--client-processes", str(n), "-o", str(out), "--fresh", "--no-report", "-q"]  # fmt: skip
    env = {**os.environ, "TQDM_DISABLE": "1", "EVALKIT_HISTORY_URL": "off"}
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    spent: dict[str, float] = json.loads(cpu.read_text())
    return spent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=2, help="sender processes (default 2)")
    p.add_argument("--sizes", default="10000,30000", help="requests per run, comma-separated (default 10000,30000)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args()
    sizes = sorted(int(x) for x in a.sizes.split(","))
    runs: dict[int, list[dict[str, float]]] = defaultdict(list)
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        servers = [stack.enter_context(SubprocessServer("--fast")) for _ in range(2)]
        ends = [arg for s in servers for arg in ("--endpoint", s.url)]
        run_once(ends, sizes[0], a.processes, Path(tmp) / "warm")  # the servers' answer cache, the page cache
        for r in range(a.rounds):
            for size in sizes:
                runs[size].append(run_once(ends, size, a.processes, Path(tmp) / f"r{r}-{size}"))
    small, large = sizes[0], sizes[-1]
    roles = sorted({k for rs in runs.values() for x in rs for k in x}, key=lambda k: (k == "(process)", k))
    per_request: dict[str, float] = {}
    for role in roles:
        med = {s: statistics.median(x.get(role, 0.0) for x in runs[s]) for s in (small, large)}
        per_request[role] = (med[large] - med[small]) / (large - small) * 1e6
    print(f"evalkit's own process, {a.processes} sender processes, {small:,} -> {large:,} requests, {a.rounds} rounds")
    print(f"{'thread':<26} {'us of CPU per request':>22}")
    for role, us in per_request.items():
        print(f"{role:<26} {us:>22.1f}")
    total = per_request["(process)"]
    print(f"one core's worth of this process at this cost: {1e6 / total:,.0f} requests/s (not a bound: docstring)")
    if a.json is not None:
        result: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(a).items()}, "runs": runs,
                                  "us_per_request": per_request}  # fmt: skip
        a.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
