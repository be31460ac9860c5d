"""The numerics figures (evalkit/scoring/numerics.py) on synthetic positions with perturbations of known size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalkit.contracts import PromptPositions
from evalkit.scoring.numerics import (
    TokenMismatch,
    compare_runs,
    compare_text,
    first_split,
    noise_floor,
    position_divergence,
    split_passes,
    t_interval,
    texts_to_separate,
)
from tests.numerics_fixtures import log_softmax, positions, side, text_logits


def _kl_full(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    return (np.exp(la) * (la - lb)).sum(axis=1)


def test_kl_is_exact_when_both_sides_report_the_whole_vocabulary() -> None:
    logits, ids = text_logits(0, n=30, vocab=32)
    shifted = logits + np.random.default_rng(3).normal(0.0, 0.5, logits.shape)
    _, kl, dlp, _ = position_divergence(positions(logits, ids, k=32), positions(shifted, ids, k=32))
    la, lb = log_softmax(logits)[1:], log_softmax(shifted)[1:]
    assert kl == pytest.approx(_kl_full(la, lb), abs=1e-5)
    assert dlp == pytest.approx(np.abs(la - lb)[np.arange(29), ids[1:]], abs=1e-5)


def test_a_known_shift_of_one_logit_gives_its_kl_and_a_uniform_shift_none() -> None:
    logits, ids = text_logits(1, n=20, vocab=16)
    _, kl, dlp, agree = position_divergence(positions(logits, ids, k=16), positions(logits + 3.0, ids, k=16))
    assert kl.max() < 1e-6 and dlp.max() < 1e-5 and agree.all()  # softmax ignores a constant
    bumped = logits.copy()
    bumped[:, 5] += 0.7
    _, kl, _, _ = position_divergence(positions(logits, ids, k=16), positions(bumped, ids, k=16))
    assert kl == pytest.approx(_kl_full(log_softmax(logits), log_softmax(bumped))[1:], abs=1e-5)
    assert kl.mean() > 1e-3


def test_top1_flips_are_counted() -> None:
    logits, ids = text_logits(2, n=41, vocab=16)
    flipped = logits.copy()
    lp = log_softmax(logits)
    flips = [3, 10, 17, 30]
    for i in flips:  # swap the first and second ranked tokens
        first, second = np.argsort(-lp[i])[:2]
        flipped[i, [first, second]] = flipped[i, [second, first]]
    text = compare_text(positions(logits, ids), positions(flipped, ids))
    assert text.positions == 40
    assert sorted(text.index[~text.agree].tolist()) == flips
    assert text.figure("top1") == pytest.approx(1 - len(flips) / 40)


def _hand(top: list[tuple[int, float]], actual: int, k: int = 2) -> PromptPositions:
    """Two positions: position 0 (no logprob) and one with the given top-``k`` (id, probability)."""
    ids = np.array([[-1] * k, [i for i, _ in top]], dtype=np.int32)
    lps = np.array([[np.nan] * k, [math.log(p) for _, p in top]], dtype=np.float32)
    actual_p = dict(top).get(actual, 0.01)
    return PromptPositions(
        key="k", task="numerics", doc_id=0, sample_index=0, token_ids=np.array([7, actual], dtype=np.int32),
        token_logprobs=np.array([np.nan, math.log(actual_p)], dtype=np.float32), top_ids=ids, top_logprobs=lps,
        tokens=("a", "b"), continuation_ids=np.zeros(0, dtype=np.int32),
    )  # fmt: skip


def test_union_with_a_token_one_side_did_not_report_shares_its_rest_mass() -> None:
    # A: x .6, y .3 (rest .1); B: x .6, z .3 (rest .1). y is missing from B and z from A: each gets half of that
    # side's rest (min(.1 / 2, .3) = .05), the bucket the other half. KL = .3 ln(.3/.05) + .05 ln(.05/.3).
    a, b = _hand([(1, 0.6), (2, 0.3)], actual=1), _hand([(1, 0.6), (3, 0.3)], actual=1)
    _, kl, dlp, agree = position_divergence(a, b)
    assert kl[0] == pytest.approx(0.25 * math.log(6), rel=1e-5)
    assert dlp[0] == pytest.approx(0.0, abs=1e-7) and agree[0]


def test_a_missing_token_gets_at_most_the_sides_kth_probability() -> None:
    # A: x .4, y .1 (rest .5); z missing from A gets min(.5 / 2, .1) = .1 and A's bucket .4. B: x .4, z .1 (rest .5).
    a, b = _hand([(1, 0.4), (2, 0.1)], actual=1), _hand([(1, 0.4), (3, 0.1)], actual=1)
    _, kl, _, _ = position_divergence(a, b)
    assert kl[0] == pytest.approx(0.0, abs=1e-6)  # symmetric: y and z both get .1 on the side that lacks them
    c = _hand([(1, 0.4), (3, 0.35)], actual=1)  # B puts .35 on z, rest .25: y gets min(.125, .35) = .125
    _, kl, _, _ = position_divergence(a, c)
    pa = {"x": 0.4, "y": 0.1, "z": 0.1, "rest": 0.4}
    pb = {"x": 0.4, "y": 0.125, "z": 0.35, "rest": 0.125}
    assert kl[0] == pytest.approx(sum(pa[t] * math.log(pa[t] / pb[t]) for t in pa), rel=1e-4)


def test_top_k_summing_past_one_still_gives_a_finite_kl() -> None:
    a, b = _hand([(1, 0.7), (2, 0.31)], actual=1), _hand([(1, 0.7), (3, 0.31)], actual=1)
    _, kl, _, _ = position_divergence(a, b)
    assert np.isfinite(kl).all() and kl[0] > 1.0  # y and z each near 0 on the side without them


def test_an_actual_token_outside_the_top_k_counts_with_its_reported_logprob() -> None:
    a, b = _hand([(1, 0.6), (2, 0.3)], actual=9), _hand([(1, 0.6), (2, 0.3)], actual=9)
    _, kl, dlp, _ = position_divergence(a, b)
    assert kl[0] == pytest.approx(0.0, abs=1e-7) and dlp[0] == 0.0


def test_different_tokens_are_refused_naming_the_text_and_position() -> None:
    logits, ids = text_logits(3)
    other = ids.copy()
    other[17] = (other[17] + 1) % 64
    with pytest.raises(TokenMismatch, match=r"doc 3 was tokenised differently .*position 17"):
        position_divergence(positions(logits, ids, doc_id=3), positions(logits, other, doc_id=3))
    with pytest.raises(TokenMismatch, match="40 vs 39 tokens"):
        position_divergence(positions(logits, ids, doc_id=3), positions(logits[:39], ids[:39], doc_id=3))


def test_first_split_of_greedy_continuations() -> None:
    logits, ids = text_logits(4)
    a = positions(logits, ids, continuation=[5, 6, 7, 8])
    assert first_split(a, positions(logits, ids, continuation=[5, 6, 7, 8])) is None
    assert first_split(a, positions(logits, ids, continuation=[5, 6, 9, 8])) == 2
    assert first_split(a, positions(logits, ids, continuation=[5, 6])) == 2


def test_pair_figures_recover_the_perturbation_and_their_intervals_behave() -> None:
    base = side(16)
    same = compare_runs(base, side(16))
    for f in ("top1", "mean_kl", "p99_kl", "mean_abs_dlp"):
        iv = same.figures[f]
        assert iv.lo == iv.hi == iv.value == (1.0 if f == "top1" else 0.0)  # no spread: a point
    small, large = compare_runs(base, side(16, noise=0.05, seed=2)), compare_runs(base, side(16, noise=0.3, seed=2))
    for f in ("mean_kl", "p99_kl", "mean_abs_dlp"):
        s, big = small.figures[f], large.figures[f]
        assert s.lo <= s.value <= s.hi and big.lo <= big.value <= big.hi
        assert s.hi < big.lo  # six times the noise: disjoint intervals
    assert large.figures["top1"].hi < small.figures["top1"].lo
    # |d-logprob| of Gaussian logit noise sd s is about s * sqrt(2/pi) * sqrt(1 + 1/V)-ish: within a factor 2
    assert 0.5 * 0.3 * math.sqrt(2 / math.pi) < large.figures["mean_abs_dlp"].value < 2 * 0.3
    assert large.positions == 16 * 39


def test_t_interval_widths_shrink_with_texts_and_need_two() -> None:
    rng = np.random.default_rng(0)
    wide, narrow = t_interval(rng.normal(1, 1, 8), 0.05), t_interval(rng.normal(1, 1, 800), 0.05)
    assert (narrow.hi - narrow.lo) < (wide.hi - wide.lo) / 5
    assert narrow.lo < 1 < narrow.hi and narrow.level == pytest.approx(0.9)
    one = t_interval(np.array([0.3]), 0.05)
    assert one.value == 0.3 and one.lo == -math.inf and one.hi == math.inf


def test_noise_floor_is_the_main_pass_against_the_second_pass() -> None:
    main, again = side(8), side(3, noise=0.01, seed=5, sample_index=1)
    both = {p.key: p for p in [*main.values(), *again.values()]}
    m, a = split_passes(both)
    assert sorted(m) == list(range(8)) and sorted(a) == [0, 1, 2]
    floor = noise_floor(m, a)
    assert floor is not None and len(floor.texts) == 3 and 0 < floor.figures["mean_abs_dlp"].value < 0.02
    assert noise_floor(m, {}) is None


def test_texts_to_separate_from_per_text_spread() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(0.06, 0.01, 30)
    assert texts_to_separate(values, 0.0) == 1  # bf16 vs float32 on CPU: every text shows it
    n_close = texts_to_separate(values, 0.055)
    assert n_close is not None and 10 < n_close < 100
    assert texts_to_separate(np.full(5, 0.2), 0.0) == 1
    assert texts_to_separate(np.full(5, 0.2), 0.2) is None
