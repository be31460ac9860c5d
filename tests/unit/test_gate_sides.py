"""Which run is on which side of the gate: one run given twice on a side (the same directory under another
spelling, or a ``cp -r`` copy) is refused instead of counted as two runs, and run dirs given without a side
beside -b/-c are refused as ambiguous instead of put on the candidate's side (issue 44, items 4 and 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from tests.report_fixtures import build_gsm8k_run


def gate(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["gate", *map(str, args)])
    print(res.output)
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sides")
    return {
        name: build_gsm8k_run(root / name, n=200, seed=seed, speed=speed)
        for name, seed, speed in (("A1", 0, 1.0), ("A2", 1, 1.0), ("B1", 2, 0.82), ("B2", 3, 0.82))
    }


def test_one_run_given_twice_on_a_side_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    a, b = runs["A1"], runs["B1"]
    out = tmp_path / "g"
    code, text = gate("-b", a, "-b", f"{a}/", "-c", b, "-c", f"{b}/", "-o", out)  # the form
    assert code == 2 and "cannot decide: the same baseline run is given twice" in text
    assert "pass each baseline run once" in text
    code, text = gate("-b", a, "-b", runs["A2"], "-c", b, "-c", f"{b}/../{b.name}", "-o", out)
    assert code == 2 and f"cannot decide: the same candidate run is given twice ({b}, {b}/../{b.name})" in text
    assert not out.exists()  # nothing judged, nothing written
    copy = Path(shutil.copytree(b, tmp_path / "B1-copy"))
    code, text = gate("-b", a, "-b", runs["A2"], "-c", b, "-c", copy, "-o", out)
    assert code == 2 and f"cannot decide: the same candidate run is given twice ({b}, {copy})" in text
    assert not out.exists()


def test_two_distinct_runs_a_side_are_judged(runs: dict[str, Path], tmp_path: Path) -> None:
    code, text = gate("-b", runs["A1"], "-b", runs["A2"], "-c", runs["B1"], "-c", runs["B2"], "-o", tmp_path / "g")
    assert code in (0, 1), text
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert data["baseline"] == "A1 + A2" and data["candidate"] == "B1 + B2"


@pytest.mark.parametrize(
    "args",
    [
        ("{A1}", "-b", "{A2}", "-c", "{B1}", "-c", "{B2}"),  # the form: A1 was put on the candidate's side
        ("{A1}", "{B1}", "-b", "{A2}"),
        ("{A1}", "{B1}", "-c", "{B2}"),
        ("{B1}", "-c", "{B2}"),
    ],
)
def test_run_dirs_without_a_side_beside_b_or_c_are_refused(
    runs: dict[str, Path], tmp_path: Path, args: tuple[str, ...]
) -> None:
    code, text = gate(*(a.format(**runs) for a in args), "-o", tmp_path / "g")
    lines = [line for line in text.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, text
    assert "without a side" in text and "is ambiguous" in text and "-b BASELINE ... -c CANDIDATE ..." in text
    assert not (tmp_path / "g").exists()


def test_a_candidate_alone_beside_b_is_the_candidate(runs: dict[str, Path], tmp_path: Path) -> None:
    code, text = gate(runs["B1"], "-b", runs["A1"], "-b", runs["A2"], "-o", tmp_path / "g")
    assert code in (0, 1), text
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert data["baseline"] == "A1 + A2" and data["candidate"] == "B1"
