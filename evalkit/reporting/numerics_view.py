"""The report's numerics sections (a task holding teacher-forced positions, the ``numerics`` task): in a comparison
of two runs, the per-position divergence (a histogram of KL as inline SVG and a table of quantiles), the texts and
positions that diverge most shown in context (each token coloured by the divergence of its position) and where
the greedy continuations split; in a single run's report, its noise floor (its main pass against its noise-floor
pass). Token texts are model output: they reach the template as ``str`` and are escaped there."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from evalkit.gating.errors import GateInputError
from evalkit.gating.inputs import NumericsInputs
from evalkit.gating.load import numerics_inputs
from evalkit.gating.numerics_rules import figure_text
from evalkit.scoring.numerics import (
    FIGURE_LABELS,
    FIGURES,
    PairFigures,
    TextDivergence,
    TokenMismatch,
    compare_runs,
    noise_floor,
)
from evalkit.store.positions_file import POSITIONS
from evalkit.store.reader import Run

CSS = Path(__file__).resolve().parent / "static" / "numerics.css"
SHOWN_TEXTS = 5  # texts shown in context, most divergent first
BEFORE, AFTER = 24, 8  # tokens shown before and after a text's most divergent position
TOP_POSITIONS = 12
# KL bands of the token colours (class nd0 .. nd5): below 1e-4 uncoloured
KL_BANDS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
HIST_EDGES = tuple(10.0**e for e in range(-8, 2))  # decades from 1e-8 to 10; a bar below and one above
QUANTILE_POINTS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("max", 100.0))


@dataclass
class FigureRow:
    label: str
    value: str
    ci: str
    floors: list[str]


@dataclass
class Bar:
    x: float
    y: float
    h: float
    label: str
    title: str


@dataclass
class TokenCell:
    text: str
    band: int
    title: str
    focus: bool = False


@dataclass
class Context:
    doc_id: int
    position: int
    kl: str
    abs_dlp: str
    mean_kl: str
    cells: list[TokenCell]


@dataclass
class Split:
    doc_id: int
    index: int
    a: str
    b: str


@dataclass
class NumericsCompare:
    task: str
    anchor: str
    texts: int = 0
    positions: int = 0  # compared by |d-logprob|
    ranked: int = 0  # compared by KL and top-1 too (both sides gave a top-K list)
    scored: int = 0  # both runs scored
    figures: list[FigureRow] = field(default_factory=list)
    floor_labels: list[str] = field(default_factory=list)
    quantiles: list[list[str]] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    contexts: list[Context] = field(default_factory=list)
    top: list[list[str]] = field(default_factory=list)
    splits: list[Split] = field(default_factory=list)
    same_continuations: int = 0
    error: str | None = None


@dataclass
class NumericsFloor:
    task: str
    texts: int
    positions: int
    figures: list[FigureRow]


def _inputs(run: Run, task: str) -> NumericsInputs | None:
    samples = [s for s in run.samples if s.get("task") == task]
    try:
        return numerics_inputs(run.path, task, samples)
    except GateInputError:  # an unreadable positions file: the gate refuses it; the report shows the rest
        return None


def _ci(iv_lo: float, iv_hi: float, figure: str, level: float) -> str:
    return f"{level:.0%} CI [{figure_text(figure, iv_lo)}, {figure_text(figure, iv_hi)}]"


def figure_rows(pair: PairFigures, floors: list[PairFigures | None]) -> list[FigureRow]:
    """One row per figure: the pair's value and interval, and each floor's value."""
    rows = []
    for f in FIGURES:
        iv = pair.figures[f]
        shown = [figure_text(f, fl.figures[f].value) if fl is not None else "–" for fl in floors]
        rows.append(FigureRow(FIGURE_LABELS[f], figure_text(f, iv.value), _ci(iv.lo, iv.hi, f, iv.level), shown))
    return rows


def band(kl: float) -> int:
    """The colour band (0 .. 5) of a position's KL."""
    return int(np.searchsorted(KL_BANDS, kl, side="right"))


def histogram(kl: np.ndarray, width: float = 560.0, height: float = 140.0) -> list[Bar]:
    """Bars of the per-position KL over decades (below 1e-8, each decade, 10 and above), heights relative to
    the largest bar."""
    edges = np.array(HIST_EDGES)
    counts = np.bincount(np.searchsorted(edges, kl, side="right"), minlength=len(edges) + 1)
    labels = ["<1e-8", *(f"{e:.0e}".replace("e-0", "e-").replace("e+0", "e") for e in edges[:-1]), "≥10"]
    step, top = width / len(counts), max(int(counts.max()), 1) if counts.size else 1
    bars = []
    for i, (c, lab) in enumerate(zip(counts.tolist(), labels, strict=True)):
        h = (height - 20) * c / top
        bars.append(Bar(round(i * step + 2, 1), round(height - 18 - h, 1), round(h, 1), lab, f"{lab}: {c} positions"))
    return bars


