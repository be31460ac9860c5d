"""The capacity search's rules (evalkit/capacity/search.py) on a scripted bench: bracket by doubling, bisect to
the tolerance, the repeat of a point near the boundary, and the stops (below the start, cannot decide,
--max-duration), with no server."""

from __future__ import annotations

from collections.abc import Callable

from evalkit.capacity.search import SearchSettings, Step, near_boundary, search
from evalkit.contracts import CapacityPoint


class Scripted:
    """A bench whose level holds when ``share(level, repeat)`` ≥ the SLO share; ``budget``: points it affords."""

    def __init__(
        self,
        share: Callable[[float, int], float | None],
        n: int = 1000,
        budget: int = 1000,
        kept: Callable[[float, int], bool] = lambda level, repeat: True,
    ) -> None:
        self.share, self.n, self.budget, self.kept = share, n, budget, kept
        self.measured: list[tuple[float, Step, int]] = []

    def affordable(self, level: float) -> bool:
        return len(self.measured) < self.budget

    def measure(self, level: float, step: Step, repeat: int) -> CapacityPoint:
        self.measured.append((level, step, repeat))
        share = self.share(level, repeat)
        if share is None:
            return CapacityPoint(offered=level, requests=0, good_requests=0, holds=False, run_dir="x", step=step,
                                 repeat=repeat, error="connection refused")  # fmt: skip
        good = round(share * self.n)
        return CapacityPoint(offered=level, requests=self.n, good_requests=good, goodput_share=good / self.n,
                             holds=good / self.n >= 0.99, run_dir=f"x{len(self.measured)}", step=step, repeat=repeat,
                             schedule_kept=self.kept(level, repeat))  # fmt: skip


def _settings(**kw: object) -> SearchSettings:
    base: dict[str, object] = {"kind": "rate", "start": 1.0, "slo_share": 0.99, "tolerance": 0.05}
    return SearchSettings(**{**base, **kw})  # type: ignore[arg-type]


def test_brackets_by_doubling_then_bisects_to_the_tolerance() -> None:
    bench = Scripted(lambda level, _: 1.0 if level <= 37.0 else 0.5)
    r = search(_settings(), bench)
    assert r.status == "ok" and r.low is not None and r.high is not None
    assert [lv for lv, step, _ in bench.measured if step == "bracket"] == [1, 2, 4, 8, 16, 32, 64]
    assert r.low <= 37.0 < r.high and r.high - r.low <= 0.05 * r.low
    assert r.bracket_steps == 7 and r.bisect_steps == len(bench.measured) - 7 and r.repeats == 0
    grid = r.grid_points(_settings())
    assert grid is not None and len(bench.measured) < grid  # 12 levels against a grid of 30


def test_a_point_near_the_boundary_is_repeated_and_decided_pooled() -> None:
    """Bisecting [20, 40], 30's first measurement holds at 0.992 (within one standard error of 0.99 over 1000
    requests); its repeat at 0.95 pools to 0.971: the level fails, one noisy point did not decide it."""
    bench = Scripted(lambda level, rep: 1.0 if level < 30 else (0.992 if rep == 0 else 0.95) if level == 30 else 0.0)
    r = search(_settings(start=20.0), bench)
    assert bench.measured[2:4] == [(30.0, "bisect", 0), (30.0, "repeat", 1)] and r.repeats == 1
    assert r.high == 30.0 and r.low is not None and r.low < 30.0
    assert near_boundary(0.992, 1000, 0.99) and not near_boundary(1.0, 1000, 0.99)


def test_a_bracket_point_near_the_boundary_is_repeated_but_not_one_with_every_request_good() -> None:
    """Doubling, 16 first misses by a hair (0.985 of 200: within one standard error of 0.99), its repeat
    holds at 1.0: pooled 0.9925, still that near: a third at 1.0 pools to 0.995, which holds and is no longer near
    (the standard error over 600 is 0.004). 1, 2, 4, 8 (every request good) are not repeated, nor is 32 (0.5)."""
    share = {16.0: (0.985, 1.0, 1.0)}
    bench = Scripted(lambda level, rep: 1.0 if level < 16 else share[level][rep] if level in share else 0.5, n=200)
    r = search(_settings(), bench)
    assert [m for m in bench.measured if m[1] == "repeat"] == [(16.0, "repeat", 1), (16.0, "repeat", 2)]
    assert r.low is not None and r.low >= 16.0 and r.high is not None and r.high <= 32.0


def test_a_failing_level_the_client_sent_late_is_measured_again_and_decided_on_time() -> None:
    """16's first measurement fails (0.8) while the client lagged behind the schedule; measured again on schedule it
    holds (1.0), and that decides it. 32 fails on schedule: not repeated. A level that lags every time is
    decided on what was measured: 64 here, never reached."""
    bench = Scripted(lambda level, rep: 0.8 if (level, rep) == (16.0, 0) or level >= 32 else 1.0,
                     kept=lambda level, rep: (level, rep) != (16.0, 0))  # fmt: skip
    r = search(_settings(), bench)
    assert [m for m in bench.measured if m[1] == "repeat"] == [(16.0, "repeat", 1)]
    assert r.low is not None and r.low >= 16.0 and r.high is not None and r.high <= 32.0
    always_late = Scripted(lambda level, rep: 0.8 if level >= 16 else 1.0, kept=lambda level, rep: level < 16)
    r = search(_settings(), always_late)
    assert r.high is not None and r.high <= 16.0 and (16.0, "repeat", 1) in always_late.measured


def test_a_start_that_already_fails_is_below_start_not_zero() -> None:
    r = search(_settings(start=10.0), Scripted(lambda level, _: 0.5))
    assert r.status == "below_start" and r.low is None and r.high == 10.0
    assert r.reason == "capacity below the start 10 req/s"


def test_a_server_failing_every_point_cannot_be_decided() -> None:
    bench = Scripted(lambda level, _: None)
    r = search(_settings(start=4.0), bench)
    assert r.status == "cannot_decide" and len(bench.measured) == 1
    assert r.reason is not None and "no load could be judged" in r.reason and "connection refused" in r.reason


def test_a_failed_run_above_a_held_load_counts_as_not_holding() -> None:
    r = search(_settings(), Scripted(lambda level, _: 1.0 if level <= 4 else None))
    assert r.status == "ok" and r.high is not None and r.low is not None and 4.0 <= r.low < r.high <= 8.0


def test_max_duration_stops_with_the_bracket_so_far() -> None:
    bench = Scripted(lambda level, _: 1.0 if level <= 37.0 else 0.5, budget=8)
    r = search(_settings(), bench)
    assert r.status == "max_duration" and len(bench.measured) == 8
    assert (r.low, r.high) == (32.0, 48.0)  # the bracket and one bisection step


def test_concurrency_bisects_whole_numbers() -> None:
    bench = Scripted(lambda level, _: 1.0 if level <= 13 else 0.0)
    r = search(_settings(kind="concurrency", tolerance=0.01), bench)
    assert r.status == "ok" and (r.low, r.high) == (13.0, 14.0)
    assert all(level == int(level) for level, _, _ in bench.measured)


def test_every_load_holding_cannot_be_decided() -> None:
    r = search(_settings(), Scripted(lambda level, _: 1.0))
    assert r.status == "cannot_decide" and r.reason is not None and "every load up to" in r.reason
