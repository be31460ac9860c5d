"""Per-request flips between two runs of a comparison: broken/fixed samples and per-problem changes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from evalkit.reporting.analysis import Flip, compute_flips, cut_text
from evalkit.reporting.formatting import KV, fmt_pct, short
from evalkit.reporting.sample_data import gold_answer, split_fewshot
from evalkit.reporting.samples import TextPool, TextRef
from evalkit.store.reader import Run, as_dict, as_int, as_str

FLIP_TEXT_BYTES = 2_000_000
MAX_FLIPS = 300  # flips shown per direction


@dataclass
class CompareRunHead:
    """One run's column head in a comparison (also shown above its flips)."""

    index: int
    letter: str
    label: str
    model: str | None
    diff: list[KV]
    argv: str | None
    notes: list[str]


@dataclass
class FlipRow:
    task: str
    doc_id: str
    sample_index: int
    metric: str | None
    target: str | None
    extracted_a: str | None
    extracted_b: str | None
    status_a: str
    status_b: str
    prompt: TextRef
    response_a: TextRef
    response_b: TextRef
    reasoning_a: TextRef
    reasoning_b: TextRef
    run: int | None = None  # with several runs a side: which pair of runs (1: the first of each side)


@dataclass
class ProblemChangeRow:
    task: str
    doc_id: str
    acc_a: str
    acc_b: str
    delta: str
    n_a: int
    n_b: int
    worse: bool


@dataclass
class FlipsView:
    a: CompareRunHead
    b: CompareRunHead
    both_correct: int
    both_wrong: int
    unscored: int
    only_a: int
    only_b: int
    n_broken: int
    n_fixed: int
    broken: list[FlipRow]
    fixed: list[FlipRow]
    problems: list[ProblemChangeRow]
    limit: int
    net_by_task: list[KV]
    has_samples: bool


def flips_view(
    ra: Run,
    rb: Run,
    ha: CompareRunHead,
    hb: CompareRunHead,
    samples: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None,
    stride: int | None = None,
) -> FlipsView:
    """The flips from run ``ra`` to run ``rb``; ``samples``: the two sides' samples instead of the runs' own (several
    runs a side pooled, run i's sample k as sample ``i * stride + k``: :func:`evalkit.reporting.sides.side_samples`)."""
    sa, sb = samples if samples is not None else (ra.samples, rb.samples)
    f = compute_flips(sa, sb)
    pool = TextPool()
    manifest = ra.manifest_read()

    def prompt_ref(s: dict[str, Any]) -> TextRef:
        """The question under test; the few-shot examples before it are only counted."""
        prompt = as_str(s.get("prompt"))
        k = as_int(manifest.task(str(s.get("task"))).settings.get("num_fewshot"))
        examples, question = split_fewshot(prompt, k) if prompt is not None else ([], None)
        note = None
        if examples:
            chars = len(prompt or "") - len(question or "")
            note = f"after {len(examples)} few-shot examples ({chars:,} chars; in samples.jsonl)"
        return TextRef(cut=cut_text(question, 1500, 0.8), note=note)

    def row(fl: Flip) -> FlipRow:
        a, b = fl.a, fl.b
        metric = fl.metric
        ea = as_dict(a.get("extracted"))
        eb = as_dict(b.get("extracted"))
        pair, index = divmod(fl.key[2], stride) if stride else (None, fl.key[2])
        return FlipRow(
            task=fl.key[0],
            doc_id=str(fl.key[1]),
            sample_index=index,
            run=pair + 1 if pair is not None else None,
            metric=metric,
            target=short(gold_answer(a.get("target") if a.get("target") is not None else b.get("target"))),
            extracted_a=short(ea.get(metric)) if metric else None,
            extracted_b=short(eb.get(metric, next(iter(eb.values()), None) if eb else None)) if metric else None,
            status_a=as_str(a.get("status")) or "?",
            status_b=as_str(b.get("status")) or "?",
            prompt=prompt_ref(a),
            response_a=pool.ref(as_str(a.get("response"))),
            response_b=pool.ref(as_str(b.get("response"))),
            reasoning_a=pool.ref(as_str(a.get("reasoning"))),
            reasoning_b=pool.ref(as_str(b.get("reasoning"))),
        )

    broken = [row(x) for x in f.broken[:MAX_FLIPS]]
    fixed = [row(x) for x in f.fixed[:MAX_FLIPS]]
    limit = pool.finish(FLIP_TEXT_BYTES)
    net: Counter[str] = Counter()
    for x in f.broken:
        net[x.key[0]] -= 1
    for x in f.fixed:
        net[x.key[0]] += 1
    problems = [
        ProblemChangeRow(
            task=p.task,
            doc_id=str(p.doc_id),
            acc_a=fmt_pct(p.acc_a, 0),
            acc_b=fmt_pct(p.acc_b, 0),
            delta=f"{100 * p.delta:+.0f} pp",
            n_a=p.n_a,
            n_b=p.n_b,
            worse=p.delta < 0,
        )
        for p in f.problems
    ]
    return FlipsView(
        a=ha,
        b=hb,
        both_correct=f.both_correct,
        both_wrong=f.both_wrong,
        unscored=f.unscored,
        only_a=f.only_a,
        only_b=f.only_b,
        n_broken=len(f.broken),
        n_fixed=len(f.fixed),
        broken=broken,
        fixed=fixed,
        problems=problems,
        limit=limit,
        net_by_task=[KV(k, f"{v:+d}") for k, v in net.items()],
        has_samples=bool(sa) and bool(sb),
    )
