"""Goodput under latency SLOs and cost per token: the figures a deployment is bought on.

Goodput is ``vllm bench serve --goodput``'s (``vllm/benchmarks/serve.py``, ``calculate_metrics``): a request is
good when it was answered and each latency it is given an SLO for (``ttft``, ``tpot``, ``e2el``, milliseconds)
is at or under it; goodput is the good requests over the run's duration (the ``wall_s`` that requests/s is over).
Per-request TPOT is vLLM's: (e2e - TTFT) / (output tokens - 1), and 0 for a request of one output token (or
none). A figure the client could not measure (TTFT of an answer that was not streamed) does not meet its SLO.

Cost is the dollars the GPUs billed cost per hour, spread over what they produced per hour at the run's rates.
Energy is what NVML's counters say the GPUs used over the timed phase, per output token produced in it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalkit.contracts import SampleFields, Speed


def request_tpot_ms(r: SampleFields) -> float | None:
    """The request's TPOT as vLLM's goodput counts it: its ``tpot_ms``, 0 for one output token (or none)."""
    if (r.output_tokens or 0) <= 1:
        return 0.0
    return r.tpot_ms


def is_good(r: SampleFields, slos: Mapping[str, float]) -> bool:
    """Whether ``r`` was answered and meets every SLO in ``slos`` (key -> milliseconds, vLLM's keys)."""
    if r.status == "api_error":
        return False
    figures = {"ttft": r.ttft_ms, "tpot": request_tpot_ms(r), "e2el": r.e2e_ms}
    return all(figures[key] is not None and figures[key] <= limit for key, limit in slos.items())  # type: ignore[operator]


def add_goodput(speed: Speed, records: Sequence[SampleFields], slos: Mapping[str, float]) -> None:
    """Set ``speed``'s goodput figures from ``records`` (every request of the task, failed ones included):
    ``good_requests``, ``goodput_requests_per_s`` (over ``speed.wall_s``; absent when it is 0) and
    ``goodput_share`` (good requests over all of ``records``; absent when there are none)."""
    good = sum(is_good(r, slos) for r in records)
    speed.good_requests = good
    speed.goodput_requests_per_s = good / speed.wall_s if speed.wall_s > 0 else None
    speed.goodput_share = good / len(records) if records else None


def usd_per_second(cost_per_gpu_hour: float, gpus: int) -> float:
    """What ``gpus`` GPUs at ``cost_per_gpu_hour`` dollars each cost per second."""
    return cost_per_gpu_hour * gpus / 3600.0


def per_unit(usd_s: float, rate: float | None, units: float) -> float | None:
    """Dollars per ``units`` of something produced at ``rate`` per second (None without a positive rate)."""
    return usd_s / rate * units if rate else None


def add_cost(speed: Speed, cost_per_gpu_hour: float, gpus: int) -> None:
    """Set ``speed``'s cost figures: dollars per million output and total tokens and per 1,000 requests at the
    whole run's rates, and per million output tokens at its steady state's rate where it has one."""
    usd_s = usd_per_second(cost_per_gpu_hour, gpus)
    speed.gpus_billed = gpus
    speed.cost_per_million_output_tokens = per_unit(usd_s, speed.output_tokens_per_s, 1e6)
    speed.cost_per_million_total_tokens = per_unit(usd_s, speed.total_tokens_per_s, 1e6)
    speed.cost_per_1k_requests = per_unit(usd_s, speed.requests_per_s, 1e3)
    if speed.steady_state is not None:
        speed.steady_state.cost_per_million_output_tokens = per_unit(usd_s, speed.steady_state.output_tokens_per_s, 1e6)


def add_energy(speed: Speed, energy: Mapping[str, Any] | None, output_tokens: int) -> None:
    """Set ``speed``'s energy figures from the GPU sampler's ``energy`` (``{"seconds", "joules", "gpus"}``) over
    a timed phase that produced ``output_tokens``: joules per output token and average watts per GPU. Nothing
    is set without a reading (or without tokens, or time)."""
    if not energy or not energy.get("gpus"):
        return
    joules, seconds, gpus = float(energy["joules"]), float(energy["seconds"]), len(energy["gpus"])
    speed.joules_per_output_token = joules / output_tokens if output_tokens > 0 else None
    speed.avg_power_w_per_gpu = joules / seconds / gpus if seconds > 0 else None
