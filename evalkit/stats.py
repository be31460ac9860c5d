"""Percentiles and the speed summary of a set of sample records."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from evalkit.records import Percentiles, SampleRecord, Speed


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


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


def speed_summary(records: Sequence[SampleRecord], wall_s: float | None = None) -> Speed:
    """Speed over the records that got an answer. ``wall_s`` defaults to first send -> last completion."""
    done = [r for r in records if r.status != "api_error"]
    if wall_s is None:
        spans = [(r.start_s, r.start_s + (r.e2e_ms or 0) / 1000.0) for r in done if r.start_s is not None]
        wall_s = (max(e for _, e in spans) - min(s for s, _ in spans)) if spans else 0.0
    out_tok = sum(r.output_tokens or 0 for r in done)
    all_tok = out_tok + sum(r.prompt_tokens or 0 for r in done)
    itl = [x for r in done for x in r.itl_ms]
    return Speed(
        ttft_ms=percentiles(r.ttft_ms for r in done),
        tpot_ms=percentiles(r.tpot_ms for r in done),
        itl_ms=percentiles(itl),
        e2e_ms=percentiles(r.e2e_ms for r in done),
        output_tokens_per_s=out_tok / wall_s if wall_s > 0 else None,
        total_tokens_per_s=all_tok / wall_s if wall_s > 0 else None,
        requests_per_s=len(done) / wall_s if wall_s > 0 else None,
        wall_s=wall_s,
    )
