"""The sweep table's numerics columns: for a task whose runs hold teacher-forced positions (the ``numerics``
task), each combination's divergence from the first combination with a finished run (the reference), by the
gate's figures (:mod:`evalkit.scoring.numerics`): ``<task> <figure> vs first`` (top1, mean_kl, p99_kl,
mean_abs_dlp), and each run's own noise floor (its main pass against its noise-floor pass) in ``<task> <figure>
floor``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.gating.inputs import NumericsInputs
from evalkit.gating.load import from_run_dir
from evalkit.scoring.numerics import FIGURES, TokenMismatch, compare_runs, noise_floor
from evalkit.store.positions_file import POSITIONS


def _numerics(run_dir: Path, task: str) -> NumericsInputs | None:
    if not (run_dir / POSITIONS).is_file():
        return None
    try:
        t = from_run_dir(run_dir).tasks.get(task)
    except EvalkitError:  # a run the gate refuses: its row's other cells say what they can
        return None
    return t.numerics if t is not None else None


def add_numerics_columns(rows: list[tuple[dict[str, Any], Path]], tasks: list[str]) -> None:
    """Add each numerics task's columns to the rows (row, run dir) of finished runs, in the plan's order."""
    for task in tasks:
        held = [(row, n) for row, d in rows if (n := _numerics(d, task)) is not None]
        if not held:
            continue
        ref = held[0][1]
        for row, n in held:
            try:
                floor = noise_floor(n.main, n.again)
                pair = compare_runs(ref.main, n.main) if ref.main.keys() & n.main.keys() else None
            except TokenMismatch as e:
                row[f"{task} vs first"] = f"not compared: {e}"
                continue
            for f in FIGURES:
                row[f"{task} {f} vs first"] = pair.figures[f].value if pair is not None else None
                row[f"{task} {f} floor"] = floor.figures[f].value if floor is not None else None
