"""The gate's rule catalogue (evalkit/gating/rule_catalogue.py) is the one source of its rate rules and gated speed
figures: the policy's ``rates:`` and ``speed:`` rule keys are built from it and the engine judges each, so a key
is judged or refused, never accepted and ignored (the gate failing open). Also: the gate's status counts are the
contract's statuses, one for one."""

from __future__ import annotations

import dataclasses
from typing import get_args

import pytest

from evalkit.contracts import STATUSES, speed_metric
from evalkit.gating import GateResult, PolicyError, RunInputs, StatusCounts, evaluate, policy_from_dict
from evalkit.gating.policy import (
    GATED_SPEED,
    Policy,
    RatesPolicy,
    SpeedPolicy,
    SpeedRule,
    rates_policy_model,
    speed_policy_model,
)
from evalkit.gating.rule_catalogue import GATED_SPEEDS, RATE_RULES, GatedSpeed, RateRule
from tests.gate_fixtures import correctness, difficulties, metric, run, speed_records, task

N = 200  # documents per run: enough requests for every speed rule (min_requests 30), fast to judge
NO_ACCURACY = {"accuracy": {"default": {"enabled": False}}}


def _runs(cand_counts: StatusCounts | None = None, slower: float = 1.0) -> tuple[RunInputs, RunInputs]:
    """A baseline and a candidate with the same answers; the candidate ``slower`` times the baseline's TTFT and
    TPOT (so its E2E and tokens/s are worse too) and with ``cand_counts`` as its status counts."""
    items = metric(correctness(difficulties(N, 0.75), 1, seed=1))
    base = task({items.name: items}, speed=speed_records(n=N, seed=0))
    cand = task(
        {items.name: items},
        speed=speed_records(n=N, seed=1, ttft_scale=slower, tpot_scale=slower),
        counts=cand_counts,
    )
    return run("base", base), run("cand", cand)


def _named(result: GateResult, label: str) -> list[str]:
    """The verdicts of the rules named ``gsm8k: <label>``."""
    return [r.verdict for r in result.rules if r.name == f"gsm8k: {label}"]


def test_the_rates_policy_has_one_key_per_rate_rule() -> None:
    keys, rules = list(RatesPolicy.model_fields), [r.key for r in RATE_RULES]
    assert keys == rules, (
        f"RatesPolicy keys {keys} differ from the rule catalogue's RATE_RULES {rules}: declare a rate rule only "
        "as a RateRule in evalkit/gating/rule_catalogue.py (the policy's field is built from it)"
    )
    assert {k: f.default for k, f in RatesPolicy.model_fields.items()} == {r.key: r.default for r in RATE_RULES}


def test_the_speed_policy_has_one_rule_key_per_gated_figure() -> None:
    rule_keys = [k for k, f in SpeedPolicy.model_fields.items() if SpeedRule in get_args(f.annotation)]
    assert rule_keys == [g.key for g in GATED_SPEEDS] == list(GATED_SPEED), (
        f"SpeedPolicy's rule keys {rule_keys} differ from the rule catalogue's GATED_SPEEDS: declare a gated speed "
        "figure only as a GatedSpeed in evalkit/gating/rule_catalogue.py (the policy's field is built from it)"
    )
    defaults = Policy().speed
    assert [getattr(defaults, g.key) is not None for g in GATED_SPEEDS] == [g.judged for g in GATED_SPEEDS]


def test_the_status_counts_are_the_contract_statuses() -> None:
    fields = [f.name for f in dataclasses.fields(StatusCounts)]
    assert fields == ["total", *STATUSES], (
        f"the gate's StatusCounts fields {fields[1:]} differ from contracts.STATUSES {list(STATUSES)}: give "
        "StatusCounts (evalkit/gating/inputs.py) one int field per status, in the same order"
    )


@pytest.mark.parametrize("rule", RATE_RULES, ids=lambda r: r.key)
def test_the_engine_judges_every_rate_rule_of_the_catalogue(rule: RateRule) -> None:
    """Each rate key, set alone to 0, fails a candidate with one request in its status (and passes at 1)."""
    counts = StatusCounts(**{"total": N, "ok": N - 1, rule.statuses[0]: 1})
    only = {r.key: None for r in RATE_RULES} | {rule.key: 0.0}
    result = evaluate(*_runs(cand_counts=counts), policy_from_dict({**NO_ACCURACY, "rates": only}))
    assert _named(result, rule.label) == ["fail"]
    assert [(r, limit) for r, limit in policy_from_dict({"rates": only}).rates.limits()] == [(rule, 0.0)]
    loose = policy_from_dict({**NO_ACCURACY, "rates": only | {rule.key: 1.0}})
    assert _named(evaluate(*_runs(cand_counts=counts), loose), rule.label) == ["pass"]


