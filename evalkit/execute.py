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
    """Grow concurrency while the server has spare capacity.

    Every ``window_s`` it looks at the server's queue (``vllm:num_requests_waiting``) and at completed output
    tokens per second. It doubles the limit while our requests fill it, the server queues none of them, and
    throughput did not fall; it stops growing once the server queues requests (its batch is full) or, without
    /metrics, once throughput stops rising by 5%.
    """

    def __init__(self, start: int, cap: int, metrics_url: str | None, window_s: float = 0.5) -> None:
        self.limit = min(start, cap)
        self.cap = cap
        self.metrics_url = metrics_url
        self.window_s = window_s
        self.settled = False
        self.tokens = 0
        self.completions = 0

    def observe(self, resp: Response) -> None:
        self.completions += 1
        self.tokens += resp.output_tokens or 1

    async def run(self, limiter: Limiter, session: aiohttp.ClientSession, stats: ExecStats, t0: float) -> None:
        last_tokens, last_time, best = 0, time.perf_counter(), 0.0
        while not self.settled:
            await asyncio.sleep(self.window_s)
            now = time.perf_counter()
            rate = (self.tokens - last_tokens) / (now - last_time)
            last_tokens, last_time = self.tokens, now
            full = limiter.active >= limiter.limit
            waiting = await _waiting_requests(session, self.metrics_url)
            if waiting is not None:
                grow = full and waiting == 0 and rate >= 0.95 * best
                if waiting > 0:
                    self.settled = True
            else:
                grow = full and rate > 1.05 * best
                if not grow and best > 0:
                    self.settled = True
            best = max(best, rate)
            if grow and self.limit < self.cap:
                self.limit = min(self.limit * 2, self.cap)
                await limiter.set_limit(self.limit)
                stats.concurrency_trace.append((now - t0, self.limit))
            elif self.limit >= self.cap:
                self.settled = True


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
    auto_start: int = 64,
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
    auto_task = asyncio.create_task(auto.run(limiter, client._session, stats, t0)) if auto else None
    pending: set[asyncio.Task[None]] = set()

    async def one(req: Request) -> None:
        try:
            resp = await client.generate(req)
            if auto:
                auto.observe(resp)
            result = on_done(req, resp)
            if inspect.isawaitable(result):
                await result
        finally:
            await limiter.release()

    try:
        for req in requests:
            await limiter.acquire()
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
