"""(a) Client CPU per streamed token: evalkit's Client vs. a plain aiohttp line loop (and the openai SDK).

    python -m benchmarks.bench_client_cpu [--quick] [--requests 200] [--rounds 3] [--concurrency 16]
                                          [--kinds completions,chat] [--no-sdk] [--json PATH]

The deterministic test server runs as a subprocess in ``--fast`` mode (no sleeps, each distinct response
serialized once and then replayed from a cache), so the CPU it spends is not in this process. This process
then sends the same requests (distinct prompts, ``max_tokens`` 1000, answers padded to 1000 tokens with
``--answer-tokens``, 1 token per SSE chunk as vLLM streams by default) with the same number in flight through:

- ``plain``:   :func:`benchmarks.raw_client.run` (aiohttp, ``json.loads`` per ``data:`` line, usage only),
- ``plain-oj``: the same loop with ``orjson.loads`` and orjson-encoded bodies (context: what evalkit's own
  bookkeeping costs on top of a loop that parses as fast as it does),
- ``evalkit``: ``Client.generate`` (orjson, text, TTFT/ITL/TPOT, tenacity retries) under the same semaphore,
- ``execute``: evalkit's scheduler :func:`evalkit.client.scheduler.execute` around the same Client (context),
- ``sdk``:     ``AsyncOpenAI(...).{completions,chat.completions}.create(stream=True)`` iterated (context).

CPU is ``time.process_time()`` of this process around each pass (session set-up included for all). The
implementations alternate within every round, in a rotated order, so that machine noise falls on all of them
alike; a warm-up round is discarded (the SDK warms up on the first 32 requests only: it is slow). Reported:
output tokens per CPU-second, µs of CPU per token, and the ratios to ``plain`` (pass: evalkit/plain <= 1.5).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import orjson

from benchmarks.raw_client import run as raw_run
from evalkit.client.http_client import Client
from evalkit.contracts import GenParams, Request
from evalkit.testing.server import SubprocessServer

MODEL = "test-model"
LIMIT_RATIO = 1.5

Impl = Callable[[str, str, list[Request], int], Coroutine[Any, Any, dict[str, float]]]


def make_requests(kind: str, n: int, max_tokens: int) -> list[Request]:
    """``n`` distinct prompts (unknown to the server's answer policy: filler text, padded to max_tokens)."""
    out = []
    for i in range(n):
        prompt = f"Benchmark request {i}: write at length about anything."
        messages = ({"role": "user", "content": prompt},) if kind == "chat" else None
        out.append(
            Request(
                task="bench",
                doc_id=i,
                sample_index=0,
                prompt=prompt,
                gen=GenParams(max_tokens=max_tokens, temperature=0.0),
                messages=messages,
            )
        )
    return out


# ------------------------------------------------------------------------------------------ implementations


async def run_plain(base: str, kind: str, reqs: list[Request], concurrency: int) -> dict[str, float]:
    bodies = [Client(base, MODEL, kind=kind).payload(r) for r in reqs]
    url = base + ("/chat/completions" if kind == "chat" else "/completions")
    c0 = time.process_time()
    r = await raw_run(url, bodies, concurrency)
    return {"cpu_s": time.process_time() - c0, "wall_s": r["wall_s"], "tokens": r["output_tokens"]}


async def run_plain_orjson(base: str, kind: str, reqs: list[Request], concurrency: int) -> dict[str, float]:
    bodies = [orjson.dumps(Client(base, MODEL, kind=kind).payload(r)) for r in reqs]
    url = base + ("/chat/completions" if kind == "chat" else "/completions")
    headers = {"Content-Type": "application/json"}
    sem = asyncio.Semaphore(concurrency)
    tokens = 0

    async def one(session: aiohttp.ClientSession, body: bytes) -> None:
        nonlocal tokens
        n = 0
        async with sem, session.post(url, data=body, headers=headers) as resp:
            resp.raise_for_status()
            async for line in resp.content:
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                if not data:
                    continue
                usage = orjson.loads(data).get("usage")
                if usage:
                    n = usage.get("completion_tokens") or n
        tokens += n

    t0, c0 = time.perf_counter(), time.process_time()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=3600)
    ) as session:
        await asyncio.gather(*(one(session, b) for b in bodies))
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "tokens": tokens}