@pytest.mark.parametrize("gated", GATED_SPEEDS, ids=lambda g: g.key)
def test_the_engine_judges_every_gated_speed_figure_of_the_catalogue(gated: GatedSpeed) -> None:
    """Each gated figure, set alone, fails a candidate three times slower (one run per side: beyond its noise
    budget and floor) and passes an equal one."""
    only = {"speed": {g.key: None for g in GATED_SPEEDS} | {gated.key: {}}}
    policy = policy_from_dict({**NO_ACCURACY, **only})
    label = speed_metric(gated.key).label
    assert _named(evaluate(*_runs(slower=3.0), policy), label) == ["fail"]
    assert _named(evaluate(*_runs(), policy), label) == ["pass"]


def test_a_rate_rule_added_to_the_catalogue_is_accepted_and_judged() -> None:
    """One catalogue entry is the whole edit: the policy built from the catalogue takes the new key, and the
    engine judges it."""
    no_answer = RateRule("max_no_answer_rate", ("no_answer", "empty"), "no-answer rate")
    rates = rates_policy_model((*RATE_RULES, no_answer)).model_validate({"max_no_answer_rate": 0.01})
    policy = policy_from_dict(NO_ACCURACY).model_copy(update={"rates": rates})
    counts = StatusCounts(total=N, ok=N - 4, no_answer=2, empty=2)
    rule = next(r for r in evaluate(*_runs(cand_counts=counts), policy).rules if r.name == "gsm8k: no-answer rate")
    assert (rule.verdict, rule.observed, rule.note) == ("fail", 4 / N, f"4 of {N} requests no_answer or empty")
    # the policy of the catalogue as it is refuses the key rather than ignore it
    with pytest.raises(PolicyError, match=r"unknown key 'rates.max_no_answer_rate' \(allowed here: max_error_rate"):
        policy_from_dict({"rates": {"max_no_answer_rate": 0.01}})


def test_a_speed_percentile_added_to_the_catalogue_is_accepted_and_judged() -> None:
    """One catalogue entry is the whole edit: TTFT p90 with its noise budget and floor becomes a policy key the
    engine judges, with the entry's budget (one run per side) and floor."""
    p90 = GatedSpeed("ttft_p90_ms", noise=1.0, floor_ms=5.0)
    speed = speed_policy_model((*GATED_SPEEDS, p90)).model_validate(
        {**{g.key: None for g in GATED_SPEEDS}, "ttft_p90_ms": {"max_change": 0.1}}
    )
    assert list(type(speed).model_fields)[: len(GATED_SPEEDS) + 1] == [*GATED_SPEED, "ttft_p90_ms"]
    policy = policy_from_dict(NO_ACCURACY).model_copy(update={"speed": speed})
    slow = evaluate(*_runs(slower=3.0), policy)
    rule = next(r for r in slow.rules if r.name == "gsm8k: TTFT p90")
    assert rule.verdict == "fail" and rule.budget == 1.0 and "noise budget of 100%" in rule.note
    assert [r.name for r in slow.rules if r.kind == "speed"] == ["gsm8k: TTFT p90"]
    assert _named(evaluate(*_runs(), policy), "TTFT p90") == ["pass"]
    with pytest.raises(PolicyError, match=r"unknown key 'speed.ttft_p90_ms' \(allowed here: output_tokens_per_s,"):
        policy_from_dict({"speed": {"ttft_p90_ms": {"max_change": 0.1}}})


def test_a_catalogue_entry_missing_its_budget_or_naming_no_figure_is_refused_where_it_is_written() -> None:
    with pytest.raises(ValueError, match="floor_ms iff a latency"):
        GatedSpeed("ttft_p90_ms", noise=1.0)  # a latency without its floor
    with pytest.raises(ValueError, match="floor_ms iff a latency"):
        GatedSpeed("output_tokens_per_s", noise=0.35, floor_ms=1.0)
    with pytest.raises(KeyError, match="no speed metric 'ttft_p95_ms'"):
        GatedSpeed("ttft_p95_ms", noise=1.0, floor_ms=5.0)  # not a figure of the speed catalogue
    with pytest.raises(ValueError, match=r"not of contracts\.STATUSES"):
        RateRule("max_bogus_rate", ("bogus",), "bogus rate")  # type: ignore[arg-type]
