"""Requests/s of ``evalkit run`` with 1, 2, … sender processes (``--client-processes``), side by side in one run.

    python -m benchmarks.bench_client_processes [--processes 1,2] [--servers 2] [--num-prompts 5000]
                                                [--output-len 16] [--concurrency 256] [--rounds 2] [--json FILE]

Starts ``--servers`` bundled test servers in ``--fast`` mode (no sleeps, cached answers: the client is what is
measured), each its own process, and runs ``evalkit run random`` (``--num-prompts`` short prompts,
``--output-len`` streamed tokens each, the default warm-up, during which the senders start; no report) sharded
over all of them, once per process count per round, the counts in a rotated order each round so that machine
noise falls on all of them alike. A first run is discarded (warm caches).

Per run: requests/s over the sending window (the summary's ``speed.requests_per_s``: first send to last answer),
the request phase's requests/s (``timings_s``: what of the senders' start the warm-up did not cover and the tail
of answers still being scored and stored after the last one came back, which the parent does for all senders,
included), and each server
process's CPU share over the phase (near 100% of a core: the servers, not the client, set the figure; add
``--servers``). Prints the medians, the scaling against one process, and the scaling per added process,
``(rate(N) / rate(1) - 1) / (N - 1)`` (1.0: each added process adds a whole process's rate; target >= 0.8 while
there are cores for the senders, the parent, the scoring process and the servers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from evalkit.testing.server import SubprocessServer

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """The user + system CPU seconds process ``pid`` has used (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def run_once(servers: list[SubprocessServer], out: Path, n: int, a: argparse.Namespace) -> dict[str, Any]:
    """One ``evalkit run`` with ``n`` sender processes: its figures and the servers' CPU shares."""
    ends = [arg for s in servers for arg in ("--endpoint", s.url)]
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "random", *ends, "--num-prompts", str(a.num_prompts),
           "--random-input-len", "32", "--random-output-len", str(a.output_len), "--concurrency", str(a.concurrency),
           "--client-processes", str(n), "-o", str(out), "--fresh", "--no-report", "-q"]  # fmt: skip
    before = [cpu_s(s.proc.pid) for s in servers if s.proc is not None]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "TQDM_DISABLE": "1"})
    whole = time.perf_counter() - t
    after = [cpu_s(s.proc.pid) for s in servers if s.proc is not None]
    summary = json.loads((out / "summary.json").read_text())
    task, phase = summary["tasks"]["random"], summary["timings_s"]["random.requests"]
    speed = task["speed"]
    return {
        "processes": n,
        "requests": task["counts"]["total"],
        "requests_per_s": speed["requests_per_s"],
        "send_window_s": speed["wall_s"],
        "phase_s": phase,
        "phase_requests_per_s": task["counts"]["total"] / phase,
        "command_s": whole,
        "client_cpu_s": speed.get("client_cpu_s"),
        "server_cpu_share": [round((b - a0) / phase, 3) for a0, b in zip(before, after, strict=True)],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--processes", default="1,2", help="sender process counts, comma-separated (first: the base)")
    p.add_argument("--servers", type=int, default=2, help="test server processes (default 2)")
    p.add_argument("--num-prompts", type=int, default=5000, help="requests per run (default 5000)")
    p.add_argument("--output-len", type=int, default=16, help="tokens per answer (default 16)")
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args()
    counts = [int(x) for x in a.processes.split(",")]
    runs: list[dict[str, Any]] = []
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        servers = [stack.enter_context(SubprocessServer("--fast")) for _ in range(a.servers)]
        run_once(servers, Path(tmp) / "warm", counts[0], a)  # the prompt cache, the servers' answer cache
        for r in range(a.rounds):
            for n in counts[r % len(counts) :] + counts[: r % len(counts)]:
                got = run_once(servers, Path(tmp) / f"r{r}-n{n}", n, a)
                runs.append(got)
                print(json.dumps(got), flush=True)
    median = {n: statistics.median(x["requests_per_s"] for x in runs if x["processes"] == n) for n in counts}
    phase = {n: statistics.median(x["phase_requests_per_s"] for x in runs if x["processes"] == n) for n in counts}
    base = counts[0]
    print(f"\ncores {len(os.sched_getaffinity(0))}, {a.servers} test servers, concurrency {a.concurrency}, "
          f"{runs[0]['requests']} requests per run, {a.rounds} rounds (medians)")  # fmt: skip
    print(f"{'processes':>9} {'req/s':>9} {'x base':>7} {'per added':>9} {'phase req/s':>12} {'x base':>7}")
    result: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(a).items()}, "runs": runs, "medians": {}}
    for n in counts:
        ratio, phase_ratio = median[n] / median[base], phase[n] / phase[base]
        per_added = (ratio - 1) / (n - base) if n != base else None
        shown = f"{per_added:.2f}" if per_added is not None else "-"
        print(f"{n:>9} {median[n]:>9.1f} {ratio:>7.2f} {shown:>9} {phase[n]:>12.1f} {phase_ratio:>7.2f}")
        result["medians"][n] = {"requests_per_s": median[n], "x_base": ratio, "per_added_process": per_added,
                                "phase_requests_per_s": phase[n], "phase_x_base": phase_ratio}  # fmt: skip
    if a.json is not None:
        a.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
