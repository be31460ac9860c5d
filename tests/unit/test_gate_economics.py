"""The gate's goodput and cost rules as the console, gate.md, junit.xml and the HTML verdict view show them: a
limit rule shows the candidate's figure and the policy's limit with their units (never as a change), and the
goodput change rule compares only goodput counted under the same SLOs. With several runs per side every run counts:
a limit holds in each candidate run, the goodput change is Welch's test over the runs, and runs counted under
different SLOs within a side are not compared."""

from __future__ import annotations

import pytest

from evalkit.gating.economics import goodput_change_rule, limit_rules, undecided_reasons
from evalkit.gating.inputs import SpeedRecords
from evalkit.gating.output import budget_text, observed_text, to_markdown
from evalkit.gating.policy import SpeedPolicy
from evalkit.gating.result import GateResult

FIGURES = {"goodput_requests_per_s": 1060.4, "goodput_share": 0.99623, "cost_per_million_output_tokens": 0.017}
POLICY = SpeedPolicy(min_goodput=500, min_goodput_share=0.9, max_cost_per_million_output_tokens=0.5)


def _shown(figures: dict[str, float]) -> dict[str, tuple[str, str, str]]:
    rules = limit_rules("gsm8k", [SpeedRecords(figures=figures)], POLICY)
    return {r.name.split(": ", 1)[1]: (r.verdict, observed_text(r), budget_text(r)) for r in rules}


def test_limit_rules_show_the_figure_and_the_limit_with_units_not_a_change() -> None:
    shown = _shown(FIGURES)
    assert shown["goodput (requests/s within the SLOs)"] == ("pass", "1060 req/s", "≥ 500 req/s")
    assert shown["share of requests within the SLOs"] == ("pass", "99.62%", "≥ 90%")
    assert shown["cost per million output tokens"] == ("pass", "$0.0170", "≤ $0.50")
    failing = _shown({"goodput_requests_per_s": 12.5, "goodput_share": 0.5, "cost_per_million_output_tokens": 2.0})
    assert failing["goodput (requests/s within the SLOs)"] == ("fail", "12.5 req/s", "≥ 500 req/s")
    assert failing["share of requests within the SLOs"] == ("fail", "50%", "≥ 90%")
    assert failing["cost per million output tokens"] == ("fail", "$2.00", "≤ $0.50")


def test_a_skipped_limit_rule_still_shows_its_limit_and_gate_md_shows_no_change() -> None:
    shown = _shown({})
    assert shown["share of requests within the SLOs"] == ("skip", "–", "≥ 90%")
    rules = limit_rules("gsm8k", [SpeedRecords(figures=FIGURES)], POLICY)
    md = to_markdown(GateResult(verdict="pass", candidate="B", rules=rules))
    assert "| 99.62% | ≥ 90% |" in md and "| $0.0170 | ≤ $0.50 |" in md
    assert "worse by" not in md and "+99.62%" not in md
    assert "99.62%; the policy asks for at least 90%" in md


def _speed(goodput: float, slos: dict[str, float] | None) -> SpeedRecords:
    return SpeedRecords(figures={"goodput_requests_per_s": goodput}, goodput_slos=slos)


SLOS = {"ttft": 200.0, "tpot": 20.0}


@pytest.mark.parametrize(
    ("base", "cand", "named"),
    [
        (SLOS, {"ttft": 500.0, "tpot": 20.0}, "baseline ttft ≤ 200 ms, tpot ≤ 20 ms; candidate ttft ≤ 500 ms"),
        (SLOS, {"ttft": 200.0}, "candidate ttft ≤ 200 ms)"),
        (None, SLOS, "baseline none recorded; candidate ttft ≤ 200 ms, tpot ≤ 20 ms"),
    ],
)
def test_goodput_counted_under_different_slos_is_not_compared(base, cand, named) -> None:
    rule = goodput_change_rule("gsm8k", [_speed(100.0, base)], [_speed(10.0, cand)], 0.1)
    assert rule.verdict == "skip" and rule.observed is None
    assert named in rule.note and "run both with the same --goodput" in rule.note
    (reason,) = undecided_reasons([rule])  # the gate cannot decide (exit 2), with this one line
    assert reason.startswith("gsm8k: goodput change: ") and "\n" not in reason


