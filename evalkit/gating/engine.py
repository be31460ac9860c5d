"""The verdict engine: a candidate run against a baseline run (:func:`evaluate`) or against published scores
(:func:`evaluate_expected`), under a :class:`~evalkit.gating.policy.Policy`."""

from __future__ import annotations

from typing import Literal

from evalkit.gating.corpus import corpus_rule
from evalkit.gating.economics import goodput_change_rule, limit_rules, undecided_reasons
from evalkit.gating.errors import CannotCompare, PolicyError
from evalkit.gating.inputs import CorpusMetric, Identity, MetricSamples, RunInputs, StatusCounts, TaskInputs
from evalkit.gating.matching import Unmatched, match_runs
from evalkit.gating.numerics_rules import numerics_rules
from evalkit.gating.policy import Policy, default_policy
from evalkit.gating.result import GateResult, Rule, StoredMetric, overall
from evalkit.gating.rules import accuracy_rule, expected_rule, rate_rules, speed_rule


def identity_differences(a: Identity, b: Identity) -> list[str]:
    """What makes two runs of a task measure different things: task version, data, limit, few-shot setting,
    or the prompt of any document both runs sent."""
    diffs: list[str] = []
    for label, x, y in (
        ("task version", a.version, b.version),
        ("limit", a.limit, b.limit),
        ("num_fewshot", a.num_fewshot, b.num_fewshot),
    ):
        if x != y:
            diffs.append(f"{label} {x} vs {y}")
    if a.data_sha256 != b.data_sha256:
        splits = sorted(
            k for k in a.data_sha256.keys() | b.data_sha256.keys() if a.data_sha256.get(k) != b.data_sha256.get(k)
        )
        diffs.append(f"data sha256 of {', '.join(splits)} differs")
    common = a.prompt_digests.keys() & b.prompt_digests.keys()
    changed = sorted(d for d in common if a.prompt_digests[d] != b.prompt_digests[d])
    if changed:
        diffs.append(f"prompts differ on {len(changed)} of {len(common)} documents (first: doc {changed[0]})")
    return diffs


def sampling_differences(a: Identity, b: Identity) -> list[str]:
    """Generation settings that differ (reported, never refused)."""
    keys = sorted(a.sampling.keys() | b.sampling.keys())
    return [f"{k} {a.sampling.get(k)} vs {b.sampling.get(k)}" for k in keys if a.sampling.get(k) != b.sampling.get(k)]


def check_comparable(task: str, base: TaskInputs, cand: TaskInputs, force: bool) -> list[str]:
    """Notes on how the runs of ``task`` differ; raises CannotCompare (one line) on an identity difference
    unless ``force``."""
    diffs = identity_differences(base.identity, cand.identity)
    if diffs and not force:
        raise CannotCompare(
            f"{task}: baseline and candidate are not comparable ({'; '.join(diffs)}); "
            "compare runs of the same task setup, or force the comparison"
        )
    notes = [f"{task}: compared despite {d} (forced)" for d in diffs]
    sampling = sampling_differences(base.identity, cand.identity)
    if sampling:
        notes.append(f"{task}: generation settings differ: {', '.join(sampling)}")
    return notes


