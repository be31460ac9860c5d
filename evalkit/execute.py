"""Run many requests against the server with bounded (fixed or self-tuning) concurrency."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import aiohttp

from evalkit.client import Client
from evalkit.tasks.base import Request, Response

OnDone = Callable[[Request, Response], "Awaitable[None] | None"]


class Limiter:
    """A semaphore whose size can change while requests are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._cond = asyncio.Condition()

    async def acquire(self) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.active < self.limit)
            self.active += 1

    async def release(self) -> None:
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    async def set_limit(self, limit: int) -> None:
        async with self._cond:
            self.limit = limit
            self._cond.notify_all()


@dataclass
class ExecStats:
    concurrency_trace: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, limit)
    final_concurrency: int = 0
    loop_lag_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0


async def _waiting_requests(session: aiohttp.ClientSession, metrics_url: str | None) -> float | None:
    """vLLM's ``vllm:num_requests_waiting`` summed over engines, or None when /metrics is not served."""
    if not metrics_url:
        return None
    try:
        async with session.get(metrics_url, timeout=aiohttp.ClientTimeout(total=2)) as r:
            if r.status != 200:
                return None
            text = await r.text()
    except (aiohttp.ClientError, asyncio.TimeoutError):
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting"):
            seen = True
            total += float(line.rsplit(" ", 1)[-1])
    return total if seen else None


class AutoConcurrency:
    """Find the server's speed without tuning: double the requests in flight while that pays.

    At each level it waits half a window for the new requests to start, then over ``window_s`` compares the
    streamed-chunk rate (≈ output tokens/s, counted as chunks arrive, so it
    is smooth even when requests are long) with the rate at the previous level. It doubles while our requests
    fill the current limit and either the server reports no queue (``vllm:num_requests_waiting`` averaged over
    the window is < 1) or the rate rose by more than ``gain`` (``queued_gain`` when the server does report a
    queue, since then more in flight should not help). It stops when the rate stops rising and
    the server queues requests, at the cap, or when too few requests remain to fill a larger limit.
    """

    def __init__(
        self, start: int, cap: int, metrics_url: str | None, window_s: float = 1.0, gain: float = 0.05,
        queued_gain: float = 0.25,
    ):
        self.limit = min(start, cap)
        self.cap = cap
        self.metrics_url = metrics_url
        self.window_s = window_s
        self.gain = gain
        self.queued_gain = queued_gain
        self.settled = False
        self.remaining: int | None = None

    async def run(
        self, limiter: Limiter, client: Client, stats: ExecStats, t0: float
    ) -> None:
        assert client._session is not None
        prev_rate = 0.0
        while not self.settled:
            await asyncio.sleep(self.window_s / 2)  # let the new level fill before measuring it
            c0, w0 = client.chunks_received, time.perf_counter()
            waits: list[float] = []
            while time.perf_counter() - w0 < self.window_s:
                await asyncio.sleep(self.window_s / 4)
                w = await _waiting_requests(client._session, self.metrics_url)
                if w is not None:
                    waits.append(w)
            rate = (client.chunks_received - c0) / (time.perf_counter() - w0)
            full = limiter.active >= limiter.limit
            queue_free = bool(waits) and sum(waits) / len(waits) < 1.0
            # with a queue reported by the server, a rise must be clear: ramp effects alone look like a few percent
            gain = self.queued_gain if waits else self.gain
            rising = rate > (1.0 + gain) * prev_rate
            if not full or (self.remaining is not None and self.remaining < self.limit):
                self.settled = True  # nothing left to gain: the tail of the run
            elif (rising or queue_free) and self.limit < self.cap:
                self.limit = min(self.limit * 2, self.cap)
                await limiter.set_limit(self.limit)
                stats.concurrency_trace.append((round(time.perf_counter() - t0, 3), self.limit))
            else:
                self.settled = True
            prev_rate = max(prev_rate, rate)


async def _loop_lag(stats: ExecStats, interval: float = 0.05) -> None:
    while True:
        t = time.perf_counter()
        await asyncio.sleep(interval)
        stats.loop_lag_ms.append(max(0.0, (time.perf_counter() - t - interval) * 1000.0))


async def execute(
    requests: Iterable[Request],
    client: Client,
    on_done: OnDone,
    *,
    concurrency: int | str = 64,
    max_concurrency: int = 512,
    metrics_url: str | None = None,
    auto_start: int = 32,
) -> ExecStats:
    """Send every request, at most ``concurrency`` at a time ("auto" tunes it), calling ``on_done`` as each
    completes (in completion order). Only ``concurrency`` requests are in memory at once."""
    stats = ExecStats()
    auto = (
        AutoConcurrency(auto_start, max_concurrency, metrics_url) if concurrency == "auto" else None
    )
    limit = auto.limit if auto else int(concurrency)
    limiter = Limiter(limit)
    stats.concurrency_trace.append((0.0, limit))
    t0, c0 = time.perf_counter(), time.process_time()
    lag_task = asyncio.create_task(_loop_lag(stats))
    assert client._session is not None
    auto_task = asyncio.create_task(auto.run(limiter, client, stats, t0)) if auto else None
    pending: set[asyncio.Task[None]] = set()

    reqs = list(requests) if auto else requests
    left = len(reqs) if isinstance(reqs, list) else None

    async def one(req: Request) -> None:
        try:
            resp = await client.generate(req)
            result = on_done(req, resp)
            if inspect.isawaitable(result):
                await result
        finally:
            await limiter.release()

    try:
        for req in reqs:
            await limiter.acquire()
            if auto and left is not None:
                left -= 1
                auto.remaining = left
            task = asyncio.create_task(one(req))
            pending.add(task)
            task.add_done_callback(pending.discard)
        while pending:
            await asyncio.gather(*list(pending))
    finally:
        for t in (lag_task, auto_task, *pending):
            if t is not None:
                t.cancel()
        await asyncio.gather(lag_task, *(t for t in [auto_task] if t), *pending, return_exceptions=True)
        stats.wall_s = time.perf_counter() - t0
        stats.cpu_s = time.process_time() - c0
        stats.final_concurrency = auto.limit if auto else limit
    return stats
