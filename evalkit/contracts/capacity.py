"""A capacity search in the contract (re-exported by :mod:`evalkit.contracts`): ``capacity.json``, what
``evalkit capacity`` writes beside the run dirs of its load points.

The search finds the highest load (a request rate, or a number of requests in flight with ``search:
concurrency``) at which at least ``slo_share`` of the requests meet every SLO. Each measured load point is an
ordinary run dir under the capacity dir (``points[].run_dir``, relative to it); a point measured again near the
boundary appears once per measurement (``repeat`` 0, 1, …) and is decided on the requests of all its
measurements pooled (``curve``). ``capacity_rps`` (or ``capacity_concurrency``) is the highest load measured to
hold, ``bracket`` its ``[low, high]``: ``low`` held, ``high`` (the lowest load measured to fail) did not.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field

from evalkit.contracts.record import Record

CAPACITY_SCHEMA_VERSION = 1
"""The version of ``capacity.json``'s layout (its own; run dirs keep ``SCHEMA_VERSION``)."""

CapacityStatus = Literal["ok", "below_start", "cannot_decide", "max_duration"]
"""``ok``: a bracket closed to the tolerance; ``below_start``: the start load already fails the SLOs (the
capacity is below it, not zero); ``cannot_decide``: no load point could be measured (every one failed to run or
answered nothing); ``max_duration``: ``--max-duration`` ran out, the bracket is the one so far."""

SearchKind = Literal["rate", "concurrency"]


def _is_none(value: Any) -> bool:
    return value is None


class LoadFigures(Record):
    """What one load level gave: the figures of the curve (rate → goodput share, tok/s, TTFT/TPOT p50/p99)."""

    model_config = ConfigDict(extra="forbid")
    written_at_default: ClassVar[frozenset[str]] = frozenset(
        {"achieved_rps", "goodput_share", "output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
         "tpot_p99_ms"}
    )  # fmt: skip

    offered: float  # the load asked: requests/s (search rate) or requests in flight (search concurrency)
    requests: int  # requests sent (failed ones included: they count against the share)
    good_requests: int  # answered and within every SLO
    achieved_rps: float | None = None  # requests/s the server received (first sends), not the offered rate
    goodput_share: float | None = None  # good_requests / requests
    output_tokens_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p99_ms: float | None = None
    holds: bool  # goodput_share >= the search's slo_share


class CapacityPoint(LoadFigures):
    """One measurement: one run dir under the capacity dir."""

    run_dir: str  # relative to the capacity dir
    repeat: int = 0  # 0: the level's first measurement; 1, 2, …: measured again (near the boundary)
    step: Literal["bracket", "bisect", "repeat"]  # which phase of the search measured it
    duration_s: float | None = None  # the timed phase's wall time
    schedule_kept: bool | None = None  # False: the client could not send on schedule (see the run's summary)
    error: str | None = Field(default=None, exclude_if=_is_none)  # the run failed: why (it counts as not holding)


class CapacityDecision(Record):
    """How the answer was reached: the rule, in words, and the counts behind it."""

    model_config = ConfigDict(extra="forbid")

    rule: str  # the bracket, bisection and repeat rule as applied
    bracket_steps: int  # load levels measured while doubling from the start
    bisect_steps: int  # load levels measured while bisecting
    repeats: int  # extra measurements of levels near the boundary
    points: int  # measurements in all (run dirs)
    grid_points: int | None = None  # levels a grid from the start to ``high`` at the tolerance's resolution needs


class ServerIdentity(Record):
    """The server the search measured: the endpoint (no credentials) or the ``--serve`` config, and its model."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = None  # display form, credentials removed
    model: str | None = None
    serve: dict[str, Any] | None = None  # the ServerConfig of ``--serve`` (as the run's manifest records it)
    gpus: int | None = None  # GPUs billed for the cost (``--serve``'s layout, else 1)


class CapacityRecord(Record):
    """``capacity.json``."""

    model_config = ConfigDict(extra="forbid")
    written_at_default: ClassVar[frozenset[str]] = frozenset(
        {"capacity_rps", "capacity_concurrency", "bracket", "reason", "at_capacity", "cost_per_million_output_tokens"}
    )

    capacity_schema_version: int = CAPACITY_SCHEMA_VERSION
    status: CapacityStatus
    reason: str | None = None  # why, for a status other than ok
    search: SearchKind
    slos: dict[str, float]  # {ttft|tpot|e2el: milliseconds}, as --goodput
    slo_share: float  # the share of requests that must meet every SLO
    tolerance: float  # the bisection stops when high - low <= tolerance * low (rate), or 1 (concurrency)
    start: float  # the start load
    capacity_rps: float | None = None  # search rate: the highest offered rate measured to hold
    capacity_concurrency: int | None = None  # search concurrency: the highest number in flight measured to hold
    bracket: list[float | None] | None = None  # [low, high]; low None below the start, high None if none failed
    at_capacity: LoadFigures | None = None  # the figures at the answer (its measurements pooled)
    cost_per_gpu_hour: float | None = Field(default=None, exclude_if=_is_none)
    cost_per_million_output_tokens: float | None = None  # at the answer's output tok/s (with --cost-per-gpu-hour)
    points: list[CapacityPoint] = Field(default_factory=list)  # in the order measured
    curve: list[LoadFigures] = Field(default_factory=list)  # one per load level, measurements pooled, by load
    decision: CapacityDecision
    point_duration_s: float | None = None  # each point's --duration
    point_requests: int | None = None  # or its request count
    warmup_requests: int | None = None  # warm-up requests before each point's timed phase
    max_duration_s: float | None = None
    tasks: list[str]  # the task or workload the load is made of (as given to evalkit capacity)
    workload: dict[str, Any] = Field(default_factory=dict)  # its settings (seed, arrival, lengths, …)
    server: ServerIdentity
    created_at: str
    finished_at: str | None = None
    evalkit_version: str