async def run_evalkit(base: str, kind: str, reqs: list[Request], concurrency: int) -> dict[str, float]:
    sem = asyncio.Semaphore(concurrency)
    tokens = 0
    errors: list[str] = []

    async def one(client: Client, req: Request) -> None:
        nonlocal tokens
        async with sem:
            resp = await client.generate(req)
        if resp.error is not None:
            errors.append(resp.error)
        tokens += resp.output_tokens or 0

    t0, c0 = time.perf_counter(), time.process_time()
    async with Client(base, MODEL, kind=kind) as client:
        await asyncio.gather(*(one(client, r) for r in reqs))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"evalkit: {len(errors)} requests failed, e.g. {errors[0]}")
    return {"cpu_s": cpu, "wall_s": wall, "tokens": tokens}


async def run_execute(base: str, kind: str, reqs: list[Request], concurrency: int) -> dict[str, float]:
    from evalkit.client.scheduler import execute

    tokens = 0

    def on_done(req: Request, resp: Any) -> None:
        nonlocal tokens
        if resp.error is not None:
            raise RuntimeError(f"evalkit execute: request failed: {resp.error}")
        tokens += resp.output_tokens or 0

    t0, c0 = time.perf_counter(), time.process_time()
    async with Client(base, MODEL, kind=kind) as client:
        await execute(reqs, client, on_done, concurrency=concurrency)
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "tokens": tokens}


