"""The numerics gate compares each figure where both runs gave what it needs: |d-logprob| at every position both
gave the actual token's logprob, top-1 and KL only where both gave a top-K list; a figure that compared fewer
positions than the policy's coverage of those both scored cannot decide, naming the count (issue 44, items 1
and 13)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from evalkit.contracts import PromptPositions
from tests.numerics_fixtures import TASK, build_numerics_run, side
from tests.unit.test_numerics_gate import _run, _verdicts, gate

TOP_K_RULES = ("top-1 agreement", "mean KL", "p99 KL")
SCORED = 12 * 39  # 12 texts of 40 tokens: every position after the first


def actual_only(p: PromptPositions, shift: float, keep: int | None = None) -> PromptPositions:
    """``p`` as a server reports it that gives only the actual token's logprob (no top-K list, no rank), that
    logprob ``shift`` nats lower; position ``keep`` (if any) as ``p`` had it, top-K list and all."""
    top_ids = np.full_like(p.top_ids, -1)
    top_lp = np.full_like(p.top_logprobs, np.nan)
    tok = p.token_logprobs - np.float32(shift)
    if keep is not None:
        top_ids[keep], top_lp[keep], tok[keep] = p.top_ids[keep], p.top_logprobs[keep], p.token_logprobs[keep]
    return dataclasses.replace(p, token_logprobs=tok, top_ids=top_ids, top_logprobs=top_lp)


def _cand(path: Path, shift: float, keep: int | None = None) -> Path:
    main = {d: actual_only(p, shift, keep) for d, p in side(12, seed=2).items()}
    return build_numerics_run(path, main, seed=2)


def test_a_candidate_off_by_3_nats_where_it_gives_no_top_k_fails(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 0.0, 1)
    code, data = gate(base, _cand(tmp_path / "cand", 3.0, keep=1))  # a top-K list at 1 position of each text
    verdicts = _verdicts(data)
    assert code == 1 and data["verdict"] == "fail"
    dlp = next(r for r in data["rules"] if r["name"] == f"{TASK}: mean abs d-logprob")
    assert dlp["verdict"] == "fail" and abs(dlp["observed"] - 3.0 * 38 / 39) < 1e-3
    assert f"over 12 texts ({SCORED} of {SCORED} positions)" in dlp["note"]
    for rule in TOP_K_RULES:
        assert verdicts[f"{TASK}: {rule}"] == "skip"
        assert any(
            r.startswith(f"{TASK}: {rule}: 12 of {SCORED} positions compared")
            and f"the candidate gave no top-K list at {SCORED - 12}" in r
            and "below the policy's coverage 95%" in r
            for r in data["reasons"]
        ), data["reasons"]


def test_a_candidate_off_by_3_nats_with_no_top_k_at_all_fails(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 0.0, 1)
    code, data = gate(base, _cand(tmp_path / "cand", 3.0))
    assert code == 1 and data["verdict"] == "fail"
    assert _verdicts(data)[f"{TASK}: mean abs d-logprob"] == "fail"


def test_no_top_k_on_the_candidate_says_0_positions_compared_and_why(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 0.0, 1)
    code, data = gate(base, _cand(tmp_path / "cand", 0.0))  # the same logprobs, no top-K list anywhere
    verdicts = _verdicts(data)
    assert code == 2 and data["verdict"] == "cannot_decide"
    assert verdicts[f"{TASK}: mean abs d-logprob"] == "pass"
    for rule in TOP_K_RULES:
        assert verdicts[f"{TASK}: {rule}"] == "skip"
        (reason,) = [r for r in data["reasons"] if r.startswith(f"{TASK}: {rule}:")]
        assert f"0 of {SCORED} positions compared (the candidate gave no top-K list at {SCORED})" in reason
        assert "budget lies inside" not in reason and "prompt_logprobs" in reason


def test_a_coverage_the_policy_lowers_lets_the_top_k_rules_decide_on_what_was_compared(tmp_path: Path) -> None:
    base = _run(tmp_path / "base", 0.0, 1)
    policy = tmp_path / "policy.yaml"
    policy.write_text("min_coverage: 0.02\n")
    code, data = gate(base, _cand(tmp_path / "cand", 0.0, keep=1), "--policy", policy)
    assert code == 0 and set(_verdicts(data).values()) == {"pass"}, data["reasons"]


def test_the_comparison_report_counts_the_positions_each_figure_compared(tmp_path: Path) -> None:
    from evalkit.reporting import render_compare_html

    base = _run(tmp_path / "base", 0.0, 1)
    html = render_compare_html([base, _cand(tmp_path / "cand", 3.0, keep=1)])
    section = html[html.index('<section id="numerics-0">') :]
    assert f"({SCORED} positions; |d-logprob| compared at {SCORED}, KL and top-1 at 12," in section
    assert "KL and top-1 not compared (a side gave no top-K list)" in section
    html = render_compare_html([base, _cand(tmp_path / "none", 0.0)])  # no KL at all: still a page
    assert "KL and top-1 at 0," in html
