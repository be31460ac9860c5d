"""Run many requests against the server with bounded (fixed or self-tuning) concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import statistics
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import aiohttp

from evalkit.contracts import Request, Response, SchedulerStats
from evalkit.errors import warn
from evalkit.requests.client import Client
from evalkit.server.metrics import scrape_async

OnDone = Callable[[Request, Response], "Awaitable[None] | None"]


class Limiter:
    """A semaphore whose size can change while requests are in flight."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self.closed = False
        self._cond = asyncio.Condition()

    async def acquire(self) -> bool:
        """Wait for a slot and take it; False (no slot taken) once closed, also for those already waiting."""
        async with self._cond:
            await self._cond.wait_for(lambda: self.closed or self.active < self.limit)
            if self.closed:
                return False
            self.active += 1
            return True

    async def release(self) -> None:
        async with self._cond:
            self.active -= 1
            self._cond.notify_all()

    async def set_limit(self, limit: int) -> None:
        async with self._cond:
            self.limit = limit
            self._cond.notify_all()

    async def close(self) -> None:
        async with self._cond:
            self.closed = True
            self._cond.notify_all()


@dataclass(frozen=True)
class InFlight:
    """How many requests a run may have in flight: as asked, or capped by the open-file limit (``cap`` then says
    so: ``{"requested", "cap", "open_files_limit"}``)."""

    concurrency: int | str
    max_concurrency: int
    cap: dict[str, int] | None = None


def _open_descriptors() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(folder))
    return 32


def fit_open_files(concurrency: int | str, max_concurrency: int, reserve: int = 64) -> InFlight:
    """Each request in flight holds a socket, so ``concurrency`` (for "auto": ``max_concurrency``) of them must fit
    in this process's open-file limit (RLIMIT_NOFILE) beside the descriptors open now and ``reserve`` more (the
    store, /metrics scrapes, the workers' pipes, the report). The soft limit is raised towards the hard one as far
    as needed; where even that is too small, the concurrency is capped and a line on stderr says so: past the
    limit, connections fail with "Too many open files", the client's limit and not the server's."""
    try:
        import resource
    except ImportError:  # not POSIX: no such limit
        return InFlight(concurrency, max_concurrency)
    wanted = max_concurrency if concurrency == "auto" else int(concurrency)
    in_use = _open_descriptors()
    need = wanted + in_use + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return InFlight(concurrency, max_concurrency)
    raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if raised > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft >= need:
        return InFlight(concurrency, max_concurrency)
    cap = max(1, soft - in_use - reserve)
    flag = "--max-concurrency" if concurrency == "auto" else "--concurrency"
    warn(f"{flag} {wanted} needs about {need} open files but this process may open only {soft} (ulimit -n): at "
         f"most {cap} requests go in flight; raise the limit (e.g. ulimit -n {need}) for more")
    return InFlight(
        concurrency if concurrency == "auto" else cap, min(max_concurrency, cap),
        {"requested": wanted, "cap": cap, "open_files_limit": soft},
    )


COUNTERS = {  # vLLM's /metrics series auto reads, summed over engines (data parallel)
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:generation_tokens_total": "generated",
}


async def _server_counts(session: aiohttp.ClientSession, metrics_url: str | None) -> dict[str, float]:
    """From vLLM's /metrics, summed over engines: ``waiting`` and ``running`` (requests queued and running) and
    ``generated`` (output tokens so far); keys absent when not served."""
    if not metrics_url:
        return {}
    snap = await scrape_async(session, metrics_url, only=tuple(COUNTERS))
    if snap is None:
        return {}
    out: dict[str, float] = {}
    for name, key in COUNTERS.items():
        value = snap.value(name)
        if value is not None:
            out[key] = value
    return out


