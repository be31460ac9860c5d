"""Which combination of a sweep to buy, in one sentence with its evidence (sweep.md's "Recommendation").

A combination qualifies when its accuracy is not worse than the reference config's (the gate's paired accuracy
rules under the default policy, :func:`evalkit.gating.evaluate`, against the reference's run of the same sampling
point, at the same concurrency level where it has one) and its share of requests within the SLOs is at least
``min_goodput_share``. Among those, the one with the most good requests per dollar (goodput over what its GPUs cost
per second) is recommended; each other combination is listed with the rule it lost on, and "none qualifies" says
why each did not. Also the sweep table's goodput and cost cells of a run."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from evalkit.config.slos import slos_text
from evalkit.contracts import speed_metric
from evalkit.sweep.combinations import Combination
from evalkit.sweep.sweep_file import Recommend

ECONOMIC_COLUMNS = ("goodput_requests_per_s", "goodput_share", "cost_per_million_output_tokens")
GOOD_PER_USD = "good_requests_per_usd"  # the column: goodput over the dollars per second of the run's GPUs


def economics_cells(speed: dict[str, Any], pricing: Any) -> dict[str, Any]:
    """The sweep table's goodput and cost cells of a run (its summary ``speed`` and manifest ``pricing``): only
    those the run has, so that a sweep without SLOs or a price keeps the table it always had."""
    figures = {speed_metric(key).column: speed_metric(key).of_json(speed) for key in ECONOMIC_COLUMNS}
    cells = {column: value for column, value in figures.items() if value is not None}
    steady = (speed.get("steady_state") or {}).get("cost_per_million_output_tokens")
    if steady is not None:
        cells["steady_cost_per_m_out_tok"] = steady
    per_usd = good_per_usd(speed, pricing)
    if per_usd is not None:
        cells[GOOD_PER_USD] = per_usd
    return cells


def good_per_usd(speed: dict[str, Any], pricing: Any) -> float | None:
    """Good requests per dollar: goodput (requests/s) over the run's GPUs' dollars per second."""
    goodput = speed.get("goodput_requests_per_s")
    if not isinstance(pricing, dict) or not isinstance(goodput, int | float):
        return None
    price, gpus = pricing.get("cost_per_gpu_hour"), pricing.get("gpus")
    if not isinstance(price, int | float) or not isinstance(gpus, int) or price <= 0 or gpus <= 0:
        return None
    return goodput / (price * gpus / 3600.0)


@dataclass
class Candidate:
    """A combination: its row of the sweep table (whose ``error`` cell says why when it has no usable run) and
    its run dir; ``finished``: the run dir holds a finished run of the sweep file's settings."""

    combo: Combination
    row: dict[str, Any]
    run_dir: Path
    finished: bool = True


def _reference(c: Candidate, refs: list[Candidate]) -> Candidate | None:
    same = [r for r in refs if r.combo.sampling == c.combo.sampling]
    level = [r for r in same if r.combo.concurrency == c.combo.concurrency]
    found = level or same
    return found[0] if found else None


def _accuracy_loss(c: Candidate, ref: Candidate | None, reference: str, tasks: list[str] | None = None) -> str | None:
    """Why ``c``'s accuracy is worse than (or cannot be compared with) the reference's; None when it is not.
    ``tasks``: judge only these tasks of the two runs (None: all)."""
    if ref is None:
        return f"accuracy: config {reference} has no finished run of sampling point {c.combo.sampling} to compare with"
    if ref.combo.config == c.combo.config:
        return None
    from evalkit.errors import EvalkitError
    from evalkit.gating import default_policy, evaluate, from_run_dir

    def judged(run_dir: Path) -> Any:
        run = from_run_dir(run_dir)
        return run if tasks is None else replace(run, tasks={k: v for k, v in run.tasks.items() if k in tasks})

    try:
        result = evaluate(judged(ref.run_dir), judged(c.run_dir), default_policy())
    except EvalkitError as e:
        return f"accuracy: cannot be compared with {ref.combo.name} ({' '.join(str(e).split())})"
    failed = [r for r in result.rules if r.kind in ("accuracy", "perplexity") and r.verdict == "fail"]
    if failed:
        return f"accuracy: {failed[0].name} is worse than {ref.combo.name}'s ({failed[0].note})"
    if result.reasons:  # coverage too low, a metric on one side only, no task shared: not shown to be no worse
        return f"accuracy: not decided against {ref.combo.name} ({result.reasons[0]})"
    return None


