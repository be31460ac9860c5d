"""Per-request flips between two runs of a comparison: broken/fixed samples and per-problem changes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evalkit.report.analysis import Flip, compute_flips, cut_text, shared_prefix
from evalkit.report.common import KV, TEXT_LIMIT, fmt_pct, short
from evalkit.report.samples import SHARED_MIN_CHARS, SharedText, TextPool, TextRef
from evalkit.report.store import RunData, as_dict, as_str

if TYPE_CHECKING:
    from evalkit.report.compare_view import CompareRunHead

FLIP_TEXT_BYTES = 2_000_000
MAX_FLIPS = 300  # flips shown per direction


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
    prefixes: list[SharedText]


def _prompt_prefixes(samples: list[dict[str, Any]], anchor: str) -> dict[str, SharedText]:
    by_task: dict[str, list[str]] = {}
    for s in samples:
        p = as_str(s.get("prompt"))
        if p is not None:
            by_task.setdefault(str(s.get("task")), []).append(p)
    out: dict[str, SharedText] = {}
    for ti, (task, prompts) in enumerate(by_task.items()):
        pre = shared_prefix(prompts, SHARED_MIN_CHARS)
        if pre:
            out[task] = SharedText(
                f"{anchor}-p{ti}", f"Shared prompt prefix of {task}", len(pre), cut_text(pre, TEXT_LIMIT * 4)
            )
            out[task].text = pre
    return out


def flips_view(ra: RunData, rb: RunData, ha: CompareRunHead, hb: CompareRunHead) -> FlipsView:
    f = compute_flips(ra.samples, rb.samples)
    pool = TextPool("flip")
    prefixes = _prompt_prefixes(ra.samples, "flip")

    def prompt_ref(s: dict[str, Any]) -> TextRef:
        prompt = as_str(s.get("prompt"))
        pre = prefixes.get(str(s.get("task")))
        if prompt is not None and pre is not None and prompt.startswith(pre.text):
            return TextRef(
                cut=cut_text(prompt[pre.chars :], 1500, 0.8), prefix_anchor=pre.anchor, prefix_chars=pre.chars
            )
        return TextRef(cut=cut_text(prompt, 1500, 0.8))

    def row(fl: Flip) -> FlipRow:
        a, b = fl.a, fl.b
        metric = fl.metric
        ea = as_dict(a.get("extracted"))
        eb = as_dict(b.get("extracted"))
        return FlipRow(
            task=fl.key[0],
            doc_id=str(fl.key[1]),
            sample_index=fl.key[2],
            metric=metric,
            target=short(a.get("target") if a.get("target") is not None else b.get("target")),
            extracted_a=short(ea.get(metric)) if metric else None,
            extracted_b=short(eb.get(metric, next(iter(eb.values()), None) if eb else None)) if metric else None,
            status_a=as_str(a.get("status")) or "?",
            status_b=as_str(b.get("status")) or "?",
            prompt=prompt_ref(a),
            response_a=pool.ref(as_str(a.get("response")), dedupe=False),
            response_b=pool.ref(as_str(b.get("response")), dedupe=False),
            reasoning_a=pool.ref(as_str(a.get("reasoning")), dedupe=False),
            reasoning_b=pool.ref(as_str(b.get("reasoning")), dedupe=False),
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
        prefixes=list(prefixes.values()),
    )