class AutoConcurrency:
    """Find the server's speed without tuning: a doubling climb on the server's output token rate.

    Raising the level lets a burst of new requests in at once; on a prefill-bound server they hold the decode
    rate down until they are prefilled. So each level first settles until the requests sent so far (the burst
    included) have streamed their first token (9 in 10 of them, bounded by ``max_window_s``), and is then
    measured for one typical request latency (median end-to-end time of the latest answers, within
    ``min_window_s``..``max_window_s``): the output token rate from the server's ``vllm:generation_tokens_total``
    (where /metrics is not served: the rate of streamed chunks), and the server's mean ``waiting`` and
    ``running`` requests. Then, against the best level so far:

    - everything has been sent: stop (nothing left to tune);
    - the rate fell clearly (below ``1 - gain`` of the best), or it did not rise clearly and the server queues
      (``waiting`` above ``queue_share`` of the level: the extra requests only wait there, inflating TTFT): go
      back to the best level and stop. A queue alone is no reason to go lower: a prefill-bound server keeps
      requests waiting for its token budget at every level while more in flight still raises its throughput;
    - the rate did not rise by more than ``gain``: keep this level and stop. On vLLM more requests in flight
      never lower throughput until the server queues or thrashes (both handled above), and a one-latency
      window reads the rate only roughly, so a tie is no evidence against the larger level;
    - fewer requests remain to be sent than the current level, or the cap is reached: stay;
    - else double.

    A level is judged only on a window in which the requests were there to send: where the sender waited for
    prompts still being built (streamed from a cold prompt cache) for more than ``starved_share`` of the window,
    the window is kept with ``starved: True`` and the level measured again.

    Every measured level is kept in ``levels``: limit, tok_s (server-counted output tokens/s), chunks_s (streamed
    chunks/s), waiting and running (mean server queue and batch); the server's figures are None where /metrics
    is not served.
    """

    def __init__(
        self, start: int, cap: int, metrics_url: str | None, gain: float = 0.10, min_window_s: float = 0.5,
        max_window_s: float = 6.0, queue_share: float = 0.25, starved_share: float = 0.05,
    ):
        self.limit = min(start, cap)
        self.cap = cap
        self.metrics_url = metrics_url
        self.gain = gain
        self.min_window_s = min_window_s
        self.max_window_s = max_window_s
        self.queue_share = queue_share
        self.starved_share = starved_share
        self.settled = False
        self.total = 0  # requests to send; set by execute()
        self.sent = 0
        self.starved_s = 0.0  # time a free slot waited for the next request to be built (streamed prompts)
        self.tokenless = 0
        self.latencies: deque[float] = deque(maxlen=64)  # seconds, of the latest answered requests
        self.levels: list[dict[str, Any]] = []

    @property
    def remaining(self) -> int:
        """Requests not yet sent."""
        return self.total - self.sent

    def observe(self, resp: Response) -> None:
        if resp.error is None and resp.e2e_ms is not None:
            self.latencies.append(resp.e2e_ms / 1000.0)
        if resp.ttft_ms is None:
            self.tokenless += 1  # finished (empty answer, error) without streaming a first token

    async def settle(self, client: Client) -> None:
        """Wait until the requests sent so far have (nearly all) streamed a first token or ended without one,
        or ``max_window_s``."""
        await asyncio.sleep(0.01)  # the sender fills the new level
        target = self.sent - self.limit // 10
        deadline = time.perf_counter() + self.max_window_s
        while client.first_tokens + self.tokenless < target and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)

    async def window_s(self) -> float:
        """The typical request latency, bounded; waits (up to the bound) for a first answer to know it."""
        deadline = time.perf_counter() + self.max_window_s
        while not self.latencies and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        typical = statistics.median(self.latencies) if self.latencies else self.max_window_s
        return min(self.max_window_s, max(self.min_window_s, typical))

    async def _measure(self, client: Client, window_s: float) -> dict[str, Any]:
        """Over ``window_s``: output tokens/s from the server's own counter (``tok_s``, None without /metrics),
        streamed chunks/s (``chunks_s``), and the server's mean queue and batch (``waiting``, ``running``; None if
        unknown).

        The server's counter is the one to trust: under load vLLM coalesces several tokens into one SSE chunk,
        so chunk counts under-read exactly the levels being compared (BENCHMARKS.md, H200)."""
        assert client._session is not None
        first = await _server_counts(client._session, self.metrics_url)
        c0, w0 = client.chunks_received, time.perf_counter()
        gauges: dict[str, list[float]] = {"waiting": [], "running": []}
        last, w1 = first, w0
        while time.perf_counter() - w0 < window_s:
            await asyncio.sleep(window_s / 4)
            counts = await _server_counts(client._session, self.metrics_url)
            for key, seen in gauges.items():
                if key in counts:
                    seen.append(counts[key])
            if "generated" in counts:
                last, w1 = counts, time.perf_counter()
        elapsed = time.perf_counter() - w0
        tok_s = None
        if "generated" in first and "generated" in last and w1 > w0:
            tok_s = round((last["generated"] - first["generated"]) / (w1 - w0), 1)
        mean = {key: round(sum(v) / len(v), 2) if v else None for key, v in gauges.items()}
        return {"limit": self.limit, "tok_s": tok_s, "chunks_s": round((client.chunks_received - c0) / elapsed, 1),
                **mean}

    @staticmethod
    def _rate(level: dict[str, Any]) -> float:
        return float(level["tok_s"] if level["tok_s"] is not None else level["chunks_s"])

    def _queues(self, level: dict[str, Any]) -> bool:
        return level["waiting"] is not None and level["waiting"] > self.queue_share * level["limit"]

    async def _set(self, limiter: Limiter, limit: int, stats: SchedulerStats, t0: float) -> None:
        self.limit = limit
        await limiter.set_limit(limit)
        stats.concurrency_trace.append((round(time.perf_counter() - t0, 3), limit))

    async def run(self, limiter: Limiter, client: Client, stats: SchedulerStats, t0: float) -> None:
        best: dict[str, Any] | None = None
        while not self.settled:
            await self.settle(client)
            starved = self.starved_s
            window = await self.window_s()
            level = await self._measure(client, window)
            if self.remaining > 0 and self.starved_s - starved > self.starved_share * window:
                # prompts came slower than the server took them (a cold prompt cache, lm-eval still building):
                # the rate read is the builder's, not the server's; measure this level again
                self.levels.append({**level, "starved": True})
                continue
            self.levels.append(level)
            rate, queues = self._rate(level), self._queues(level)
            rose = best is None or rate > (1.0 + self.gain) * self._rate(best)
            if self.remaining <= 0:
                self.settled = True  # everything has been sent: nothing left to tune
            elif best is not None and (rate < (1.0 - self.gain) * self._rate(best) or (queues and not rose)):
                self.settled = True  # clearly slower, or the extra requests only queue: back to the best level
                await self._set(limiter, best["limit"], stats, t0)
            elif not rose:
                self.settled = True  # a tie: the larger level is no slower, keep it
            elif self.remaining < self.limit or self.limit >= self.cap:
                self.settled = True  # the tail of the run, or the cap
            else:
                best = level
                await self._set(limiter, min(self.limit * 2, self.cap), stats, t0)