def combine_runs(label: str, runs: list[RunInputs], side: str = "baseline") -> RunInputs:
    """Several runs of one config as one side of the gate: per document every run's samples (accuracy is paired
    over all of them), status counts added up, the documents asked of and scored by every run, and each run's
    speed kept apart (``TaskInputs.runs``) for rules judged on run-to-run variation, and the first run's
    teacher-forced positions (numerics compares one run per side). Only tasks every run holds
    are kept; runs of a task that measured different things, or that hold different tasks, are refused
    (CannotCompare); a metric some runs lack is a problem of the task (the gate cannot decide on fewer runs than
    it names)."""
    if len(runs) == 1:
        return runs[0]
    for r in runs[1:]:
        if set(r.tasks) != set(runs[0].tasks):
            odd = sorted(set(r.tasks) ^ set(runs[0].tasks))
            raise CannotCompare(
                f"the {side} runs {runs[0].label} and {r.label} hold different tasks ({', '.join(odd)} in only one); "
                "pass runs of the same tasks"
            )
    tasks: dict[str, TaskInputs] = {}
    for name in runs[0].tasks:
        parts = [r.tasks[name] for r in runs]
        for r, t in zip(runs[1:], parts[1:], strict=True):
            diffs = identity_differences(parts[0].identity, t.identity)
            if diffs:
                raise CannotCompare(
                    f"{name}: the {side} runs {runs[0].label} and {r.label} are not runs of one config "
                    f"({'; '.join(diffs)}); pass runs of the same task setup"
                )
        metrics: dict[str, MetricSamples] = {}
        lacking = [
            f"{name}: metric {m} is missing from the {side} run {r.label}"
            for m in sorted({m for t in parts for m in t.metrics})
            for r, t in zip(runs, parts, strict=True)
            if m not in t.metrics
        ]
        for m in [m for m in parts[0].metrics if all(m in t.metrics for t in parts)]:
            items: dict[int, tuple[int, ...]] = {}
            for t in parts:
                for doc, v in t.metrics[m].items.items():
                    items[doc] = items.get(doc, ()) + v
            metrics[m] = MetricSamples(m, parts[0].metrics[m].filter, items)
        lacking += [
            f"{name}: metric {m} is missing from the {side} run {r.label}"
            for m in sorted({m for t in parts for m in t.corpus})
            for r, t in zip(runs, parts, strict=True)
            if m not in t.corpus
        ]
        corpus = {
            m: _pooled([t.corpus[m] for t in parts]) for m in parts[0].corpus if all(m in t.corpus for t in parts)
        }
        asked = [t.asked_docs for t in parts]
        tasks[name] = TaskInputs(
            name=name,
            identity=parts[0].identity,
            metrics=metrics,
            speed=parts[0].speed,
            counts=StatusCounts.combined(t.counts for t in parts),
            asked_docs=None
            if any(a is None for a in asked)
            else frozenset.intersection(*(a or frozenset() for a in asked)),
            scored_docs=frozenset.intersection(*(t.scored() for t in parts)),
            runs=tuple(t.speed for t in parts),
            problems=(*(p for t in parts for p in t.problems), *lacking),
            numerics=parts[0].numerics,
            not_gated=parts[0].not_gated,
            corpus=corpus,
        )
    notes = [n for r in runs for n in r.notes]
    return RunInputs(label=label, tasks=tasks, concurrency_setting=runs[0].concurrency_setting, notes=notes)


def _pooled(parts: list[CorpusMetric]) -> CorpusMetric:
    """A corpus metric of several runs as one: per document the runs' mean loglikelihood and the first run's
    length (the runs scored the same texts: their identities match), for the documents every run scored; its
    value is the metric of all the runs' texts together."""
    docs = frozenset.intersection(*(frozenset(p.items) for p in parts))
    items = {d: (sum(p.items[d][0] for p in parts) / len(parts), parts[0].items[d][1]) for d in sorted(docs)}
    return CorpusMetric(parts[0].name, parts[0].aggregation, items)


def _share(part: int, whole: int) -> str:
    return f"{part} of {whole} ({part / whole:.0%})"


def coverage_reasons(task: str, base: TaskInputs | None, cand: TaskInputs, min_coverage: float) -> list[str]:
    """Why the runs of ``task`` do not cover enough to decide: each run's scored share of the documents both
    were asked for (the candidate's alone without a baseline) below ``min_coverage``, or records that disagree
    with their summary. A document counts as scored when one of its samples got an answer (not api_error)."""
    reasons = [*(base.problems if base is not None else ()), *cand.problems]
    sides = [("baseline", base), ("candidate", cand)] if base is not None else [("candidate", cand)]
    asked_sets = [t.asked_docs for _, t in sides if t.asked_docs is not None]
    if asked_sets:
        asked = frozenset.intersection(*asked_sets)
    else:  # older or hand-made inputs: what either run scored
        asked = frozenset.union(*(t.scored() for _, t in sides))
    if not asked:
        what = "the runs were asked for no common document" if len(asked_sets) > 1 else "no document was asked for"
        return [*reasons, f"{task}: {what}; compare runs of the same documents"]
    for side, t in sides:
        n = len(t.scored() & asked)
        if n < min_coverage * len(asked) - 1e-9:
            reasons.append(
                f"{task}: the {side} scored only {_share(n, len(asked))} of the documents "
                f"{'both runs were' if len(sides) == 2 else 'it was'} asked for (minimum {min_coverage:.0%}; "
                f"{t.counts.api_error} failed requests); re-run it to complete it, or lower min_coverage"
            )
    return reasons


def _accuracy_rules(
    task: str, base: TaskInputs, cand: TaskInputs, policy: Policy
) -> tuple[list[Rule], list[str], list[str]]:
    """Rules for the metrics both runs scored; a metric only one run has is a reason the gate cannot decide
    (unless the policy turned it off)."""
    rules = [
        accuracy_rule(task, base.metrics[m], cand.metrics[m], policy.accuracy.rule(task, m), policy.bootstrap)
        for m in base.metrics
        if m in cand.metrics
    ]
    reasons: list[str] = []
    for m in [m for m in base.corpus if m in cand.corpus]:
        rule, why = corpus_rule(task, base.corpus[m], cand.corpus[m], policy.accuracy.rule(task, m), policy.bootstrap)
        rules.append(rule)
        reasons += why
    judged = {*base.metrics, *cand.metrics, *base.corpus, *cand.corpus}
    reasons += [
        f"{task}: metric {m} has scores only in the {side}, so it was not compared"
        for side, a, b in (("baseline", base, cand), ("candidate", cand, base))
        for m in sorted((a.metrics.keys() - b.metrics.keys()) | (a.corpus.keys() - b.corpus.keys()))
        if policy.accuracy.rule(task, m).enabled
    ]
    reasons += [
        f"{task}: metric {m} is not judged by the gate: {why}"
        for m, why in sorted({**base.not_gated, **cand.not_gated}.items())
        if m not in judged and policy.accuracy.rule(task, m).enabled
    ]
    if not judged and not reasons:
        reasons.append(f"{task}: neither run has a scored accuracy metric")
    notes = [
        f"{task}: the policy names metric {m}, which neither run has"
        for m in sorted(policy.accuracy.tasks.get(task, {}))
        if m not in judged
    ]
    return rules, notes, reasons


def _speed_rules(task: str, base: TaskInputs, cand: TaskInputs, policy: Policy) -> tuple[list[Rule], list[str]]:
    sp = policy.speed
    unmatched: Unmatched = "fail" if policy.require_matched_load else ("whole" if sp.judge_unmatched_load else "skip")
    match = match_runs(list(base.speeds()), list(cand.speeds()), sp.min_requests, unmatched)
    rules = [speed_rule(task, gated, rule, match, sp.min_requests) for gated, rule in sp.judged()]
    if sp.max_goodput_drop is not None:
        apart = None if match.base is not None and match.cand is not None else (match.note, match.verdict)
        rules.append(goodput_change_rule(task, base.speeds(), cand.speeds(), sp.max_goodput_drop, unmatched=apart))
    return rules, [f"{task}: {match.note}"] if match.note else []


def _candidate_rules(cand: RunInputs, policy: Policy) -> list[Rule]:
    """Checks of the candidate alone: expected scores and status rates."""
    rules: list[Rule] = []
    for exp in policy.expected:
        task = cand.tasks.get(exp.task)
        rules.append(expected_rule(exp.task, task.metrics.get(exp.metric) if task else None, exp, policy.bootstrap))
    for name, task in cand.tasks.items():
        rules += rate_rules(name, task.counts, policy.rates)
        rules += limit_rules(name, task.speeds(), policy.speed)
    return rules


def evaluate(
    baseline: RunInputs, candidate: RunInputs, policy: Policy | None = None, *, force: bool = False
) -> GateResult:
    """Compare the candidate with the baseline task by task: accuracy (paired), speed (at matched load),
    status rates and the policy's expected scores; a task holding teacher-forced positions by the numerics rules
    (:mod:`evalkit.gating.numerics_rules`) instead of speed, and of accuracy unless it scored a metric. Raises
    CannotCompare when a shared task was run with a different version, data, limit, few-shot setting or prompts,
    unless ``force``. The verdict is cannot_decide (with ``reasons``) when no rule failed but a task's coverage is
    below the policy's ``min_coverage``, a metric was scored on one side only, the runs share no task, no rule was
    evaluated, or a numerics rule could not decide."""
    policy = policy or default_policy()
    rules: list[Rule] = []
    notes: list[str] = []
    reasons: list[str] = []
    shared = [t for t in baseline.tasks if t in candidate.tasks]
    for task in shared:  # refuse before computing anything
        notes += check_comparable(task, baseline.tasks[task], candidate.tasks[task], force)
    for task in shared:
        base, cand = baseline.tasks[task], candidate.tasks[task]
        reasons += coverage_reasons(task, base, cand, policy.min_coverage)
        numerics = base.numerics is not None or cand.numerics is not None
        if numerics:
            r, why, n = numerics_rules(task, base, cand, policy.numerics, policy.min_coverage)
            rules += r
            notes += n
            reasons += why
        speed_only = base.speed_only and cand.speed_only and not (base.metrics or cand.metrics)
        if speed_only:
            r, n = _speed_rules(task, base, cand, policy)
            rules += r
            notes += n
            if not any(rule.verdict in ("pass", "fail") for rule in r):
                skipped = "; ".join(dict.fromkeys(rule.note for rule in r if rule.note)) or "no speed rule is on"
                reasons.append(
                    f"{task}: a workload is judged by its speed alone and no speed rule was evaluated ({skipped})"
                )
            continue
        if not numerics or base.metrics or cand.metrics or base.corpus or cand.corpus:
            r, n, why = _accuracy_rules(task, base, cand, policy)
            rules += r
            notes += n
            reasons += why
        if not numerics or policy.numerics.judge_speed:
            r, n = _speed_rules(task, base, cand, policy)
            rules += r
            notes += n
    if not shared:
        reasons.append("the runs share no task; compare runs of the same task")
    for task in baseline.tasks:
        if task not in candidate.tasks:
            rules.append(
                Rule(
                    name=f"{task}: present",
                    task=task,
                    kind="coverage",
                    verdict="fail",
                    note="the baseline ran this task; the candidate did not",
                )
            )
    notes += [f"{t}: only in the candidate, not compared" for t in candidate.tasks if t not in baseline.tasks]
    rules += _candidate_rules(candidate, policy)
    reasons += undecided_reasons(rules)
    verdict = overall(rules, reasons)
    return GateResult(
        verdict=verdict,
        baseline=baseline.label,
        candidate=candidate.label,
        rules=rules,
        reasons=reasons,
        notes=notes,
        metrics=[*stored_metrics(baseline, "baseline"), *stored_metrics(candidate, "candidate")],
        policy=policy.model_dump(mode="json"),
    )


def stored_metrics(run: RunInputs, side: Literal["baseline", "candidate"]) -> list[StoredMetric]:
    """``run``'s metrics as its summary stores them (none for several runs merged), for the gate's outputs."""
    return [
        StoredMetric(side=side, task=task, metric=key, **m.model_dump())
        for task, t in run.tasks.items()
        for key, m in t.stored.items()
    ]


def evaluate_expected(candidate: RunInputs, policy: Policy) -> GateResult:
    """Check the candidate against the policy's expected scores (no baseline run), plus its status rates."""
    if not policy.expected:
        raise PolicyError("the policy lists no expected scores; add an 'expected:' list or compare with a baseline")
    rules = _candidate_rules(candidate, policy)
    reasons = undecided_reasons(rules) + [
        why
        for task in sorted({e.task for e in policy.expected} & candidate.tasks.keys())
        for why in coverage_reasons(task, None, candidate.tasks[task], policy.min_coverage)
    ]
    verdict = overall(rules, reasons)
    return GateResult(
        verdict=verdict,
        candidate=candidate.label,
        rules=rules,
        reasons=reasons,
        metrics=stored_metrics(candidate, "candidate"),
        policy=policy.model_dump(mode="json"),
    )
