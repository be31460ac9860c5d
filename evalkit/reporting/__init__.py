"""Self-contained HTML reports that pair accuracy with speed.

- :func:`render_run`: one run directory -> one ``report.html`` (headline cards, provenance, latency CDFs,
  accuracy by output length, server/GPU metrics, a filterable per-sample table).
- :func:`render_compare`: N run directories -> one comparison page (config diff, speed and accuracy table,
  accuracy-vs-throughput scatter with the Pareto front, per-request flips between two runs, and for a task
  holding teacher-forced positions the token-level divergence of the two runs: :mod:`.numerics_view`).

Reports read only the result store (``manifest.json``, ``summary.json``, ``samples.jsonl``), are one
``.html`` file with inline Chart.js/CSS/JS, make no network requests and escape all model text.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalkit.reporting.analysis import Flips, compute_flips, pareto_front
from evalkit.reporting.html import render_template
from evalkit.reporting.run_view import build_run_view
from evalkit.store.files import write_text_atomic
from evalkit.store.reader import Run, open_run

if TYPE_CHECKING:  # the comparison, the gate's verdict and the numerics sections (gate, scipy) load when used
    from evalkit.gating import GateResult, RunInputs
    from evalkit.reporting.verdict_view import Verdict

__all__ = [
    "Flips",
    "Run",
    "Verdict",
    "compute_flips",
    "open_run",
    "pareto_front",
    "render_compare",
    "render_compare_html",
    "render_run",
    "render_run_html",
    "write_gate_compare",
]


def __getattr__(name: str) -> Any:
    if name == "Verdict":
        from evalkit.reporting.verdict_view import Verdict

        return Verdict
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _numerics_css() -> str:
    from evalkit.reporting.numerics_view import numerics_css

    return numerics_css()


def render_run_html(run_dir: Path, rest_run: Path | None = None) -> str:
    """The single-run report of ``run_dir`` as an HTML string; ``rest_run``: a run of its probe tasks at rest,
    whose accuracy the probe section shows beside the accuracy under load (reporting/probe_view.py)."""
    run = open_run(Path(run_dir))
    view = build_run_view(run, None if rest_run is None else Path(rest_run))
    return render_template("run.html.j2", _numerics_css() if view.numerics else "", v=view)


def render_run(run_dir: Path, out: Path | None = None, rest_run: Path | None = None) -> Path:
    """Write the single-run report of ``run_dir`` to ``out`` (default ``run_dir/"report.html"``), its probes
    beside ``rest_run``'s accuracy when given."""
    run_dir = Path(run_dir)
    target = Path(out) if out is not None else run_dir / "report.html"
    write_text_atomic(target, render_run_html(run_dir, rest_run))
    return target


def render_compare_html(
    run_dirs: list[Path],
    pair: tuple[int, int] | None = None,
    verdict: Verdict | None = None,
    charts: list[dict[str, Any]] | None = None,
    n_baseline: int | None = None,
) -> str:
    """The comparison report of ``run_dirs`` as an HTML string; ``pair`` picks the two runs whose per-request
    flips are listed (indices into ``run_dirs``; default the first two). ``charts``: extra line charts (ids
    ``sweep-*``) drawn above the tasks, e.g. a sweep's speed against concurrency.

    A decision page, opening with the release gate's decision: two runs (the default policy's verdict unless
    ``verdict`` is given), or the first ``n_baseline`` runs as the baseline and the rest as the candidate (the
    gate's ``verdict``); with several runs a side, flips and charts compare the sides."""
    from evalkit.gating.gate_runs import side_label
    from evalkit.reporting.compare_view import build_compare_view
    from evalkit.reporting.sides import Sides
    from evalkit.reporting.verdict_view import build_verdict_view, decision, gate_verdict

    if not run_dirs:
        raise ValueError("render_compare needs at least one run directory")
    n = len(run_dirs)
    if pair is not None:
        a, b = pair
        if not (0 <= a < n and 0 <= b < n) or a == b:
            raise ValueError(f"pair {pair!r} must be two different indices into the {n} run directories")
    if n_baseline is not None and not 0 < n_baseline < n:
        raise ValueError(f"n_baseline {n_baseline} must leave a run on either side of the {n} run directories")
    dirs = [Path(d) for d in run_dirs]
    k = n_baseline if n_baseline is not None else (1 if n == 2 else None)
    sides = None
    if k is not None:
        names = (side_label(dirs[:k], dirs[k:]), side_label(dirs[k:], dirs[:k]))
        sides = Sides(names, (list(range(k)), list(range(k, n))))
    chosen = set(range(n)) if sides is not None and sides.pooled else set(pair if pair is not None else (0, 1))
    runs: list[Run] = [open_run(d, with_samples=i in chosen) for i, d in enumerate(dirs)]
    view = build_compare_view(runs, pair, sides)
    if verdict is None and n == 2:
        verdict = gate_verdict(dirs[0], dirs[1])
    view.verdict = build_verdict_view(verdict) if verdict is not None else None
    if view.verdict is not None and sides is not None:
        view.decision = decision(view.verdict, *sides.names)
        view.title = f"Release gate: {view.decision.candidate} vs {view.decision.baseline}"
    view.charts += charts or []
    view.chart_ids |= {c["id"] for c in charts or []}
    return render_template("compare.html.j2", _numerics_css() if view.numerics else "", v=view)


def write_gate_compare(
    baselines: list[Path],
    candidates: list[Path],
    out: Path,
    result: GateResult,
    baseline: RunInputs,
    candidate: RunInputs,
) -> Path:
    """The gate's compare.html: the comparison of the runs gated (baseline runs, then candidate runs), opening
    with the gate's own decision (what :func:`evalkit.gating.gate_runs.run_gate` takes as ``write_compare``)."""
    from evalkit.reporting.verdict_view import Verdict

    verdict = Verdict(result, baseline, candidate)
    return render_compare([*baselines, *candidates], out, verdict=verdict, n_baseline=len(baselines))


def render_compare(
    run_dirs: list[Path],
    out: Path,
    pair: tuple[int, int] | None = None,
    verdict: Verdict | None = None,
    charts: list[dict[str, Any]] | None = None,
    n_baseline: int | None = None,
) -> Path:
    """Write the comparison report of ``run_dirs`` to ``out`` (a decision page for two runs, or for ``n_baseline``
    baseline runs and the rest candidates: :func:`render_compare_html`)."""
    write_text_atomic(Path(out), render_compare_html(list(run_dirs), pair, verdict, charts, n_baseline))
    return Path(out)
