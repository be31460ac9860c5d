"""The verdict engine: a candidate run against a baseline run (:func:`evaluate`) or against published scores
(:func:`evaluate_expected`), under a :class:`~evalkit.gate.policy.Policy`."""

from __future__ import annotations

from evalkit.gate.errors import CannotCompare, PolicyError
from evalkit.gate.inputs import Identity, RunInputs, TaskInputs
from evalkit.gate.matching import match_load
from evalkit.gate.policy import Policy, default_policy
from evalkit.gate.result import GateResult, Rule, overall
from evalkit.gate.rules import accuracy_rule, expected_rule, rate_rules, speed_rule


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


def _accuracy_rules(task: str, base: TaskInputs, cand: TaskInputs, policy: Policy) -> tuple[list[Rule], list[str]]:
    rules = [
        accuracy_rule(task, base.metrics[m], cand.metrics[m], policy.accuracy.rule(task, m), policy.bootstrap)
        for m in base.metrics
        if m in cand.metrics
    ]
    notes = [
        f"{task}: metric {m} is only in the {side} run and was not compared"
        for side, only in (
            ("baseline", base.metrics.keys() - cand.metrics.keys()),
            ("candidate", cand.metrics.keys() - base.metrics.keys()),
        )
        for m in sorted(only)
    ]
    notes += [
        f"{task}: the policy names metric {m}, which neither run has"
        for m in sorted(policy.accuracy.tasks.get(task, {}))
        if m not in base.metrics and m not in cand.metrics
    ]
    return rules, notes


def _speed_rules(task: str, base: TaskInputs, cand: TaskInputs, policy: Policy) -> tuple[list[Rule], list[str]]:
    sp = policy.speed
    match = match_load(base.speed, cand.speed, sp.min_requests, policy.require_matched_load)
    rules = [
        speed_rule(task, key, rule, match, sp.min_requests, policy.bootstrap)
        for key in ("output_tokens_per_s", "ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms")
        if (rule := getattr(sp, key)) is not None
    ]
    return rules, [f"{task}: {match.note}"] if match.note else []


def _candidate_rules(cand: RunInputs, policy: Policy) -> list[Rule]:
    """Checks of the candidate alone: expected scores and status rates."""
    rules: list[Rule] = []
    for exp in policy.expected:
        task = cand.tasks.get(exp.task)
        rules.append(expected_rule(exp.task, task.metrics.get(exp.metric) if task else None, exp, policy.bootstrap))
    for name, task in cand.tasks.items():
        rules += rate_rules(name, task.counts, policy.rates)
    return rules


def evaluate(
    baseline: RunInputs, candidate: RunInputs, policy: Policy | None = None, *, force: bool = False
) -> GateResult:
    """Compare the candidate with the baseline task by task: accuracy (paired), speed (at matched load),
    status rates and the policy's expected scores. Raises CannotCompare when a shared task was run with a
    different version, data, limit, few-shot setting or prompts, unless ``force``."""
    policy = policy or default_policy()
    rules: list[Rule] = []
    notes: list[str] = []
    shared = [t for t in baseline.tasks if t in candidate.tasks]
    for task in shared:  # refuse before computing anything
        notes += check_comparable(task, baseline.tasks[task], candidate.tasks[task], force)
    for task in shared:
        for part in (_accuracy_rules, _speed_rules):
            r, n = part(task, baseline.tasks[task], candidate.tasks[task], policy)
            rules += r
            notes += n
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
    reasons: list[str] = []
    verdict = overall(rules, reasons)
    return GateResult(
        verdict=verdict,
        baseline=baseline.label,
        candidate=candidate.label,
        rules=rules,
        reasons=reasons,
        notes=notes,
        policy=policy.model_dump(mode="json"),
    )


def evaluate_expected(candidate: RunInputs, policy: Policy) -> GateResult:
    """Check the candidate against the policy's expected scores (no baseline run), plus its status rates."""
    if not policy.expected:
        raise PolicyError("the policy lists no expected scores; add an 'expected:' list or compare with a baseline")
    rules = _candidate_rules(candidate, policy)
    reasons: list[str] = []
    verdict = overall(rules, reasons)
    return GateResult(
        verdict=verdict,
        candidate=candidate.label,
        rules=rules,
        reasons=reasons,
        policy=policy.model_dump(mode="json"),
    )
