"""Arrival processes: when each request of a timed phase is due, as ``vllm bench serve``'s ``get_request``
(``vllm/benchmarks/serve.py``) schedules them.

- ``poisson``: inter-arrival times drawn from a gamma distribution of shape ``burstiness`` (k) and mean 1/R
  (scale 1/(R k)); k = 1 is the exponential, a Poisson process. As vLLM, the cumulative times are rescaled so
  that the last request is due at n/R (the schedule's mean rate is exactly R whatever the seed).
- ``constant``: request i is due at i/R (the first at once, evalkit's pacing before arrival processes).
- a linear ramp (``ramp``: start and end requests/s): request i's rate is start + (end − start)·i/(n − 1), its
  gap drawn at that rate (``poisson``) or 1/rate (``constant``); no rescaling, as vLLM's ramp-up.

The draws come from ``numpy.random.RandomState(seed)`` (vLLM seeds numpy's legacy global generator the same way),
so a seed gives the same schedule on every run. Offsets are seconds from the timed phase's start.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from evalkit.config import RunConfig
    from evalkit.contracts import Request

T = TypeVar("T")

DEFAULT_SEED = 0  # vllm bench serve's --seed default
Process = Literal["poisson", "constant"]


@dataclass(frozen=True)
class Arrivals:
    """An arrival process: ``rate`` requests/s (None with a ``ramp``), gamma shape ``burstiness`` (``poisson``
    only), a linear ``ramp`` (start, end requests/s) and the ``seed`` of its draws."""

    process: Process = "poisson"
    rate: float | None = None
    burstiness: float = 1.0
    ramp: tuple[float, float] | None = None
    seed: int = DEFAULT_SEED

    @property
    def name(self) -> str:
        """``poisson``, ``gamma`` (a burstiness other than 1) or ``constant``."""
        if self.process == "poisson" and self.burstiness != 1.0:
            return "gamma"
        return self.process

    def record(self) -> dict[str, Any]:
        """The process as the manifest records it."""
        out: dict[str, Any] = {"process": self.name, "request_rate": self.rate, "seed": self.seed}
        if self.process == "poisson":
            out["burstiness"] = self.burstiness
        if self.ramp is not None:
            out |= {"ramp_up_strategy": "linear", "ramp_up_start_rps": self.ramp[0], "ramp_up_end_rps": self.ramp[1]}
        return out

    @classmethod
    def of(cls, cfg: RunConfig) -> Arrivals | None:
        """The run's arrival process (None: requests go as fast as the concurrency allows)."""
        ramp = None
        if cfg.ramp_up_start_rps is not None and cfg.ramp_up_end_rps is not None:
            ramp = (cfg.ramp_up_start_rps, cfg.ramp_up_end_rps)
        if cfg.request_rate is None and ramp is None:
            return None
        return cls(
            process=cfg.arrival or "poisson",
            rate=cfg.request_rate,
            burstiness=cfg.burstiness if cfg.burstiness is not None else 1.0,
            ramp=ramp,
            seed=cfg.seed if cfg.seed is not None else DEFAULT_SEED,
        )


def ramp_rate(index: int, total: int, start: float, end: float) -> float:
    """vLLM's linear ramp-up: the rate for request ``index`` of ``total``, ``start`` at the first, ``end`` at the
    last."""
    return start + (end - start) * index / max(total - 1, 1)


def arrival_offsets(total: int, arrivals: Arrivals) -> list[float]:
    """The seconds from the phase's start at which each of ``total`` requests is due (non-decreasing)."""
    import numpy as np

    if total <= 0:
        return []
    if arrivals.ramp is not None:
        start, end = arrivals.ramp
        rates = np.array([ramp_rate(i, total, start, end) for i in range(total)], dtype=np.float64)
    else:
        assert arrivals.rate is not None and arrivals.rate > 0
        rates = np.full(total, arrivals.rate, dtype=np.float64)
    if arrivals.process == "constant":
        gaps = 1.0 / rates
        return [0.0, *np.cumsum(gaps[:-1]).tolist()]
    k = arrivals.burstiness
    draws = np.random.RandomState(arrivals.seed % 2**32).gamma(shape=k, scale=1.0 / (rates * k))
    times = np.cumsum(draws)
    if arrivals.ramp is None and times[-1] > 0:  # vLLM: the last request is due at n/R exactly
        times *= (total / rates[0]) / times[-1]
    return [float(t) for t in times]


def mean_gap_s(arrivals: Arrivals) -> float:
    """The mean inter-arrival time (for a ramp: at its mean rate)."""
    rate = arrivals.rate if arrivals.ramp is None else sum(arrivals.ramp) / 2
    return 1.0 / rate if rate else math.inf


def schedule_part(schedule: Sequence[T], index: int, count: int, start: int = 0) -> list[T]:
    """Part ``index`` of ``count`` of ``schedule`` (0 <= index < count): the items at positions ≡ index mod
    count, in order — the split ``--shard I/N`` deals documents by (``Shard.takes``). Any sequence in send order:
    the requests of a schedule whose ``arrival_s`` are set (:func:`timed`), or the offsets themselves; ``start``:
    the position of ``schedule[0]`` in the whole (a batch of a stream, split as it comes). The ``count`` parts
    together are the schedule exactly, each item once with its own arrival time, so N senders (shards, client
    processes) that each send their part from one shared start send the one schedule."""
    if not 0 <= index < count:
        raise ValueError(f"part {index} of {count}: the index must be in 0..{count - 1}")
    return list(schedule[part_of(index - start, count) :: count])


def part_of(position: int, count: int) -> int:
    """The part (of ``count``) that :func:`schedule_part` deals the item at ``position`` to: for senders that
    take a schedule's items one at a time, as they come, instead of as a whole sequence."""
    return position % count


def timed(requests: Sequence[Request], offsets: Sequence[float], start: int = 0) -> list[Request]:
    """``requests`` (in send order, the first at position ``start`` of the whole) each with its ``arrival_s``:
    its own where it has one (a trace's, a probe's), else its position's offset in ``offsets`` (the schedule of
    the whole, :func:`arrival_offsets`, as the scheduler would give it when sending them all); one past the
    schedule's end is left as it is."""
    return [
        r
        if r.arrival_s is not None or start + i >= len(offsets)
        else dataclasses.replace(r, arrival_s=offsets[start + i])
        for i, r in enumerate(requests)
    ]
