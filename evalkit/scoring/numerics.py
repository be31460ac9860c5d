"""Token-level divergence between two servers' teacher-forced positions of the same texts (the ``numerics`` task).

Per position (every position but the first, which has no logprob) of a text both sides scored with the same
token ids, each figure where both sides gave what it needs: |d-logprob| wherever both gave the actual token's
logprob; top-1 agreement and KL only where both also gave a top-K list (a server may answer only the actual
token). :class:`PairFigures` counts the positions each figure compared and those both runs scored, for the gate's
coverage check.

- **top-1 agreement**: both sides rank the same token first (``top_ids[:, 0]``).
- **|d-logprob|**: the absolute difference of the actual token's logprob (``token_logprobs``).
- **KL(A‖B)** over the union ``U`` of both sides' top-K tokens (and the actual token) plus one *rest* bucket.
  Each side's distribution on ``U ∪ {rest}`` is built the same way: a token the side reported (in its top-K, or
  the actual token, whose logprob every side reports) gets its reported probability; the side's unreported mass
  is ``rest = max(0, 1 - Σ reported)``; the ``m`` tokens of ``U`` the side did not report share it evenly with
  the rest bucket, each getting ``min(rest / (m + 1), p_K)`` (``p_K`` the side's K-th probability: a token
  outside the top-K cannot be likelier than the K-th) and the bucket what is left. Every entry is floored at
  :data:`P_FLOOR` and the distribution renormalised, so KL is finite. When both sides report the same top-K the
  figure is the exact KL of the two top-K distributions with their tails lumped; it is never larger than the
  full-vocabulary KL by more than what the even spread assumes about the unreported tokens.

Per text: the mean of each figure over its positions and the p99 of KL. Per pair of runs (:func:`compare_runs`):
each figure's mean over texts (top-1 agreement, mean KL, mean |d-logprob|: the mean of the per-text means) with a
Student-t interval over texts, and the p99 of KL over all positions pooled with a bootstrap interval over texts;
the first index where the two greedy continuations split. The same figures between a run's own main pass and its
noise-floor pass are its noise floor. :func:`texts_to_separate` sizes the text set a difference needs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evalkit.contracts import PromptPositions

P_FLOOR = 1e-12  # smallest probability an entry of a side's distribution gets (keeps KL finite)
P99 = 99.0
FIGURES = ("top1", "mean_kl", "p99_kl", "mean_abs_dlp")
FIGURE_LABELS = {
    "top1": "top-1 agreement",
    "mean_kl": "mean KL",
    "p99_kl": "p99 KL",
    "mean_abs_dlp": "mean abs d-logprob",
}


class TokenMismatch(ValueError):
    """Two sides scored different tokens for one text (another tokenizer, template or text)."""


def _side(
    union: np.ndarray, valid: np.ndarray, ids: np.ndarray, lps: np.ndarray, actual: np.ndarray, actual_lp: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One side's probabilities on the union columns ``[n, C]`` and its rest bucket ``[n]`` (module docstring)."""
    known_ids = np.concatenate([ids, actual[:, None]], axis=1)
    known_lp = np.concatenate([lps, actual_lp[:, None]], axis=1).astype(np.float64)
    usable = (known_ids >= 0) & np.isfinite(known_lp)
    eq = (union[:, :, None] == known_ids[:, None, :]) & usable[:, None, :]
    found = eq.any(axis=2) & valid
    lp = np.where(eq, known_lp[:, None, :], -np.inf).max(axis=2)
    p = np.where(found, np.exp(lp), 0.0)
    rest = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    missing = valid & ~found
    m = missing.sum(axis=1)
    top_ok = (ids >= 0) & np.isfinite(lps)
    p_k = np.where(top_ok, np.exp(np.where(top_ok, lps, 0.0)), np.inf).min(axis=1)
    share = np.minimum(rest / (m + 1), p_k)
    p = np.where(missing, share[:, None], p)
    bucket = rest - m * share
    p = np.where(valid, np.maximum(p, P_FLOOR), 0.0)
    bucket = np.maximum(bucket, P_FLOOR)
    total = p.sum(axis=1) + bucket
    return p / total[:, None], bucket / total


