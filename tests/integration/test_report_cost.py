"""What writing a run report costs: the sample block is compressed once for both of its candidate forms (with and
without the few-shot examples) and comes out byte-identical to compressing the chosen form alone; a run report
of a run without teacher-forced positions loads neither the gate nor scipy.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_report_cost.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import report_fixtures as rf

REPO = Path(__file__).resolve().parents[2]


def test_a_run_report_loads_neither_the_gate_nor_scipy(tmp_path: Path) -> None:
    """Writing the report of a run without positions.bin imports no gate module and no scipy (their imports
    are most of the command's time); the comparison still has them."""
    run = rf.build_gsm8k_run(tmp_path / "run", n=40)
    code = (
        "import sys, json; from pathlib import Path; from evalkit.reporting import render_run; "
        f"render_run(Path({str(run)!r}), Path({str(tmp_path / 'r.html')!r})); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('scipy', 'evalkit.gating')))))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=REPO)
    assert json.loads(out.stdout) == []
    assert (tmp_path / "r.html").stat().st_size > 0
