"""The verdict engine: refusals, speed rules, matched load, status rates, coverage and expected scores."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from evalkit.gating import (
    CannotCompare,
    GateResult,
    PolicyError,
    Rule,
    RunInputs,
    SpeedRecords,
    StatusCounts,
    evaluate,
    evaluate_expected,
    policy_from_dict,
)
from evalkit.gating.engine import combine_runs
from evalkit.gating.matching import level_at, match_load
from tests.gate_fixtures import N_GSM8K, correctness, difficulties, identity, metric, run, speed_records, task

FAST = policy_from_dict({"bootstrap": {"resamples": 1000}})


def _runs(
    cand_ident: dict[str, Any] | None = None,
    base_speed: SpeedRecords | None = None,
    cand_speed: SpeedRecords | None = None,
    counts: StatusCounts | None = None,
    scale: float = 1.0,
) -> tuple[RunInputs, RunInputs]:
    p = difficulties(N_GSM8K, 0.75)
    base = task({"exact_match,strict-match": metric(correctness(p, 1, seed=1))}, speed=base_speed)
    cand = task(
        {"exact_match,strict-match": metric(correctness(p, 1, seed=2, scale=scale))},
        speed=cand_speed or speed_records(seed=1),
        counts=counts,
        ident=identity(**(cand_ident or {})),
    )
    return run("base", base), run("cand", cand)


def _rule(result: GateResult, suffix: str) -> Rule:
    return next(r for r in result.rules if r.name.endswith(suffix))


def test_two_equal_runs_pass_with_every_default_rule() -> None:
    result = evaluate(*_runs(), FAST)
    names = [r.name for r in result.rules]
    assert names == [
        "gsm8k: exact_match,strict-match",
        "gsm8k: output tokens/s",
        "gsm8k: TTFT p50",
        "gsm8k: TPOT p50",
        "gsm8k: error rate",
    ]
    assert result.verdict == "pass", [r.note for r in result.rules]
    assert result.notes == []


def test_a_five_point_drop_fails_the_gate() -> None:
    result = evaluate(*_runs(scale=0.70 / 0.75), FAST)
    assert result.verdict == "fail"
    assert [r.name for r in result.failed] == ["gsm8k: exact_match,strict-match"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": "4.0"}, "task version 3.0 vs 4.0"),
        ({"data_sha256": {"test": "c" * 64, "train": "b" * 64}}, "data sha256 of test differs"),
        ({"limit": 200}, "limit None vs 200"),
        ({"num_fewshot": 0}, "num_fewshot 5 vs 0"),
        (
            {"prompt_digests": {d: f"{d:016x}" if d != 17 else "x" * 16 for d in range(N_GSM8K)}},
            "prompts differ on 1 of 1319 documents (first: doc 17)",
        ),
    ],
)
def test_runs_that_measured_different_things_are_refused(change: dict, named: str) -> None:
    base, cand = _runs(cand_ident=change)
    with pytest.raises(CannotCompare) as e:
        evaluate(base, cand, FAST)
    msg = str(e.value)
    assert named in msg and "\n" not in msg and "force" in msg
    forced = evaluate(base, cand, FAST, force=True)
    assert any(named in n and "(forced)" in n for n in forced.notes)


def test_different_sampling_is_reported_not_refused() -> None:
    result = evaluate(*_runs(cand_ident={"sampling": {"temperature": 0.6, "max_tokens": 256}}), FAST)
    assert result.notes == ["gsm8k: generation settings differ: temperature 0.0 vs 0.6"]


@pytest.mark.parametrize(("scale", "verdict"), [(2.3, "fail"), (1.5, "pass"), (1.02, "pass")])
def test_one_run_per_side_is_judged_against_the_noise_budget(scale: float, verdict: str) -> None:
    """One run per side holds no run-to-run variation: TTFT p50 fails only beyond its noise budget (+100%: it
    moved +29% and +54% between identical H200 runs), never on a bootstrap over the run's own requests."""
    result = evaluate(*_runs(cand_speed=speed_records(seed=1, ttft_scale=scale)), FAST)
    rule = _rule(result, "TTFT p50")
    assert rule.verdict == verdict, rule.note
    assert rule.observed == pytest.approx(scale - 1, abs=0.06)
    assert rule.p_value is None and rule.decided_by == "threshold" and rule.budget == 1.0
    assert "one run per side" in (rule.method or "") and "noise budget of 100%" in rule.note
    assert _rule(result, "TPOT p50").verdict == "pass"


