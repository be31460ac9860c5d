"""Speed in the contract (re-exported by :mod:`evalkit.contracts`): the summary's :class:`Speed` with its
:class:`Percentiles` and :class:`SteadyState`, and the speed catalogue, every figure of them by the names its
consumers use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ConfigDict, Field

from evalkit.contracts.record import Record


def _is_none(value: Any) -> bool:
    return value is None


class Percentiles(Record):
    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({"mean", "p50", "p90", "p99", "n"})  # schema 2

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    n: int = 0


class SteadyState(Record):
    """Speed over the window in which the requests in flight were at the run's level (``target``): from the
    first moment that many were in flight to the last moment they were (ramp-up and drain tail left out).
    Latencies are over the requests that started and finished inside the window; tokens/s and requests/s over
    the requests that finished inside it, divided by its duration. The figures are None, and ``reason`` says
    why, when fewer than ``min_requests`` requests fall in the window (or the level was never reached)."""

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({  # schema 2
        "start_s", "end_s", "duration_s", "requests", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s",
        "requests_per_s",
    })  # fmt: skip

    target: int  # requests in flight that count as steady: the run's concurrency, capped by its request count
    start_s: float | None = None  # the window, in seconds since the request phase began (as ``start_s``)
    end_s: float | None = None
    duration_s: float | None = None
    requests: int = 0  # started and finished inside the window
    min_requests: int
    ttft_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    itl_ms: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    output_tokens_per_s: float | None = None
    requests_per_s: float | None = None
    reason: str | None = Field(default=None, exclude_if=_is_none)  # why there are no figures
    # --cost-per-gpu-hour: dollars per million output tokens at this window's output tokens/s (absent otherwise)
    cost_per_million_output_tokens: float | None = Field(default=None, exclude_if=_is_none)


class Speed(Record):
    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset(
        {"total_tokens_per_s", "concurrency", "client_cpu_s", "loop_lag_ms_p99", "client_bound"}
    )

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None = None
    requests_per_s: float | None
    wall_s: float
    concurrency: int | None = None
    client_cpu_s: float | None = None
    loop_lag_ms_p99: float | None = None
    client_bound: bool | None = None
    # the same figures over the window at the target level of requests in flight (a task's speed only)
    steady_state: SteadyState | None = Field(default=None, exclude_if=_is_none)
    # --goodput (absent without it): requests that met every SLO per second of ``wall_s``, and their share of the
    # task's requests (all of them, failed ones included: a failed request is never good)
    goodput_requests_per_s: float | None = Field(default=None, exclude_if=_is_none)
    goodput_share: float | None = Field(default=None, exclude_if=_is_none)
    good_requests: int | None = Field(default=None, exclude_if=_is_none)
    # --cost-per-gpu-hour (absent without it): dollars per million output / total tokens and per 1,000 requests at
    # the whole run's rates, and the GPUs billed (the started server's TP x PP x DP, or --gpus-billed)
    cost_per_million_output_tokens: float | None = Field(default=None, exclude_if=_is_none)
    cost_per_million_total_tokens: float | None = Field(default=None, exclude_if=_is_none)
    cost_per_1k_requests: float | None = Field(default=None, exclude_if=_is_none)
    gpus_billed: int | None = Field(default=None, exclude_if=_is_none)
    # where NVML's energy counters were read (absent elsewhere, never zero): joules the measured server's GPUs used
    # over the timed phase per output token of it, and their average power per GPU (the summary's gpu.energy)
    joules_per_output_token: float | None = Field(default=None, exclude_if=_is_none)
    avg_power_w_per_gpu: float | None = Field(default=None, exclude_if=_is_none)


Direction = Literal["lower", "higher"]  # which way a speed figure is better


@dataclass(frozen=True)
class Latency:
    """A per-request latency: a field of :class:`SampleRecord` (and of :class:`Response`) that :class:`Speed` and
    :class:`SteadyState` summarise as :class:`Percentiles` under the same name."""

    key: str  # the field, e.g. "ttft_ms"
    label: str  # e.g. "TTFT"


LATENCIES: tuple[Latency, ...] = (
    Latency("ttft_ms", "TTFT"), Latency("tpot_ms", "TPOT"), Latency("itl_ms", "ITL"), Latency("e2e_ms", "E2E latency")
)  # fmt: skip
"""The latencies of the speed summary, in the order every table shows them."""
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
"""The percentiles of a :class:`Percentiles` (its field, the percent), in the order every table shows them."""


@dataclass(frozen=True)
class SpeedMetric:
    """One speed figure of a summary's ``speed``, by the names its consumers use: ``key`` (gate policies, rule
    lookups), ``label`` (rule names, headings), ``short`` (narrow table headers), ``column`` (the sweep table's
    column), with its ``unit`` and ``direction``. ``field`` is :class:`Speed`'s field; ``stat`` the
    :class:`Percentiles` field of a latency."""

    key: str
    label: str
    short: str
    column: str
    unit: str  # "ms", "tok/s", "req/s", "share", "$/Mtok" or "J/tok"
    direction: Direction
    field: str
    stat: str | None = None

    @property
    def lower_is_better(self) -> bool:
        return self.direction == "lower"

    def of(self, speed: Speed | SteadyState | None) -> float | None:
        """The figure in a (typed) speed summary; None where it has none."""
        value = getattr(speed, self.field, None)
        if self.stat is not None:
            value = getattr(value, self.stat, None)
        return value if isinstance(value, float | int) and not isinstance(value, bool) else None

    def of_json(self, speed: Any) -> Any:
        """The figure in a speed summary as JSON (``summary.json``'s ``speed``), as it is there."""
        value = speed.get(self.field) if isinstance(speed, dict) else None
        if self.stat is not None:
            value = value.get(self.stat) if isinstance(value, dict) else None
        return value


def _rate(key: str, label: str, short: str, column: str, unit: str) -> SpeedMetric:
    return SpeedMetric(key, label, short, column, unit, "higher", key)


def _latency(lat: Latency, q: str) -> SpeedMetric:
    key, label = f"{lat.key.removesuffix('_ms')}_{q}_ms", f"{lat.label} {q}"
    return SpeedMetric(key, label, label, key, "ms", "lower", lat.key, q)


SPEED_METRICS: tuple[SpeedMetric, ...] = (
    _rate("output_tokens_per_s", "output tokens/s", "output tok/s", "output_tok_s", "tok/s"),
    _rate("total_tokens_per_s", "total tokens/s", "total tok/s", "total_tok_s", "tok/s"),
    _rate("requests_per_s", "requests/s", "req/s", "requests_s", "req/s"),
    _rate("goodput_requests_per_s", "goodput (requests/s within the SLOs)", "goodput", "goodput_req_s", "req/s"),
    _rate("goodput_share", "share of requests within the SLOs", "good share", "goodput_share", "share"),
    SpeedMetric(
        "cost_per_million_output_tokens",
        "cost per million output tokens",
        "$/M out tok",
        "cost_per_m_out_tok",
        "$/Mtok",
        "lower",
        "cost_per_million_output_tokens",
    ),
    SpeedMetric(
        "joules_per_output_token",
        "energy per output token",
        "J/out tok",
        "joules_per_out_tok",
        "J/tok",
        "lower",
        "joules_per_output_token",
    ),
    *(_latency(lat, q) for lat in LATENCIES for q, _ in QUANTILES),
)
"""The speed catalogue: every figure of :class:`Speed` that a report, the console, the gate, a sweep or watch
shows or judges (each latency at each of :data:`QUANTILES`). A new latency or percentile: :data:`LATENCIES` /
:data:`QUANTILES`, the model fields (:class:`Speed`, :class:`SteadyState`, :class:`Percentiles`) and where it is
measured (:mod:`evalkit.scoring.speed`); tests/unit/test_speed_catalogue.py checks that they agree."""
SPEED = {m.key: m for m in SPEED_METRICS}


def speed_metric(key: str) -> SpeedMetric:
    """The catalogue entry named ``key`` (KeyError naming the known ones otherwise)."""
    if key not in SPEED:
        raise KeyError(f"no speed metric {key!r}; known: {', '.join(SPEED)}")
    return SPEED[key]