def _goodput_loss(row: dict[str, Any], min_share: float) -> str | None:
    share = row.get(speed_metric("goodput_share").column)
    if not isinstance(share, int | float):
        return "goodput: the run has no goodput figure (run it with the sweep file's goodput SLOs)"
    if share < min_share:
        return f"goodput: {share:.1%} of requests within the SLOs, below the {min_share:.0%} asked for"
    return None


@dataclass
class Recommendation:
    """The sweep's recommendation: the combination to buy (``pick``, None when none qualifies), the sentence that
    says so with its evidence (``headline``, plain text), the reference combination its accuracy was judged
    against (``reference``) and, for each other combination, the rule it lost on (``lost``)."""

    pick: str | None
    headline: str
    lost: dict[str, str]
    reference: str | None = None

    def markdown(self) -> list[str]:
        """sweep.md's "Recommendation" section (the pick in bold)."""
        head = self.headline
        if self.pick is not None:
            head = f"**{self.pick}**" + head.removeprefix(self.pick)
        return ["## Recommendation", "", head, "", *(f"- {name}: {why}" for name, why in self.lost.items())]


def recommend(
    cands: list[Candidate], rec: Recommend, slos: dict[str, float], accuracy_tasks: list[str] | None = None
) -> Recommendation:
    """The combination to buy (or "none qualifies"), with the rule each other combination lost on; accuracy
    judged on ``accuracy_tasks`` only (None: every task of the runs)."""
    refs = [c for c in cands if c.combo.config == rec.reference and c.finished]
    lost: dict[str, str] = {}
    ok: list[Candidate] = []
    for c in cands:
        error = c.row.get("error")
        why = (
            f"run: {error}"
            if error
            else _accuracy_loss(c, _reference(c, refs), rec.reference, accuracy_tasks)
            or _goodput_loss(c.row, rec.min_goodput_share)
        )
        if why:
            lost[c.combo.name] = why
        else:
            ok.append(c)
    shown = slos_text(slos)
    rule = (
        f"accuracy not worse than config {rec.reference} (the gate's paired rules) and at least "
        f"{rec.min_goodput_share:.0%} of requests within the SLOs ({shown})"
    )
    scored = [(c.row.get(GOOD_PER_USD), c) for c in ok]
    best = max(((v, c) for v, c in scored if isinstance(v, int | float)), key=lambda x: x[0], default=None)
    if best is None and not any(c.finished for c in cands):
        none_finished = "None qualifies: no combination has a finished run to judge (each line says why)."
        return Recommendation(None, none_finished, lost)
    if best is None:
        return Recommendation(None, f"None qualifies: no combination has {rule}.", lost)
    value, pick = best
    headline = (
        f"{pick.combo.name}: the most good requests per dollar ({value:,.0f}) among the combinations with {rule}."
    )
    for v, c in scored:
        if c is not pick:
            lost[c.combo.name] = (
                f"cost: {v:,.0f} good requests per dollar, fewer than {pick.combo.name}'s {value:,.0f}"
                if isinstance(v, int | float)
                else "cost: the run has no price (run it with the sweep file's cost_per_gpu_hour)"
            )
    ref = _reference(pick, refs)
    return Recommendation(pick.combo.name, headline, lost, ref.combo.name if ref is not None else None)
