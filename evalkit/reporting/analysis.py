"""Numbers behind the reports: distributions, length buckets, Pareto front, flips, text cutting.

Pure functions over plain data (dicts read from the result store); no HTML here.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evalkit.store.reader import as_dict, as_int, as_num

# ----------------------------------------------------------------------------------------------------------
# Distributions


def cdf_points(values: Iterable[float], max_points: int = 200) -> list[list[float]]:
    """Empirical CDF as ``[[x, fraction <= x], ...]``, thinned to at most ``max_points`` points
    (always keeping the minimum and maximum)."""
    xs = sorted(v for v in values if math.isfinite(v))
    n = len(xs)
    if n == 0:
        return []
    if n <= max_points:
        idx = list(range(n))
    else:
        step = (n - 1) / (max_points - 1)
        idx = sorted({round(i * step) for i in range(max_points)})
    return [[_round_sig(xs[i]), round((i + 1) / n, 5)] for i in idx]


def _round_sig(x: float, sig: int = 5) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, max(0, sig - 1 - math.floor(math.log10(abs(x)))))


def sample_values(samples: Iterable[dict[str, Any]], key: str) -> list[float]:
    out = []
    for s in samples:
        v = as_num(s.get(key))
        if v is not None:
            out.append(v)
    return out


# ----------------------------------------------------------------------------------------------------------
# Correctness


def primary_correct(sample: dict[str, Any], key: str | None = None) -> tuple[str | None, bool | None]:
    """(metric key, flag) of the primary correctness flag: ``key`` if given and present, else the first key
    of ``correct``. The flag is None when the sample is unscored."""
    correct = as_dict(sample.get("correct"))
    if not correct:
        return None, None
    k = key if key is not None and key in correct else next(iter(correct))
    v = correct[k]
    return k, v if isinstance(v, bool) else None


LENGTH_EDGES = (0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


def length_bucket_labels() -> list[str]:
    labels = []
    for lo, hi in itertools.pairwise(LENGTH_EDGES):
        labels.append(f"{lo}–{hi - 1}")
    labels.append(f"≥{LENGTH_EDGES[-1]}")
    return labels


def length_bucket(tokens: int) -> int:
    b = 0
    for i, edge in enumerate(LENGTH_EDGES):
        if tokens >= edge:
            b = i
    return b


@dataclass
class Bucket:
    label: str
    n: int = 0
    correct: int = 0
    truncated: int = 0

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.n if self.n else None


@dataclass
class LengthAccuracy:
    buckets: list[Bucket]
    unknown_length: int = 0  # scored samples without output_tokens


def accuracy_by_length(samples: Iterable[dict[str, Any]]) -> LengthAccuracy:
    """Primary-metric accuracy of scored samples per output-length bucket (power-of-two token edges)."""
    labels = length_bucket_labels()
    buckets = [Bucket(label) for label in labels]
    unknown = 0
    for s in samples:
        _, flag = primary_correct(s)
        if flag is None:
            continue
        tokens = as_int(s.get("output_tokens"))
        if tokens is None or tokens < 0:
            unknown += 1
            continue
        b = buckets[length_bucket(tokens)]
        b.n += 1
        b.correct += int(flag)
        b.truncated += int(s.get("status") == "truncated")
    return LengthAccuracy(buckets=buckets, unknown_length=unknown)


# ----------------------------------------------------------------------------------------------------------
# Pareto front


def pareto_front(points: Sequence[tuple[float | None, float | None]]) -> list[int]:
    """Indices of the points no other point dominates, when both coordinates are better higher
    (e.g. (throughput, accuracy)). A point dominates another when it is >= in both and > in one.
    Points with a missing or non-finite coordinate are never on the front. Equal points are all kept.
    Returned in order of increasing first coordinate (ties: increasing second)."""
    valid: list[tuple[int, float, float]] = []
    for i, (x, y) in enumerate(points):
        if x is None or y is None or not (math.isfinite(x) and math.isfinite(y)):
            continue
        valid.append((i, float(x), float(y)))
    front = [
        (i, x, y) for i, x, y in valid if not any(x2 >= x and y2 >= y and (x2 > x or y2 > y) for _, x2, y2 in valid)
    ]
    front.sort(key=lambda t: (t[1], t[2], t[0]))
    return [i for i, _, _ in front]


# ----------------------------------------------------------------------------------------------------------
# Flips between two runs


SampleKey = tuple[str, int | str, int]


def sample_key(s: dict[str, Any]) -> SampleKey:
    doc = s.get("doc_id")
    doc_key: int | str = doc if isinstance(doc, int) and not isinstance(doc, bool) else str(doc)
    return (str(s.get("task")), doc_key, as_int(s.get("sample_index")) or 0)


@dataclass
class Flip:
    key: SampleKey
    metric: str | None
    a: dict[str, Any]
    b: dict[str, Any]


@dataclass
class ProblemChange:
    task: str
    doc_id: int | str
    n_a: int
    n_b: int
    acc_a: float
    acc_b: float

    @property
    def delta(self) -> float:
        return self.acc_b - self.acc_a


@dataclass
class Flips:
    broken: list[Flip] = field(default_factory=list)  # correct in A, wrong in B
    fixed: list[Flip] = field(default_factory=list)  # wrong in A, correct in B
    both_correct: int = 0
    both_wrong: int = 0
    unscored: int = 0  # in both runs, but unscored in at least one
    only_a: int = 0
    only_b: int = 0
    problems: list[ProblemChange] = field(default_factory=list)  # per (task, doc) when several samples per doc


def compute_flips(samples_a: Iterable[dict[str, Any]], samples_b: Iterable[dict[str, Any]]) -> Flips:
    """Compare two runs request by request, keyed by (task, doc_id, sample_index), on the primary
    correctness flag (the first key of A's ``correct``; B is read under the same key when it has it)."""
    a_by = {sample_key(s): s for s in samples_a}
    b_by = {sample_key(s): s for s in samples_b}
    out = Flips()
    out.only_a = sum(1 for k in a_by if k not in b_by)
    out.only_b = sum(1 for k in b_by if k not in a_by)
    per_doc: dict[tuple[str, int | str], list[int]] = {}  # [n_a, correct_a, n_b, correct_b, samples]
    for key in sorted((k for k in a_by if k in b_by), key=lambda k: (k[0], str(type(k[1])), k[1], k[2])):
        sa, sb = a_by[key], b_by[key]
        metric, fa = primary_correct(sa)
        _, fb = primary_correct(sb, metric)
        doc = per_doc.setdefault((key[0], key[1]), [0, 0, 0, 0, 0])
        doc[4] += 1
        if fa is not None:
            doc[0] += 1
            doc[1] += int(fa)
        if fb is not None:
            doc[2] += 1
            doc[3] += int(fb)
        if fa is None or fb is None:
            out.unscored += 1
        elif fa and fb:
            out.both_correct += 1
        elif not fa and not fb:
            out.both_wrong += 1
        elif fa:
            out.broken.append(Flip(key, metric, sa, sb))
        else:
            out.fixed.append(Flip(key, metric, sa, sb))
    if any(d[4] > 1 for d in per_doc.values()):
        for (task, doc_id), (n_a, c_a, n_b, c_b, _) in per_doc.items():
            if n_a and n_b and c_a / n_a != c_b / n_b:
                out.problems.append(ProblemChange(task, doc_id, n_a, n_b, c_a / n_a, c_b / n_b))
        out.problems.sort(key=lambda p: (p.delta, p.task, str(p.doc_id)))
    return out


# ----------------------------------------------------------------------------------------------------------
# Text


@dataclass(frozen=True)
class Cut:
    """A text cut to a bounded size: ``head`` + (``omitted`` characters) + ``tail``."""

    head: str
    tail: str = ""
    omitted: int = 0
    total: int = 0

    @property
    def is_cut(self) -> bool:
        return self.omitted > 0


def cut_text(text: str | None, limit: int, tail_share: float = 0.34) -> Cut | None:
    """Keep the first and last characters of ``text`` (the end of a model's output holds its answer)."""
    if text is None:
        return None
    n = len(text)
    if n <= limit:
        return Cut(head=text, total=n)
    tail_len = int(limit * tail_share)
    head_len = max(limit - tail_len, 0)
    return Cut(head=text[:head_len], tail=text[n - tail_len :] if tail_len else "", omitted=n - limit, total=n)


def fit_limit(
    lengths: Sequence[int],
    budget: float,
    max_limit: int,
    min_limit: int = 200,
    weights: Sequence[float] | None = None,
    cut_overhead: float = 0.0,
) -> int:
    """The largest per-text limit L in [min_limit, max_limit] with sum(min(len_i, L) * weight_i) <= budget
    (min_limit when even that does not fit): cut only as much as the size bound needs. ``weights`` are
    bytes per character (UTF-8, HTML escaping); 1 when not given. ``cut_overhead`` is added per text that is
    cut (the note saying so)."""
    ws = list(weights) if weights is not None else [1.0] * len(lengths)

    def total(limit: int) -> float:
        return sum(min(n, limit) * w + (cut_overhead if n > limit else 0.0) for n, w in zip(lengths, ws, strict=True))

    if total(max_limit) <= budget:
        return max_limit
    lo, hi = min_limit, max_limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if total(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo
