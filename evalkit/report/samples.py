"""The per-sample table: rows, shared prompt prefixes and repeated texts, and cutting texts to a size budget.

Model text is passed as plain ``str`` (autoescaped by Jinja), never as ``Markup``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from markupsafe import escape

from evalkit.report.analysis import Cut, cut_text, fit_limit, primary_correct, shared_prefix
from evalkit.report.common import DASH, KV, STATUSES, TEXT_LIMIT, fmt_int, fmt_ms, short
from evalkit.report.store import RunData, as_dict, as_int, as_list, as_str

# Size bound: a report aims at REPORT_TARGET_BYTES. Inlined assets take ~ASSET_BYTES, each sample row about
# ROW_BYTES of markup; what is left goes to model and prompt text (cut with one limit, see fit_limit).
REPORT_TARGET_BYTES = 4_300_000
ASSET_BYTES = 260_000
ROW_BYTES = 1000
CUT_NOTE_BYTES = 160
MIN_TEXT_BYTES = 400_000
MAX_ROWS = 2000  # sample rows shown; failures and wrong answers are kept first
SHARED_MIN_CHARS = 200


@dataclass
class TextRef:
    """A long text as shown: possibly cut, possibly minus a shared prefix, or a pointer to a shared text."""

    cut: Cut | None = None
    prefix_anchor: str | None = None
    prefix_chars: int = 0
    shared_anchor: str | None = None
    shared_label: str = ""
    shared_chars: int = 0
    note: str | None = None  # e.g. "same as the prompt"
    raw: str | None = None  # before cutting (dropped once cut)
    tail_share: float = 0.34

    @property
    def empty(self) -> bool:
        return self.cut is None and self.shared_anchor is None and self.note is None and self.prefix_anchor is None


@dataclass
class SharedText:
    anchor: str
    label: str
    chars: int
    cut: Cut | None
    text: str = ""  # the full text, for matching (not rendered)


@dataclass
class Message:
    role: str
    text: TextRef


@dataclass
class FilterResult:
    name: str
    extracted: str | None
    verdict: str


@dataclass
class SampleRow:
    task: str
    doc_id: str
    sample_index: int
    status: str
    verdict: str  # correct | wrong | unscored
    metric: str | None
    extracted: str | None
    target: str | None
    finish_reason: str | None
    output_tokens: str
    ttft: str
    tpot: str
    e2e: str
    error: str | None
    prompt: TextRef
    messages: list[Message]
    response: TextRef
    reasoning: TextRef
    filters: list[FilterResult]
    extra: list[KV] = field(default_factory=list)


class TextPool:
    """Collects the texts of a report's rows, dedupes repeats, then cuts all of them to fit a budget."""

    def __init__(self, anchor_prefix: str) -> None:
        self.anchor_prefix = anchor_prefix
        self.refs: list[TextRef] = []
        self.shared: dict[str, SharedText] = {}
        self._counts: Counter[str] = Counter()

    def count(self, text: str | None) -> None:
        if text and len(text) >= SHARED_MIN_CHARS:
            self._counts[text] += 1

    def ref(self, text: str | None, *, tail_share: float = 0.34, dedupe: bool = True) -> TextRef:
        if text is None:
            return TextRef()
        if dedupe and len(text) >= SHARED_MIN_CHARS and self._counts[text] >= 2:
            st = self.shared.get(text)
            if st is None:
                k = len(self.shared) + 1
                st = SharedText(f"{self.anchor_prefix}-s{k}", f"shared text {k}", len(text), None)
                self.shared[text] = st
            return TextRef(shared_anchor=st.anchor, shared_label=st.label, shared_chars=st.chars)
        r = TextRef(raw=text, tail_share=tail_share)
        self.refs.append(r)
        return r

    def finish(self, budget: int, max_limit: int = TEXT_LIMIT) -> int:
        """Cut every collected text with one limit chosen so that all of them, HTML-escaped and UTF-8
        encoded, fit ``budget`` bytes (as far as a limit of a few hundred characters allows); returns it."""
        shared_total = sum(_html_bytes(t[: max_limit * 4]) for t in self.shared)
        lengths = [len(r.raw or "") for r in self.refs]
        weights = [_html_bytes(r.raw) / len(r.raw) if r.raw else 1.0 for r in self.refs]
        limit = fit_limit(
            lengths, max(budget - shared_total, 0), max_limit, weights=weights, cut_overhead=CUT_NOTE_BYTES
        )
        for r in self.refs:
            r.cut = cut_text(r.raw, limit, r.tail_share)
            r.raw = None
        for text, st in self.shared.items():
            st.cut = cut_text(text, max_limit * 4)
        return limit


def _html_bytes(text: str) -> int:
    return len(str(escape(text)).encode("utf-8", "replace"))


def _bool(v: Any) -> bool | None:
    return v if isinstance(v, bool) else None


def _verdict(flag: bool | None) -> str:
    return "unscored" if flag is None else ("correct" if flag else "wrong")


def _pick_rows(samples: list[dict[str, Any]], max_rows: int) -> list[dict[str, Any]]:
    """At most ``max_rows`` samples in their original order, failures and wrong answers first."""
    if len(samples) <= max_rows:
        return samples

    def rank(i: int) -> tuple[int, int]:
        s = samples[i]
        _, flag = primary_correct(s)
        status = s.get("status")
        return (0 if status not in ("ok", None) else 1 if flag is False else 2, i)

    keep = sorted(sorted(range(len(samples)), key=rank)[:max_rows])
    return [samples[i] for i in keep]


