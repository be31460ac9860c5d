"""Scrape vLLM's Prometheus ``/metrics`` and turn two scrapes into the run's ``server`` section.

Over 400 lines: the one /metrics module (parse, scrape, async scrape, histogram quantiles, deltas, the gauge
sampler); the histogram fit is most of it and belongs with the deltas that use it.

vLLM's own counters and histograms say what the *server* saw (its TTFT, queue time, prefix-cache hits,
preemptions), which complements evalkit's client-side timings. Typical use::

    before = scrape(server.base_url)
    with MetricsSampler(server.base_url, interval_s=1.0, model_name="smollm2-135m") as sampler:
        ...  # send the requests
    after = scrape(server.base_url)
    section = delta(before, after, "smollm2-135m", gauges=sampler.summary())

Metric names are those of vLLM's V1 engine (checked against vLLM 0.32, ``vllm/v1/metrics/loggers.py``);
the older names (``vllm:gpu_cache_usage_perc``, ``vllm:gpu_prefix_cache_*``,
``vllm:time_per_output_token_seconds``) are read when the new ones are missing. A metric the server does
not export is reported as absent (``None`` and listed under ``absent``), never as 0. The parser is a small
implementation of the Prometheus text exposition format 0.0.4, so ``prometheus_client`` is not needed.

Histogram percentiles are estimates: their resolution is the server's bucket widths (e.g. vLLM's queue-time
buckets start at 0.3 s). Inside a bucket they are interpolated with a density fitted to the exact mean (see
:func:`histogram_quantile`), so they never contradict it; means are exact.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from evalkit.contracts.speed_catalogue import QUANTILES as SPEED_QUANTILES
from evalkit.limits import BodyTooLarge
from evalkit.server.http_reads import http_get, read_capped
from evalkit.server.periodic import PeriodicSampler

Labels = dict[str, str]

# section key -> candidate metric names, newest first
COUNTERS: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
}
REQUESTS = ("vllm:request_success_total",)
PREFIX_HITS = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
PREFIX_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HISTOGRAMS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("vllm:time_to_first_token_seconds",),
    "tpot_s": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "request_tpot_s": ("vllm:request_time_per_output_token_seconds",),
    "e2e_s": ("vllm:e2e_request_latency_seconds",),
    "queue_s": ("vllm:request_queue_time_seconds",),
}
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
RUNNING = ("vllm:num_requests_running",)
WAITING = ("vllm:num_requests_waiting",)
QUANTILES = tuple((key, percent / 100) for key, percent in SPEED_QUANTILES)  # the speed summary's, as fractions
# what delta() imports when it first fits a histogram (~0.3 s, seconds on a busy host): a process that will compute
# deltas imports it ahead, while it has nothing else to do
DELTA_IMPORTS = ("scipy.optimize",)

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE = re.compile(rf'^({_NAME})(?:\{{((?:[^"}}]|"(?:[^"\\]|\\.)*")*)\}})?\s+(\S+)(?:\s+\S+)?\s*$')
_LABEL_RE = re.compile(rf'\s*({_NAME})\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Snapshot:
    """One parsed scrape: samples by sample name (``foo_total``, ``foo_bucket``, ...) and family types."""

    samples: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    t: float = 0.0  # time.monotonic() when scraped
    wall: float = 0.0  # time.time() when scraped

    def get(self, name: str, model_name: str | None = None) -> list[tuple[Labels, float]]:
        """Samples called ``name``; with ``model_name``, only those whose ``model_name`` label matches it.

        When no sample carries that model name (e.g. a model path was given instead of the served name),
        all samples are returned: a vLLM server serves one model.
        """
        rows = self.samples.get(name, [])
        if model_name is not None:
            mine = [r for r in rows if r[0].get("model_name") == model_name]
            if mine:
                return mine
        return rows

    def value(self, name: str, model_name: str | None = None) -> float | None:
        """Sum over all matching series (e.g. over data-parallel engines); None when the metric is absent."""
        rows = self.get(name, model_name)
        return sum(v for _, v in rows) if rows else None

    def first_present(self, names: Iterable[str]) -> str | None:
        return next((n for n in names if n in self.samples), None)


def _unescape(value: str) -> str:
    return re.sub(r'\\[\\"n]', lambda m: _UNESCAPE[m.group(0)], value)


def parse_text(text: str, only: Iterable[str] | None = None) -> Snapshot:
    """Parse Prometheus text exposition format into a :class:`Snapshot`.

    ``only``: sample-name prefixes to keep (faster when sampling a few gauges).

    >>> s = parse_text('# TYPE vllm:x counter\\nvllm:x_total{model_name="m"} 3.0\\n')
    >>> s.value("vllm:x_total", "m"), s.types["vllm:x"]
    (3.0, 'counter')
    """
    prefixes = tuple(only) if only is not None else None
    snap = Snapshot(t=time.monotonic(), wall=time.time())
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                snap.types[parts[2]] = parts[3].strip()
            continue
        if prefixes is not None and not line.startswith(prefixes):
            continue
        m = _SAMPLE_RE.match(line)
        if m is None:
            continue  # tolerate lines we do not understand rather than failing the run
        name, label_text, value_text = m.groups()
        try:
            value = float(value_text)
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL_RE.findall(label_text or "")}
        snap.samples.setdefault(name, []).append((labels, value))
    return snap


def scrape(
    base_url: str,
    timeout: float = 5.0,
    only: Iterable[str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Snapshot | None:
    """GET ``{base_url}/metrics`` and parse it; None when the endpoint is missing, unreachable, redirects or
    answers more than ``MAX_BODY_BYTES`` (:func:`~evalkit.server.http_reads.http_get`).

    >>> scrape("http://127.0.0.1:9")  # nothing listens on the discard port
    """
    status, body = http_get(base_url.rstrip("/") + "/metrics", headers, timeout)  # follows no redirect
    if status != 200:
        return None
    return parse_text(body.decode("utf-8", errors="replace"), only)


async def scrape_async(
    session: aiohttp.ClientSession, metrics_url: str, only: Iterable[str] | None = None, timeout: float = 2.0
) -> Snapshot | None:
    """:func:`scrape` on an event loop, through the caller's session (the scheduler reads the server's queue
    while its requests stream); None when the endpoint is missing, unreachable, redirects or answers more than
    ``MAX_BODY_BYTES``."""
    try:
        async with session.get(metrics_url, timeout=aiohttp.ClientTimeout(total=timeout), allow_redirects=False) as r:
            if r.status != 200:
                return None
            text = (await read_capped(r)).decode("utf-8", errors="replace")
    except (aiohttp.ClientError, asyncio.TimeoutError, BodyTooLarge):
        return None
    return parse_text(text, only)


# ---------------------------------------------------------------------------------------------- histograms
def _buckets(snap: Snapshot, family: str, model_name: str | None) -> dict[float, float]:
    """Cumulative bucket counts by upper bound, summed over series (engines)."""
    out: dict[float, float] = {}
    for labels, v in snap.get(family + "_bucket", model_name):
        le = float(labels.get("le", "nan"))
        if not math.isnan(le):
            out[le] = out.get(le, 0.0) + v
    return out


def histogram_quantile(q: float, buckets: Mapping[float, float], total: float | None = None) -> float | None:
    """Quantile ``q`` from cumulative buckets ``{le: count}``, interpolated inside the bucket that holds it.

    Without ``total`` this is PromQL's ``histogram_quantile``: observations are taken as spread evenly inside
    each bucket (the lowest bucket starting at 0), and a quantile in the ``+Inf`` bucket returns the largest
    finite bound. With ``total``, the exact sum of the observations (the histogram's ``_sum``), the density
    inside every bucket is ``exp(lam * x)`` with the one ``lam`` that makes the histogram's mean equal the
    true mean (``lam = 0`` is the even spread). That keeps estimates consistent with the mean where buckets
    are coarse: vLLM's queue-time buckets start at 0.3 s, so 1,000 queue times averaging 20 ms all land in
    the first bucket, where the even spread puts the median at 0.15 s and the fitted density at ~14 ms (an
    exponential's true median). The fit is skipped (even spread) when observations fall above the largest
    finite bound, whose share of the sum is unknown.

    >>> round(histogram_quantile(0.5, {0.1: 2, 0.5: 6, 1.0: 8, math.inf: 8}), 6)
    0.3
    >>> round(histogram_quantile(0.5, {0.3: 1000, math.inf: 1000}, total=20.0), 4)
    0.0139
    """
    bounds = sorted(buckets)
    if not bounds or bounds[-1] != math.inf:
        return None
    n = buckets[math.inf]
    if n <= 0:
        return None
    lam = _fit_tilt(bounds, buckets, total) if total is not None else 0.0
    rank = q * n
    prev_bound, prev_count = 0.0, 0.0
    for i, le in enumerate(bounds):
        count = buckets[le]
        if count >= rank:
            if le == math.inf:
                return bounds[-2] if len(bounds) > 1 else None
            if i == 0 and le <= 0:
                return le
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return le
            return _tilted_point(prev_bound, le - prev_bound, (rank - prev_count) / in_bucket, lam)
        prev_bound, prev_count = le, count
    return None


def _tilted_mean_share(t: float) -> float:
    """Where the mean of the density ``exp(t * u)`` on ``u`` in [0, 1] lies, as a share of the interval."""
    if abs(t) < 1e-6:
        return 0.5 + t / 12
    if t < 0:
        return 1.0 - _tilted_mean_share(-t)
    return 1.0 / -math.expm1(-t) - 1.0 / t


def _tilted_point(start: float, width: float, p: float, lam: float) -> float:
    """The point below which a share ``p`` of a bucket [start, start + width] lies, density ``exp(lam * x)``."""
    t = lam * width
    if abs(t) < 1e-9:
        return start + p * width
    if t > 0:
        return start + width + math.log(p + (1.0 - p) * math.exp(-t)) / lam
    inner = p * math.expm1(t)
    return start + width if inner <= -1.0 else start + math.log1p(inner) / lam


def _fit_tilt(bounds: list[float], buckets: Mapping[float, float], total: float) -> float:
    """The ``lam`` of :func:`histogram_quantile`; 0 when the buckets cannot pin it down."""
    if len(bounds) < 2 or buckets[math.inf] - buckets[bounds[-2]] > 0 or bounds[0] <= 0:
        return 0.0
    segments: list[tuple[float, float, float]] = []  # (start, width, count)
    prev_bound, prev_count = 0.0, 0.0
    for le in bounds[:-1]:
        if buckets[le] > prev_count:
            segments.append((prev_bound, le - prev_bound, buckets[le] - prev_count))
        prev_bound, prev_count = le, buckets[le]
    lowest = sum(c * a for a, _, c in segments)
    highest = sum(c * (a + w) for a, w, c in segments)
    if not segments or not lowest < total < highest:
        return 0.0

    def excess(lam: float) -> float:
        return sum(c * (a + w * _tilted_mean_share(lam * w)) for a, w, c in segments) - total

    from scipy.optimize import brentq  # imported here (DELTA_IMPORTS): only the end-of-task summary needs it

    scale = 1.0 / min(w for _, w, _ in segments)
    lo, hi = -scale, scale
    while excess(lo) > 0:
        lo *= 4
    while excess(hi) < 0:
        hi *= 4
    return float(brentq(excess, lo, hi, xtol=1e-12 * scale, rtol=1e-10))


def _histogram_delta(
    before: Snapshot, after: Snapshot, family: str, model_name: str | None
) -> dict[str, float | int | None]:
    b, a = _buckets(before, family, model_name), _buckets(after, family, model_name)
    diff = {le: a[le] - b.get(le, 0.0) for le in a}
    n = diff.get(math.inf, 0.0)
    s_after, s_before = after.value(family + "_sum", model_name), before.value(family + "_sum", model_name)
    total_s = (s_after or 0.0) - (s_before or 0.0)
    out: dict[str, float | int | None] = {"mean": total_s / n if n > 0 else None}
    for key, q in QUANTILES:
        out[key] = histogram_quantile(q, diff, total_s) if n > 0 else None
    out["n"] = round(n)
    return out


# ------------------------------------------------------------------------------------------------ delta
def _counter_delta(before: Snapshot, after: Snapshot, names: Iterable[str], model_name: str | None):
    """(delta, name used) for the first name the *after* scrape has; (None, None) when absent."""
    name = after.first_present(names)
    if name is None:
        return None, None
    a = after.value(name, model_name) or 0.0
    b = before.value(name, model_name) or 0.0
    return a - b, name


def _requests(before: Snapshot, after: Snapshot, model_name: str | None) -> dict[str, Any] | None:
    name = after.first_present(REQUESTS)
    if name is None:
        return None
    by_reason: dict[str, float] = {}
    for snap, sign in ((after, 1.0), (before, -1.0)):
        for labels, v in snap.get(name, model_name):
            reason = labels.get("finished_reason", "unknown")
            by_reason[reason] = by_reason.get(reason, 0.0) + sign * v
    counts = {k: round(v) for k, v in sorted(by_reason.items())}
    return {"total": sum(counts.values()), "by_finished_reason": counts}


def delta(
    before: Snapshot | None,
    after: Snapshot | None,
    model_name: str | None = None,
    gauges: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run's ``server`` section: what vLLM counted between two scrapes.

    ``gauges``: :meth:`MetricsSampler.summary` (peaks of KV-cache usage and queue lengths); without it those
    peaks are reported as absent. Counters and histograms are summed over the server's engines (one series per
    data-parallel engine, label ``engine``); with more than one engine, ``engines`` gives each engine's
    counters by engine label. Histogram entries are ``{"mean", "p50", "p90", "p99", "n"}`` in seconds,
    estimated from bucket deltas (interpolated inside a bucket to agree with the exact mean).

    >>> delta(None, None)
    {'available': False}
    """
    if before is None or after is None:
        return {"available": False}
    out: dict[str, Any] = {"available": True, "model_name": model_name, "interval_s": after.t - before.t}
    absent: list[str] = []
    warnings: list[str] = []

    out["requests"] = _requests(before, after, model_name)
    for key, names in COUNTERS.items():
        value, _ = _counter_delta(before, after, names, model_name)
        out[key] = None if value is None else round(value)
    hits, _ = _counter_delta(before, after, PREFIX_HITS, model_name)
    queries, _ = _counter_delta(before, after, PREFIX_QUERIES, model_name)
    if hits is None or queries is None:
        out["prefix_cache_hit_rate"] = None
        absent.append("prefix_cache_hit_rate")
    else:
        out["prefix_cache"] = {"hits": round(hits), "queries": round(queries)}
        out["prefix_cache_hit_rate"] = hits / queries if queries > 0 else None
    for key, names in HISTOGRAMS.items():
        family = next((n for n in names if n + "_bucket" in after.samples), None)
        out[key] = None if family is None else _histogram_delta(before, after, family, model_name)
    g = gauges or {}
    for key in ("kv_cache_usage_peak", "num_requests_running_peak", "num_requests_waiting_peak"):
        out[key] = g.get(key)

    for key, value in out.items():
        if value is None and key not in ("model_name", "prefix_cache_hit_rate"):
            absent.append(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
            warnings.append(f"{key} went down between scrapes (server restarted?); value is not meaningful")
            out[key] = None
    out["absent"] = sorted(absent)
    if len(engines := _engines(after)) > 1:
        out["engines"] = {e: _engine_counts(_of_engine(before, e), _of_engine(after, e), model_name) for e in engines}
    if warnings:
        out["warnings"] = warnings
    return out


def _engines(snap: Snapshot) -> list[str]:
    """The ``engine`` label values of the request counters (one per data-parallel engine), in numeric order."""
    found = {labels["engine"] for name in REQUESTS for labels, _ in snap.samples.get(name, []) if "engine" in labels}
    return sorted(found, key=lambda e: (len(e), e))


def _of_engine(snap: Snapshot, engine: str) -> Snapshot:
    samples = {
        name: mine for name, rows in snap.samples.items() if (mine := [r for r in rows if r[0].get("engine") == engine])
    }
    return Snapshot(samples=samples, types=snap.types, t=snap.t, wall=snap.wall)


def _engine_counts(before: Snapshot, after: Snapshot, model_name: str | None) -> dict[str, Any]:
    """One engine's share of the section's counters (the section's totals are their sums)."""
    out: dict[str, Any] = {"requests": (_requests(before, after, model_name) or {}).get("total")}
    for key, names in {**COUNTERS, "prefix_cache_hits": PREFIX_HITS, "prefix_cache_queries": PREFIX_QUERIES}.items():
        value, _ = _counter_delta(before, after, names, model_name)
        out[key] = None if value is None else round(value)
    return out


# ---------------------------------------------------------------------------------------------- sampling
def _gauge(snap: Snapshot, names: Iterable[str], model_name: str | None, how: str) -> float | None:
    name = snap.first_present(names)
    if name is None:
        return None
    values = [v for _, v in snap.get(name, model_name) if not math.isnan(v)]
    if not values:
        return None
    return max(values) if how == "max" else sum(values)


class MetricsSampler(PeriodicSampler):
    """Background thread that scrapes ``/metrics`` every ``interval_s`` and keeps gauge peaks.

    KV-cache usage is the maximum over engines (a fraction, 1.0 = full); running/waiting requests are summed
    over engines. Scrape failures are counted, never raised.

    >>> with MetricsSampler("http://127.0.0.1:9", interval_s=0.05) as s:
    ...     pass
    >>> s.summary()["kv_cache_usage_peak"] is None
    True
    """

    _PREFIXES = KV_USAGE + RUNNING + WAITING
    thread_name = "evalkit-metrics-sampler"

    def __init__(self, base_url: str, interval_s: float = 1.0, model_name: str | None = None, timeout: float = 5.0):
        super().__init__(interval_s, timeout)
        self.base_url = base_url
        self.model_name = model_name
        self._peaks: dict[str, float | None] = {"kv": None, "running": None, "waiting": None}
        self._samples = 0
        self._failed = 0

    def sample_once(self) -> None:
        snap = scrape(self.base_url, self.timeout, only=self._PREFIXES)
        with self._lock:
            if snap is None:
                self._failed += 1
                return
            self._samples += 1
            for key, names, how in (
                ("kv", KV_USAGE, "max"),
                ("running", RUNNING, "sum"),
                ("waiting", WAITING, "sum"),
            ):
                v = _gauge(snap, names, self.model_name, how)
                old = self._peaks[key]
                if v is not None and (old is None or v > old):
                    self._peaks[key] = v

    def summary(self) -> dict[str, Any]:
        """Peaks seen so far: ``kv_cache_usage_peak`` (0-1), ``num_requests_running_peak``,
        ``num_requests_waiting_peak`` (None when never seen), plus ``samples``/``failed`` scrape counts."""
        with self._lock:
            return {
                "kv_cache_usage_peak": self._peaks["kv"],
                "num_requests_running_peak": None if self._peaks["running"] is None else int(self._peaks["running"]),
                "num_requests_waiting_peak": None if self._peaks["waiting"] is None else int(self._peaks["waiting"]),
                "samples": self._samples,
                "failed": self._failed,
                "interval_s": self.interval_s,
            }
