"""Sweeps: one evaluation per combination of server config, sampling settings and concurrency level.

:func:`load_spec` reads the sweep file (:mod:`evalkit.sweep.spec`), :func:`plan` lists the combinations
(:mod:`evalkit.sweep.plan`) and :func:`run_sweep` runs them into ``DIR/runs/<name>/`` and writes ``sweep.csv``,
``sweep.md`` and ``compare.html`` (:mod:`evalkit.sweep.run`).
"""

from evalkit.sweep.plan import Combination, plan
from evalkit.sweep.run import SweepResult, run_sweep
from evalkit.sweep.spec import SweepSpec, load_spec

__all__ = ["Combination", "SweepResult", "SweepSpec", "load_spec", "plan", "run_sweep"]
