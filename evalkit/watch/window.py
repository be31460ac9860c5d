"""The watch's statistics: the window of ticks as one candidate run, judged against the baseline by the gate.

Every tick is a run directory read through the gate's loader (:func:`evalkit.gating.from_run_dir`, which reads it
with :func:`evalkit.store.open_run`); :func:`merge` joins the ticks of a window (or the first ticks that form a
baseline) into one :class:`~evalkit.gating.RunInputs`, and :func:`judge` asks the gate for the verdict: accuracy
paired item by item on the documents both hold, speed, error/empty/truncation rates. :func:`ticks_to_detect`
says, from the gate's power formula for McNemar's test, within how many ticks a given accuracy drop is caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalkit.gating import (
    CorpusMetric,
    GateResult,
    MetricSamples,
    NumericsInputs,
    RunInputs,
    SpeedRecords,
    StatusCounts,
    TaskInputs,
    evaluate,
    from_run_dir,
    policy_from_dict,
)
from evalkit.gating.policy import Policy
from evalkit.gating.stats import mde_mcnemar
from evalkit.scoring.estimators import proportion_interval

# The gate's default policy, with two changes: alpha 0.01 instead of 0.05, since the watch tests again at every
# tick (fewer false alarms over days of ticks); and output tokens/s not judged, since a canary's throughput at a
# few requests in flight says nothing against a baseline run at another concurrency, and on a live server it
# moves with production traffic (it is exported and drawn all the same; a --policy file can judge it).
WATCH_POLICY: dict[str, Any] = {
    "accuracy": {"default": {"alpha": 0.01}},
    "speed": {"output_tokens_per_s": None, "ttft_p50_ms": {"alpha": 0.01}, "tpot_p50_ms": {"alpha": 0.01}},
}


def watch_policy() -> Policy:
    """The policy a watch uses without ``--policy``."""
    return policy_from_dict(WATCH_POLICY, "the watch's default policy")


def tick_inputs(run_dir: Path, task: str) -> TaskInputs | None:
    """The gate's inputs of ``task`` in one tick's run dir (None when the tick stored nothing for it)."""
    if not (run_dir / "samples.jsonl").is_file() or not (run_dir / "summary.json").is_file():
        return None
    return from_run_dir(run_dir).tasks.get(task)


def _merge_metrics(ticks: list[TaskInputs]) -> dict[str, MetricSamples]:
    out: dict[str, MetricSamples] = {}
    for t in ticks:  # in tick order: a document seen again in a later tick takes that tick's answers
        for name, m in t.metrics.items():
            old = out.get(name)
            out[name] = MetricSamples(name, m.filter, {**(old.items if old else {}), **m.items})
    return out


def _merge_corpus(ticks: list[TaskInputs]) -> dict[str, CorpusMetric]:
    out: dict[str, CorpusMetric] = {}
    for t in ticks:  # in tick order: a document seen again in a later tick takes that tick's pair
        for name, m in t.corpus.items():
            old = out.get(name)
            out[name] = CorpusMetric(name, m.aggregation, {**(old.items if old else {}), **m.items})
    return out


def _merge_speed(ticks: list[TaskInputs]) -> SpeedRecords:
    walls = [t.speed.wall_s for t in ticks]
    levels = {t.speed.concurrency for t in ticks}
    rates = {t.speed.request_rate for t in ticks}
    return SpeedRecords(
        ttft_ms=[x for t in ticks for x in t.speed.ttft_ms],
        tpot_ms=[x for t in ticks for x in t.speed.tpot_ms],
        e2e_ms=[x for t in ticks for x in t.speed.e2e_ms],
        output_tokens=[x for t in ticks for x in t.speed.output_tokens],
        start_s=[x for t in ticks for x in t.speed.start_s],
        wall_s=None if any(w is None for w in walls) else sum(w for w in walls if w is not None),
        concurrency=next(iter(levels)) if len(levels) == 1 else None,
        # the ticks' --request-rate: the window's load is the canary's; ticks at different rates are no one load
        request_rate=next(iter(rates)) if len(rates) == 1 else math.nan,
    )


def _merge_asked(ticks: list[TaskInputs]) -> frozenset[int] | None:
    asked = [t.asked_docs for t in ticks]
    return None if any(a is None for a in asked) else frozenset().union(*(a for a in asked if a is not None))


def _merge_numerics(ticks: list[TaskInputs]) -> NumericsInputs | None:
    """The ticks' teacher-forced positions per document, the latest tick's where several hold one (None when no
    tick holds any): the window is judged by the gate's numerics rules against the baseline's same texts."""
    held = [t.numerics for t in ticks if t.numerics is not None]
    if not held:
        return None
    return NumericsInputs(
        main={d: p for n in held for d, p in n.main.items()}, again={d: p for n in held for d, p in n.again.items()}
    )


def merge(label: str, task: str, ticks: list[TaskInputs], limit: int | None = None) -> RunInputs:
    """Several ticks of ``task`` as one run: per document the latest tick's answers (and teacher-forced
    positions), every request's timings and status (the gate's own :meth:`StatusCounts.combined`), the documents
    asked for and scored (the union of the ticks'; asked None when a tick's are unknown), the ticks' problems.
    ``limit``: the identity's limit (the baseline's: a tick's slice is a selection of its docs)."""
    last = ticks[-1].identity
    digests: dict[int, str] = {}
    for t in ticks:
        digests.update(t.identity.prompt_digests)
    identity = replace(last, limit=limit, prompt_digests=digests, prompt_hash=None)
    merged = TaskInputs(
        task,
        identity,
        _merge_metrics(ticks),
        _merge_speed(ticks),
        StatusCounts.combined(t.counts for t in ticks),
        asked_docs=_merge_asked(ticks),
        scored_docs=frozenset().union(*(t.scored() for t in ticks)),
        problems=tuple(p for t in ticks for p in t.problems),
        numerics=_merge_numerics(ticks),
        not_gated={k: v for t in ticks for k, v in t.not_gated.items()},
        corpus=_merge_corpus(ticks),
    )
    return RunInputs(label=label, tasks={task: merged}, concurrency_setting=None)


