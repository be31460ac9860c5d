"""The run history (evalkit/history): its schema against its migrations, `evalkit history add|list|show|export`
on the example runs, the gate recording its verdicts and taking a baseline from the history (both on SQLite and
on PostgreSQL), and the history never failing a command (a write that fails is one warning with the URL's
password redacted).

Here: those of its tests that need a real outside program (PostgreSQL, a browser, docker's tools, Prometheus); the
others are in tests/unit/test_history.py."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.history_fixtures import db_url, forget, sqlite_url  # noqa: F401  (db_url: the fixture)
from tests.report_fixtures import build_gsm8k_run
from tests.unit.test_history import DATA, LENIENT, cli

H200 = DATA / "h200-smollm2-135m-2026-12-02"


def test_add_list_show_export_of_the_example_runs(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    url = db_url
    runs = [DATA / "cpu-vllm-gsm8k", *sorted(H200.iterdir())]
    code, out = cli(url, "history", "add", *runs)
    assert code == 0 and len(out.strip().splitlines()) == 4
    code, out = cli(url, "history", "list")
    lines = out.strip().splitlines()
    assert code == 0 and lines[0].split()[:3] == ["id", "created", "(UTC)"] and len(lines) == 5
    assert "2026-12-03 08:14" in lines[1] and "0.32.0" in lines[1]  # newest first, its vLLM version
    # each row names its run dir and kind, under a header whose columns line up with the rows'
    assert lines[0].split()[3:6] == ["run", "dir", "kind"]
    assert lines[1].split()[3:5] == ["cpu-vllm-gsm8k", "run"]
    assert lines[1].index("cpu-vllm-gsm8k") == lines[0].index("run dir")
    code, out = cli(url, "history", "list", "--task", "aime25")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "aime25" in out
    code, out = cli(url, "history", "list", "--since", "2026-12-03")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "0.32.0" in out
    code, out = cli(url, "history", "list", "--since", "last week")
    assert code == 2 and "--since 'last week'" in out and len(out.strip().splitlines()) == 1

    seqs64 = H200 / "gsm8k-max-num-seqs-64"
    code, out = cli(url, "history", "show", seqs64)
    assert code == 0, out
    assert "exact_match,strict-match: 0.0129 [0.0068, 0.0190] (n 1319)" in out  # the metric with its CI
    assert "--max-num-seqs 64" in out and "vLLM 0.26.0" in out and "ttft_p99_ms 1819" in out
    (speed,) = [line for line in out.splitlines() if line.strip().startswith("speed:")]
    assert "e+" not in speed and re.search(r" e2e_p99_ms \d{4,}(,|$)", speed), speed  # 10714, not 1.071e+04
    first_id = out.split(":")[0].split()[-1]
    code, out = cli(url, "history", "add", "--config", "seqs64", seqs64)  # recorded again: same row, named
    assert code == 0 and out.startswith(f"run {first_id}:") and "config seqs64" in out
    code, out = cli(url, "history", "list", "--config", "seqs64")
    assert code == 0 and len(out.strip().splitlines()) == 2

    code, out = cli(url, "history", "export", "-o", tmp_path / "h.csv")
    assert code == 0, out
    rows = list(csv.DictReader((tmp_path / "h.csv").open()))
    strict = [r for r in rows if r["config"] == "seqs64" and r["name"] == "exact_match,strict-match"]
    assert (
        len(strict) == 1
        and strict[0]["kind"] == "metric"
        and float(strict[0]["ci_low"]) == pytest.approx(0.0068, abs=1e-4)
    )
    assert {r["kind"] for r in rows} == {"metric", "speed"} and {r["task"] for r in rows} == {"gsm8k", "aime25"}
    pq = pytest.importorskip("pyarrow.parquet")
    code, out = cli(url, "history", "export", "-o", tmp_path / "h.parquet", "--task", "aime25")
    assert code == 0, out
    table = pq.read_table(tmp_path / "h.parquet")
    assert set(table.column("task").to_pylist()) == {"aime25"} and out.strip().endswith(f"({table.num_rows} rows)")
    with pytest.MonkeyPatch.context() as mp:  # without pyarrow: CSV only, and evalkit says so
        mp.setitem(sys.modules, "pyarrow", None)
        code, out = cli(url, "history", "export", "-o", tmp_path / "h2.parquet")
    assert code == 2 and "needs pyarrow, which is not installed" in out and not (tmp_path / "h2.parquet").exists()
    code, out = cli(url, "history", "export", "-o", tmp_path / "h.txt")
    assert code == 2 and "--format csv or --format parquet" in out
    code, out = cli(url, "history", "show", "999")
    assert code == 2 and "no run '999'" in out
    code, out = cli(url, "history", "add", tmp_path)
    assert code == 2 and "is not a run dir" in out
    forget(url)


def test_gate_verdicts_are_recorded_and_a_baseline_comes_from_the_history(db_url: str, tmp_path: Path) -> None:  # noqa: F811 (the fixture imported above)
    url = db_url
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT)
    base = build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78)
    nightly1 = build_gsm8k_run(tmp_path / "nightly1", seed=1, accuracy=0.78)
    nightly2 = build_gsm8k_run(tmp_path / "nightly2", seed=2, accuracy=0.70)  # a real drop
    code, _ = cli(url, "history", "add", "--config", "nightly", nightly1, nightly2)
    assert code == 0
    code, out = cli(url, "gate", base, nightly1, "--policy", policy, "-o", tmp_path / "g1")
    assert code == 0, out
    code, out = cli(url, "history", "list", "--verdict", "pass")
    assert code == 0 and len(out.strip().splitlines()) == 2 and "nightly" in out and out.rstrip().endswith("pass")
    code, out = cli(url, "history", "show", nightly1)
    assert code == 0 and "as candidate: pass" in out

    # the newest passing nightly is the baseline: the drop of nightly2 against it fails
    ref = "history:latest-pass?config=nightly"
    code, out = cli(url, "gate", "--baseline", ref, nightly2, "--policy", policy, "-o", tmp_path / "g2")
    assert code == 1, out
    gate = json.loads((tmp_path / "g2" / "gate.json").read_text())
    assert gate["baseline"] == "nightly1" and gate["candidate"] == "nightly2" and gate["verdict"] == "fail"
    code, out = cli(url, "history", "show", nightly2)
    assert "as candidate: fail; failed: gsm8k: exact_match" in out
    code, out = cli(url, ref.replace("latest-pass", "latest"))  # not a command: a bad first argument
    assert code == 2

    # bad or unmatched history baselines: one line each, naming the fix
    for bad, why in [
        ("history:newest?config=nightly", "write history:latest-pass?config=NAME"),
        ("history:latest-pass?config=nope", "no gate passed a candidate run of config=nope"),
        ("history:latest-pass?cfg=nightly", "(filters: config, model, task)"),
    ]:
        code, out = cli(url, "gate", "--baseline", bad, nightly2, "-o", tmp_path / "g3")
        assert code == 2 and why in out and len(out.strip().splitlines()) == 1, out
    shutil.rmtree(nightly1)
    code, out = cli(url, "gate", "--baseline", ref, nightly2, "-o", tmp_path / "g3")
    assert code == 2 and "is gone" in out
    forget(url)
