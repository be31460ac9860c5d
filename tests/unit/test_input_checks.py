"""Input and environment checks: non-finite numbers, out-of-range seeds, GPU counts and prices are bad input (one
line, exit 2); a mistyped EVALKIT_* variable, an unwritable prompt cache and a descriptor limit too small for the
concurrency are each said in one line; a prompt cache that does not hold every document is rebuilt; ``evalkit
report -o`` takes a folder and refuses an unwritable place in one line; a client out of file descriptors is not a
server failure.

Here: those of its tests that run in-process; the others are in tests/integration/test_input_checks.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_bad_input import assert_one_error_line, invoke
from tests.report_fixtures import build_minimal_run


# ---------------------------------------------------------------------------------------------- report
def test_report_into_a_folder_writes_the_usual_name_there(tmp_path: Path) -> None:
    run_a, run_b = build_minimal_run(tmp_path / "a"), build_minimal_run(tmp_path / "b")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    single = invoke(["report", str(run_a), "-o", str(out_dir)])
    assert single.code == 0, single.stderr
    assert single.stdout.strip() == str(out_dir / "report.html") and (out_dir / "report.html").stat().st_size
    both = invoke(["report", str(run_a), str(run_b), "-o", str(out_dir)])
    assert both.code == 0, both.stderr
    assert both.stdout.strip() == str(out_dir / "compare.html") and (out_dir / "compare.html").stat().st_size


@pytest.mark.parametrize("runs", [1, 2], ids=["report", "compare"])
def test_report_to_an_unwritable_place_is_one_line(runs: int, tmp_path: Path) -> None:
    dirs = [str(build_minimal_run(tmp_path / f"r{i}")) for i in range(runs)]
    (tmp_path / "file").write_text("not a folder")
    target = tmp_path / "file" / "x.html"
    out = invoke(["report", *dirs, "-o", str(target)])
    assert_one_error_line(out, f"cannot write the report to {target}", str(tmp_path / "file"), "pass -o")