def test_goodput_counted_under_the_same_slos_is_compared() -> None:
    cand = _speed(80.0, {"tpot": 20.0, "ttft": 200.0})
    rule = goodput_change_rule("gsm8k", [_speed(100.0, dict(SLOS))], [cand], 0.1)
    assert rule.verdict == "fail" and rule.observed == pytest.approx(-0.2)
    assert undecided_reasons([rule]) == []
    assert observed_text(rule) == "-20.00% (100 → 80 req/s)" and budget_text(rule) == "worse by ≤ 10%"


def test_a_limit_holds_in_every_candidate_run_the_worst_decides() -> None:
    runs = [SpeedRecords(figures={**FIGURES, "goodput_share": x}) for x in (0.99, 0.85, 0.97)]
    (share,) = [r for r in limit_rules("gsm8k", runs, POLICY) if r.figure == "goodput_share"]
    assert share.verdict == "fail" and share.observed == 0.85  # the first run alone would pass
    assert "the worst of 3 runs, 99%, 85%, 97%" in share.note
    missing = [SpeedRecords(figures=FIGURES), SpeedRecords(figures={})]
    assert {r.verdict for r in limit_rules("gsm8k", missing, POLICY)} == {"skip"}
    (reason, *_) = undecided_reasons(limit_rules("gsm8k", missing, POLICY))
    assert "in 1 of its 2 runs" in reason


def test_several_runs_per_side_goodput_change_is_welchs_test_over_the_runs() -> None:
    base = [_speed(x, SLOS) for x in (100.0, 104.0, 98.0)]
    steady = goodput_change_rule("gsm8k", base, [_speed(x, SLOS) for x in (99.0, 101.0, 103.0)], 0.05)
    assert steady.verdict == "pass" and steady.decided_by == "p_value" and "Welch" in (steady.method or "")
    low = goodput_change_rule("gsm8k", base, [_speed(x, SLOS) for x in (70.0, 72.0, 69.0)], 0.05)
    assert low.verdict == "fail" and low.p_value is not None and low.p_value < 0.05
    assert low.observed == pytest.approx((70 * 72 * 69 / (100 * 104 * 98)) ** (1 / 3) - 1)
    # a 20% drop in the runs' geometric means, but runs that spread this widely cannot show it significant
    spread = goodput_change_rule(
        "gsm8k", [_speed(x, SLOS) for x in (100.0, 60.0)], [_speed(x, SLOS) for x in (70.0, 55.0)], 0.05
    )
    assert spread.observed == pytest.approx(-0.199, abs=1e-3)
    assert spread.verdict == "pass" and spread.p_value is not None and spread.p_value > 0.3
    # a run with goodput 0 has no log: the sides' means against the threshold, said so
    zero = goodput_change_rule("gsm8k", base, [_speed(x, SLOS) for x in (0.0, 100.0)], 0.05)
    assert zero.verdict == "fail" and zero.decided_by == "threshold" and "no significance test" in zero.note


def test_runs_of_one_side_counted_under_different_slos_are_not_compared() -> None:
    base = [_speed(100.0, SLOS), _speed(100.0, {"ttft": 500.0, "tpot": 20.0})]
    rule = goodput_change_rule("gsm8k", base, [_speed(100.0, SLOS), _speed(100.0, SLOS)], 0.1)
    assert rule.verdict == "skip" and "the baseline runs' goodput was counted under different SLOs" in rule.note
    assert "ttft ≤ 500 ms" in rule.note and len(undecided_reasons([rule])) == 1
    lacking = goodput_change_rule("gsm8k", [_speed(100.0, SLOS)], [_speed(9.0, SLOS), SpeedRecords()], 0.1)
    assert lacking.verdict == "skip" and "candidate has no goodput in 1 of its 2 runs" in lacking.note


def test_goodput_of_runs_not_matched_in_load_is_not_compared() -> None:
    one = [_speed(100.0, SLOS)]
    skipped = goodput_change_rule("gsm8k", one, one, 0.1, unmatched=("speed not judged: other concurrency", "skip"))
    assert skipped.verdict == "skip" and skipped.note == "goodput not compared: speed not judged: other concurrency"
    assert undecided_reasons([skipped])  # the gate cannot decide
    failed = goodput_change_rule("gsm8k", one, one, 0.1, unmatched=("cannot compare speed at matched load", "fail"))
    assert failed.verdict == "fail"
