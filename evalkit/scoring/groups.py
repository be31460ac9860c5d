"""lm-eval groups' aggregate scores in ``summary.json``: lm-eval's own ``Group.aggregate`` (its
``aggregate_subtask_metrics``, ``pooled_sample_stderr`` and ``unweighted_mean_stderr``) run on the group's tasks'
values, stderrs and sizes as the run's task summaries hold them, so a group's score is lm-eval's to the last digit.

A group gets no aggregate, and a ``reason`` instead, while any of its tasks is not in the summary (the run has not
reached it, or stopped) or had requests that failed; or when its config has no ``aggregate_metric_list`` (lm-eval
shows no score for it either)."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from evalkit.contracts import GroupSummary, MetricValue, TaskSummary

NA = "N/A"  # lm-eval's stderr where it has none


def task_size(task: TaskSummary) -> int:
    """The documents lm-eval weights a task by (its ``sample_len``): the most items any of its metrics holds."""
    return max((m.n for m in task.metrics.values()), default=0)


def _lm_eval_task_metrics(name: str, task: TaskSummary) -> dict[str, Any]:
    """A task's results as lm-eval's evaluator holds them: ``metric,filter``, ``metric_stderr,filter`` (N/A where
    there is none) and ``sample_len``."""
    out: dict[str, Any] = {"sample_len": task_size(task), "alias": name}
    for key, m in task.metrics.items():
        if m.value is None:
            continue
        metric, _, filt = key.partition(",")
        out[key] = m.value
        out[f"{metric}_stderr,{filt}"] = NA if m.stderr is None else m.stderr
    return out


def _proportion(m: MetricValue | None) -> bool:
    """Whether a task's metric reads as a proportion: its value and 95% interval within [0, 1]."""
    return m is not None and m.ci95 is not None and m.ci95[0] >= 0 and m.ci95[1] <= 1 and 0 <= (m.value or 0) <= 1


def _why_not(group: GroupSummary, tasks: Mapping[str, TaskSummary]) -> str | None:
    if not group.aggregate_metric_list:
        return "its lm-eval config has no aggregate_metric_list (lm-eval shows no score for it)"
    custom = [a["metric"] for a in group.aggregate_metric_list if a.get("aggregation", "mean") != "mean"]
    if custom:
        return f"its aggregate_metric_list aggregates {', '.join(custom)} by a function of its own, not mean"
    missing = [t for t in group.tasks if t not in tasks]
    if missing:
        return f"{len(missing)} of its {len(group.tasks)} tasks have no result yet: {', '.join(missing[:5])}"
    failed = [t for t in group.tasks if tasks[t].counts.get("api_error", 0)]
    if failed:
        return f"requests failed in {', '.join(failed[:5])}; re-run the same command to retry them"
    return None


def group_result(name: str, group: GroupSummary, tasks: Mapping[str, TaskSummary]) -> GroupSummary:
    """``group`` with its sizes and aggregate metrics (as lm-eval computes them) filled in from the run's task
    summaries, or with the reason it has none."""
    from lm_eval.api.group import Group
    from lm_eval.config.group import AggMetricConfig

    sizes = {t: task_size(tasks[t]) for t in group.tasks if t in tasks}
    why = _why_not(group, tasks)
    if why is not None:
        return group.model_copy(update={"sizes": sizes, "metrics": {}, "reason": why})

    class _OverTasks(Group):  # lm-eval's Group, its tasks given by name (the summaries hold their results)
        def get_all_tasks(self, recursive: bool = True) -> list[Any]:
            return [SimpleNamespace(task_name=t) for t in group.tasks]

    lm_group = _OverTasks(name, aggregate_metric_list=[AggMetricConfig(**a) for a in group.aggregate_metric_list])
    results = lm_group.aggregate({t: _lm_eval_task_metrics(t, tasks[t]) for t in group.tasks})
    counts: dict[str, int] = results.get("sample_count", {})
    metrics: dict[str, MetricValue] = {}
    for key, n in counts.items():
        metric, _, filt = key.partition(",")
        value = float(results[key])
        se = results.get(f"{metric}_stderr,{filt}", NA)
        stderr = None if se == NA else float(se)
        ci = (value - 1.96 * stderr, value + 1.96 * stderr) if stderr is not None else None
        if ci is not None and all(
            _proportion(tasks[t].metrics.get(key)) for t in group.tasks if key in tasks[t].metrics
        ):
            ci = (max(0.0, ci[0]), min(1.0, ci[1]))  # a proportion's interval stays within [0, 1], as its tasks'
        method = "lm-eval-normal" if ci is not None else None  # lm-eval's pooled stderr of the group
        metrics[key] = MetricValue(value=value, stderr=stderr, ci95=ci, n=n, ci_method=method)
    reason = None if metrics else "none of its tasks has a metric its aggregate_metric_list names"
    return group.model_copy(update={"sizes": sizes, "metrics": metrics, "reason": reason})


def group_results(groups: Mapping[str, GroupSummary], tasks: Mapping[str, TaskSummary]) -> dict[str, GroupSummary]:
    """Every group of ``groups`` (:func:`evalkit.tasks.lmeval_source.lm_eval_groups`) with its aggregate."""
    return {name: group_result(name, g, tasks) for name, g in groups.items()}
