"""What ``evalkit report`` does, as one library call (:func:`write_report`, also ``evalkit.report(...)``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evalkit.errors import EvalkitError
from evalkit.reporting import render_compare, render_run


def write_report(
    run_dirs: str | Path | Sequence[str | Path], output: str | Path | None = None, rest_run: str | Path | None = None
) -> Path:
    """Render the report of one run dir (``report.html``, default inside it) or the comparison of several
    (``compare.html``, default in the current folder) from the store alone, and return the file written.

    ``rest_run``: a run of the probe tasks at rest, for one probed load run: its probe section shows each probe's
    accuracy at rest beside that under load, with the paired difference (reporting/probe_view.py).

    ``output`` names the HTML file, or a folder to write ``report.html`` / ``compare.html`` into. A folder that
    is not a run dir, or a place that cannot be written, raises :class:`~evalkit.errors.EvalkitError` (one line).

    Example::

        write_report("reports/run1")                                  # reports/run1/report.html
        write_report(["reports/base", "reports/cand"], "compare.html")
    """
    dirs = [Path(run_dirs)] if isinstance(run_dirs, str | Path) else [Path(d) for d in run_dirs]
    if not dirs:
        raise EvalkitError("no run dir given; pass the folder of a run (its --output-dir)")
    for d in dirs:
        if not (d / "summary.json").exists() and not (d / "samples.jsonl").exists():
            raise EvalkitError(f"{d} is not a run dir (no summary.json or samples.jsonl); pass the folder of a run")
    single = len(dirs) == 1
    if rest_run is not None and not single:
        raise EvalkitError("--rest-run goes with one load run: evalkit report LOADED_RUN --rest-run REST_RUN")
    name = "report.html" if single else "compare.html"
    out = Path(output) if output is not None else None
    target = out / name if out is not None and out.is_dir() else out
    try:
        return (
            render_run(dirs[0], target, None if rest_run is None else Path(rest_run))
            if single
            else render_compare(dirs, target or Path(name))
        )
    except OSError as e:
        where = target or dirs[0] / name
        blocked = e.filename is not None and Path(e.filename) in Path(where).parents  # a folder on the way
        why = f"{e.strerror}: {e.filename}" if blocked else e.strerror or e
        raise EvalkitError(f"cannot write the report to {where} ({why}); pass -o a writable file path") from None
