"""Steady-state speed (``speed.steady_state`` in summary.json): the figures over the window in which the requests
in flight were at the run's level, ramp-up and drain tail left out, beside the whole-run figures (whose keys stay
as they are); shown in the run report and the sweep table."""

from __future__ import annotations

from array import array
from typing import Any

import pytest

from evalkit.contracts import SampleFields, SampleRecord
from evalkit.scoring.speed import STEADY_MIN_REQUESTS, steady_state, steady_window
from evalkit.sweep.combination_runs import SPEED_COLUMNS, table_row
from evalkit.sweep.combinations import Combination


def rec(i: int, start: float, e2e_s: float, ttft_ms: float = 100.0, tokens: int = 10, **kw: Any) -> SampleRecord:
    return SampleRecord(
        key=f"k{i}", task="t", doc_id=i, prompt="p", status=kw.pop("status", "ok"), start_s=start,
        e2e_ms=e2e_s * 1000.0, ttft_ms=ttft_ms, tpot_ms=5.0, output_tokens=tokens, **kw,
    )  # fmt: skip


def closed_loop(n: int, c: int, e2e_s: float = 1.0, gap_s: float = 0.01, ramp_s: float = 0.05) -> list[SampleRecord]:
    """What a fixed-concurrency scheduler does: ``c`` requests sent over ``ramp_s``, each answer followed
    ``gap_s`` later by the next request, until ``n`` were sent."""
    out: list[SampleRecord] = []
    free = [i * ramp_s / c for i in range(c)]  # when each slot sends next
    for i in range(n):
        slot = min(range(c), key=lambda k: free[k])
        start = free[slot]
        out.append(rec(i, start, e2e_s, itl_ms=[1.0 + i]))
        free[slot] = start + e2e_s + gap_s
    return out


def test_window_leaves_out_ramp_up_and_drain() -> None:
    records = closed_loop(100, 4)
    start, end, peak = steady_window(records, 4)
    assert peak == 4
    assert start == pytest.approx(3 * 0.05 / 4)  # the 4th request's send: the first moment 4 were in flight
    last_send = max(r.start_s or 0 for r in records)
    assert end == pytest.approx(min(e for e in ((r.start_s or 0) + 1.0 for r in records) if e > last_send))


def test_steady_state_figures_and_counts() -> None:
    records = closed_loop(100, 4)
    records[0] = records[0].model_copy(update={"ttft_ms": 2500.0})  # a slow first request, sent during the ramp-up
    s = steady_state(records, 4)
    t0, t1, _ = steady_window(records, 4)
    assert s.reason is None and s.target == 4 and t0 is not None and t1 is not None
    assert (s.start_s, s.end_s, s.duration_s) == (round(t0, 3), round(t1, 3), round(t1 - t0, 3))
    inside = [r for r in records if r.start_s >= t0 and r.start_s + r.e2e_ms / 1000 <= t1]
    assert s.requests == len(inside) >= STEADY_MIN_REQUESTS
    assert s.ttft_ms is not None and s.ttft_ms.p99 == pytest.approx(100.0)  # the whole run's p99 has the 2.5 s
    assert s.itl_ms is not None and s.itl_ms.n == len(inside)
    finished = [r for r in records if t0 <= r.start_s + r.e2e_ms / 1000 <= t1]
    assert len(finished) > len(inside)
    assert s.requests_per_s == pytest.approx(len(finished) / (t1 - t0))
    assert s.output_tokens_per_s == pytest.approx(10 * len(finished) / (t1 - t0))


def test_itl_from_itl_of_when_records_were_loaded_without_theirs() -> None:
    records = closed_loop(60, 2)
    itl = array("f")
    spans: dict[str, tuple[int, int]] = {}
    slim = []
    for r in records:
        spans[r.key] = (len(itl), len(itl) + 1)
        itl.extend(r.itl_ms)
        slim.append(r.model_copy(update={"itl_ms": []}))

    def itl_of(r: SampleFields) -> array:
        lo, hi = spans[r.key]
        return itl[lo:hi]

    full, from_spans = steady_state(records, 2), steady_state(slim, 2, itl_of)
    assert from_spans.itl_ms is not None and full.itl_ms is not None
    assert from_spans.itl_ms.n == full.itl_ms.n > 0
    assert from_spans.itl_ms.p50 == pytest.approx(full.itl_ms.p50)


def test_no_figures_with_too_few_requests_or_a_level_never_reached() -> None:
    few = steady_state(closed_loop(12, 1), 1)
    assert few.requests == 12 and few.ttft_ms is None and few.output_tokens_per_s is None
    want = "only 12 requests ran entirely inside the window at 1 in flight; its figures need at least 30"
    assert few.reason == want and STEADY_MIN_REQUESTS == 30
    paced = [rec(i, i * 2.0, 1.0) for i in range(50)]  # one at a time: 8 never in flight
    never = steady_state(paced, 8)
    assert never.start_s is None and never.reason == "the requests in flight never reached 8 (at most 1)"
    failed = [rec(i, None, 0.0, status="api_error") for i in range(5)]  # type: ignore[arg-type]
    assert steady_state(failed, 4).target == 1  # capped by the answered requests


def test_sweep_table_has_steady_state_columns() -> None:
    combo = Combination("a", "default", 8, None)
    summary = {
        "tasks": {
            "t": {
                "speed": {
                    "output_tokens_per_s": 90.0,
                    "ttft_ms": {"p50": 120.0},
                    "steady_state": {"output_tokens_per_s": 100.0, "ttft_ms": {"p50": 110.0}, "requests": 40},
                }
            }
        }
    }
    row = table_row(combo, summary, ["t"])
    assert (row["output_tok_s"], row["steady_output_tok_s"], row["steady_ttft_p50_ms"]) == (90.0, 100.0, 110.0)
    assert row["steady_requests"] == 40
    assert {"steady_output_tok_s", "steady_ttft_p50_ms", "steady_requests"} <= set(SPEED_COLUMNS)
    few = {"tasks": {"t": {"speed": {"steady_state": {"requests": 3, "reason": "too few", "ttft_ms": None}}}}}
    row = table_row(combo, few, ["t"])
    assert row["steady_output_tok_s"] is None and row["steady_ttft_p50_ms"] is None and row["steady_requests"] == 3