def test_slower_decoding_fails_tpot_and_throughput_on_one_run_per_side() -> None:
    """Gross slowdowns still fail on one run per side: twice the per-token latency (TPOT budget 80%), half the
    output tokens/s (budget 35%)."""
    result = evaluate(*_runs(cand_speed=speed_records(seed=1, tpot_scale=2.0)), FAST)
    assert _rule(result, "TPOT p50").verdict == "fail"
    tput = _rule(result, "output tokens/s")
    assert tput.verdict == "fail" and tput.observed is not None and tput.observed < -0.4
    assert tput.baseline is not None and tput.candidate is not None and tput.candidate < tput.baseline


def _side(label: str, scales: list[float], seed: int) -> RunInputs:
    """Runs of one config whose speed differs from run to run by ``scales`` (TTFT and TPOT alike)."""
    runs = []
    for i, k in enumerate(scales):
        p = difficulties(N_GSM8K, 0.75)
        sp = speed_records(seed=seed + i, ttft_scale=k, tpot_scale=k)
        runs.append(run(f"{label}{i}", task({"exact_match,strict-match": metric(correctness(p, 1, seed + i))}, sp)))
    return combine_runs(label, runs)


def test_three_runs_per_side_judge_speed_on_run_to_run_variation() -> None:
    base = _side("base", [1.0, 1.1, 0.92], seed=10)
    same = _side("same", [1.08, 0.9, 1.02], seed=20)  # identical config, runs spread by +-10%
    slow = _side("slow", [1.4 * 1.05, 1.4 * 0.93, 1.4 * 1.0], seed=30)  # 40% slower
    ok = evaluate(base, same, FAST)
    assert ok.verdict == "pass", [(r.name, r.note) for r in ok.rules]
    bad = evaluate(base, slow, FAST)
    for name in ("TTFT p50", "TPOT p50", "output tokens/s"):
        r = _rule(bad, name)
        assert r.verdict == "fail" and r.p_value is not None and r.p_value < 0.05, (name, r.note)
        assert r.method is not None and r.method.startswith("Welch's t-test on log per-run figures (3 vs 3 runs")
        assert r.ci is not None and r.ci[0] < (r.observed or 0) < r.ci[1]
    acc = _rule(bad, "exact_match,strict-match")  # accuracy paired over every run's samples
    assert acc.method is not None and "bootstrap" in acc.method and acc.verdict == "pass"
    # a latency rise under the rule's floor never fails, whatever the runs say
    tiny = policy_from_dict({"bootstrap": {"resamples": 1000}, "speed": {"ttft_p50_ms": {"min_abs_ms": 500}}})
    assert _rule(evaluate(base, slow, tiny), "TTFT p50").verdict == "pass"


def test_any_failed_request_in_the_candidate_fails() -> None:
    counts = StatusCounts(total=N_GSM8K, ok=N_GSM8K - 1, api_error=1)
    result = evaluate(*_runs(counts=counts), FAST)
    rule = _rule(result, "error rate")
    assert rule.verdict == "fail" and rule.note == "1 of 1319 requests api_error"
    relaxed = policy_from_dict({"rates": {"max_error_rate": 0.01, "max_truncated_rate": 0.0}})
    assert _rule(evaluate(*_runs(counts=counts), relaxed), "error rate").verdict == "pass"
    assert _rule(evaluate(*_runs(counts=counts), relaxed), "truncation rate").verdict == "pass"


def test_level_at_reads_the_concurrency_trace() -> None:
    trace = [(0.0, 64), (2.5, 128), (9.0, 256)]
    assert [level_at(t, trace, None) for t in (0.0, 2.4, 2.5, 8.99, 100.0)] == [64, 64, 128, 128, 256]
    assert level_at(None, trace, 32) == 32 and level_at(1.0, [], 32) == 32


