"""Numerics figures of run pairs, as the gate computes them, and how many texts separate each pair at 95% power.

For each ``BASE CAND`` pair of ``numerics`` (or ``numerics-chat``) run dirs: top-1 agreement, mean KL, p99 KL and
mean abs d-logprob over the texts both scored (A the reference, 90% intervals as ``evalkit gate`` uses), the
per-text spread, and :func:`~evalkit.scoring.numerics.texts_to_separate` against the baseline's own noise floor
(its noise-floor pass) and against the default budget. Also each run's scored positions and request phase, for
the time per position::

    python -m benchmarks.numerics_pairs runs/bf16-a1 runs/fp8 --pair runs/bf16-a1 runs/bf16-b [--task numerics]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from evalkit.gating.load import from_run_dir
from evalkit.gating.policy import NumericsPolicy
from evalkit.scoring.numerics import FIGURES, compare_runs, noise_floor, texts_to_separate


def pair_figures(base: Path, cand: Path, task: str) -> dict[str, object]:
    """The pair's figures, per-text ranges and texts to separate (see the module docstring)."""
    a, b = (from_run_dir(p).tasks[task].numerics for p in (base, cand))
    assert a is not None and b is not None, f"{base} or {cand} holds no numerics for {task}"
    pair = compare_runs(a.main, b.main)
    floor = noise_floor(a.main, a.again)
    budgets = NumericsPolicy()
    out: dict[str, object] = {"base": str(base), "cand": str(cand), "texts": len(pair.texts),
                              "positions": int(sum(t.positions for t in pair.texts))}  # fmt: skip
    for f in FIGURES:
        iv = pair.figures[f]
        row: dict[str, object] = {"value": iv.value, "interval": [iv.lo, iv.hi], "level": iv.level}
        if f != "p99_kl":
            v = pair.per_text(f)
            ref_floor = floor.figures[f].value if floor is not None else (1.0 if f == "top1" else 0.0)
            row["per_text"] = [float(v.min()), float(v.max())]
            row["texts_vs_floor"] = texts_to_separate(v, ref_floor)
            budget = budgets.budget(f)
            row["texts_vs_budget"] = texts_to_separate(v, budget) if budget is not None else None
        out[f] = row
    return out


def run_timing(run: Path, task: str) -> dict[str, object]:
    """A run's scored positions and request phase (seconds), from its summary."""
    s = json.loads((run / "summary.json").read_text())["tasks"][task]
    ins = from_run_dir(run).tasks[task].numerics
    positions = int(sum(len(p.token_ids) for p in ins.main.values())) if ins is not None else None
    wall = s["speed"]["wall_s"]
    return {"run": str(run), "request_phase_s": wall, "main_positions": positions,
            "ms_per_position": 1000 * wall / positions if positions else None}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("base", type=Path, nargs="?")
    ap.add_argument("cand", type=Path, nargs="?")
    ap.add_argument("--pair", nargs=2, type=Path, action="append", default=[])
    ap.add_argument("--task", default="numerics")
    a = ap.parse_args()
    pairs = ([(a.base, a.cand)] if a.base and a.cand else []) + [tuple(p) for p in a.pair]
    runs = sorted({p for pair in pairs for p in pair})
    for r in runs:
        print(json.dumps(run_timing(r, a.task)))
    for base, cand in pairs:
        print(json.dumps(pair_figures(base, cand, a.task), default=lambda x: float(np.asarray(x))))


if __name__ == "__main__":
    main()
