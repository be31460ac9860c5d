"""The gate's statistics: exact McNemar, its MDE, the clustered paired bootstrap, expected scores, and the
default policy's false-failure rate under the null (seeded simulations)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from evalkit.gating import default_policy
from evalkit.gating.policy import AccuracyRule, BootstrapSettings, ExpectedScore
from evalkit.gating.rules import accuracy_rule, expected_rule, sums
from evalkit.gating.stats import (
    binomial_vs_expected,
    mcnemar_exact,
    mde_mcnemar,
    min_significant_losses,
    paired_bootstrap,
    sign_flip_p,
    tango_z,
)
from tests.gate_fixtures import N_GSM8K, correctness, difficulties, metric

BOOT = BootstrapSettings(resamples=2000, seed=0)


def test_mcnemar_matches_hand_computed_values() -> None:
    # 10 losses, 2 gains: P(X >= 10 | Bin(12, 1/2)) = (C(12,10) + C(12,11) + C(12,12)) / 2^12 = 79 / 4096
    est = mcnemar_exact(10, 2, N_GSM8K, alpha=0.05)
    assert est.p_value == pytest.approx(79 / 4096, abs=1e-15)
    assert est.value == pytest.approx(-8 / N_GSM8K)
    # the interval of the difference: Tango's score statistic equals -+z at its ends; at 0 it is McNemar's
    z = sps.norm.ppf(0.95)
    assert tango_z(2, 10, N_GSM8K, 0.0) == pytest.approx((2 - 10) / math.sqrt(12))
    assert tango_z(2, 10, N_GSM8K, est.ci[0]) == pytest.approx(z, abs=1e-6)
    assert tango_z(2, 10, N_GSM8K, est.ci[1]) == pytest.approx(-z, abs=1e-6)
    assert est.ci[0] < est.value < est.ci[1] < 0
    assert est.ci_level == pytest.approx(0.90)
    # no discordant pair among 30: the bound solves n*d/(1-d) = z^2, i.e. d = z^2 / (n + z^2), not 0
    assert mcnemar_exact(0, 0, 30, 0.05).ci == pytest.approx((-(z**2) / (30 + z**2), z**2 / (30 + z**2)))
    # balanced: P(X >= 5 | Bin(10, 1/2)) = (252 + 210 + 120 + 45 + 10 + 1) / 1024
    assert mcnemar_exact(5, 5, 100, 0.05).p_value == pytest.approx(638 / 1024)
    # all discordant pairs are losses: 5 of them give 1/32 < 0.05, 4 give 1/16
    assert mcnemar_exact(5, 0, 100, 0.05).p_value == pytest.approx(1 / 32)
    assert mcnemar_exact(4, 0, 100, 0.05).p_value == pytest.approx(1 / 16)
    assert min_significant_losses(0.05) == 5
    none = mcnemar_exact(0, 0, 100, 0.05)
    assert (none.p_value, none.mde) == (1.0, 5 / 100)


def test_mcnemar_mde_solves_connors_formula_and_has_80_percent_power() -> None:
    n, psi, alpha = N_GSM8K, 0.12, 0.05
    d = mde_mcnemar(n, psi, alpha)
    za, zb = sps.norm.ppf(0.95), sps.norm.ppf(0.80)
    assert math.sqrt(n) * d == pytest.approx(za * math.sqrt(psi) + zb * math.sqrt(psi - d * d), rel=1e-9)
    assert mde_mcnemar(4 * n, psi, alpha) < d  # more items, smaller detectable drop
    # simulated power at a true drop of the MDE: discordant pairs ~ Bin(n, psi), losses among them ~ Bin(D, q)
    rng = np.random.default_rng(3)
    q = (1 + d / psi) / 2
    discordant = rng.binomial(n, psi, 2000)
    losses = rng.binomial(discordant, q)
    hits = [
        sps.binomtest(int(b), int(m), 0.5, alternative="greater").pvalue < alpha
        for b, m in zip(losses, discordant, strict=True)
    ]
    power = float(np.mean(hits))
    print(f"McNemar MDE {d:.4f} at psi={psi}, n={n}: simulated power {power:.3f}")
    assert 0.74 < power < 0.87


def test_paired_bootstrap_keeps_samples_of_a_problem_together() -> None:
    """The candidate breaks some problems outright (a per-problem effect), so its 8 samples of a problem move
    together: the interval must reflect 30 problems, not 240 independent samples."""
    p = difficulties(30, 0.6, items_seed=2, concentration=0.8)
    broken = np.where(np.random.default_rng(1).random(30) < 0.3, 0.2, 1.0)
    base, cand = correctness(p, 8, seed=10), correctness(p * broken, 8, seed=11)
    b, c = [base[d] for d in range(30)], [cand[d] for d in range(30)]
    est = paired_bootstrap(*sums(b), *sums(c), alpha=0.05, resamples=5000, seed=0)
    diffs = np.array([np.mean(y) - np.mean(x) for x, y in zip(b, c, strict=True)])
    assert est.value == pytest.approx(diffs.mean())
    # percentile interval of a mean over 30 clusters: about +-1.645 clustered standard errors (ddof 0)
    se = diffs.std(ddof=0) / math.sqrt(30)
    assert est.ci[1] - est.ci[0] == pytest.approx(2 * 1.645 * se, rel=0.12)
    assert est.ci[0] < est.value < est.ci[1]
    # treating the 240 samples as independent items understates the noise of correlated samples
    flat = paired_bootstrap(*sums([(x,) for v in b for x in v]), *sums([(x,) for v in c for x in v]), 0.05, 5000, 0)
    assert est.ci[1] - est.ci[0] > 1.4 * (flat.ci[1] - flat.ci[0])
    assert paired_bootstrap(*sums(b), *sums(c), 0.05, 5000, 0) == est  # seeded: deterministic
    assert est.mde is not None and est.mde == pytest.approx(2.486 * se, rel=0.15)


def test_sign_flip_p_value_is_exact_for_few_items() -> None:
    """With 10 items all 2^10 swaps of the runs' samples are enumerated: the p-value equals the share of swaps
    whose difference is at most the observed one (counted here independently)."""
    base = correctness(np.full(10, 0.6), 4, seed=20)
    cand = correctness(np.full(10, 0.4), 4, seed=21)
    (sb, nb), (sc, nc) = sums(list(base.values())), sums(list(cand.values()))
    observed = sc.sum() / nc.sum() - sb.sum() / nb.sum()
    hits = 0
    for flips in itertools.product((False, True), repeat=10):
        f = np.array(flips)
        b, c = np.where(f, sc, sb), np.where(f, sb, sc)
        hits += c.sum() / nc.sum() - b.sum() / nb.sum() <= observed + 1e-12
    assert sign_flip_p(sb, nb, sc, nc, resamples=5000, seed=0) == pytest.approx(hits / 2**10)
    assert paired_bootstrap(sb, nb, sc, nc, 0.05, 5000, 0).p_value == pytest.approx(hits / 2**10)


def test_a_true_five_point_drop_on_1319_items_fails_the_default_policy() -> None:
    p = difficulties(N_GSM8K, 0.75)
    base, cand = metric(correctness(p, 1, seed=1)), metric(correctness(p, 1, seed=2, scale=0.70 / 0.75))
    rule = accuracy_rule("gsm8k", base, cand, default_policy().accuracy.rule("gsm8k", base.name), BOOT)
    print(rule.model_dump())
    assert rule.verdict == "fail" and rule.decided_by == "p_value"
    assert rule.observed is not None and -0.07 < rule.observed < -0.03
    assert rule.p_value is not None and rule.p_value < 0.05
    assert rule.ci is not None and rule.ci[1] < 0
    assert rule.method is not None and rule.method.startswith("exact McNemar")
    assert rule.mde is not None and 0.01 < rule.mde < 0.05


def test_two_runs_differing_only_by_noise_pass() -> None:
    p = difficulties(N_GSM8K, 0.75)
    base, cand = metric(correctness(p, 1, seed=1)), metric(correctness(p, 1, seed=5))
    rule = accuracy_rule("gsm8k", base, cand, default_policy().accuracy.rule("gsm8k", base.name), BOOT)
    assert rule.verdict == "pass"
    assert rule.ci is not None and rule.ci[0] < 0 < rule.ci[1]


def _false_failure_rate(n_items: int, k: int, sims: int, resamples: int) -> float:
    p = difficulties(n_items, 0.75, items_seed=1, concentration=1.0)
    rule = default_policy().accuracy.rule("t", "m")
    boot = BootstrapSettings(resamples=resamples, seed=0)
    fails = 0
    for i in range(sims):
        base = metric(correctness(p, k, seed=2 * i + 100), "m")
        cand = metric(correctness(p, k, seed=2 * i + 101), "m")
        fails += accuracy_rule("t", base, cand, rule, boot).verdict == "fail"
    return fails / sims


def test_default_policy_false_failure_rate_under_the_null() -> None:
    """Baseline and candidate draw from the same per-item chances: the default policy (1 point, alpha 0.05
    one-sided) should fail at most about alpha of such pairs."""
    single = _false_failure_rate(N_GSM8K, 1, sims=1500, resamples=200)
    clustered = _false_failure_rate(30, 8, sims=500, resamples=500)
    print(
        f"false-failure rate under the null: K=1, 1319 items (McNemar): {single:.4f}; "
        f"K=8, 30 problems (sign-flip test): {clustered:.4f}"
    )
    assert single <= 0.05 + 0.015  # 1500 draws: standard error ~0.006
    assert clustered <= 0.05 + 0.02  # 500 draws: standard error ~0.01 (a percentile-bootstrap p-value: 0.072)


def test_expected_score_binomial_matches_hand_values() -> None:
    # 3 of 10 right against 0.5: P(X <= 3 | Bin(10, 1/2)) = (1 + 10 + 45 + 120) / 1024
    est = binomial_vs_expected(3, 10, 0.5, alpha=0.05)
    assert est.p_value == pytest.approx(176 / 1024)
    assert est.ci == pytest.approx((sps.beta.ppf(0.05, 3, 8), sps.beta.ppf(0.95, 4, 7)))


def test_expected_score_check_without_a_baseline() -> None:
    items = correctness(np.full(N_GSM8K, 0.70), 1, seed=4)
    m = metric(items)
    observed = m.value or 0.0
    fail = expected_rule("gsm8k", m, ExpectedScore(task="gsm8k", metric=m.name, value=observed + 0.05), BOOT)
    near = expected_rule("gsm8k", m, ExpectedScore(task="gsm8k", metric=m.name, value=observed + 0.005), BOOT)
    assert (fail.verdict, near.verdict) == ("fail", "pass")
    assert fail.method is not None and fail.method.startswith("exact binomial")

    # non-inferiority: the 95% lower bound must stay within max_drop of the published value
    def ni(max_drop: float) -> ExpectedScore:
        return ExpectedScore(task="gsm8k", metric=m.name, value=observed, mode="non-inferiority", max_drop=max_drop)

    assert expected_rule("gsm8k", m, ni(0.005), BOOT).verdict == "fail"
    assert expected_rule("gsm8k", m, ni(0.03), BOOT).verdict == "pass"
    assert expected_rule("gsm8k", None, ni(0.03), BOOT).verdict == "fail"  # nothing to check


def test_expected_avg_at_k_against_a_published_number() -> None:
    """AIME-style: 30 problems x 8 samples against a published avg@8 of 0.9333."""
    strong = metric(correctness(difficulties(30, 0.95, items_seed=3, concentration=4.0), 8, seed=6), "avg@8")
    weak = metric(correctness(difficulties(30, 0.6, items_seed=3, concentration=4.0), 8, seed=6), "avg@8")
    exp = ExpectedScore(task="aime25", metric="avg@8", value=0.9333)
    ok, bad = expected_rule("aime25", strong, exp, BOOT), expected_rule("aime25", weak, exp, BOOT)
    print(strong.value, ok.p_value, weak.value, bad.p_value)
    assert ok.verdict == "pass" and bad.verdict == "fail"
    assert bad.method is not None and "bootstrap over 30 items (240 samples" in bad.method
    assert bad.ci is not None and bad.ci[1] < 0.9333


def test_relative_budget_and_non_inferiority_mode() -> None:
    p = difficulties(N_GSM8K, 0.75)
    base, cand = metric(correctness(p, 1, seed=1)), metric(correctness(p, 1, seed=2, scale=0.70 / 0.75))
    loose = AccuracyRule(max_drop=None, max_drop_rel=0.2)  # 20% of ~0.75: a 15-point budget
    assert accuracy_rule("gsm8k", base, cand, loose, BOOT).budget == pytest.approx(0.2 * (base.value or 0))
    assert accuracy_rule("gsm8k", base, cand, loose, BOOT).verdict == "pass"
    both = AccuracyRule(max_drop=0.01, max_drop_rel=0.2)  # the smaller one holds
    assert accuracy_rule("gsm8k", base, cand, both, BOOT).budget == pytest.approx(0.01)
    same = metric(correctness(p, 1, seed=1))
    ni = AccuracyRule(max_drop=0.01, mode="non-inferiority")
    assert accuracy_rule("gsm8k", base, same, ni, BOOT).verdict == "pass"  # identical runs: within any budget
    assert accuracy_rule("gsm8k", base, metric(correctness(p, 1, seed=5)), ni, BOOT).verdict == "fail"
