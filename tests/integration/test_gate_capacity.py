"""``evalkit gate BASE CAND`` on two capacity dirs: ``speed.max_capacity_drop`` judges the candidate's capacity
by the two searches' brackets (docs/gate.md#capacity): fail when the candidate's high is below the baseline's
low less the allowed drop, pass when its low reaches the baseline's high less the drop, cannot decide (exit 2)
in between, and when the SLOs, SLO share, search kind or workload differ. gate.json / gate.md / junit.xml show
the rule. Synthetic capacity dirs (written with write_capacity), and one pair of real searches on the test
server at two --max-num-seqs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.contracts import CapacityPoint, CapacityRecord, LoadFigures
from evalkit.contracts.capacity import CapacityDecision, ServerIdentity
from evalkit.store.capacity_dir import write_capacity
from evalkit.testing.server import SubprocessServer


def _figures(offered: float, holds: bool) -> dict[str, Any]:
    good = 100 if holds else 80
    return {"offered": offered, "requests": 100, "good_requests": good, "goodput_share": good / 100, "holds": holds}


def write_search(path: Path, bracket: list[float | None], **over: Any) -> Path:
    """A capacity dir whose search bracketed its capacity in ``bracket``, its boundary levels measured twice."""
    low, high = bracket
    levels = [(x, ok) for x, ok in ((low, True), (high, False)) if x is not None]
    points = [
        CapacityPoint(**_figures(x, ok), run_dir=f"point-{i}-{r}", repeat=r, step="repeat" if r else "bisect")
        for i, (x, ok) in enumerate(levels)
        for r in (0, 1)
    ]
    fields: dict[str, Any] = {
        "status": "ok", "search": "rate", "slos": {"ttft": 150.0}, "slo_share": 0.99, "tolerance": 0.05,
        "start": 1.0, "capacity_rps": low, "bracket": bracket, "points": points,
        "curve": [LoadFigures(**_figures(x, ok)) for x, ok in levels],
        "decision": CapacityDecision(rule="synthetic", bracket_steps=2, bisect_steps=2, repeats=2, points=4),
        "tasks": ["random"], "workload": {"seed": 0}, "server": ServerIdentity(endpoint="http://x"),
        "created_at": "2026-12-06T00:00:00Z", "evalkit_version": "test",
    }  # fmt: skip
    path.mkdir(parents=True)
    write_capacity(path, CapacityRecord(**{**fields, **over}))
    return path


def gate(tmp_path: Path, base: Path, cand: Path, policy: dict[str, Any] | None = None) -> tuple[int, str, dict]:
    args = ["gate", str(base), str(cand), "-o", str(tmp_path / "out")]
    if policy is not None:
        (tmp_path / "policy.yaml").write_text(json.dumps(policy))
        args += ["--policy", str(tmp_path / "policy.yaml")]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    gate_json = tmp_path / "out" / "gate.json"
    return res.exit_code, res.stdout + res.stderr, json.loads(gate_json.read_text()) if gate_json.exists() else {}


def test_a_candidate_bracket_below_the_baselines_less_the_drop_fails(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [7.0, 7.4])  # 7.4 < 10 × 0.9
    code, out, result = gate(tmp_path, base, cand)
    assert code == 1, out
    (rule,) = result["rules"]
    assert rule["name"] == "random: capacity change" and rule["verdict"] == "fail"
    assert rule["budget"] == pytest.approx(0.10) and rule["method"] == "brackets"
    assert rule["ci"] == pytest.approx([7.0 / 10.5 - 1, 7.4 / 10.0 - 1])
    assert "7.4 is below the baseline's low 10 × (1 − 10%) = 9" in rule["note"]
    assert "2 measurements, 100.0% within the SLOs" in rule["note"]  # the repeated boundary points
    assert "capacity: lower by more than 10% (speed.max_capacity_drop)" in out and "accuracy:" not in out
    md = (tmp_path / "out" / "gate.md").read_text()
    assert "capacity change" in md and "fail" in md and "brackets allow [-33.3%, -26.0%]" in md
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "capacity change" in junit and "<failure" in junit


def test_a_candidate_bracket_within_the_drop_passes(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [9.5, 10.0])  # 9.5 >= 10.5 × 0.9
    code, out, result = gate(tmp_path, base, cand)
    assert code == 0, out
    assert result["verdict"] == "pass" and result["rules"][0]["verdict"] == "pass"


def test_the_policys_drop_decides_and_overlap_cannot_decide(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [9.5, 10.0])
    code, out, result = gate(tmp_path, base, cand, {"speed": {"max_capacity_drop": 0.0}})
    assert code == 2, out  # 9.5 < 10.5 (no pass) and 10 >= 10 (no fail): the brackets cannot tell
    assert result["verdict"] == "cannot_decide" and result["rules"][0]["verdict"] == "skip"
    assert "the brackets overlap the allowed drop of 0%" in result["reasons"][0]
    assert "cannot decide" in out


def test_a_baseline_where_no_load_failed_cannot_pass(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, None], status="max_duration")
    cand = write_search(tmp_path / "cand", [20.0, 21.0])
    assert gate(tmp_path, base, cand)[0] == 2
    cand_below = write_search(tmp_path / "below", [None, 1.0], status="below_start", capacity_rps=None)
    code, _, result = gate(tmp_path, base, cand_below)
    assert code == 1 and "below the start" in result["rules"][0]["note"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"slos": {"ttft": 200.0}}, "the SLOs differ (baseline ttft ≤ 150 ms; candidate ttft ≤ 200 ms)"),
        ({"slo_share": 0.95}, "the SLO share differs (baseline 0.99; candidate 0.95)"),
        ({"search": "concurrency"}, "the search kind differs (baseline rate; candidate concurrency)"),
        ({"workload": {"seed": 1}}, "the workload settings differ (seed: 0 vs 1)"),
        ({"tasks": ["gsm8k"]}, "the tasks differ (baseline random; candidate gsm8k)"),
    ],
)
def test_searches_under_other_settings_cannot_be_decided(tmp_path: Path, change: dict, named: str) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [5.0, 5.2], **change)  # would fail, were they comparable
    code, out, result = gate(tmp_path, base, cand)
    assert code == 2, out
    assert named in result["reasons"][0]


def test_a_capacity_dir_beside_a_run_dir_is_one_line(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    (tmp_path / "run").mkdir()
    code, out, _ = gate(tmp_path, base, tmp_path / "run")
    assert code == 2 and "compares two run dirs or two capacity dirs" in out


def test_a_bad_max_capacity_drop_is_refused(tmp_path: Path) -> None:
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [9.5, 10.0])
    code, out, _ = gate(tmp_path, base, cand, {"speed": {"max_capacity_drop": 1.5}})
    assert code == 2 and "max_capacity_drop" in out and "less than 1" in out, out


def _search(url: str, out: Path, start: float) -> None:
    args = ["capacity", "random", "--endpoint", url, "--random-input-len", "20", "--random-output-len", "2"]
    args += ["--goodput", "ttft:250", "--point-duration", "1s", "--start-rate", f"{start:g}"]
    args += ["--tolerance", "0.25"]  # a coarse bracket decides a fourfold difference
    args += ["-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stdout + res.stderr


def test_real_searches_on_the_test_server_fail_a_quarter_of_the_seats(tmp_path: Path) -> None:
    """Four sequences in flight carry about four times what one carries at 50 ms each (a 250 ms TTFT SLO, five
    services: loose enough for a shared machine's jitter; 1 s points of 16 to 100 requests): the gate fails the
    one."""
    runs = {}
    for seqs, start in ((4, 16.0), (1, 4.0)):
        with SubprocessServer("--max-num-seqs", str(seqs), "--ttft", "0.05") as server:
            _search(server.url, tmp_path / f"seqs{seqs}", start)
        runs[seqs] = tmp_path / f"seqs{seqs}"
    code, out, result = gate(tmp_path, runs[4], runs[1])
    assert code == 1, out
    assert result["rules"][0]["verdict"] == "fail"


def test_a_search_that_measured_nothing_cannot_be_decided(tmp_path: Path) -> None:
    """A candidate whose every point failed (no load could be judged) is not compared: exit 2 with the reason."""
    base = write_search(tmp_path / "base", [10.0, 10.5])
    cand = write_search(tmp_path / "cand", [None, None], status="cannot_decide", reason="every point failed")
    code, out, result = gate(tmp_path, base, cand)
    assert code == 2, out
    assert result["verdict"] == "cannot_decide" and result["reasons"], result