def judge(baseline: RunInputs, window: RunInputs, policy: Policy) -> GateResult:
    """The gate's verdict on the window against the baseline (CannotCompare when they measured different
    things: task version, data, few-shot setting or prompts)."""
    return evaluate(baseline, window, policy)


@dataclass(frozen=True)
class Accuracy:
    """A metric's value over a set of documents and its 95% interval (Wilson; clustered by document when the
    documents have several samples)."""

    value: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, m: MetricSamples, docs: set[int] | None = None) -> Accuracy | None:
        items = [v for d, v in m.items.items() if docs is None or d in docs]
        n = sum(len(v) for v in items)
        if not n:
            return None
        value = sum(sum(v) for v in items) / n
        stderr = None
        if len(items) > 1 and n > len(items):
            means = [sum(v) / len(v) for v in items]
            mu = sum(means) / len(means)
            stderr = math.sqrt(sum((x - mu) ** 2 for x in means) / (len(means) - 1) / len(means))
        ci = proportion_interval(value, n, stderr, clusters=len(items) if n > len(items) else None)
        return cls(value, ci.lo, ci.hi, n)


def ticks_to_detect(
    drop: float,
    base_accuracy: float,
    per_tick: int,
    window: int,
    alpha: float,
    power: float = 0.99,
    budget: float = 0.01,
    noise_discordance: float | None = None,
) -> int | None:
    """After the endpoint's accuracy falls by ``drop``, within how many ticks the watch fails with probability
    ``power``: the first k whose window (k degraded ticks, the rest before the change) shows a drop of at least
    McNemar's minimum detectable effect (the gate's :func:`~evalkit.gating.stats.mde_mcnemar`) and beyond the
    budget. ``noise_discordance``: the share of items answered differently by two runs of an unchanged
    endpoint (sampling noise; default: independent draws, 2p(1-p)). None when the window can never show it."""
    p, q = base_accuracy, base_accuracy - drop
    if noise_discordance is None:  # independent draws before and after the change
        same, changed = 2 * p * (1 - p), p * (1 - q) + q * (1 - p)
    else:  # the items that turned wrong add to the noise
        same, changed = noise_discordance, noise_discordance + drop
    n = per_tick * window
    for k in range(1, window + 1):
        effect = drop * k / window
        psi = (k * changed + (window - k) * same) / window
        if effect > budget and effect >= mde_mcnemar(n, psi, alpha, power):
            return k
    return None
