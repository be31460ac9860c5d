"""Client CPU per request on short answers: `evalkit run gsm8k`'s request phase vs a bare aiohttp loop.

    python -m benchmarks.bench_request_rate                    # full GSM8K (1,319 requests), 3 rounds
    python -m benchmarks.bench_request_rate --rounds 5 --json out.json
    python -m benchmarks.bench_request_rate --limit 400 --rounds 1   # the short mode CI's guard runs
    python -m benchmarks.bench_request_rate --code /tmp/old          # also the evalkit of another checkout

The deterministic test server runs in its own process in ``--fast`` mode (no sleeps, cached answers: GSM8K's
short answers, ~54 tokens each, one token per SSE chunk). Against it, each round runs, one after the other in an
order that alternates from round to round:

- ``bare``: ``python -m benchmarks.raw_client`` (:mod:`benchmarks.raw_client`: aiohttp, ``json.loads`` per
  ``data:`` line, nothing else) sending the same GSM8K requests (their bodies built once, as evalkit's Client
  builds them, and read from a file) with the same number in flight; its CPU is the process's
  ``time.process_time()`` around the sending.
- ``evalkit``: the real command ``evalkit run gsm8k --endpoint URL --concurrency C --no-report`` (a fresh run dir;
  the prompt cache, evalkit's usual one, is warmed first by building the bare loop's bodies); its CPU is the run's
  own accounting, the summary's ``speed.client_cpu_s``: the process's CPU (every thread: the event loop, the hand-
  off to the scoring process, the store's writes, progress) from the first request sent to the last answer stored.
  The scoring process's CPU is not in it (it is another process, as the server is).

Printed per round and as medians: µs of client CPU per request, requests/s (requests over the sending's wall
time), requests per CPU-second (what one process could sustain with a core to itself), and the ratio
evalkit/bare of CPU per request (bound: ≤ 1.5; CI's guard, tests/integration/test_client_cost_guard.py, fails past 2). A
warm-up round of both (prompt cache, the server's answer cache, imports) is run first and discarded. Wall-clock
figures share the machine with the server and whatever else runs: the CPU figures are the measurement.
``--code DIR`` adds ``evalkit@DIR``, the same command with the evalkit of another checkout (e.g. a worktree of
main), in the same rounds: before and after measured side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.raw_client import gsm8k_bodies
from evalkit.testing.server import SubprocessServer

RATIO_BOUND = 1.5
MODEL = "test-model"


def run_bare(url: str, concurrency: int, bodies: Path, env: dict[str, str]) -> dict[str, float]:
    """The bare loop in a fresh process, sending ``bodies`` (a JSON file): its sending's CPU and wall."""
    cmd = [sys.executable, "-m", "benchmarks.raw_client", "--endpoint", url, "--model", MODEL]
    cmd += ["--concurrency", str(concurrency), "--bodies", str(bodies)]
    out = subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return {"requests": r["requests"], "cpu_s": r["cpu_s"], "wall_s": r["wall_s"]}


def run_evalkit(
    url: str, concurrency: int, args: list[str], env: dict[str, str], out: Path, code: str | None = None
) -> dict[str, float]:
    """`evalkit run gsm8k ARGS` as a command (run in ``code``, another checkout, if given): its request phase's
    CPU and wall as the run dir's summary records them."""
    cmd = [sys.executable, "-m", "evalkit.cli", "run", "gsm8k", "--endpoint", url, "--concurrency", str(concurrency)]
    cmd += ["-o", str(out), "--fresh", "-q", "--no-report", *args]
    subprocess.run(cmd, check=True, env=env, capture_output=True, cwd=code)
    task = json.loads((out / "summary.json").read_text())["tasks"]["gsm8k"]
    speed = task["speed"]
    n = sum(1 for _ in (out / "samples.jsonl").open())
    return {"requests": n, "cpu_s": speed["client_cpu_s"], "wall_s": speed["wall_s"]}


def figures(r: dict[str, float]) -> dict[str, float]:
    n = r["requests"]
    return {
        **r,
        "cpu_us_per_request": r["cpu_s"] / n * 1e6,
        "requests_per_s": n / r["wall_s"],
        "requests_per_cpu_s": n / r["cpu_s"],
    }