def test_speed_is_compared_at_the_common_concurrency_level() -> None:
    """Baseline ran 64 then 128; candidate 128 then 256, where it is twice as slow. At 128 the two are equal;
    over the whole runs the candidate's 256 phase would look like a regression."""
    base = speed_records(seed=0, trace=[(0.0, 64), (30.0, 128)])
    cand = speed_records(seed=1, trace=[(0.0, 128), (30.0, 256)], slow_after_s=30.0)
    result = evaluate(*_runs(base_speed=base, cand_speed=cand), FAST)
    rule = _rule(result, "TTFT p50")
    assert rule.verdict == "pass", rule.note
    assert "baseline ran at concurrency 64→128, candidate at 128→256" in rule.note
    assert "compared at 128 (300 vs 300 requests" in rule.note
    b, c = [x for x in base.ttft_ms if x is not None], [x for x in cand.ttft_ms if x is not None]
    assert float(np.median(c)) / float(np.median(b)) > 1.3  # what comparing the whole runs would have said
    same = match_load(base, dataclasses.replace(base), 30, "fail")
    assert same.level == 128 and same.matched and len(same.base.ttft_ms) == 300  # type: ignore[union-attr]


def test_unmatched_load_is_not_judged_unless_the_policy_asks() -> None:
    base = speed_records(seed=0, trace=[(0.0, 64)])
    slow = speed_records(seed=1, trace=[(0.0, 256)], slow_after_s=0.0)  # twice as slow, at another load
    default = evaluate(*_runs(base_speed=base, cand_speed=slow), FAST)
    for name in ("output tokens/s", "TTFT p50", "TPOT p50"):
        r = _rule(default, name)
        assert r.verdict == "skip" and r.note.startswith("speed not judged: baseline ran at concurrency 64"), r.note
    assert default.verdict == "pass"  # accuracy and rates judged; speed at another load is not a verdict
    judged = policy_from_dict({"speed": {"judge_unmatched_load": True}, "bootstrap": {"resamples": 1000}})
    loose = evaluate(*_runs(base_speed=base, cand_speed=slow), judged)
    assert (
        _rule(loose, "TPOT p50").verdict == "fail" and "compared over the whole runs" in _rule(loose, "TPOT p50").note
    )
    strict = policy_from_dict({"require_matched_load": True, "bootstrap": {"resamples": 1000}})
    matched = evaluate(*_runs(base_speed=base, cand_speed=speed_records(seed=1, trace=[(0.0, 256)])), strict)
    for name in ("output tokens/s", "TTFT p50", "TPOT p50"):
        r = _rule(matched, name)
        assert r.verdict == "fail" and r.note.startswith("cannot compare speed at matched load"), r.note
    assert _rule(matched, "exact_match,strict-match").verdict == "pass"  # accuracy is still judged


def test_a_task_missing_from_the_candidate_fails() -> None:
    base, cand = _runs()
    extra = dataclasses.replace(base.tasks["gsm8k"], name="aime25")
    result = evaluate(dataclasses.replace(base, tasks={**base.tasks, "aime25": extra}), cand, FAST)
    assert _rule(result, "aime25: present").verdict == "fail" and result.verdict == "fail"


def test_policy_overrides_per_metric_and_notes_unknown_ones() -> None:
    policy = policy_from_dict(
        {
            "accuracy": {"tasks": {"gsm8k": {"exact_match,strict-match": {"enabled": False}, "nope": {}}}},
            "speed": {"ttft_p50_ms": None, "e2e_p50_ms": {"max_change": 0.2}},
            "bootstrap": {"resamples": 1000},
        }
    )
    result = evaluate(*_runs(scale=0.70 / 0.75), policy)
    assert _rule(result, "exact_match,strict-match").verdict == "skip"
    assert [r.name for r in result.rules if r.kind == "speed"] == [
        "gsm8k: output tokens/s",
        "gsm8k: TPOT p50",
        "gsm8k: E2E latency p50",
    ]
    assert "gsm8k: the policy names metric nope, which neither run has" in result.notes


