"""The capacity search itself, apart from how a load point is measured: bracket, then bisect, with the repeat
rule for points near the boundary. A :class:`Bench` measures one load level (a run dir) and says whether the
next one fits in the time left; :func:`search` decides which levels to measure and what they show.

- **Bracket**: measure the start load; while it holds, double it, until a load fails (``high``); the last load
  that held is ``low``. The start failing already is ``below_start`` (the capacity lies below it, not at zero).
- **Bisect**: measure the middle of ``[low, high]`` and keep the half the boundary lies in, until ``high − low ≤
  tolerance × low`` (a rate) or ``high − low ≤ max(1, ⌊tolerance × low⌋)`` (requests in flight, whole numbers).
- **Repeat**: a level whose goodput share lies within one binomial standard error of the SLO share
  (``|share − s| ≤ √(s(1 − s)/n)``, ``n`` its requests), with at least one request outside the SLOs, is measured
  again (at most twice more, while its pooled share stays that near) and decided on the requests of its
  measurements pooled, so that one noisy point does not decide the boundary (a level with every request within
  the SLOs has nothing against it, and is not repeated).
- **The client's lag**: a level that fails while none of its measurements kept the schedule (send lag p99 over
  the run's threshold: the client sent late, in bursts the server then queued) is measured again too (the same
  limit), and decided on the measurements that kept their schedule (on all, when none did).
- A level whose run failed or answered no request cannot be judged: before any load held, the search cannot
  decide (exit 2); above a load that held, it counts as not holding (the server did not carry it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Protocol

from evalkit.contracts import CapacityPoint
from evalkit.contracts.capacity import CapacityStatus, SearchKind

Step = Literal["bracket", "bisect", "repeat"]
MAX_DOUBLINGS = 16  # the bracket gives up after start x 2^16 held (65,536 times the start)

REPEAT_RULE = (
    "bracket: the start load doubled until one fails; bisect: the middle of [low, high] until high - low <= "
    "{resolution}; repeat: a level whose goodput share lies within one binomial standard error of {share:g} "
    "(sqrt(s(1 - s)/n), n its requests), with a request outside the SLOs, is measured again, up to {extra} more "
    "time(s) while it stays that near, and so "
    "is a failing level whose measurement did not keep its schedule (the client lagged); a level is decided on the "
    "requests of its measurements pooled, those that kept their schedule (all, when none did); "
    "the answer is the highest load measured to hold"
)


class Bench(Protocol):
    """What the search measures with."""

    def measure(self, level: float, step: Step, repeat: int) -> CapacityPoint:
        """Run load ``level`` once; ``error`` set on the point when it could not be judged."""
        ...

    def affordable(self, level: float) -> bool:
        """Whether measuring ``level`` fits in what is left of ``--max-duration``."""
        ...


@dataclass(frozen=True)
class SearchSettings:
    kind: SearchKind
    start: float
    slo_share: float
    tolerance: float
    max_repeats: int = 2  # measurements of one level beyond its first

    def resolution_text(self) -> str:
        return f"{self.tolerance:g} x low" if self.kind == "rate" else f"max(1, {self.tolerance:g} x low)"


@dataclass
class SearchResult:
    status: CapacityStatus
    reason: str | None
    low: float | None  # the highest load measured to hold
    high: float | None  # the lowest load measured to fail
    points: list[CapacityPoint] = field(default_factory=list)
    bracket_steps: int = 0
    bisect_steps: int = 0
    repeats: int = 0

    def grid_points(self, s: SearchSettings) -> int | None:
        """The levels a grid from the start to ``high`` needs at the resolution the bisection reached."""
        if self.low is None or self.high is None:
            return None
        step = s.tolerance * self.low if s.kind == "rate" else max(1.0, math.floor(s.tolerance * self.low))
        return math.ceil((self.high - s.start) / step - 1e-9) + 1


class _OutOfTime(Exception):
    pass


class _Unjudged(Exception):
    def __init__(self, point: CapacityPoint) -> None:
        self.point = point


def pooled_share(points: list[CapacityPoint]) -> float | None:
    """The goodput share over every request of ``points`` (one level's measurements)."""
    n = sum(p.requests for p in points)
    return sum(p.good_requests for p in points) / n if n else None


def kept(p: CapacityPoint) -> bool:
    """Whether the client sent ``p``'s requests on schedule (a point without a schedule, ``--search
    concurrency``, counts as kept)."""
    return p.schedule_kept is not False


def deciding(points: list[CapacityPoint]) -> list[CapacityPoint]:
    """The measurements a level is decided on: those that kept their schedule, or all when none did."""
    return [p for p in points if kept(p)] or points


def near_boundary(share: float, n: int, slo_share: float) -> bool:
    """Whether ``share`` over ``n`` requests lies within one binomial standard error of ``slo_share``."""
    return n > 0 and abs(share - slo_share) <= math.sqrt(slo_share * (1 - slo_share) / n)


def level_text(level: float, kind: SearchKind) -> str:
    return f"{level:g} req/s" if kind == "rate" else f"{level:g} in flight"


class _Search:
    def __init__(self, s: SearchSettings, bench: Bench) -> None:
        self.s, self.bench = s, bench
        self.result = SearchResult(status="ok", reason=None, low=None, high=None)

    def holds(self, level: float, step: Step) -> bool:
        """Measure ``level`` (and again, pooled, when near the boundary): whether it holds."""
        r = self.result
        if not self.bench.affordable(level):
            raise _OutOfTime
        first = self.bench.measure(level, step, 0)
        r.points.append(first)
        if first.error is not None:
            if r.low is None:
                raise _Unjudged(first)
            return False
        measured = [first]
        while len(measured) <= self.s.max_repeats and self._again(measured) and self.bench.affordable(level):
            again = self.bench.measure(level, "repeat", len(measured))
            r.points.append(again)
            r.repeats += 1
            if again.error is not None:
                break
            measured.append(again)
        share = pooled_share(deciding(measured))
        return share is not None and share >= self.s.slo_share

    def _again(self, measured: list[CapacityPoint]) -> bool:
        """Whether the level's measurements so far call for one more: near the boundary with a request outside
        the SLOs, or failing while no measurement kept its schedule (the client, not the server, may have failed)."""
        share = pooled_share(deciding(measured))
        if share is None:
            return False
        if share < self.s.slo_share and not any(kept(p) for p in measured):
            return True
        n = sum(p.requests for p in deciding(measured))
        return share < 1.0 and near_boundary(share, n, self.s.slo_share)

    def run(self) -> SearchResult:
        s, r = self.s, self.result
        try:
            level = s.start
            r.bracket_steps += 1
            if not self.holds(level, "bracket"):
                r.high = level
                return self._stop("below_start", f"capacity below the start {level_text(level, s.kind)}")
            r.low = level
            for _ in range(MAX_DOUBLINGS):
                level = level * 2
                r.bracket_steps += 1
                if not self.holds(level, "bracket"):
                    r.high = level
                    break
                r.low = level
            else:
                return self._stop(
                    "cannot_decide",
                    f"every load up to {level_text(level, s.kind)} held; give a higher --start-rate or "
                    "--start-concurrency",
                )
            while not self._closed():
                assert r.low is not None and r.high is not None
                mid = (r.low + r.high) / 2 if s.kind == "rate" else float(int((r.low + r.high) // 2))
                r.bisect_steps += 1
                if self.holds(_round(mid, s.kind), "bisect"):
                    r.low = _round(mid, s.kind)
                else:
                    r.high = _round(mid, s.kind)
        except _OutOfTime:
            return self._stop("max_duration", "--max-duration ran out before the next load point; the bracket so far")
        except _Unjudged as e:
            return self._stop(
                "cannot_decide",
                f"no load could be judged: the run at {level_text(e.point.offered, s.kind)} failed ({e.point.error})",
            )
        return r

    def _closed(self) -> bool:
        r, s = self.result, self.s
        assert r.low is not None and r.high is not None
        if s.kind == "rate":
            return r.high - r.low <= s.tolerance * r.low * (1 + 1e-9)
        return r.high - r.low <= max(1, math.floor(s.tolerance * r.low))

    def _stop(self, status: CapacityStatus, reason: str) -> SearchResult:
        self.result.status, self.result.reason = status, reason
        return self.result


def _round(level: float, kind: SearchKind) -> float:
    """A level as measured and named: 4 significant digits for a rate, a whole number in flight."""
    return float(int(level)) if kind == "concurrency" else float(f"{level:.4g}")


def search(s: SearchSettings, bench: Bench) -> SearchResult:
    """Bracket and bisect for the highest load that holds (this module's docstring has the rules)."""
    return _Search(s, bench).run()


def decision_rule(s: SearchSettings) -> str:
    """The rule as capacity.json's ``decision.rule`` states it."""
    return REPEAT_RULE.format(resolution=s.resolution_text(), share=s.slo_share, extra=s.max_repeats)