def check_same_tokens(a: PromptPositions, b: PromptPositions) -> None:
    """Raise :class:`TokenMismatch` (naming the text and the first differing position) unless ``a`` and ``b``
    hold the same token ids."""
    if a.n != b.n or not np.array_equal(a.token_ids, b.token_ids):
        diff = np.flatnonzero(a.token_ids[: min(a.n, b.n)] != b.token_ids[: min(a.n, b.n)])
        at = int(diff[0]) if diff.size else min(a.n, b.n)
        ta = int(a.token_ids[at]) if at < a.n else "end of text"
        tb = int(b.token_ids[at]) if at < b.n else "end of text"
        raise TokenMismatch(
            f"doc {a.doc_id} was tokenised differently ({a.n} vs {b.n} tokens; first difference at position {at}: "
            f"token {ta} vs {tb})"
        )


def position_divergence(a: PromptPositions, b: PromptPositions) -> tuple[np.ndarray, ...]:
    """Per compared position of one text: (index, KL(A‖B), |d-logprob|, top-1 agreed). Compared: every position
    after the first where both sides gave the actual token's logprob. KL and top-1 need both sides' top-K lists:
    where either side gave none, KL is NaN and top-1 False (:attr:`TextDivergence.ranked`)."""
    check_same_tokens(a, b)
    if a.n < 2:
        empty = np.zeros(0)
        return empty.astype(np.int64), empty, empty, empty.astype(bool)
    sl = slice(1, None)
    actual = a.token_ids[sl].astype(np.int64)
    a_tok, b_tok = a.token_logprobs[sl].astype(np.float64), b.token_logprobs[sl].astype(np.float64)
    keep = np.isfinite(a_tok) & np.isfinite(b_tok)
    kl = np.full(a.n - 1, np.nan)
    agree = np.zeros(a.n - 1, dtype=bool)
    if a.k and b.k:
        a_ids, b_ids, a_lp, b_lp = a.top_ids[sl], b.top_ids[sl], a.top_logprobs[sl], b.top_logprobs[sl]
        ranked = (a_ids[:, 0] >= 0) & (b_ids[:, 0] >= 0)
        union = np.concatenate([a_ids, b_ids, actual[:, None]], axis=1).astype(np.int64)
        later_dup = np.triu(union[:, :, None] == union[:, None, :], k=1).any(axis=1)  # seen in an earlier column
        valid = (union >= 0) & ~later_dup
        pa, ra = _side(union, valid, a_ids, a_lp, actual, a_tok)
        pb, rb = _side(union, valid, b_ids, b_lp, actual, b_tok)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(valid, pa * (np.log(np.where(valid, pa, 1.0)) - np.log(np.where(valid, pb, 1.0))), 0.0)
            full = np.maximum(terms.sum(axis=1) + ra * (np.log(ra) - np.log(rb)), 0.0)
        kl = np.where(ranked, full, np.nan)
        agree = ranked & (a_ids[:, 0] == b_ids[:, 0])
    index = np.arange(1, a.n)
    return index[keep], kl[keep], np.abs(a_tok - b_tok)[keep], agree[keep]


def first_split(a: PromptPositions, b: PromptPositions) -> int | None:
    """The first index where the two greedy continuations differ (the shorter one's length when one extends the
    other); None when they are the same."""
    ca, cb = a.continuation_ids, b.continuation_ids
    common = min(ca.shape[0], cb.shape[0])
    diff = np.flatnonzero(ca[:common] != cb[:common])
    if diff.size:
        return int(diff[0])
    return None if ca.shape[0] == cb.shape[0] else common