def test_expected_scores_without_a_baseline() -> None:
    _, cand = _runs()
    value = cand.tasks["gsm8k"].metrics["exact_match,strict-match"].value or 0.0
    entry = {"task": "gsm8k", "metric": "exact_match,strict-match"}
    ok = evaluate_expected(cand, policy_from_dict({"expected": [{**entry, "value": round(value, 4)}]}))
    bad = evaluate_expected(cand, policy_from_dict({"expected": [{**entry, "value": value + 0.05}]}))
    missing = evaluate_expected(cand, policy_from_dict({"expected": [{**entry, "metric": "avg@8", "value": 0.9}]}))
    assert (ok.verdict, bad.verdict, missing.verdict) == ("pass", "fail", "fail")
    assert [r.kind for r in ok.rules] == ["expected", "rate"] and ok.baseline is None
    with pytest.raises(PolicyError, match="lists no expected scores"):
        evaluate_expected(cand, FAST)


def test_several_runs_of_a_side_must_hold_the_same_tasks_and_metrics() -> None:
    """combine_runs used to keep only what every run held, silently: a verdict on 2 runs while claiming 3."""
    p = difficulties(N_GSM8K, 0.75)
    full = {
        "exact_match,strict-match": metric(correctness(p, 1, 1)),
        "exact_match,flexible-extract": metric(correctness(p, 1, 2)),
    }
    a = run("a", task(dict(full)), task(dict(full), name="aime25"))
    b = run("b", task(dict(full)))
    with pytest.raises(CannotCompare, match=r"the baseline runs a and b hold different tasks \(aime25 in only one\)"):
        combine_runs("base", [a, b])
    partial = run("c", task({"exact_match,strict-match": full["exact_match,strict-match"]}))
    side = combine_runs("base", [run("a", task(dict(full))), partial])
    assert side.tasks["gsm8k"].problems == (
        "gsm8k: metric exact_match,flexible-extract is missing from the baseline run c",
    )
    result = evaluate(side, _side("cand", [1.0, 1.0], seed=5), FAST)
    assert result.verdict == "cannot_decide"
    assert "gsm8k: metric exact_match,flexible-extract is missing from the baseline run c" in result.reasons


def test_default_latency_floors_keep_sub_millisecond_changes_from_failing() -> None:
    """TPOT of 0.2 ms against 0.1 ms is +100% but 0.1 ms: under the default 0.5 ms floor it never fails (a canary at
    another concurrency failed on sub-millisecond TPOT p50s); the same relative change at 10 ms fails."""
    tiny_base = dataclasses.replace(speed_records(seed=1), tpot_ms=[0.1] * 600)
    tiny_cand = dataclasses.replace(speed_records(seed=1), tpot_ms=[0.2] * 600)
    one = policy_from_dict({"bootstrap": {"resamples": 1000}, "rates": {"max_error_rate": 0.0}})
    rule = _rule(evaluate(*_runs(base_speed=tiny_base, cand_speed=tiny_cand), one), "TPOT p50")
    assert rule.verdict == "pass" and "0.5 ms" in (rule.note or ""), rule.note
    big = dataclasses.replace(speed_records(seed=1), tpot_ms=[20.0] * 600)
    base = dataclasses.replace(speed_records(seed=1), tpot_ms=[10.0] * 600)
    assert _rule(evaluate(*_runs(base_speed=base, cand_speed=big), one), "TPOT p50").verdict == "fail"


def test_another_request_rate_is_another_load() -> None:
    paced = dataclasses.replace(speed_records(seed=1), request_rate=2.0)
    result = evaluate(*_runs(base_speed=speed_records(seed=1), cand_speed=paced), FAST)
    for name in ("TTFT p50", "TPOT p50", "output tokens/s"):
        r = _rule(result, name)
        assert r.verdict == "skip" and "baseline sent as fast as its concurrency allowed, candidate 2 requests/s" in (
            r.note or ""
        ), r.note
