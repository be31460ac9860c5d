"""pass@k against brute force, maj@k and the clustered CI against hand-computed values."""

from __future__ import annotations

import itertools
import math

import pytest

from evalkit.scoring.estimators import (
    Z95,
    maj_at_k,
    mean_ci_clustered,
    pass_at_k,
    pass_at_k_ladder,
    proportion_interval,
    wilson_interval,
)


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 9))
def test_pass_at_k_matches_enumeration_of_all_k_subsets(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_hand_values():
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8)  # pass@1 is the plain accuracy
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k


def test_pass_at_k_is_stable_for_large_n():
    # C(1000, 500) overflows floats; the product form does not.
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)
    assert pass_at_k(1000, 10, 500) == pytest.approx(1 - math.comb(990, 500) / math.comb(1000, 500), rel=1e-9)
    assert 0.0 <= pass_at_k(1000, 1, 999) <= 1.0


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_pass_at_k_ladder():
    assert pass_at_k_ladder(1) == [1]
    assert pass_at_k_ladder(8) == [1, 2, 4, 8]
    assert pass_at_k_ladder(6) == [1, 2, 4, 6]
    assert pass_at_k_ladder(32) == [1, 2, 4, 8, 16, 32]
    assert pass_at_k_ladder(0) == []


@pytest.mark.parametrize(
    ("answers", "gold", "expected"),
    [
        (["70", "70", "69"], "70", 1.0),
        (["69", "69", "70"], "70", 0.0),
        (["70", "69"], "70", 0.5),  # two-way tie containing gold: half credit
        (["69", "70"], "70", 0.5),  # ... whatever the order
        (["1", "2", "3"], "2", 1 / 3),
        (["1", "1", "2", "2", "70"], "70", 0.0),  # tie not containing gold
        ([None, None, "70"], "70", 1.0),  # no-answer samples do not vote
        ([None, None, None], "70", 0.0),
        ([], "70", 0.0),
        (["70", None, "69", "70", "69", "69"], "70", 0.0),
    ],
)
def test_maj_at_k(answers, gold, expected):
    assert maj_at_k(answers, gold) == pytest.approx(expected)


def test_mean_ci_clustered_equal_sizes_is_stderr_of_problem_means():
    mean, se, ci = mean_ci_clustered([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    # problem means 0.5, 1, 0 -> sd (ddof=1) = 0.5 -> se = 0.5 / sqrt(3)
    assert mean == pytest.approx(0.5)
    assert se == pytest.approx(0.5 / math.sqrt(3))
    assert ci == pytest.approx((0.5 - Z95 * 0.5 / math.sqrt(3), 0.5 + Z95 * 0.5 / math.sqrt(3)))


def test_mean_ci_clustered_unequal_sizes_uses_cluster_robust_variance():
    mean, se, ci = mean_ci_clustered([[1, 0], [1, 1, 1, 1], [0]])
    # N = 7, mean = 5/7; residual sums per problem: 1 - 10/7 = -3/7, 4 - 20/7 = 8/7, -5/7
    # var = G/(G-1) * sum(r^2) / N^2 = 3/2 * (9 + 64 + 25)/49 / 49 = 3/49
    assert mean == pytest.approx(5 / 7)
    assert se == pytest.approx(math.sqrt(3) / 7)
    assert ci == pytest.approx((5 / 7 - Z95 * math.sqrt(3) / 7, 5 / 7 + Z95 * math.sqrt(3) / 7))
    # not the naive iid standard error over the 7 samples
    assert se is not None
    naive = math.sqrt((5 / 7) * (2 / 7) / 6)
    assert abs(se - naive) > 0.05


def test_mean_ci_clustered_edge_cases():
    assert mean_ci_clustered([[1, 0, 1]]) == (pytest.approx(2 / 3), None, None)
    assert mean_ci_clustered([[1, 0], [], [1, 1]])[0] == pytest.approx(0.75)  # empty problems ignored
    mean, se, ci = mean_ci_clustered([[1, 1], [1, 1]])
    assert (mean, se, ci) == (1.0, 0.0, (1.0, 1.0))
    with pytest.raises(ValueError):
        mean_ci_clustered([[], []])


# ------------------------------------------------------------------------------------------- proportion intervals
@pytest.mark.parametrize(("k", "n"), [(0, 30), (30, 30), (1, 10), (19, 1319), (660, 1319), (3, 4)])
def test_wilson_interval_matches_scipy(k: int, n: int) -> None:
    from scipy.stats import binomtest

    ref = binomtest(k, n).proportion_ci(method="wilson")
    assert wilson_interval(k, n) == pytest.approx((ref.low, ref.high), abs=1e-6)


def test_wilson_interval_has_width_at_0_and_1() -> None:
    lo, hi = wilson_interval(0, 30)
    assert lo == 0.0 and hi == pytest.approx(0.1135, abs=1e-4)  # AIME 0/30: not "0.0%-0.0%"
    lo, hi = wilson_interval(30, 30)
    assert hi == pytest.approx(1.0) and lo == pytest.approx(1 - 0.1135, abs=1e-4)


def test_proportion_interval_independent_samples() -> None:
    iv = proportion_interval(19 / 1319, 1319, stderr=0.0033)
    assert not iv.clustered and iv.n_effective == 1319
    assert (iv.lo, iv.hi) == pytest.approx(wilson_interval(19, 1319))


def test_proportion_interval_clustered_uses_the_design_effect() -> None:
    # 120 samples of 30 problems; a clustered stderr twice the binomial one: design effect 4, n_eff 30
    p = 0.25
    se = 2 * math.sqrt(p * (1 - p) / 120)
    iv = proportion_interval(p, 120, stderr=se, clusters=30)
    assert iv.clustered and not iv.degenerate and iv.n_effective == pytest.approx(30)
    assert (iv.lo, iv.hi) == pytest.approx(wilson_interval(p * 30, 30))
    # a stderr below the binomial one does not make the samples more than independent
    assert proportion_interval(p, 120, stderr=1e-4, clusters=30).n_effective == 120


def test_proportion_interval_degenerate_cluster_counts_problems() -> None:
    # every sample wrong: clustered stderr 0 says nothing about how alike samples are -> one per problem
    iv = proportion_interval(0.0, 120, stderr=0.0, clusters=30)
    assert iv.degenerate and iv.n_effective == 30
    assert (iv.lo, iv.hi) == pytest.approx(wilson_interval(0, 30))
    with pytest.raises(ValueError):
        proportion_interval(0.5, 0)