@dataclass(frozen=True)
class TextDivergence:
    """One text's divergence: per compared position (:func:`position_divergence`) its token index, KL (NaN where
    a side gave no top-K list), |d-logprob| and top-1 agreement; ``scored``: the positions both sides scored
    (every position after the first)."""

    doc_id: int
    index: np.ndarray
    kl: np.ndarray
    abs_dlp: np.ndarray
    agree: np.ndarray
    first_split: int | None
    scored: int = 0

    @property
    def positions(self) -> int:
        """Positions compared by |d-logprob| (both sides gave the actual token's logprob)."""
        return int(self.index.shape[0])

    @property
    def ranked(self) -> np.ndarray:
        """Which compared positions both sides gave a top-K list at (KL and top-1 compared)."""
        return np.isfinite(self.kl)

    def compared(self, name: str) -> int:
        """How many positions one of :data:`FIGURES` compares."""
        return self.positions if name == "mean_abs_dlp" else int(self.ranked.sum())

    def figure(self, name: str) -> float:
        """The text's value of one of :data:`FIGURES` (NaN when it has no position that figure compares)."""
        if name not in FIGURES:
            raise ValueError(f"unknown numerics figure {name!r}; one of {', '.join(FIGURES)}")
        if not self.compared(name):
            return math.nan
        if name == "mean_abs_dlp":
            return float(self.abs_dlp.mean())
        if name == "top1":
            return float(self.agree[self.ranked].mean())
        kl = self.kl[self.ranked]
        return float(kl.mean()) if name == "mean_kl" else float(np.percentile(kl, P99, method="inverted_cdf"))


def compare_text(a: PromptPositions, b: PromptPositions) -> TextDivergence:
    """The divergence of one text between side A and side B (raises :class:`TokenMismatch`)."""
    index, kl, dlp, agree = position_divergence(a, b)
    return TextDivergence(a.doc_id, index, kl, dlp, agree, first_split(a, b), max(a.n - 1, 0))


@dataclass(frozen=True)
class Interval:
    """A figure over texts with its two-sided interval at ``level`` (each end a one-sided bound at
    ``(1 - level) / 2``); the ends are infinite when fewer than two texts leave nothing to size it."""

    value: float
    lo: float
    hi: float
    level: float
    method: str


def t_interval(values: np.ndarray, alpha: float, low: float = 0.0, high: float = math.inf) -> Interval:
    """The mean of ``values`` with a Student-t interval at ``1 - 2*alpha`` (clipped to ``[low, high]``)."""
    n = int(values.shape[0])
    mean = float(values.mean()) if n else math.nan
    level = 1 - 2 * alpha
    if n < 2:
        return Interval(mean, -math.inf, math.inf, level, "t-interval over texts (fewer than 2 texts)")
    half = float(stats.t.ppf(1 - alpha, n - 1) * values.std(ddof=1) / math.sqrt(n))
    return Interval(mean, max(low, mean - half), min(high, mean + half), level, f"t-interval over {n} texts")


def pooled_p99(texts: list[TextDivergence], alpha: float, resamples: int, seed: int) -> Interval:
    """The p99 of KL over all positions pooled, with a percentile bootstrap over texts (a seeded generator)."""
    level = 1 - 2 * alpha
    parts = [t.kl[t.ranked] for t in texts if t.compared("p99_kl")]
    if not parts:
        return Interval(math.nan, -math.inf, math.inf, level, "no compared position")
    kl = np.concatenate(parts)
    owner = np.concatenate([np.full(p.shape[0], i) for i, p in enumerate(parts)])
    order = np.argsort(kl, kind="stable")
    kl_sorted, owner_sorted = kl[order], owner[order]
    value = float(np.percentile(kl, P99, method="inverted_cdf"))
    if len(parts) < 2:
        return Interval(value, -math.inf, math.inf, level, "pooled positions (fewer than 2 texts)")
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(len(parts), np.full(len(parts), 1.0 / len(parts)), size=resamples)
    reps = np.empty(resamples)
    for r in range(resamples):
        cum = np.cumsum(counts[r][owner_sorted])
        reps[r] = kl_sorted[min(int(np.searchsorted(cum, P99 / 100 * cum[-1])), kl_sorted.shape[0] - 1)]
    lo, hi = np.quantile(reps, [alpha, 1 - alpha])
    return Interval(value, float(lo), float(hi), level, f"pooled positions, bootstrap over {len(parts)} texts")