async def run_sdk(base: str, kind: str, reqs: list[Request], concurrency: int) -> dict[str, float]:
    from openai import AsyncOpenAI

    bodies = [Client(base, MODEL, kind=kind).payload(r) for r in reqs]
    for b in bodies:
        b.pop("stream", None)
    sem = asyncio.Semaphore(concurrency)
    tokens = 0

    async def one(oc: Any, body: dict[str, Any]) -> None:
        nonlocal tokens
        async with sem:
            api = oc.chat.completions if kind == "chat" else oc.completions
            stream = await api.create(stream=True, **body)
            n = 0
            async for chunk in stream:
                if chunk.usage is not None:
                    n = chunk.usage.completion_tokens or n
        tokens += n

    t0, c0 = time.perf_counter(), time.process_time()
    async with AsyncOpenAI(base_url=base, api_key="bench", max_retries=0, timeout=3600) as oc:
        await asyncio.gather(*(one(oc, b) for b in bodies))
    return {"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0, "tokens": tokens}


IMPLS: dict[str, Impl] = {
    "plain": run_plain,
    "plain-oj": run_plain_orjson,
    "evalkit": run_evalkit,
    "execute": run_execute,
    "sdk": run_sdk,
}


# ------------------------------------------------------------------------------------------------ driver


def measure(
    base: str, kind: str, names: list[str], reqs: list[Request], concurrency: int, rounds: int, warmup: bool = True
) -> dict[str, Any]:
    """Interleaved rounds; per implementation: totals over the rounds and per-round µs/token."""
    per: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for rnd in range(-1 if warmup else 0, rounds):
        k = max(rnd, 0) % len(names)
        order = names[k:] + names[:k]  # rotate who goes first
        for name in order:
            gc.collect()
            batch = reqs[:32] if rnd < 0 and name == "sdk" else reqs
            r = asyncio.run(IMPLS[name](base, kind, batch, concurrency))
            if rnd >= 0:
                per[name].append(r)
            tag = "warm-up" if rnd < 0 else f"round {rnd + 1}/{rounds}"
            print(
                f"  [{kind} {tag}] {name:<8} {r['tokens']:>8} tok  cpu {r['cpu_s']:6.2f} s  "
                f"wall {r['wall_s']:6.2f} s  {r['cpu_s'] / max(1, r['tokens']) * 1e6:6.2f} µs/tok",
                flush=True,
            )
    out: dict[str, Any] = {}
    for name, runs in per.items():
        tok = sum(r["tokens"] for r in runs)
        cpu = sum(r["cpu_s"] for r in runs)
        out[name] = {
            "tokens": tok,
            "cpu_s": round(cpu, 3),
            "wall_s": round(sum(r["wall_s"] for r in runs), 3),
            "tokens_per_cpu_s": round(tok / cpu, 1),
            "us_per_token": round(cpu / tok * 1e6, 3),
            "rounds_us_per_token": [round(r["cpu_s"] / r["tokens"] * 1e6, 3) for r in runs],
        }
    tokens = {n: out[n]["tokens"] for n in names}
    if len(set(tokens.values())) != 1:
        raise RuntimeError(f"implementations streamed different token counts: {tokens}")
    base_us = out["plain"]["us_per_token"]
    for name in names:
        if name == "plain":
            continue
        rr = [a / b for a, b in zip(out[name]["rounds_us_per_token"], out["plain"]["rounds_us_per_token"], strict=True)]
        out[name]["ratio_to_plain"] = round(out[name]["us_per_token"] / base_us, 3)
        out[name]["round_ratios"] = [round(x, 3) for x in rr]
        out[name]["round_ratio_median"] = round(statistics.median(rr), 3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--kinds", default="completions,chat")
    ap.add_argument("--no-sdk", action="store_true", help="skip the openai SDK (the slowest, context only)")
    ap.add_argument("--no-execute", action="store_true", help="skip evalkit's execute() scheduler pass")
    ap.add_argument("--quick", action="store_true", help="80 requests, 2 rounds, completions only")
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args(argv)
    if a.quick:
        a.requests, a.rounds, a.kinds = min(a.requests, 80), min(a.rounds, 2), "completions"
    names = ["plain", "plain-oj", "evalkit"] + ([] if a.no_execute else ["execute"]) + ([] if a.no_sdk else ["sdk"])
    results: dict[str, Any] = {
        "config": {
            "requests": a.requests,
            "max_tokens": a.max_tokens,
            "concurrency": a.concurrency,
            "rounds": a.rounds,
            "tokens_per_chunk": a.tokens_per_chunk,
            "python": sys.version.split()[0],
        },
        "kinds": {},
    }
    with SubprocessServer(
        "--fast",
        "--tokens-per-chunk",
        str(a.tokens_per_chunk),
        "--answer-tokens",
        str(a.max_tokens),
        "--max-model-len",
        str(a.max_tokens + 1024),
    ) as srv:
        for kind in [k.strip() for k in a.kinds.split(",") if k.strip()]:
            reqs = make_requests(kind, a.requests, a.max_tokens)
            print(
                f"{kind}: {a.requests} requests x {a.max_tokens} tokens, {a.tokens_per_chunk} token/chunk, "
                f"concurrency {a.concurrency}, {a.rounds} rounds (+1 warm-up)",
                flush=True,
            )
            results["kinds"][kind] = measure(srv.url, kind, names, reqs, a.concurrency, a.rounds)
    ok = True
    print("\n(a) client CPU per streamed token (this process only; server in a subprocess)")
    print(f"{'kind':<12} {'impl':<8} {'tok/CPU-s':>11} {'µs/tok':>8} {'x plain':>8}  per-round x plain")
    for kind, res in results["kinds"].items():
        for name in names:
            r = res[name]
            ratio = r.get("ratio_to_plain", 1.0)
            rounds = " ".join(f"{x:.2f}" for x in r.get("round_ratios", []))
            print(
                f"{kind:<12} {name:<8} {r['tokens_per_cpu_s']:>11,.0f} {r['us_per_token']:>8.2f} {ratio:>8.2f}  "
                f"{rounds}"
            )
        ok = ok and res["evalkit"]["ratio_to_plain"] <= LIMIT_RATIO
    results["pass"] = ok
    print(f"evalkit/plain <= {LIMIT_RATIO}: {'PASS' if ok else 'FAIL'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=2)
    return results


if __name__ == "__main__":
    sys.exit(0 if main()["pass"] else 1)
