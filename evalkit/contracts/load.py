"""The load a timed phase put on the server (re-exported by :mod:`evalkit.contracts`): a task summary's
``load`` when its requests were sent on a schedule (an arrival process, or the requests' own arrival times)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from evalkit.contracts.record import Record
from evalkit.contracts.speed_catalogue import Percentiles


def _is_none(value: Any) -> bool:
    return value is None


class LoadSeries(Record):
    """Per-bin time series of the timed phase, bins of ``bin_s`` seconds (1, wider for runs of over an hour)
    from the phase's start: requests sent per second, requests in flight (time-averaged over the bin), output
    tokens per second of the requests that completed in the bin."""

    model_config = ConfigDict(extra="forbid")

    bin_s: float
    t: list[float]  # each bin's start, seconds from the phase's start
    sent_per_s: list[float]
    in_flight: list[float]
    output_tokens_per_s: list[float]


class LoadSummary(Record):
    """Offered against achieved load. ``offered_rps`` is the schedule's own rate over the requests sent
    ((sent − 1) / (last due − first due)), ``achieved_rps`` the same over their actual first sends; the send lag
    is each request's first send minus the time it was due. ``schedule_kept`` is False, and ``reason`` says
    why, when the send lag p99 is over ``lag_threshold_ms``: then ``achieved_rps`` is what the server received,
    not the offered load."""

    model_config = ConfigDict(extra="forbid")

    process: str  # poisson | gamma | constant, or trace: the requests' own arrival times
    request_rate: float | None = None  # as asked (None: a ramp or a trace)
    origin_s: float = 0.0  # the phase's start (the schedule's zero) on the samples' start_s clock
    sent: int  # requests of this session sent (each once, at its first send)
    not_sent: int = 0  # left unsent when --duration ran out (a resumed run sends them)
    duration_s: float | None = Field(default=None, exclude_if=_is_none)  # --duration, when given
    schedule_window_s: float | None = None  # first due -> last due
    sending_window_s: float | None = None  # first send -> last send
    offered_rps: float | None = None
    achieved_rps: float | None = None
    send_lag_ms: Percentiles
    send_lag_max_ms: float | None = None
    lag_threshold_ms: float
    schedule_kept: bool
    reason: str | None = Field(default=None, exclude_if=_is_none)
    series: LoadSeries | None = None
