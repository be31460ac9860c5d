"""The run report's probe section: each probe task of a probed load run (``--probe TASK:SHARE``) with its accuracy
under the load (its interval as its summary stores it), the load it was measured at (the workload's offered and
achieved rate), and, given a run of the task at rest (``evalkit report LOADED --rest-run REST``), the accuracy at
rest beside it with the difference over the documents both runs scored and whether it is significant, by the
gate's own paired test (:func:`~evalkit.gating.rules.paired_accuracy`: exact McNemar or the paired bootstrap, as
``evalkit gate REST LOADED`` pairs probes by document). Both runs are read as the gate reads them
(:func:`~evalkit.gating.load.from_run_dir`, the store's typed reads).

A rest run that cannot be compared is refused with one line naming the fix (:class:`~evalkit.errors.ConfigError`,
exit 2): not a run dir, a run of another model, with no samples of a probe task, of another version, data or
prompts of it, or with none of the probe's documents."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalkit.contracts import MetricValue
from evalkit.errors import ConfigError
from evalkit.gating.inputs import RunInputs, TaskInputs
from evalkit.gating.load import from_run_dir
from evalkit.gating.policy import AccuracyRule, BootstrapSettings
from evalkit.gating.rules import paired_accuracy
from evalkit.reporting.formatting import fmt_num
from evalkit.store.reader import Run, open_run


@dataclass(frozen=True)
class ProbeRow:
    """One metric of one probe task: at rest and under load (value and interval), the paired difference with
    its interval, whether it is significant, and the documents it is paired over."""

    task: str
    metric: str
    rest: str
    loaded: str
    difference: str
    significance: str
    paired: str


@dataclass(frozen=True)
class ProbeSection:
    load: str  # the load the probes were measured at
    rest_label: str | None  # the rest run's dir name (None: no rest run given)
    rows: list[ProbeRow]
    method: str  # how the difference was tested


def _metric(m: MetricValue | None) -> str:
    if m is None or m.value is None:
        return "-"
    ci = f" [{fmt_num(m.ci95[0], 4)}, {fmt_num(m.ci95[1], 4)}]" if m.ci95 is not None else ""
    return f"{fmt_num(m.value, 4)}{ci} (n={m.n})"


def _load_text(run: Run, workloads: list[str]) -> str:
    for name in workloads:
        load = run.task(name).load
        if load is not None:
            return (
                f"{name}: offered {fmt_num(load.offered_rps, 3)} req/s, achieved {fmt_num(load.achieved_rps, 3)} "
                f"req/s ({load.process}{'' if load.schedule_kept else ', schedule not kept'})"
            )
    return f"{', '.join(workloads)}: no arrival schedule (requests sent as fast as the concurrency allowed)"


def _check_rest(name: str, loaded: TaskInputs, rest: RunInputs, rest_dir: Path) -> TaskInputs:
    """The rest run's task ``name``, once it is the same task over some of the probe's documents."""
    task = rest.tasks.get(name)
    if task is None or not any(m.items for m in task.metrics.values()):
        raise ConfigError(
            f"--rest-run {rest_dir} has no scored samples of the probe task {name}; give a run of {name} at rest "
            f"(evalkit run {name} --limit N with the probe's settings)"
        )
    a, b = loaded.identity, task.identity
    for what, x, y in (("version", a.version, b.version), ("data", a.data_sha256, b.data_sha256)):
        if x != y:
            raise ConfigError(
                f"--rest-run {rest_dir}: its {name} is of another task {what} than the probe's; give a rest run of "
                f"the same {name}"
            )
    common = loaded.scored() & task.scored()
    if not common:
        raise ConfigError(
            f"--rest-run {rest_dir} scored none of the probe's {name} documents; run {name} at rest over them "
            f"(--limit {max(loaded.scored(), default=0) + 1} takes the probe's {len(loaded.scored())})"
        )
    changed = [d for d in sorted(common) if a.prompt_digests.get(d) != b.prompt_digests.get(d)]
    if changed:
        raise ConfigError(
            f"--rest-run {rest_dir}: {len(changed)} of the {len(common)} {name} documents both runs scored were sent "
            f"with other prompts (e.g. document {changed[0]}); give a rest run with the probe's settings "
            "(few-shot, chat template, endpoint kind)"
        )
    return task


def probe_section(run: Run, rest_dir: Path | None = None) -> ProbeSection | None:
    """The probe section of ``run`` (None: it has no probe tasks, and no rest run was given)."""
    loaded = from_run_dir(run.path)
    workloads = [n for n, t in loaded.tasks.items() if t.speed_only]
    probes = [n for n, t in loaded.tasks.items() if not t.speed_only] if workloads else []
    if not probes:
        if rest_dir is None:
            return None
        raise ConfigError(
            f"{run.path} has no probe tasks; --rest-run compares the probes of a load run (evalkit run WORKLOAD "
            "--probe TASK:SHARE) with a run at rest"
        )
    rest: RunInputs | None = None
    if rest_dir is not None:
        if not (rest_dir / "manifest.json").is_file():
            raise ConfigError(f"--rest-run {rest_dir} is not a run dir (no manifest.json); give a run at rest's dir")
        rest = from_run_dir(rest_dir)
        models = (run.manifest_read().model, open_run(rest_dir).manifest_read().model)
        if models[0] != models[1]:
            raise ConfigError(
                f"--rest-run {rest_dir} is a run of {models[1]}, the load run of {models[0]}; give a rest run of "
                f"{models[0]}"
            )
    alpha, boot = AccuracyRule().alpha, BootstrapSettings()
    rows: list[ProbeRow] = []
    for name in probes:
        task = loaded.tasks[name]
        at_rest = _check_rest(name, task, rest, rest_dir) if rest is not None and rest_dir is not None else None
        for metric, samples in task.metrics.items():
            cell = ("-", "-", "no rest run given", "-")
            other = at_rest.metrics.get(metric) if at_rest is not None else None
            if other is not None and (other.items.keys() & samples.items.keys()):
                paired = paired_accuracy(other, samples, alpha, boot)
                est = paired.estimate
                worse = est.p_value < alpha
                lo, hi = est.ci
                cell = (
                    _metric(at_rest.stored.get(metric)) if at_rest is not None else "-",
                    f"{est.value * 100:+.2f} points [{lo * 100:+.2f}, {hi * 100:+.2f}] ({est.ci_level:.0%})",
                    f"{'significantly worse' if worse else 'not significantly worse'} under load "
                    f"(p={est.p_value:.3g} {'<' if worse else '≥'} {alpha})",
                    f"{len(paired.items)} of {len(samples.items)}",
                )
            elif at_rest is not None:
                cell = (_metric(at_rest.stored.get(metric)), "-", "the rest run has no such metric", "-")
            rows.append(ProbeRow(name, metric, cell[0], _metric(task.stored.get(metric)), cell[1], cell[2], cell[3]))
    method = (
        "the gate's paired test by document (evalkit gate REST LOADED): exact one-sided McNemar with Tango's "
        f"interval (one sample per document), else the paired bootstrap with the sign-flip test; α = {alpha}"
    )
    return ProbeSection(_load_text(run, workloads), rest_dir.name if rest_dir else None, rows, method)
