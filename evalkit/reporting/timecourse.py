"""Time courses of a run from its samples' timings: throughput and requests in flight over time, and stalls of the
server (seconds without a first token while requests waited).

Pure functions over sample dicts (``start_s``, ``ttft_ms``, ``e2e_ms``, ``output_tokens``); no HTML here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evalkit.store.reader import as_int, as_num


@dataclass
class Stall:
    """The longest stretch in which requests waited and none got its first token."""

    start_s: float  # seconds after the first request was sent
    end_s: float
    waiting: int  # requests sent before ``end_s`` that had no token yet at ``start_s``
    burst: int  # first tokens that arrived within ``burst_ms`` after the stall
    burst_ms: float
    affected: list[int]  # indices (into the samples given) of the requests whose TTFT includes some of it

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


def _starts_and_firsts(samples: Sequence[dict[str, Any]]) -> list[tuple[int, float, float]]:
    out = []
    for i, s in enumerate(samples):
        start, ttft = as_num(s.get("start_s")), as_num(s.get("ttft_ms"))
        if start is not None and ttft is not None and ttft >= 0:
            out.append((i, start, start + ttft / 1000.0))
    return out


def first_token_stall(
    samples: Sequence[dict[str, Any]], min_s: float = 1.0, burst_ms: float = 100.0, min_share: float = 0.1
) -> Stall | None:
    """A stall of the server as the client saw it: at least ``min_s`` seconds in which requests were waiting for
    their first token and none arrived, ended by a burst of first tokens (at least ``min_share`` of the
    requests, and 5, within ``burst_ms``). Needs ``start_s`` and ``ttft_ms`` per sample; None when there was none."""
    rows = _starts_and_firsts(samples)
    if len(rows) < 5:
        return None
    t0 = min(r[1] for r in rows)
    firsts = sorted(r[2] for r in rows)
    best: Stall | None = None
    prev = t0
    for j, f in enumerate(firsts):
        gap_start = prev
        prev = f
        if f - gap_start < min_s:
            continue
        waiting = [r for r in rows if r[1] < f and r[2] >= f]
        burst = sum(1 for x in firsts[j:] if x - f <= burst_ms / 1000.0)
        if burst < max(5, min_share * len(rows)) or not waiting:
            continue
        if best is None or f - gap_start > best.seconds:
            best = Stall(
                start_s=gap_start - t0,
                end_s=f - t0,
                waiting=len(waiting),
                burst=burst,
                burst_ms=burst_ms,
                affected=[r[0] for r in waiting],
            )
    return best


def timeline(samples: Sequence[dict[str, Any]], max_bins: int = 120) -> dict[str, list[float]]:
    """Output tokens/s and requests in flight over the run, from each request's start, TTFT, E2E and output
    tokens (a request's tokens spread evenly from its first token to its end). Bins of a round width,
    ``{"t": bin starts (s), "tok_s": [...], "in_flight": [...]}``; empty without timings."""
    rows = []
    for s in samples:
        start, ttft, e2e = as_num(s.get("start_s")), as_num(s.get("ttft_ms")), as_num(s.get("e2e_ms"))
        if start is None or e2e is None:
            continue
        first = start + (ttft / 1000.0 if ttft is not None else e2e / 1000.0)
        rows.append((start, first, start + e2e / 1000.0, as_int(s.get("output_tokens")) or 0))
    if not rows:
        return {"t": [], "tok_s": [], "in_flight": []}
    t0 = min(r[0] for r in rows)
    span = max(r[2] for r in rows) - t0
    width = _round_width(span / max_bins) if span > 0 else 1.0
    n = max(1, math.ceil(span / width))
    tokens = [0.0] * n
    busy = [0.0] * n
    for start, first, end, out in rows:
        _spread(tokens, (first - t0) / width, (end - t0) / width, float(out))
        _spread(busy, (start - t0) / width, (end - t0) / width, (end - start) / width)
    return {
        "t": [round(i * width, 3) for i in range(n)],
        "tok_s": [round(x / width, 1) for x in tokens],
        "in_flight": [round(x, 2) for x in busy],
    }


def _round_width(w: float) -> float:
    for step in (0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600):
        if w <= step:
            return float(step)
    return float(math.ceil(w / 600) * 600)


def _spread(bins: list[float], a: float, b: float, amount: float) -> None:
    """Add ``amount`` to ``bins`` spread evenly over the fractional bin range [a, b]."""
    n = len(bins)
    if b <= a:
        bins[min(max(int(a), 0), n - 1)] += amount
        return
    rate = amount / (b - a)
    i = max(int(a), 0)
    while i < n and i < b:
        lo, hi = max(a, i), min(b, i + 1)
        if hi > lo:
            bins[i] += rate * (hi - lo)
        i += 1


def timeline_chart(cid: str, title: str, series: list[tuple[str, dict[str, list[float]], list[Any]]]) -> dict[str, Any]:
    """A chart of output tok/s (left axis) with requests in flight and the concurrency limit (right axis)."""
    return {
        "id": cid,
        "kind": "timeline",
        "title": title,
        "x": "seconds since the first request",
        "series": [
            {
                "label": label,
                "t": tl["t"],
                "tok_s": tl["tok_s"],
                "in_flight": tl["in_flight"],
                "limit": [[as_num(x[0]), as_int(x[1])] for x in trace if isinstance(x, list) and len(x) == 2],
            }
            for label, tl, trace in series
        ],
    }
