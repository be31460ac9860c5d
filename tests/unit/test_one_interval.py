"""One 95% interval per metric: scoring/ chooses it once (Wilson for a share of independent documents, at the
effective sample size for avg@K's samples clustered by problem, over problems for pass@k and maj@K), summary.json
stores it with its ``ci_method``, and the console, report, gate (Markdown, JUnit, JSON) and history show that
stored interval, never one of their own.

Here: those of its tests that run in-process; the others are in tests/integration/test_one_interval.py."""

from __future__ import annotations

import pytest

from evalkit.scoring.estimators import share_interval


def test_26_of_50_is_the_wilson_interval() -> None:
    (lo, hi), method = share_interval(26 / 50, 50)
    assert method == "wilson" and (round(lo, 3), round(hi, 3)) == (0.385, 0.652)  # not the normal 0.382-0.658
    # pass@8 of 30 problems all solved keeps a width (the normal interval was [1.0, 1.0])
    (lo, hi), _ = share_interval(1.0, 30)
    assert (round(lo, 3), round(hi, 3)) == (0.886, 1.0)
    # avg@8: 240 samples of 30 problems, the clustered stderr's effective sample size
    (lo, hi), method = share_interval(0.5, 240, stderr=0.5 / 30**0.5, clusters=30)
    assert method == "wilson-clustered" and (lo, hi) == pytest.approx(share_interval(0.5, 30)[0])
