"""Estimators for sampled accuracy metrics: pass@k, maj@k, and avg@K with a problem-clustered CI.

All functions are pure. Conventions:

- **pass@k** (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1): with ``n``
  samples of which ``c`` are correct, the unbiased estimate of the chance that at least one of ``k`` samples
  drawn without replacement is correct, ``1 - C(n-c, k) / C(n, k)``, computed as a product so no large
  binomials appear.
- **maj@k**: majority vote over the extracted answers (samples without an answer do not vote). A tie between
  several top answers gives *fractional credit*: ``1/t`` when the gold answer is one of the ``t`` tied answers
  (the expected score of breaking the tie uniformly at random), so the result never depends on sample order.
- **avg@K**: the mean over all samples; its standard error is clustered by problem, because the K samples of
  one problem are not independent draws from the benchmark.
- **Intervals for proportions** (:func:`proportion_interval`): Wilson score intervals, which stay inside
  [0, 1] and keep a width at 0 and 1 (0 of 30 gives 0%–11.4%, where mean ± 1.96 stderr gives 0%–0%). Samples
  clustered by problem count as an *effective* number of independent samples (the design effect read from the
  clustered standard error), and as one per problem when that standard error is 0 and says nothing.
  :func:`share_interval` is the one place a metric's stored interval (``ci95``) and its ``ci_method`` (a key of
  ``contracts.CI_METHODS``) are chosen for a share; every output shows what it stored.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "Z95",
    "ProportionInterval",
    "maj_at_k",
    "mean_ci_clustered",
    "pass_at_k",
    "pass_at_k_ladder",
    "proportion_interval",
    "share_interval",
    "wilson_interval",
]

Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples with ``c`` correct: ``1 - C(n-c, k) / C(n, k)``.

    Numerically stable form: ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``; exactly 1.0 when ``n - c < k`` (every
    k-subset holds a correct sample). Requires ``0 <= c <= n`` and ``1 <= k <= n``.
    """
    if not (0 <= c <= n):
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if not (1 <= k <= n):
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))


def pass_at_k_ladder(k_max: int) -> list[int]:
    """The k values to report for K samples: 1, 2, 4, … up to ``k_max``, and ``k_max`` itself."""
    if k_max < 1:
        return []
    ks: list[int] = []
    k = 1
    while k <= k_max:
        ks.append(k)
        k *= 2
    if ks[-1] != k_max:
        ks.append(k_max)
    return ks


def maj_at_k(answers: Sequence[Hashable | None], gold: Hashable) -> float:
    """Majority-vote accuracy of one problem's sampled answers (``None`` = no answer, does not vote).

    The answers must already be canonical (equal answers compare equal, e.g. via
    :func:`evalkit.scoring.math_answer.canonical_answer`). Returns 1.0 when the single most frequent answer is
    ``gold``, ``1/t`` when ``gold`` is among ``t`` answers tied for most frequent, 0.0 otherwise (also when no
    sample has an answer).
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return 0.0
    top = max(counts.values())
    tied = [a for a, c in counts.items() if c == top]
    return 1.0 / len(tied) if gold in tied else 0.0


def mean_ci_clustered(
    per_problem_values: Sequence[Sequence[float]], z: float = Z95
) -> tuple[float, float | None, tuple[float, float] | None]:
    """``(mean, stderr, (lo, hi))`` of all values, with the standard error clustered by problem.

    ``mean`` is the average over all N samples (avg@K). The variance is the cluster-robust (CR1 / "sandwich")
    variance of that mean over G problems with ``n_g`` samples each::

        var = G / (G - 1) * sum_g ( sum_{i in g} (y_gi - mean) )**2 / N**2

    When every problem has the same number of samples this equals ``var(per-problem means, ddof=1) / G``,
    i.e. the standard error of the per-problem means. The CI is ``mean ± z * stderr`` (normal, 95% by
    default; not clipped). Problems without values are ignored; stderr and CI are None with fewer than two
    problems. Raises ValueError when there are no values at all.
    """
    groups = [np.asarray(v, dtype=np.float64) for v in per_problem_values if len(v) > 0]
    n_total = sum(len(g) for g in groups)
    if n_total == 0:
        raise ValueError("mean_ci_clustered: no values")
    mean = float(sum(g.sum() for g in groups) / n_total)
    n_groups = len(groups)
    if n_groups < 2:
        return mean, None, None
    residual_sums = np.array([(g - mean).sum() for g in groups])
    var = n_groups / (n_groups - 1) * float(np.sum(residual_sums**2)) / n_total**2
    stderr = math.sqrt(var)
    return mean, stderr, (mean - z * stderr, mean + z * stderr)


def wilson_interval(successes: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion ``successes / n`` (both may be fractional: an effective count).

    >>> [round(x, 4) for x in wilson_interval(0, 30)]
    [0.0, 0.1135]
    """
    if n <= 0:
        raise ValueError(f"wilson_interval: need n > 0, got {n}")
    p = min(max(successes / n, 0.0), 1.0)
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class ProportionInterval:
    lo: float
    hi: float
    n_effective: float  # the sample size the interval is computed for
    clustered: bool  # n_effective comes from clusters (problems), not from independent samples
    degenerate: bool  # the clustered stderr was 0 (or absent): one effective sample per cluster


def proportion_interval(
    value: float, n: int, stderr: float | None = None, clusters: int | None = None, z: float = Z95
) -> ProportionInterval:
    """95% Wilson interval of a proportion ``value`` measured on ``n`` samples.

    ``clusters``: when the ``n`` samples come from fewer independent units (K samples of each of ``clusters``
    problems), the effective sample size is ``value * (1 - value) / stderr**2`` from the clustered ``stderr``,
    kept between ``clusters`` and ``n``; when that stderr is 0 or missing (e.g. every sample wrong, so the
    samples cannot show how alike a problem's samples are) it is ``clusters``, the cautious choice.
    """
    if n <= 0:
        raise ValueError(f"proportion_interval: need n > 0, got {n}")
    v = min(max(value, 0.0), 1.0)
    if clusters is None or not 0 < clusters < n:
        lo, hi = wilson_interval(v * n, n, z)
        return ProportionInterval(lo, hi, float(n), clustered=False, degenerate=False)
    if stderr is not None and stderr > 0 and 0 < v < 1:
        n_eff = min(max(v * (1 - v) / (stderr * stderr), float(clusters)), float(n))
        degenerate = False
    else:
        n_eff, degenerate = float(clusters), True
    lo, hi = wilson_interval(v * n_eff, n_eff, z)
    return ProportionInterval(lo, hi, n_eff, clustered=True, degenerate=degenerate)


def share_interval(
    value: float, n: int, stderr: float | None = None, clusters: int | None = None
) -> tuple[tuple[float, float], str]:
    """A share's stored 95% interval and its ``ci_method``: :func:`proportion_interval`'s Wilson interval, over
    ``n`` independent samples (``"wilson"``), or at the effective sample size of the ``stderr`` clustered by
    ``clusters`` problems when the ``n`` samples come from fewer problems (``"wilson-clustered"``).

    >>> share_interval(26 / 50, 50)
    ((0.38522..., 0.65227...), 'wilson')
    """
    iv = proportion_interval(value, n, stderr, clusters)
    return (iv.lo, iv.hi), "wilson-clustered" if iv.clustered else "wilson"
