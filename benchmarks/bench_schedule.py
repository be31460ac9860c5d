"""Schedule accuracy: how closely evalkit's scheduler keeps a Poisson arrival schedule.

The fast test server (``python -m evalkit.testing.server --fast``: no sleeps, cached responses) runs in its own
process; this process sends ``rate * seconds`` requests of a seeded Poisson schedule at ``--rate`` req/s through
``evalkit.client.scheduler.execute`` and the ``Client`` the CLI uses, with no cap on requests in flight (as
``evalkit run --request-rate``), and prints the task ``load`` figures evalkit would record: offered and achieved
rate and the send lag (first send − due time) p50/p99/max.

    python -m benchmarks.bench_schedule                # 500 req/s for 60 s (30,000 arrivals)
    python -m benchmarks.bench_schedule --short        # 500 req/s for 10 s
    python -m benchmarks.bench_schedule --rate 200 --seconds 30 --json out.json

Bounds (issue 46): send lag p99 ≤ 5 ms and achieved within 2% of offered at 500 req/s over 60 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from evalkit.client.arrivals import Arrivals
from evalkit.client.http_client import Client
from evalkit.client.scheduler import execute
from evalkit.contracts import GenParams, Request, Response, SampleRecord
from evalkit.scoring.load import load_summary
from evalkit.testing.server import SubprocessServer

LAG_P99_BOUND_MS = 5.0
RATE_BOUND = 0.02


async def _run(url: str, n: int, rate: float, seed: int) -> tuple[Any, list[Response]]:
    gen = GenParams(max_tokens=16)
    reqs = [Request("bench", i, 0, f"question {i % 500}", gen) for i in range(n)]
    got: list[Response] = []
    async with Client(url, "test-model") as client:
        arrivals = Arrivals(rate=rate, seed=seed)
        stats = await execute(reqs, client, lambda _q, r: got.append(r), total=n, concurrency=4096, arrivals=arrivals)
    return stats, got


def measure(rate: float, seconds: float, seed: int = 0) -> dict[str, Any]:
    n = int(rate * seconds)
    with SubprocessServer("--fast") as srv:
        t0, c0 = time.perf_counter(), time.process_time()
        stats, got = asyncio.run(_run(srv.url, n, rate, seed))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    records = [
        SampleRecord(key=str(i), task="bench", doc_id=i, prompt="", status="ok", start_s=r.start_s,
                     scheduled_s=r.scheduled_s, e2e_ms=r.e2e_ms, output_tokens=r.output_tokens)
        for i, r in enumerate(got)
    ]  # fmt: skip
    load = load_summary(records, stats, "poisson", rate)
    assert load is not None
    errors = sum(r.error is not None for r in got)
    return {
        "rate": rate, "seconds": seconds, "arrivals": n, "errors": errors, "wall_s": round(wall, 2),
        "client_cpu_share": round(cpu / wall, 3), "offered_rps": load.offered_rps, "achieved_rps": load.achieved_rps,
        "achieved_over_offered": (load.achieved_rps or 0) / (load.offered_rps or 1),
        "send_lag_ms": load.send_lag_ms.model_dump(), "send_lag_max_ms": load.send_lag_max_ms,
        "schedule_kept": load.schedule_kept, "loadavg": os.getloadavg(), "cpus": os.cpu_count(),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--short", action="store_true", help="10 s instead of 60 s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    out = measure(args.rate, 10.0 if args.short else args.seconds, args.seed)
    lag = out["send_lag_ms"]
    ratio = out["achieved_over_offered"]
    ok_lag, ok_rate = lag["p99"] <= LAG_P99_BOUND_MS, abs(ratio - 1) <= RATE_BOUND
    print(f"{out['arrivals']} Poisson arrivals at {args.rate:g} req/s offered ({out['errors']} failed), "
          f"{os.cpu_count()} CPUs, load average {out['loadavg'][0]:.2f}")  # fmt: skip
    print(f"offered {out['offered_rps']:.2f} req/s, achieved {out['achieved_rps']:.2f} req/s: ratio {ratio:.4f} "
          f"(bound ±{RATE_BOUND:.0%}): {'PASS' if ok_rate else 'FAIL'}")  # fmt: skip
    verdict = "PASS" if ok_lag else "FAIL"
    print(f"send lag p50 {lag['p50']:.2f} ms, p90 {lag['p90']:.2f} ms, p99 {lag['p99']:.2f} ms, max "
          f"{out['send_lag_max_ms']:.2f} ms (p99 bound {LAG_P99_BOUND_MS} ms): {verdict}")  # fmt: skip
    print(f"client CPU {out['client_cpu_share']:.0%} of wall {out['wall_s']} s; schedule_kept {out['schedule_kept']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
