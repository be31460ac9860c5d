"""The reference client: a plain aiohttp loop with a fixed number of requests in flight.

It sends exactly what evalkit sends for GSM8K (lm-eval's prompts, stops, max_tokens, temperature, seed,
streaming with usage), reads SSE lines and ``json.loads`` each ``data:`` event — nothing else. It is the
yardstick for evalkit's wall time and for the CPU its client spends per streamed token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

import aiohttp


async def stream_one(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, int]:
    """Send one streaming request; return the output tokens the server reported and the events received."""
    tokens = events = 0
    async with session.post(url, json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            if not data:
                continue
            events += 1
            chunk = json.loads(data)
            usage = chunk.get("usage")
            if usage:
                tokens = usage.get("completion_tokens") or tokens
    return tokens, events


async def run(url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, float]:
    """Send every body with ``concurrency`` in flight; wall time and token totals."""
    sem = asyncio.Semaphore(concurrency)
    tokens = events = 0

    async def one(body: dict[str, Any]) -> None:
        nonlocal tokens, events
        async with sem:
            n, e = await stream_one(session, url, body)
        tokens += n
        events += e

    t0, c0 = time.perf_counter(), time.process_time()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=3600)
    ) as session:
        await asyncio.gather(*(one(b) for b in bodies))
    wall = time.perf_counter() - t0
    return {
        "wall_s": wall,
        "cpu_s": time.process_time() - c0,
        "output_tokens": tokens,
        "events": events,
        "requests": len(bodies),
        "concurrency": concurrency,
    }


def gsm8k_bodies(model: str, limit: int | None) -> list[dict[str, Any]]:
    """Request bodies for GSM8K exactly as evalkit (and lm-eval local-completions) send them."""
    from evalkit.client.http_client import Client
    from evalkit.tasks.registry import Registry
    from evalkit.tasks.spec import TaskSettings

    task = Registry().get("gsm8k")
    reqs = task.build_requests(TaskSettings(limit=limit))
    client = Client("http://unused/v1", model)
    return [client.payload(r) for r in reqs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--endpoint", required=True, help="http://host:port/v1")
    ap.add_argument("--model", required=True)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--bodies", help="send these request bodies (a JSON list) instead of building GSM8K's")
    a = ap.parse_args()
    if a.bodies:
        with open(a.bodies) as f:
            bodies = json.load(f)[: a.limit]
    else:
        bodies = gsm8k_bodies(a.model, a.limit)
    print(json.dumps(asyncio.run(run(a.endpoint.rstrip("/") + "/completions", bodies, a.concurrency))))


if __name__ == "__main__":
    main()
