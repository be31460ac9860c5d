"""pass@k against brute force, maj@k and the clustered CI against hand-computed values."""

from __future__ import annotations

import itertools
import math

import pytest

from evalkit.scoring.estimators import Z95, maj_at_k, mean_ci_clustered, pass_at_k, pass_at_k_ladder


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