def _context(text: TextDivergence, tokens: tuple[str, ...], tops: tuple[np.ndarray, np.ndarray]) -> Context:
    at = int(text.index[int(np.nanargmax(text.kl))])
    by_pos = {int(p): i for i, p in enumerate(text.index)}
    cells = []
    for pos in range(max(0, at - BEFORE), min(len(tokens), at + AFTER + 1)):
        i = by_pos.get(pos)
        if i is None:
            cells.append(TokenCell(tokens[pos], 0, f"position {pos}: not compared"))
            continue
        kl, dlp = float(text.kl[i]), float(text.abs_dlp[i])
        if math.isnan(kl):
            title = f"position {pos}: |d-logprob| {dlp:.3g}; KL and top-1 not compared (a side gave no top-K list)"
            cells.append(TokenCell(tokens[pos], 0, title))
            continue
        title = (
            f"position {pos}: KL {kl:.3g}, |d-logprob| {dlp:.3g}, "
            f"top-1 A {int(tops[0][pos, 0])} / B {int(tops[1][pos, 0])}"
        )
        cells.append(TokenCell(tokens[pos], band(kl), title, pos == at))
    i = by_pos[at]
    mean_kl = f"{text.figure('mean_kl'):.3g}"
    return Context(text.doc_id, at, f"{text.kl[i]:.3g}", f"{text.abs_dlp[i]:.3g}", mean_kl, cells)


def build_numerics_compare(a: Run, b: Run, task: str, anchor: str) -> NumericsCompare:
    """The comparison section of ``task`` between run ``a`` (the reference) and run ``b``."""
    view = NumericsCompare(task, anchor)
    na, nb = _inputs(a, task), _inputs(b, task)
    if na is None or nb is None:
        view.error = "only one of the two runs holds teacher-forced positions of this task"
        return view
    try:
        pair = compare_runs(na.main, nb.main)
        floors = [noise_floor(na.main, na.again), noise_floor(nb.main, nb.again)]
    except TokenMismatch as e:
        view.error = f"not compared: {e}"
        return view
    texts = [t for t in pair.texts if t.positions]
    view.texts, view.positions = len(pair.texts), pair.positions
    view.ranked, view.scored = pair.compared("mean_kl"), pair.scored
    view.figures, view.floor_labels = figure_rows(pair, floors), ["A's noise floor", "B's noise floor"]
    if not texts:
        view.error = "no position was compared"
        return view
    kl = np.concatenate([t.kl[t.ranked] for t in texts])
    dlp = np.concatenate([t.abs_dlp for t in texts])
    view.quantiles = [
        [
            name,
            f"{np.percentile(kl, q, method='inverted_cdf'):.3g}" if kl.size else "–",
            f"{np.percentile(dlp, q, method='inverted_cdf'):.3g}",
        ]
        for name, q in QUANTILE_POINTS
    ]
    view.bars = histogram(kl)
    ranked = sorted((t for t in texts if t.compared("mean_kl")), key=lambda t: -t.figure("mean_kl"))
    for t in ranked[:SHOWN_TEXTS]:
        view.contexts.append(
            _context(t, na.main[t.doc_id].tokens, (na.main[t.doc_id].top_ids, nb.main[t.doc_id].top_ids))
        )
    spots = sorted(
        ((float(k), t, int(p)) for t in texts for k, p in zip(t.kl, t.index, strict=True) if not math.isnan(k)),
        key=lambda x: -x[0],
    )
    for k, t, p in spots[:TOP_POSITIONS]:
        view.top.append([str(t.doc_id), str(p), na.main[t.doc_id].tokens[p], f"{k:.3g}"])
    for t in pair.texts:
        if t.first_split is None:
            view.same_continuations += 1
            continue
        ca, cb = na.main[t.doc_id].continuation_ids, nb.main[t.doc_id].continuation_ids
        s = t.first_split
        view.splits.append(Split(t.doc_id, s, _ids(ca[s : s + 4]), _ids(cb[s : s + 4])))
    view.splits.sort(key=lambda x: (x.index, x.doc_id))
    return view


def _ids(ids: np.ndarray) -> str:
    return " ".join(str(int(x)) for x in ids) + (" …" if ids.shape[0] == 4 else "") if ids.shape[0] else "(end)"


def build_numerics_floors(run: Run) -> list[NumericsFloor]:
    """The noise floor of each task of ``run`` that holds teacher-forced positions and a noise-floor pass."""
    out = []
    for task in run.task_names():
        inputs = _inputs(run, task)
        if inputs is None:
            continue
        try:
            floor = noise_floor(inputs.main, inputs.again)
        except TokenMismatch:
            floor = None
        if floor is not None:
            out.append(NumericsFloor(task, len(floor.texts), floor.positions, figure_rows(floor, [])))
    return out


def numerics_css() -> str:
    """The stylesheet the numerics sections add to a page (token colours, the histogram)."""
    return CSS.read_text(encoding="utf-8")


def build_numerics_sections(runs: list[Run], pair: tuple[int, int], tasks: list[str]) -> list[NumericsCompare]:
    """The comparison sections of the pair of ``runs`` (A the reference) for each of ``tasks`` either run holds
    teacher-forced positions of."""
    a, b = runs[pair[0]], runs[pair[1]]
    if not any((r.path / POSITIONS).is_file() for r in (a, b)):
        return []
    held = [t for t in tasks if _inputs(a, t) is not None or _inputs(b, t) is not None]
    return [build_numerics_compare(a, b, t, f"numerics-{i}") for i, t in enumerate(held)]
