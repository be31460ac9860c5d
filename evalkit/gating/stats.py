"""The gate's statistics (scipy): paired accuracy differences, scores against a published value, speed changes.

Every function returns an :class:`Estimate`: the observed value, a two-sided ``1 - 2*alpha`` confidence
interval (its ends are the one-sided ``1 - alpha`` bounds the verdicts use), a one-sided p-value for "no drop",
and the minimum detectable effect (MDE): the smallest drop the test finds with 80% power at that alpha.

- One sample per item in both runs: exact McNemar (:func:`scipy.stats.binomtest` on the discordant pairs)
  for the p-value, Tango's score interval for the difference.
- K samples per item: a paired bootstrap over items (the K samples of an item stay together) for the
  percentile interval, and a paired sign-flip permutation test for the p-value (the percentile bootstrap
  rejects too often when only a few dozen items carry the difference); scipy, seeded generators
  (deterministic).
- Speed, several runs per side: Welch's t-test on the log of each run's figure (its median latency or output
  tokens/s); one run per side is judged against a noise budget, never by resampling its requests.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize, stats

POWER = 0.80


@dataclass(frozen=True)
class Estimate:
    """``value`` with its ``ci`` (two-sided, level ``ci_level``), one-sided ``p_value`` against "no drop"
    (no worsening), ``mde`` (None when the data hold no variance to size it), ``n`` items and the method."""

    value: float
    ci: tuple[float, float]
    ci_level: float
    p_value: float
    mde: float | None
    n: int
    method: str


@functools.lru_cache(maxsize=64)
def _z(alpha: float) -> float:
    return float(stats.norm.ppf(1.0 - alpha))


def min_significant_losses(alpha: float) -> int:
    """The fewest discordant pairs, all of them losses, that make exact McNemar significant at ``alpha``."""
    return max(1, math.ceil(math.log2(1.0 / alpha) - 1e-12))


def mde_mcnemar(n: int, discordant_rate: float, alpha: float, power: float = POWER) -> float:
    """Smallest paired difference of proportions that McNemar detects with ``power`` (Connor's formula):
    the root of ``sqrt(n)*d = z_alpha*sqrt(psi) + z_power*sqrt(psi - d^2)``, ``psi`` the discordant rate; never
    below the drop of the fewest all-loss discordant pairs that can be significant."""
    floor = min_significant_losses(alpha) / n
    psi = discordant_rate
    za, zb = _z(alpha), _z(1.0 - power)
    if psi <= 0:
        return floor

    def gap(d: float) -> float:
        return math.sqrt(n) * d - za * math.sqrt(psi) - zb * math.sqrt(max(psi - d * d, 0.0))

    hi = math.sqrt(psi)
    root = float(optimize.brentq(gap, 0.0, hi)) if gap(hi) > 0 else hi
    return max(root, floor)


def tango_z(gains: int, losses: int, n: int, delta: float) -> float:
    """Tango's score statistic for H0: (candidate - baseline) = ``delta`` in a paired design (Tango 1998,
    Stat Med 17:891), with the restricted maximum-likelihood estimate of the loss cell."""
    a, b = 2.0 * n, -gains - losses + (2.0 * n - gains + losses) * delta
    c = -losses * delta * (1.0 - delta)
    q = (math.sqrt(max(b * b - 4.0 * a * c, 0.0)) - b) / (2.0 * a)
    var = n * (2.0 * q + delta * (1.0 - delta))
    diff = gains - losses - n * delta
    if var <= 0:
        return math.copysign(math.inf, diff) if diff else 0.0
    return diff / math.sqrt(var)


def tango_ci(gains: int, losses: int, n: int, alpha: float) -> tuple[float, float]:
    """Two-sided ``1 - 2*alpha`` score interval of a paired difference of proportions (candidate - baseline);
    unlike the conditional interval it stays informative when few or no pairs are discordant."""
    z, eps = _z(alpha), 1e-12

    def bound(target: float, lo: float, hi: float, edge: float) -> float:
        f = lambda d: tango_z(gains, losses, n, d) - target  # noqa: E731
        return float(optimize.brentq(f, lo, hi, xtol=1e-12)) if f(lo) * f(hi) < 0 else edge

    mid = (gains - losses) / n
    return bound(z, -1.0 + eps, mid, -1.0), bound(-z, mid, 1.0 - eps, 1.0)


def mcnemar_exact(losses: int, gains: int, n: int, alpha: float) -> Estimate:
    """Paired difference (candidate - baseline) of two proportions over ``n`` items, from the discordant
    pairs: ``losses`` (baseline right, candidate wrong) and ``gains``. p-value: exact one-sided McNemar
    (binomial test of losses among discordant pairs, p = 1/2, alternative "greater"); interval: Tango's score
    interval of the difference."""
    d = losses + gains
    p = float(stats.binomtest(losses, d, 0.5, alternative="greater").pvalue) if d else 1.0
    return Estimate(
        value=(gains - losses) / n,
        ci=tango_ci(gains, losses, n, alpha),
        ci_level=1.0 - 2.0 * alpha,
        p_value=p,
        mde=mde_mcnemar(n, d / n, alpha),
        n=n,
        method=f"exact McNemar ({losses} losses, {gains} gains of {n} pairs), Tango score CI",
    )


def _bootstrap(
    data: Sequence[np.ndarray], statistic: Callable[..., Any], alpha: float, resamples: int, seed: int, paired: bool
) -> tuple[float, tuple[float, float], np.ndarray, float]:
    """Percentile bootstrap: (observed, (lo, hi) at level 1 - 2*alpha, replicates, standard error)."""
    res = stats.bootstrap(
        tuple(data),
        statistic,
        n_resamples=resamples,
        batch=max(1, 2_000_000 // max(len(data[0]), 1)),
        vectorized=True,
        paired=paired,
        confidence_level=1.0 - 2.0 * alpha,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    observed = float(statistic(*data, axis=-1))
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    ci = (float(res.confidence_interval.low), float(res.confidence_interval.high))
    if not all(math.isfinite(x) for x in ci):  # every replicate equal: scipy gives nan
        ci = (observed, observed)
    return observed, ci, dist, float(np.std(dist, ddof=1))


def _tail(dist: np.ndarray, hit: np.ndarray) -> float:
    """Bootstrap p-value (1 + hits) / (B + 1)."""
    return float((1 + int(np.count_nonzero(hit))) / (len(dist) + 1))


def _mde_from_se(se: float, alpha: float) -> float | None:
    return (_z(alpha) + _z(1.0 - POWER)) * se if se > 0 else None


def _ratio_diff(sb: np.ndarray, nb: np.ndarray, sc: np.ndarray, nc: np.ndarray, axis: int = -1) -> Any:
    return sc.sum(axis=axis) / nc.sum(axis=axis) - sb.sum(axis=axis) / nb.sum(axis=axis)


def sign_flip_p(sb: np.ndarray, nb: np.ndarray, sc: np.ndarray, nc: np.ndarray, resamples: int, seed: int) -> float:
    """One-sided p-value of "the candidate is not worse": a paired permutation test that swaps the two runs'
    samples of each item at random (``scipy.stats.permutation_test``, permutation_type "samples"; exact
    enumeration when the items are few). Under "no difference" the runs' samples of an item are exchangeable,
    so the test holds its alpha however few the items."""
    s, n = np.concatenate([sb, sc]), np.concatenate([nb, nc])
    g = len(sb)

    def statistic(x: np.ndarray, y: np.ndarray, axis: int = -1) -> Any:
        return s[y].sum(axis=axis) / n[y].sum(axis=axis) - s[x].sum(axis=axis) / n[x].sum(axis=axis)

    res = stats.permutation_test(
        (np.arange(g), np.arange(g, 2 * g)),
        statistic,
        permutation_type="samples",
        vectorized=True,
        n_resamples=resamples,
        alternative="less",
        batch=max(1, 2_000_000 // max(g, 1)),
        rng=np.random.default_rng(seed),
    )
    return float(res.pvalue)


def paired_bootstrap(
    sb: np.ndarray, nb: np.ndarray, sc: np.ndarray, nc: np.ndarray, alpha: float, resamples: int, seed: int
) -> Estimate:
    """Difference (candidate - baseline) of mean correctness over all samples, from per-item right answers
    ``sb``/``sc`` out of ``nb``/``nc`` samples (same item order in both runs). Interval: percentile bootstrap
    resampling items, each keeping its samples together; p-value: the paired sign-flip test (:func:`sign_flip_p`)."""
    observed, ci, _, se = _bootstrap((sb, nb, sc, nc), _ratio_diff, alpha, resamples, seed, paired=True)
    return Estimate(
        value=observed,
        ci=ci,
        ci_level=1.0 - 2.0 * alpha,
        p_value=sign_flip_p(sb, nb, sc, nc, resamples, seed),
        mde=_mde_from_se(se, alpha),
        n=len(sb),
        method=(
            f"paired bootstrap over {len(sb)} items ({int(nb.sum())} vs {int(nc.sum())} samples, B={resamples}),"
            " sign-flip test"
        ),
    )


def binomial_vs_expected(correct: int, n: int, expected: float, alpha: float) -> Estimate:
    """A proportion (one sample per item) against a published value: exact one-sided binomial test of
    "not below ``expected``", Clopper-Pearson interval."""
    test = stats.binomtest(correct, n, expected, alternative="less")
    ci = stats.binomtest(correct, n).proportion_ci(confidence_level=1.0 - 2.0 * alpha, method="exact")
    spread = (_z(alpha) + _z(1.0 - POWER)) * math.sqrt(expected * (1.0 - expected) / n)
    return Estimate(
        value=correct / n,
        ci=(float(ci.low), float(ci.high)),
        ci_level=1.0 - 2.0 * alpha,
        p_value=float(test.pvalue),
        mde=max(spread, 1.0 / n),
        n=n,
        method=f"exact binomial test ({correct} of {n} right)",
    )


def _ratio(s: np.ndarray, n: np.ndarray, axis: int = -1) -> Any:
    return s.sum(axis=axis) / n.sum(axis=axis)


def bootstrap_vs_expected(
    s: np.ndarray, n: np.ndarray, expected: float, alpha: float, resamples: int, seed: int
) -> Estimate:
    """Mean correctness over all samples (``s`` right of ``n`` per item) against a published value: bootstrap
    over items (samples kept with their item); p-value = share of replicates at or above ``expected``."""
    observed, ci, dist, se = _bootstrap((s, n), _ratio, alpha, resamples, seed, paired=True)
    return Estimate(
        value=observed,
        ci=ci,
        ci_level=1.0 - 2.0 * alpha,
        p_value=_tail(dist, dist >= expected),
        mde=_mde_from_se(se, alpha),
        n=len(s),
        method=f"bootstrap over {len(s)} items ({int(n.sum())} samples, B={resamples})",
    )


def speed_runs_change(
    base: Sequence[float], cand: Sequence[float], *, lower_is_better: bool, budget: float, alpha: float
) -> Estimate:
    """Relative change (candidate / baseline - 1) of a speed figure measured once per run, several runs per side:
    Welch's t-test on the logs of the per-run figures, so the variation it tests against is how runs spread, not
    how the requests of one run spread. The p-value is one-sided against "worse by no more than ``budget``" (a
    rise of ``budget`` when ``lower_is_better``, else a fall of ``budget``); the interval is that of the ratio
    (Welch-Satterthwaite degrees of freedom)."""
    lb, lc = np.log(np.asarray(base, dtype=np.float64)), np.log(np.asarray(cand, dtype=np.float64))
    if min(len(lb), len(lc)) < 2:
        raise ValueError("Welch's test needs at least two runs per side")
    diff = float(lc.mean() - lb.mean())
    vb, vc = float(lb.var(ddof=1)) / len(lb), float(lc.var(ddof=1)) / len(lc)
    se = math.sqrt(vb + vc)
    df = (vb + vc) ** 2 / (vb**2 / (len(lb) - 1) + vc**2 / (len(lc) - 1)) if se > 0 else float(len(lb) + len(lc) - 2)
    worse = diff if lower_is_better else -diff
    threshold = math.log1p(budget) if lower_is_better else (-math.log1p(-budget) if budget < 1 else math.inf)
    if se > 0:
        p_value = float(stats.t.sf((worse - threshold) / se, df))
        half = float(stats.t.ppf(1.0 - alpha, df)) * se
        mde_log = threshold + float(stats.t.ppf(1.0 - alpha, df) + stats.t.ppf(POWER, df)) * se
        mde: float | None = math.expm1(mde_log) if lower_is_better else -math.expm1(-mde_log)
    else:  # every run gave the same figure: the observed change is the change
        p_value, half, mde = (0.0 if worse > threshold else 1.0), 0.0, None
    return Estimate(
        value=math.expm1(diff),
        ci=(math.expm1(diff - half), math.expm1(diff + half)),
        ci_level=1.0 - 2.0 * alpha,
        p_value=p_value,
        mde=mde,
        n=min(len(lb), len(lc)),
        method=f"Welch's t-test on log per-run figures ({len(lb)} vs {len(lc)} runs, df {df:.1f})",
    )


def corpus_change(
    lb: np.ndarray, ub: np.ndarray, lc: np.ndarray, uc: np.ndarray, aggregation: str, axis: int = -1
) -> Any:
    """Relative change (candidate / baseline - 1) of a corpus metric from per-document loglikelihoods ``lb``/``lc``
    and lengths ``ub``/``uc``: ``weighted_perplexity`` exp(-sum ll / sum units), ``bits_per_byte`` -sum ll / sum
    bytes / ln 2 (lm-eval's aggregations)."""
    rate_b = lb.sum(axis=axis) / ub.sum(axis=axis)
    rate_c = lc.sum(axis=axis) / uc.sum(axis=axis)
    if aggregation == "weighted_perplexity":
        return np.expm1(rate_b - rate_c)
    return rate_c / rate_b - 1.0


def corpus_bootstrap(
    pairs: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    aggregation: str,
    budget: float,
    alpha: float,
    resamples: int,
    seed: int,
) -> Estimate:
    """The relative change of a corpus metric (:func:`corpus_change`) over documents scored in both runs, with a
    paired bootstrap over documents (a document's two loglikelihoods and lengths stay together, so the replicates
    weight documents by length as the corpus metric does). Interval: the expanded percentile interval (Hesterberg
    2015: the replicates' quantiles at ``Phi(sqrt(n/(n-1)) * t_{n-1}(alpha))``, which widens the percentile
    interval that is too narrow over few documents). ``p_value``: one-sided, of "the increase is within
    ``budget``", the same mapping applied to the share of replicates at or below the budget; it is below ``alpha``
    exactly when the interval's lower end is above the budget."""

    def statistic(lb: np.ndarray, ub: np.ndarray, lc: np.ndarray, uc: np.ndarray, axis: int = -1) -> Any:
        return corpus_change(lb, ub, lc, uc, aggregation, axis)

    observed, _, dist, se = _bootstrap(pairs, statistic, alpha, resamples, seed, paired=True)
    n = len(pairs[0])
    stretch = math.sqrt(n / (n - 1))
    level = float(stats.norm.cdf(stretch * stats.t.ppf(alpha, n - 1)))
    ci = (float(np.quantile(dist, level)), float(np.quantile(dist, 1.0 - level)))
    within = (1 + int(np.count_nonzero(dist <= budget + 1e-12))) / (len(dist) + 1)
    p = float(stats.t.cdf(float(stats.norm.ppf(within)) / stretch, n - 1))
    return Estimate(
        value=observed,
        ci=ci,
        ci_level=1.0 - 2.0 * alpha,
        p_value=p,
        mde=_mde_from_se(se, alpha),
        n=n,
        method=f"paired bootstrap of the corpus {aggregation} ratio over {n} documents (B={resamples}), expanded "
        "percentile interval",
    )
