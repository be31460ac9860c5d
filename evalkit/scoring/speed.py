"""Percentiles and the speed summary of a set of sample records, over the whole run and over its steady state."""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from evalkit.contracts import LATENCIES, QUANTILES, Percentiles, SampleFields, Speed, SteadyState

STEADY_MIN_REQUESTS = 30  # fewer requests inside the steady-state window: no steady-state figures


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values."""
    if not len(sorted_values):
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def large_percentiles(values: array, scratch: bool = False) -> Percentiles:
    """Exact percentiles of a big float array (e.g. every ITL of a run) without a Python list per value.
    ``scratch``: ``values`` is the caller's to lose, and is reordered in place instead of copied (a 20,000-request
    run's ITLs are 80 MB)."""
    import numpy as np

    if len(values) == 0:
        return Percentiles(n=0)
    arr: Any = np.frombuffer(values, dtype=np.float32 if values.typecode == "f" else np.float64)
    mean = float(arr.mean(dtype=np.float64))  # before any reordering: the same sum, in the same order
    qs = np.percentile(arr, [pct for _, pct in QUANTILES], overwrite_input=scratch)
    stats = {name: float(x) for (name, _), x in zip(QUANTILES, qs, strict=True)}
    return Percentiles(mean=mean, **stats, n=len(values))


def floats(values: Iterable[float | None]) -> Any:
    """``values`` without their Nones, as a new numpy float64 array (8 bytes a value, not a float object's 32)."""
    import numpy as np

    if isinstance(values, np.ndarray):
        return values.astype(np.float64)  # a copy, whatever its type
    return np.fromiter((v for v in values if v is not None), dtype=np.float64)


def percentiles(values: Iterable[float | None]) -> Percentiles:
    vals = floats(values)
    if not len(vals):
        return Percentiles(n=0)
    vals.sort()
    stats = {name: float(percentile(vals, pct)) for name, pct in QUANTILES}
    return Percentiles(mean=float(vals.sum()) / len(vals), **stats, n=len(vals))


def speed_summary(records: Sequence[SampleFields], wall_s: float | None = None, itl: array | None = None) -> Speed:
    """Speed over the records that got an answer. ``wall_s`` defaults to first send -> last completion.
    ``itl``: every inter-token latency of the run when the records were loaded without theirs (big runs)."""
    done = [r for r in records if r.status != "api_error"]
    if wall_s is None:
        sent = [r for r in done if r.start_s is not None]
        first = min((r.start_s for r in sent if r.start_s is not None), default=0.0)
        last = max((r.start_s + (r.e2e_ms or 0) / 1000.0 for r in sent if r.start_s is not None), default=0.0)
        wall_s = last - first
    out_tok = sum(r.output_tokens or 0 for r in done)
    all_tok = out_tok + sum(r.prompt_tokens or 0 for r in done)
    if itl is None:
        itl = array("d", (x for r in done for x in r.itl_ms))
    rates = {
        "output_tokens_per_s": out_tok / wall_s if wall_s > 0 else None,
        "total_tokens_per_s": all_tok / wall_s if wall_s > 0 else None,
        "requests_per_s": len(done) / wall_s if wall_s > 0 else None,
    }
    return Speed.model_validate({**_latencies(done, itl), **rates, "wall_s": wall_s})


def _latencies(records: Sequence[SampleFields], itl: array, scratch: bool = False) -> dict[str, Percentiles]:
    """Percentiles of each latency of the catalogue (:data:`~evalkit.contracts.LATENCIES`) over ``records``; the
    inter-token latencies, one per token gap and many, from ``itl`` (reordered in place when ``scratch``)."""
    return {
        lat.key: large_percentiles(itl, scratch)
        if lat.key == "itl_ms"
        else percentiles(getattr(r, lat.key) for r in records)
        for lat in LATENCIES
    }


def steady_window(records: Sequence[SampleFields], target: int) -> tuple[float | None, float | None, int]:
    """(start, end, most in flight) of the window in which at least ``target`` of the answered ``records`` were in
    flight: from the first moment that many were to the last moment that many were (the ramp-up before and the
    drain tail after are left out; the moments in between when one had finished and the next was not yet sent
    are in). (None, None, most) when the level was never reached."""
    import numpy as np

    timed = [r for r in records if r.start_s is not None and r.e2e_ms is not None]
    starts = floats(r.start_s for r in timed)
    ends = starts + floats(r.e2e_ms for r in timed) / 1000.0
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(len(starts), np.int64), np.full(len(ends), -1, np.int64)])
    by_time = np.lexsort((steps, times))  # at the same moment an end (-1) comes before a start (+1)
    times, steps = times[by_time], steps[by_time]
    level = np.cumsum(steps)
    peak = int(level.max()) if len(level) else 0
    reached = np.flatnonzero((steps == 1) & (level >= target))
    if not len(reached):
        return None, None, peak
    first = int(reached[0])
    left = np.flatnonzero((steps[first:] == -1) & (level[first:] == target - 1))
    end = float(times[first + int(left[-1])]) if len(left) else None
    return float(times[first]), end, peak


def steady_state(
    records: Sequence[SampleFields],
    target: int,
    itl_of: Callable[[SampleFields], Sequence[float]] | None = None,
    min_requests: int = STEADY_MIN_REQUESTS,
) -> SteadyState:
    """Speed over the steady-state window (:func:`steady_window`) at ``target`` requests in flight (capped by the
    number of answered records). Latency percentiles are over the requests that started and finished inside
    the window; output tokens/s and requests/s count the requests that finished inside it, over its duration.
    Each record's ITLs come from ``itl_of`` (records loaded without theirs: the store's
    :meth:`~evalkit.store.sample_rows.SampleRows.itl_of`), else from the record. Fewer than ``min_requests``
    requests inside: no figures, and ``reason`` says why."""
    done = [r for r in records if r.status != "api_error" and r.start_s is not None and r.e2e_ms is not None]
    target = max(1, min(target, len(done)))
    start, end, peak = steady_window(done, target)
    out = SteadyState(target=target, min_requests=min_requests)
    if start is None or end is None:
        out.reason = f"the requests in flight never reached {target} (at most {peak})"
        return out
    out.start_s, out.end_s, out.duration_s = round(start, 3), round(end, 3), round(end - start, 3)

    def end_of(r: SampleFields) -> float:
        return (r.start_s or 0.0) + (r.e2e_ms or 0.0) / 1000.0

    inside = [r for r in done if (r.start_s or 0.0) >= start and end_of(r) <= end]
    out.requests = len(inside)
    if len(inside) < min_requests or end <= start:
        out.reason = (
            f"only {len(inside)} requests ran entirely inside the window at {target} in flight; its figures need "
            f"at least {min_requests}"
        )
        return out
    finished = [r for r in done if start <= end_of(r) <= end]
    if itl_of is not None:
        gaps = array("f")
        for r in inside:
            gaps.extend(itl_of(r))
    else:
        gaps = array("d", (x for r in inside for x in r.itl_ms))
    duration = end - start
    for key, value in _latencies(inside, gaps, scratch=True).items():  # gaps: this window's own copy
        setattr(out, key, value)
    out.output_tokens_per_s = sum(r.output_tokens or 0 for r in finished) / duration
    out.requests_per_s = len(finished) / duration
    return out