async def _loop_lag(stats: SchedulerStats, interval: float = 0.05) -> None:
    while True:
        t = time.perf_counter()
        await asyncio.sleep(interval)
        stats.loop_lag_ms.append(max(0.0, (time.perf_counter() - t - interval) * 1000.0))


async def _each(requests: Iterable[Request] | AsyncIterable[Request]) -> AsyncGenerator[Request, None]:
    if isinstance(requests, AsyncIterable):
        async for req in requests:
            yield req
    else:
        for req in requests:
            yield req


async def execute(
    requests: Iterable[Request] | AsyncIterable[Request],
    client: Client,
    on_done: OnDone,
    *,
    total: int | None = None,
    concurrency: int | str = 64,
    max_concurrency: int = 512,
    metrics_url: str | None = None,
    auto_start: int = 128,
    backlog: int = 1024,
) -> SchedulerStats:
    """Send every request, at most ``concurrency`` at a time ("auto" tunes it), calling ``on_done`` as each
    completes (in completion order).

    ``requests`` may be an async iterable (prompts still being built): each is sent as soon as it comes and a slot
    is free. "auto" needs ``total``, how many will come (for a plain iterable it counts them itself).

    A request's slot is freed as soon as its answer is in, so slow scoring never lowers the concurrency the
    server sees; at most ``backlog`` answers wait for ``on_done`` before sending pauses (memory stays bounded).
    When the run stops early (it was interrupted, or an ``on_done`` raised: then nothing more is sent and that
    error is raised), requests in flight are cancelled but answers already in finish their ``on_done``: nothing
    already computed is dropped."""
    stats = SchedulerStats()
    auto = (
        AutoConcurrency(auto_start, max_concurrency, metrics_url) if concurrency == "auto" else None
    )
    reqs = requests
    if auto:  # it needs to know how many are left
        if total is None:
            if isinstance(requests, AsyncIterable):
                raise ValueError("concurrency 'auto' over an async iterable of requests needs its total")
            reqs = list(requests)
            total = len(reqs)
        auto.total = total
    limit = auto.limit if auto else int(concurrency)
    limiter = Limiter(limit)
    # requests in flight + answers not yet handled by on_done
    unfinished = Limiter((max_concurrency if auto else limit) + backlog)
    stats.concurrency_trace.append((0.0, limit))
    t0, c0 = time.perf_counter(), time.process_time()
    lag_task = asyncio.create_task(_loop_lag(stats))
    assert client._session is not None
    auto_task = asyncio.create_task(auto.run(limiter, client, stats, t0)) if auto else None
    pending: set[asyncio.Task[None]] = set()
    answered: set[asyncio.Task[None]] = set()  # tasks past their request, in on_done
    failed: list[Exception] = []  # errors of on_done (e.g. the store could not write): sending stops at the first

    async def one(req: Request) -> None:
        try:
            try:
                resp = await client.generate(req)
            finally:
                await limiter.release()
            current = asyncio.current_task()
            if current is not None:
                answered.add(current)
            if auto:
                auto.observe(resp)
            result = on_done(req, resp)
            if inspect.isawaitable(result):
                await result
        except Exception as e:
            failed.append(e)
            await limiter.close()  # the sender stops at once, also while it waits for a slot
        finally:
            await unfinished.release()

    source = _each(reqs)
    try:
        while True:
            await unfinished.acquire()
            if not await limiter.acquire():  # closed: an on_done failed, send no more
                await unfinished.release()
                break
            waited = time.perf_counter()
            try:
                req = await source.__anext__()
            except StopAsyncIteration:
                await limiter.release()
                await unfinished.release()
                break
            if failed:  # while the next request was coming
                await limiter.release()
                await unfinished.release()
                break
            if auto:
                auto.starved_s += time.perf_counter() - waited
                auto.sent += 1
            task = asyncio.create_task(one(req))
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(answered.discard)
        while pending and not failed:
            await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
        if failed:
            raise failed[0]
    finally:
        await source.aclose()
        for t in (lag_task, auto_task, *(p for p in pending if p not in answered)):
            if t is not None:
                t.cancel()
        await asyncio.gather(lag_task, *(t for t in [auto_task] if t), *pending, return_exceptions=True)
        stats.wall_s = time.perf_counter() - t0
        stats.cpu_s = time.process_time() - c0
        stats.final_concurrency = auto.limit if auto else limit
        stats.auto_levels = auto.levels if auto else []
    return stats