def measure(
    rounds: int = 3,
    limit: int | None = None,
    concurrency: int = 256,
    warmup: bool = True,
    code: str | None = None,
    short: bool = False,
) -> dict[str, Any]:
    """``rounds`` rounds of each against one fast test server (with ``warmup``, a warm-up round first, discarded).
    ``short``: `evalkit run` with ``--no-warmup`` (its warm-up requests are not in the measured phase; CI's guard
    saves their time)."""
    rows: list[dict[str, Any]] = []
    args = [*(["--limit", str(limit)] if limit else []), *(["--no-warmup"] if short else [])]
    with tempfile.TemporaryDirectory() as tmp, SubprocessServer("--fast") as srv:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        bodies = Path(tmp) / "bodies.json"  # built here: the prompt cache is warm for the runs (their prompts
        bodies.write_bytes(json.dumps(gsm8k_bodies(MODEL, limit)).encode())  # are not built while they send)
        impls = {
            "bare": lambda: run_bare(srv.url, concurrency, bodies, env),
            "evalkit": lambda: run_evalkit(srv.url, concurrency, args, env, Path(tmp) / "run"),
        }
        if code is not None:
            other = {**env, "PYTHONPATH": os.pathsep.join([code, env.get("PYTHONPATH", "")])}
            run_dir = Path(tmp) / "run"
            impls[f"evalkit@{code}"] = lambda: run_evalkit(srv.url, concurrency, args, other, run_dir, code)
        for i in range(-1 if warmup else 0, rounds):
            order = list(impls) if i % 2 == 0 else list(reversed(impls))
            got = {name: figures(impls[name]()) for name in order}
            if i < 0:
                continue
            ratio = got["evalkit"]["cpu_us_per_request"] / got["bare"]["cpu_us_per_request"]
            others = {f"ratio {n}": got[n]["cpu_us_per_request"] / got["bare"]["cpu_us_per_request"] for n in got}
            rows.append({"round": i, "order": order, "impls": list(got), **got, "ratio": ratio, **others})
    med = {name: {k: statistics.median(r[name][k] for r in rows) for k in rows[0][name]} for name in rows[0]["impls"]}
    return {
        "rounds": rows,
        "median": med,
        "ratio_median": statistics.median(r["ratio"] for r in rows),
        "ratio_min": min(r["ratio"] for r in rows),
        "ratios_median": {n: statistics.median(r["ratio " + n] for r in rows) for n in rows[0]["impls"]},
        "concurrency": concurrency,
        "limit": limit,
        "cpus": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }


def _line(name: str, f: dict[str, float]) -> str:
    return (
        f"{name:<12} {int(f['requests']):>5} requests  CPU {f['cpu_s']:6.3f} s = "
        f"{f['cpu_us_per_request']:7.1f} µs/request  {f['requests_per_s']:7.1f} req/s (wall {f['wall_s']:.2f} s)  "
        f"{f['requests_per_cpu_s']:7.1f} req/CPU-s"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="the first N GSM8K requests (default: all 1,319)")
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--code", default=None, help="also run the evalkit of this checkout (PYTHONPATH=DIR)")
    ap.add_argument("--json", help="also write the figures to this file")
    a = ap.parse_args()
    out = measure(a.rounds, a.limit, a.concurrency, code=a.code)
    print(f"{os.cpu_count()} CPUs, load average {out['loadavg'][0]:.2f}; concurrency {a.concurrency}")
    for r in out["rounds"]:
        print(f"round {r['round']} ({' then '.join(r['order'])}):")
        for name in r["impls"]:
            print(f"  {_line(name, r[name])}  ratio {r['ratio ' + name]:.2f}")
    print("median:")
    for name, f in out["median"].items():
        print(f"  {_line(name, f)}  ratio {out['ratios_median'][name]:.2f}")
    verdict = "PASS" if out["ratio_median"] <= RATIO_BOUND else "FAIL"
    print(f"evalkit/bare CPU per request: median {out['ratio_median']:.2f} (bound {RATIO_BOUND}): {verdict}")
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