@dataclass
class SampleSection:
    rows: list[SampleRow]
    shown: int
    total: int
    prefixes: list[SharedText]  # one per task with a shared prompt prefix
    shared: list[SharedText]
    limit: int
    tasks: list[str]
    statuses: list[tuple[str, int]]
    verdicts: list[tuple[str, int]]


def sample_section(run: RunData, anchor: str = "t") -> SampleSection:
    samples = _pick_rows(run.samples, MAX_ROWS)
    pool = TextPool(anchor)
    # Shared prompt prefix per task (e.g. lm-eval's few-shot block): shown once, each row shows only its tail.
    by_task: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        by_task.setdefault(str(s.get("task")), []).append(s)
    prefixes: dict[str, SharedText] = {}
    for ti, (task, ss) in enumerate(by_task.items()):
        prompts = [p for p in (as_str(s.get("prompt")) for s in ss) if p is not None]
        pre = shared_prefix(prompts, SHARED_MIN_CHARS) if len(prompts) == len(ss) else ""
        if pre:
            prefixes[task] = SharedText(
                f"{anchor}-p{ti}", f"Shared prompt prefix of {task}", len(pre), cut_text(pre, TEXT_LIMIT * 4)
            )
    # Count repeats (system prompts, few-shot chat turns, identical prompts of repeated samples).
    for s in samples:
        task = str(s.get("task"))
        prompt = as_str(s.get("prompt"))
        ptx = prefixes.get(task)
        pool.count(prompt[ptx.chars :] if prompt is not None and ptx else prompt)
        for msg in as_list(s.get("messages")):
            content = as_str(as_dict(msg).get("content"))
            if content != prompt:
                pool.count(content)
    rows: list[SampleRow] = []
    for s in samples:
        task = str(s.get("task"))
        prompt = as_str(s.get("prompt"))
        ptx = prefixes.get(task)
        if prompt is not None and ptx is not None:
            pref = pool.ref(prompt[ptx.chars :], tail_share=0.6)
            pref.prefix_anchor, pref.prefix_chars = ptx.anchor, ptx.chars
        else:
            pref = pool.ref(prompt, tail_share=0.6)
        messages: list[Message] = []
        msgs = as_list(s.get("messages"))
        only_prompt = len(msgs) == 1 and as_str(as_dict(msgs[0]).get("content")) == prompt
        if not only_prompt:
            for msg in msgs:
                md = as_dict(msg)
                content = as_str(md.get("content"))
                role = as_str(md.get("role")) or "?"
                if content is not None and content == prompt:
                    messages.append(Message(role, TextRef(note="the prompt above")))
                else:
                    messages.append(Message(role, pool.ref(content, tail_share=0.6)))
        metric, flag = primary_correct(s)
        extracted = as_dict(s.get("extracted"))
        correct = as_dict(s.get("correct"))
        status = as_str(s.get("status")) or "?"
        extra = []
        for k in ("attempts", "prompt_tokens", "reasoning_tokens", "extraction"):
            v = s.get(k)
            if v is not None and not (k == "attempts" and v == 1):
                extra.append(KV(k, short(v, 120)))
        filters = [
            FilterResult(str(k), short(extracted.get(k), 1000), _verdict(_bool(correct.get(k))))
            for k in dict.fromkeys([*extracted, *correct])
        ]
        rows.append(
            SampleRow(
                task=task,
                doc_id=as_str(s.get("doc_id")) or DASH,
                sample_index=as_int(s.get("sample_index")) or 0,
                status=status,
                verdict=_verdict(flag),
                metric=metric,
                extracted=short(extracted.get(metric)) if metric in extracted else None,
                target=short(s.get("target")),
                finish_reason=short(s.get("finish_reason"), 40),
                output_tokens=fmt_int(s.get("output_tokens")),
                ttft=fmt_ms(s.get("ttft_ms")),
                tpot=fmt_ms(s.get("tpot_ms")),
                e2e=fmt_ms(s.get("e2e_ms")),
                error=short(s.get("error"), 1000),
                prompt=pref,
                messages=messages,
                response=pool.ref(as_str(s.get("response")), dedupe=False),
                reasoning=pool.ref(as_str(s.get("reasoning")), dedupe=False),
                filters=filters,
                extra=extra,
            )
        )
    budget = REPORT_TARGET_BYTES - ASSET_BYTES - ROW_BYTES * len(rows)
    budget -= sum(_html_bytes(p.cut.head + p.cut.tail) for p in prefixes.values() if p.cut)
    limit = pool.finish(max(budget, MIN_TEXT_BYTES))
    statuses = Counter(r.status for r in rows)
    verdicts = Counter(r.verdict for r in rows)
    ordered_status = [(st, statuses[st]) for st in STATUSES if statuses[st]] + [
        (st, c) for st, c in statuses.items() if st not in STATUSES
    ]
    return SampleSection(
        rows=rows,
        shown=len(rows),
        total=len(run.samples),
        prefixes=list(prefixes.values()),
        shared=list(pool.shared.values()),
        limit=limit,
        tasks=list(by_task),
        statuses=ordered_status,
        verdicts=[(v, verdicts[v]) for v in ("correct", "wrong", "unscored") if verdicts[v]],
    )
