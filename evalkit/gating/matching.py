"""Speed comparisons at matched load: which requests of each run ran at which concurrency level.

A request's level is the concurrency limit active when it was sent (its ``start_s`` against the run's
concurrency trace). Two runs that each ran at one and the same level are compared over all their requests;
otherwise at the common level where both sent the most requests (at least ``min_requests`` each), over the
requests sent at that level. Without a common level their speed is not judged (skipped with a note), fails
when the policy requires matched load, or is compared over the whole runs when the policy asks to judge
unmatched load.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from evalkit.gating.inputs import SpeedRecords


@dataclass(frozen=True)
class SpeedSlice:
    """The answered requests of one run that a speed comparison uses, and the wall time they span."""

    ttft_ms: list[float] = field(default_factory=list)
    tpot_ms: list[float] = field(default_factory=list)
    e2e_ms: list[float] = field(default_factory=list)
    output_tokens: list[float] = field(default_factory=list)
    wall_s: float | None = None


Unmatched = Literal["skip", "fail", "whole"]
"""What to do with runs that share no load: leave speed not judged, fail it, or compare the whole runs."""


@dataclass(frozen=True)
class LoadMatch:
    """The slices to compare (None: not compared; ``verdict`` then says whether the rules skip or fail), the
    level they share (None: whole runs) and a note."""

    base: SpeedSlice | None
    cand: SpeedSlice | None
    level: int | None
    matched: bool
    note: str = ""
    verdict: Literal["skip", "fail"] = "skip"


def level_at(t: float | None, trace: list[tuple[float, int]], default: int | None) -> int | None:
    """The concurrency limit active at ``t`` seconds (the last trace entry at or before it)."""
    if not trace or t is None:
        return default
    times = [x for x, _ in trace]
    i = bisect.bisect_right(times, t) - 1
    return trace[max(i, 0)][1]


def request_levels(speed: SpeedRecords) -> list[int | None]:
    """The level each answered request was sent at, aligned with the records."""
    trace = sorted(speed.trace)
    return [level_at(t, trace, speed.concurrency) for t in speed.start_s]


def _present(values: list[float | None], keep: list[bool]) -> list[float]:
    return [float(v) for v, k in zip(values, keep, strict=True) if k and v is not None]


def _span(speed: SpeedRecords, keep: list[bool]) -> float | None:
    """First send -> last completion over the kept requests."""
    spans = [
        (s, s + e / 1000.0)
        for s, e, k in zip(speed.start_s, speed.e2e_ms, keep, strict=True)
        if k and s is not None and e is not None
    ]
    if not spans:
        return None
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return wall if wall > 0 else None


def slice_of(speed: SpeedRecords, levels: list[int | None], level: int | None) -> SpeedSlice:
    """The requests sent at ``level`` (all of them when ``level`` is None) and their wall time: the run's
    request phase for the whole run, else first send -> last completion of those requests."""
    keep = [True] * len(speed) if level is None else [x == level for x in levels]
    wall = (speed.wall_s or _span(speed, keep)) if level is None else _span(speed, keep)
    return SpeedSlice(
        ttft_ms=_present(speed.ttft_ms, keep),
        tpot_ms=_present(speed.tpot_ms, keep),
        e2e_ms=_present(speed.e2e_ms, keep),
        output_tokens=_present([None if x is None else float(x) for x in speed.output_tokens], keep),
        wall_s=wall,
    )


def _rate(speed: SpeedRecords) -> str:
    if speed.request_rate is None:
        return "as fast as its concurrency allowed"
    if math.isnan(speed.request_rate):  # a watch window whose ticks ran at different rates
        return "several request rates"
    return f"{speed.request_rate:g} requests/s"


def steady_slice(speed: SpeedRecords, min_requests: int) -> SpeedSlice | None:
    """The run's steady state (:func:`evalkit.scoring.speed.steady_state`'s window from its summary): latencies
    of the requests that started and finished inside the window, output tokens of those that finished inside
    it over its duration; None without a window or with fewer than ``min_requests`` requests inside."""
    if speed.steady is None:
        return None
    t0, t1 = speed.steady
    ends = [
        None if s is None or e is None else s + e / 1000.0 for s, e in zip(speed.start_s, speed.e2e_ms, strict=True)
    ]
    inside = [
        s is not None and end is not None and s >= t0 and end <= t1 for s, end in zip(speed.start_s, ends, strict=True)
    ]
    if sum(inside) < min_requests:
        return None
    finished = [end is not None and t0 <= end <= t1 for end in ends]
    return SpeedSlice(
        ttft_ms=_present(speed.ttft_ms, inside),
        tpot_ms=_present(speed.tpot_ms, inside),
        e2e_ms=_present(speed.e2e_ms, inside),
        output_tokens=_present([None if x is None else float(x) for x in speed.output_tokens], finished),
        wall_s=t1 - t0,
    )


def _whole(runs: list[SpeedRecords], min_requests: int) -> tuple[list[SpeedSlice], str]:
    """Each run over its steady state when every run has one with enough requests, else over its whole request
    phase; and a note saying which."""
    steady = [steady_slice(r, min_requests) for r in runs]
    if all(s is not None for s in steady):
        return [s for s in steady if s is not None], "speed over each run's steady state (ramp-up and drain left out)"
    return [slice_of(r, request_levels(r), None) for r in runs], ""


def _describe(counts: Counter[int | None]) -> str:
    used = sorted(x for x in counts if x is not None)
    return "→".join(str(x) for x in used) if used else "an unknown concurrency"


def match_load(base: SpeedRecords, cand: SpeedRecords, min_requests: int, unmatched: Unmatched) -> LoadMatch:
    """Pick the requests to compare: whole runs at one shared level, else the best common level, else (no
    shared load) as ``unmatched`` says: not judged, failed, or the whole runs with a note."""
    lb, lc = request_levels(base), request_levels(cand)
    cb, cc = Counter(lb), Counter(lc)
    if base.request_rate != cand.request_rate:
        why = f"baseline sent {_rate(base)}, candidate {_rate(cand)}"
        return _unmatched(base, cand, lb, lc, why, unmatched)
    if len(cb) <= 1 and cb.keys() == cc.keys():
        level = next(iter(cb), None)
        if level is not None:
            (b, c), note = _whole([base, cand], min_requests)
            return LoadMatch(b, c, level, matched=True, note=note)
        return _unmatched(base, cand, lb, lc, "the concurrency of both runs is unknown", unmatched)
    loads = f"baseline ran at concurrency {_describe(cb)}, candidate at {_describe(cc)}"
    common = [x for x in cb.keys() & cc.keys() if x is not None and min(cb[x], cc[x]) >= min_requests]
    if common:
        level = max(common, key=lambda x: (min(cb[x], cc[x]), x))
        note = f"{loads}; speed compared at {level} ({cb[level]} vs {cc[level]} requests sent at that level)"
        return LoadMatch(slice_of(base, lb, level), slice_of(cand, lc, level), level, matched=True, note=note)
    return _unmatched(base, cand, lb, lc, f"{loads}, with no common level of ≥{min_requests} requests", unmatched)


def _unmatched(
    base: SpeedRecords,
    cand: SpeedRecords,
    lb: list[int | None],
    lc: list[int | None],
    why: str,
    unmatched: Unmatched,
) -> LoadMatch:
    if unmatched == "whole":
        note = f"{why}; speed compared over the whole runs (judge_unmatched_load)"
        return LoadMatch(slice_of(base, lb, None), slice_of(cand, lc, None), None, matched=False, note=note)
    if unmatched == "fail":
        note = f"cannot compare speed at matched load: {why} (require_matched_load)"
        return LoadMatch(None, None, None, matched=False, note=note, verdict="fail")
    note = (
        f"speed not judged: {why}; speed at different load says nothing about a regression "
        "(set speed.judge_unmatched_load: true to compare anyway)"
    )
    return LoadMatch(None, None, None, matched=False, note=note)


@dataclass(frozen=True)
class RunsMatch:
    """Per-run slices of each side (None: not compared; ``verdict`` then says whether rules skip or fail)."""

    base: list[SpeedSlice] | None
    cand: list[SpeedSlice] | None
    note: str = ""
    verdict: Literal["skip", "fail"] = "skip"


def match_runs(
    bases: list[SpeedRecords], cands: list[SpeedRecords], min_requests: int, unmatched: Unmatched
) -> RunsMatch:
    """Slices to compare, one per run. One run per side: :func:`match_load` (the common concurrency level).
    Several: every run over its whole request phase when all ran at one and the same level; otherwise as
    ``unmatched`` says."""
    if len(bases) == 1 and len(cands) == 1:
        m = match_load(bases[0], cands[0], min_requests, unmatched)
        if m.base is None or m.cand is None:
            return RunsMatch(None, None, m.note, m.verdict)
        return RunsMatch([m.base], [m.cand], m.note)
    levels = [set(request_levels(r)) for r in (*bases, *cands)]
    if len({r.request_rate for r in (*bases, *cands)}) > 1:
        levels = [{None}]  # another request rate is another load
    slices, note = _whole([*bases, *cands], min_requests)
    whole = RunsMatch(slices[: len(bases)], slices[len(bases) :], note)
    if all(len(x) == 1 for x in levels) and len(set().union(*levels)) == 1 and None not in levels[0]:
        return whole
    shown = ", ".join("→".join(str(x) for x in sorted(v, key=str)) or "?" for v in levels)
    why = f"the runs ran at concurrency {shown} (baseline runs first), not all at one and the same level"
    if unmatched == "whole":
        flat = [slice_of(r, request_levels(r), None) for r in (*bases, *cands)]
        note = f"{why}; speed compared over the whole runs (judge_unmatched_load)"
        return RunsMatch(flat[: len(bases)], flat[len(bases) :], note)
    if unmatched == "fail":
        return RunsMatch(None, None, f"cannot compare speed at matched load: {why} (require_matched_load)", "fail")
    return RunsMatch(None, None, f"speed not judged: {why} (set speed.judge_unmatched_load: true to compare anyway)")
