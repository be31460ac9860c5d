"""Sweeps: one evaluation per combination of server config, sampling settings and concurrency level.

:func:`load_spec` reads the sweep file (:mod:`evalkit.sweep.sweep_file`), :func:`plan` lists the combinations
(:mod:`evalkit.sweep.combinations`) and :func:`run_sweep` runs them into ``DIR/runs/<name>/`` and writes ``sweep.csv``,
``sweep.md`` and ``compare.html`` (:mod:`evalkit.sweep.combination_runs`).
"""

from evalkit.sweep.combination_runs import SweepResult, run_sweep
from evalkit.sweep.combinations import Combination, plan
from evalkit.sweep.sweep_file import SweepSpec, load_spec

__all__ = ["Combination", "SweepResult", "SweepSpec", "load_spec", "plan", "run_sweep"]
