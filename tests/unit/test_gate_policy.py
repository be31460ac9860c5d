"""The gate's policy file: defaults, per-metric overrides, and one-line errors for unknown keys and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.gating import PolicyError, default_policy, load_policy


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_default_policy_is_the_issue_default() -> None:
    p = default_policy()
    rule = p.accuracy.rule("gsm8k", "exact_match,strict-match")
    assert (rule.max_drop, rule.alpha, rule.mode, rule.budget(0.8)) == (0.01, 0.05, "regression", 0.01)
    assert [getattr(p.speed, k).max_change for k in ("output_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms")] == [
        0.10,
        0.10,
        0.10,
    ]
    assert p.speed.e2e_p50_ms is None and p.rates.max_error_rate == 0.0 and not p.require_matched_load
    assert load_policy(None) == p


def test_policy_file_overrides_merge_with_the_default(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
accuracy:
  default: {max_drop: 0.02, alpha: 0.01}
  tasks:
    gsm8k:
      "exact_match,strict-match": {mode: non-inferiority}
speed:
  ttft_p50_ms: {max_change: 0.15}
  tpot_p50_ms: null
rates: {max_truncated_rate: 0.05}
expected:
  - {task: aime25, metric: avg@8, value: 0.9333}
require_matched_load: true
""",
    )
    p = load_policy(path)
    strict = p.accuracy.rule("gsm8k", "exact_match,strict-match")
    assert (strict.max_drop, strict.alpha, strict.mode) == (0.02, 0.01, "non-inferiority")
    assert p.accuracy.rule("gsm8k", "exact_match,flexible-extract").mode == "regression"
    assert p.speed.ttft_p50_ms is not None and p.speed.ttft_p50_ms.max_change == 0.15
    assert p.speed.tpot_p50_ms is None and p.rates.max_truncated_rate == 0.05 and p.rates.max_error_rate == 0.0
    assert p.expected[0].value == 0.9333 and p.expected[0].max_drop == 0.0 and p.require_matched_load
    assert load_policy(_write(tmp_path, "")) == default_policy()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("accuracy: {defualt: {max_drop: 0.01}}", "unknown key 'accuracy.defualt' (allowed here: default, tasks)"),
        ("speed: {ttft_p50: {max_change: 0.1}}", "unknown key 'speed.ttft_p50' (allowed here: output_tokens_per_s,"),
        (
            'accuracy: {tasks: {gsm8k: {"exact_match,strict-match": {max_dorp: 0.1}}}}',
            "unknown key 'accuracy.tasks.gsm8k.exact_match,strict-match.max_dorp' (allowed here: max_drop,",
        ),
        (
            "expected: [{task: aime25, metric: avg@8, value: 0.9, tolerance: 0.1}]",
            "unknown key 'expected.0.tolerance' (allowed here: task, metric, value, max_drop, alpha, mode)",
        ),
        ("require_matched: true", "unknown key 'require_matched'"),
        ("accuracy: {default: {mode: strict}}", "'accuracy.default.mode': Input should be 'regression' or"),
        ("speed: {ttft_p50_ms: {max_change: -0.1}}", "'speed.ttft_p50_ms.max_change': Input should be greater"),
        ("expected: [{task: aime25, metric: avg@8, value: 93.3}]", "'expected.0.value': Input should be less"),
        ("accuracy: [1, 2", "does not parse as YAML at line"),
        ("- just a list", "must hold a mapping"),
    ],
)
def test_bad_policy_files_give_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(PolicyError) as e:
        load_policy(_write(tmp_path, text))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy(tmp_path / "nope.yaml")
