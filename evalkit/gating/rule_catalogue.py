"""The gate's rule catalogue: one entry per rate rule, per gated speed figure and per capacity rule, the one place
each is declared.

The policy's ``rates:`` and ``speed:`` rule keys are built from it (:mod:`evalkit.gating.policy`), and the engine
judges what the policy holds by it (:mod:`evalkit.gating.rules`; the capacity keys, on two capacity dirs of
``evalkit capacity``: :mod:`evalkit.gating.capacity_gate`), so a key is judged or refused, never accepted
and ignored. A new rate rule: a :class:`RateRule` in :data:`RATE_RULES`. A new gated speed figure (e.g. TTFT
p90): a :class:`GatedSpeed` in :data:`GATED_SPEEDS`, naming a figure of the speed catalogue
(:data:`evalkit.contracts.SPEED_METRICS`) with its noise budget and, for a latency, its floor. A new rule on two
capacity searches: a :class:`CapacityRule` in :data:`CAPACITY_RULES`.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalkit.contracts import STATUSES, Status, speed_metric


@dataclass(frozen=True)
class RateRule:
    """A ceiling on the share of the candidate's requests that ended in one of ``statuses``: ``key`` is its key
    under the policy's ``rates:``, ``label`` the rule's name, ``default`` the ceiling without a policy file
    (None: not checked unless the policy sets it)."""

    key: str
    statuses: tuple[Status, ...]
    label: str
    default: float | None = None

    def __post_init__(self) -> None:
        unknown = [s for s in self.statuses if s not in STATUSES]
        if not self.statuses or unknown:
            raise ValueError(f"rate rule {self.key}: statuses {unknown or '()'} are not of contracts.STATUSES")


RATE_RULES: tuple[RateRule, ...] = (
    RateRule("max_error_rate", ("api_error",), "error rate", default=0.0),
    RateRule("max_truncated_rate", ("truncated",), "truncation rate"),
    RateRule("max_empty_rate", ("empty",), "empty-answer rate"),
    RateRule("max_tool_text_rate", ("tool_text",), "unparsed tool-call rate"),  # tool calls the server did not parse
    RateRule(
        "max_tool_calls_empty_rate", ("tool_calls_empty",), "empty tool_calls rate"
    ),  # finish tool_calls, no calls
)
"""The rate rules, in the order the gate reports them."""


@dataclass(frozen=True)
class GatedSpeed:
    """A speed figure the gate can judge, by its speed-catalogue ``key`` (also its key under the policy's
    ``speed:``). ``noise``: how far it moves between identical runs (a fraction); with one run per side a
    worsening beyond it (or beyond the rule's ``max_change``, if larger) fails. ``floor_ms`` (latencies only): a
    change of fewer milliseconds never fails. ``judged``: whether the policy judges it without a policy file."""

    key: str
    noise: float
    floor_ms: float | None = None
    judged: bool = True

    def __post_init__(self) -> None:
        is_latency = speed_metric(self.key).unit == "ms"  # KeyError naming the known keys for a key not there
        if self.noise <= 0 or is_latency != (self.floor_ms is not None):
            raise ValueError(f"gated speed {self.key}: needs a positive noise budget, and a floor_ms iff a latency")


# Noise budgets: how far each figure moves between identical runs of one config (H200, vLLM 0.26, SmolLM2-135M,
# GSM8K at concurrency 256; docs/benchmarks/archive/gate-statistics.md). Floors: timer and scheduling jitter, not a
# regression.
GATED_SPEEDS: tuple[GatedSpeed, ...] = (
    GatedSpeed("output_tokens_per_s", noise=0.35),
    GatedSpeed("ttft_p50_ms", noise=1.0, floor_ms=5.0),
    GatedSpeed("tpot_p50_ms", noise=0.80, floor_ms=0.5),
    GatedSpeed("e2e_p50_ms", noise=0.80, floor_ms=10.0, judged=False),
)
"""The speed figures a policy can judge, in the order the gate reports them."""


@dataclass(frozen=True)
class CapacityRule:
    """A rule on two capacity searches (``evalkit gate BASE CAND`` with two capacity dirs): ``key`` is its key
    under the policy's ``speed:`` (a fraction, 0 to 1), ``label`` the rule's name, ``default`` the fraction without
    a policy file."""

    key: str
    label: str
    default: float


CAPACITY_RULES: tuple[CapacityRule, ...] = (CapacityRule("max_capacity_drop", "capacity change", default=0.10),)
"""The rules judged when both sides of the gate are capacity dirs; every other rule judges run dirs."""
