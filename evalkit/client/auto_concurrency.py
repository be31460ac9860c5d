"""``--concurrency auto``: find the level of requests in flight at which the server is fastest, from its own
``/metrics`` while the run's requests stream."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from typing import Any

import aiohttp

from evalkit.client.http_client import Client
from evalkit.client.limiter import Limiter
from evalkit.contracts import Response, SchedulerStats
from evalkit.server.metrics import scrape_async

COUNTERS = {  # vLLM's /metrics series auto reads, summed over engines (data parallel)
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_requests_running": "running",
    "vllm:generation_tokens_total": "generated",
}


async def _server_counts(session: aiohttp.ClientSession, metrics_url: str | list[str] | None) -> dict[str, float]:
    """From vLLM's /metrics, summed over engines and over endpoints (a sharded run gives one URL per endpoint):
    ``waiting`` and ``running`` (requests queued and running) and ``generated`` (output tokens so far); a key is
    absent unless every endpoint serves it (a sum over some of them would not be the run's)."""
    urls = [metrics_url] if isinstance(metrics_url, str) else list(metrics_url or ())
    if not urls:
        return {}
    snaps = await asyncio.gather(*(scrape_async(session, url, only=tuple(COUNTERS)) for url in urls))
    out: dict[str, float] = {}
    for name, key in COUNTERS.items():
        values = [snap.value(name) if snap is not None else None for snap in snaps]
        if all(v is not None for v in values):
            out[key] = sum(v for v in values if v is not None)
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
        self,
        start: int,
        cap: int,
        metrics_url: str | list[str] | None,
        gain: float = 0.10,
        min_window_s: float = 0.5,
        max_window_s: float = 6.0,
        queue_share: float = 0.25,
        starved_share: float = 0.05,
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
        so chunk counts under-read exactly the levels being compared (docs/benchmarks/archive/gpu-leases.md)."""
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
        return {
            "limit": self.limit,
            "tok_s": tok_s,
            "chunks_s": round((client.chunks_received - c0) / elapsed, 1),
            **mean,
        }

    @staticmethod
    def _rate(level: dict[str, Any]) -> float:
        return float(level["tok_s"] if level["tok_s"] is not None else level["chunks_s"])

    def _queues(self, level: dict[str, Any]) -> bool:
        return level["waiting"] is not None and level["waiting"] > self.queue_share * level["limit"]

    async def _set(self, limiter: Limiter, limit: int, stats: SchedulerStats, t0: float) -> None:
        self.limit = limit
        limiter.set_limit(limit)
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