@dataclass(frozen=True)
class PairFigures:
    """Two runs' divergence over the texts both scored: per text, and each of :data:`FIGURES` over texts."""

    texts: list[TextDivergence]
    figures: dict[str, Interval]

    @property
    def positions(self) -> int:
        """Positions compared by |d-logprob|, over all texts."""
        return sum(t.positions for t in self.texts)

    @property
    def scored(self) -> int:
        """Positions both runs scored, over all texts."""
        return sum(t.scored for t in self.texts)

    def compared(self, name: str) -> int:
        """Positions one of :data:`FIGURES` compares, over all texts."""
        return sum(t.compared(name) for t in self.texts)

    def compared_texts(self, name: str) -> int:
        """Texts with at least one position one of :data:`FIGURES` compares."""
        return sum(1 for t in self.texts if t.compared(name))

    def per_text(self, name: str) -> np.ndarray:
        """One figure's per-text values (texts without a position it compares left out)."""
        return np.array([t.figure(name) for t in self.texts if t.compared(name)])


def first_missing(a: Mapping[int, PromptPositions], b: Mapping[int, PromptPositions]) -> str | None:
    """The first text only one side scored, as a phrase ("doc 3 only in A"); None when both hold the same."""
    only = sorted([(d, "A") for d in a.keys() - b.keys()] + [(d, "B") for d in b.keys() - a.keys()])
    return f"doc {only[0][0]} only in {only[0][1]}" if only else None


def compare_runs(
    a: Mapping[int, PromptPositions],
    b: Mapping[int, PromptPositions],
    alpha: float = 0.05,
    resamples: int = 1000,
    seed: int = 0,
) -> PairFigures:
    """The divergence of the texts (by doc_id) both sides scored, A the reference; raises :class:`TokenMismatch`
    for the first text (by doc_id) tokenised differently."""
    pair = PairFigures([compare_text(a[d], b[d]) for d in sorted(a.keys() & b.keys())], {})
    pair.figures.update(
        top1=t_interval(pair.per_text("top1"), alpha, 0.0, 1.0),
        mean_kl=t_interval(pair.per_text("mean_kl"), alpha),
        p99_kl=pooled_p99(pair.texts, alpha, resamples, seed),
        mean_abs_dlp=t_interval(pair.per_text("mean_abs_dlp"), alpha),
    )
    return pair


def split_passes(positions: Mapping[str, PromptPositions]) -> tuple[dict[int, PromptPositions], ...]:
    """A run's positions by doc_id: (main pass, noise-floor pass) (``sample_index`` 0 and 1)."""
    main: dict[int, PromptPositions] = {}
    again: dict[int, PromptPositions] = {}
    for p in positions.values():
        if p.sample_index in (0, 1):
            (main if p.sample_index == 0 else again)[p.doc_id] = p
    return main, again


def noise_floor(
    main: Mapping[int, PromptPositions], again: Mapping[int, PromptPositions], alpha: float = 0.05, seed: int = 0
) -> PairFigures | None:
    """A run's own divergence: its main pass against its noise-floor pass on the texts both hold (None when it
    has no noise-floor pass)."""
    if not (main.keys() & again.keys()):
        return None
    return compare_runs(main, {d: p for d, p in again.items() if d in main}, alpha, seed=seed)


def texts_to_separate(values: np.ndarray, reference: float, alpha: float = 0.05, power: float = 0.95) -> int | None:
    """How many texts a one-sided test at ``alpha`` needs to tell a mean of per-text ``values`` from
    ``reference`` (a noise floor or a budget) with ``power``, from the per-text spread: ``((z_alpha + z_power) *
    sd / |mean - reference|)^2``, at least 1. None when the mean equals the reference or there are no values."""
    if values.shape[0] == 0:
        return None
    gap = abs(float(values.mean()) - reference)
    if gap == 0:
        return None
    sd = float(values.std(ddof=1)) if values.shape[0] > 1 else 0.0
    z = float(stats.norm.ppf(1 - alpha) + stats.norm.ppf(power))
    return max(1, math.ceil((z * sd / gap) ** 2))
