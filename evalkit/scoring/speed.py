"""Percentiles and the speed summary of a set of sample records."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence
from typing import Any

from evalkit.contracts import Percentiles, SampleRecord, Speed


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def large_percentiles(values: array) -> Percentiles:
    """Exact percentiles of a big float array (e.g. every ITL of a run) without a Python list per value."""
    import numpy as np

    if len(values) == 0:
        return Percentiles(n=0)
    arr: Any = np.frombuffer(values, dtype=np.float32 if values.typecode == "f" else np.float64)
    p50, p90, p99 = (float(x) for x in np.percentile(arr, [50, 90, 99]))
    return Percentiles(mean=float(arr.mean(dtype=np.float64)), p50=p50, p90=p90, p99=p99, n=len(values))


def percentiles(values: Iterable[float | None]) -> Percentiles:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return Percentiles(n=0)
    return Percentiles(
        mean=sum(vals) / len(vals),
        p50=percentile(vals, 50),
        p90=percentile(vals, 90),
        p99=percentile(vals, 99),
        n=len(vals),
    )


def speed_summary(records: Sequence[SampleRecord], wall_s: float | None = None, itl: array | None = None) -> Speed:
    """Speed over the records that got an answer. ``wall_s`` defaults to first send -> last completion.
    ``itl``: every inter-token latency of the run when the records were loaded without theirs (big runs)."""
    done = [r for r in records if r.status != "api_error"]
    if wall_s is None:
        spans = [(r.start_s, r.start_s + (r.e2e_ms or 0) / 1000.0) for r in done if r.start_s is not None]
        wall_s = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0.0
    out_tok = sum(r.output_tokens or 0 for r in done)
    all_tok = out_tok + sum(r.prompt_tokens or 0 for r in done)
    if itl is None:
        itl = array("d", (x for r in done for x in r.itl_ms))
    return Speed(
        ttft_ms=percentiles(r.ttft_ms for r in done),
        tpot_ms=percentiles(r.tpot_ms for r in done),
        itl_ms=large_percentiles(itl),
        e2e_ms=percentiles(r.e2e_ms for r in done),
        output_tokens_per_s=out_tok / wall_s if wall_s > 0 else None,
        total_tokens_per_s=all_tok / wall_s if wall_s > 0 else None,
        requests_per_s=len(done) / wall_s if wall_s > 0 else None,
        wall_s=wall_s,
    )
