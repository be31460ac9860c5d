"""``evalkit gate`` (exit codes, outputs, the printed policy), the verdict section of the comparison report, and
the batch-invariant server option the gate notes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.reporting import render_compare
from evalkit.reporting.compare_view import run_config
from evalkit.store.reader import open_run
from tests.report_fixtures import build_gsm8k_run

LENIENT = "rates:\n  max_error_rate: 0.01\nbootstrap:\n  resamples: 500\n"  # the fixtures hold 5 api errors


def gate(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["gate", *map(str, args)], env=env)
    print(res.output)  # shows with pytest -s
    return res.exit_code, res.output


def _edit_manifest(run_dir: Path, edit) -> None:  # type: ignore[no-untyped-def]
    manifest = orjson.loads((run_dir / "manifest.json").read_bytes())
    edit(manifest)
    (run_dir / "manifest.json").write_bytes(orjson.dumps(manifest))


def test_caught_drop_exits_1_and_writes_every_output(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78)
    cand = build_gsm8k_run(tmp_path / "cand", seed=1, accuracy=0.70)
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    code, out = gate(base, cand, env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert code == 1
    assert "policy: default (no --policy file)" in out and "a drop of more than 1 pts" in out  # printed
    assert "gsm8k: exact_match,strict-match" in out and "FAIL" in out
    out_dir = cand / "gate"  # the default: beside the candidate
    data = json.loads((out_dir / "gate.json").read_text())
    assert data["verdict"] == "fail" and data["baseline"] == "base" and data["candidate"] == "cand"
    # batch-invariant mode matters to numerics; on a GSM8K gate of two runs alike in it there is no note (issue 49)
    assert not any(n.startswith("VLLM_BATCH_INVARIANT") for n in data["notes"])
    assert "numerics:" not in out
    suite = ET.parse(out_dir / "junit.xml").getroot()
    assert int(suite.get("failures") or 0) >= 1
    md = (out_dir / "gate.md").read_text()
    assert md.startswith("## evalkit gate: ❌ fail")
    assert summary.read_text() == "earlier step\n" + md + "\n"  # appended, not overwritten
    html = (out_dir / "compare.html").read_text()
    assert 'id="verdict"' in html and 'Verdict: <span class="verdict-fail">FAIL' in html
    assert "samples worse" in html  # the flips that drive the accuracy rule


def test_noise_only_pair_passes(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78)
    cand = build_gsm8k_run(tmp_path / "cand", seed=1, accuracy=0.78, speed=1.02)  # same true accuracy, new draw
    policy = tmp_path / "gate.yaml"
    policy.write_text(LENIENT)
    code, out = gate(base, cand, "--policy", policy, "-o", tmp_path / "out")
    assert code == 0, out
    assert f"policy: {policy}" in out and "PASS" in out
    assert json.loads((tmp_path / "out" / "gate.json").read_text())["verdict"] == "pass"
    assert not (cand / "gate").exists()  # -o was honoured


def test_runs_that_cannot_be_compared_exit_2_in_one_line(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", n=200, seed=0)
    cand = build_gsm8k_run(tmp_path / "cand", n=200, seed=1)
    _edit_manifest(cand, lambda m: m["tasks"]["gsm8k"]["data_sha256"].update(test="c" * 64))
    code, out = gate(base, cand)
    assert code == 2
    lines = out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("evalkit: error: cannot compare: gsm8k")
    assert "data sha256 of test differs" in lines[0] and lines[0].endswith("pass --force to compare anyway")
    assert not (cand / "gate").exists()  # nothing written
    code, out = gate(base, cand, "--force")
    assert code in (0, 1) and "compared despite data sha256 of test differs (forced)" in out


def test_expected_scores_without_a_baseline(tmp_path: Path) -> None:
    cand = build_gsm8k_run(tmp_path / "cand", seed=0, accuracy=0.78)
    policy = tmp_path / "p.yaml"
    policy.write_text(
        LENIENT + "expected:\n  - {task: gsm8k, metric: 'exact_match,strict-match', value: 0.95, max_drop: 0.01}\n"
    )
    code, out = gate(cand, "--policy", policy)
    assert code == 1 and "expected: gsm8k exact_match,strict-match >= 0.95" in out
    assert json.loads((cand / "gate" / "gate.json").read_text())["baseline"] is None
    policy.write_text(LENIENT)
    code, out = gate(cand, "--policy", policy)
    assert code == 2 and "lists no expected scores" in out
    code, out = gate(cand, cand, cand)
    assert code == 2 and "BASELINE CANDIDATE or CANDIDATE alone" in out


def test_bad_policy_and_missing_run_exit_2(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", n=50, seed=0)
    policy = tmp_path / "p.yaml"
    policy.write_text("acuracy: {}\n")
    code, out = gate(base, base, "--policy", policy)
    assert code == 2 and "acuracy" in out
    code, out = gate(base, tmp_path / "nope")
    assert code == 2 and "not a run directory" in out


def test_report_of_two_runs_carries_the_verdict(tmp_path: Path) -> None:
    base = build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78)
    cand = build_gsm8k_run(tmp_path / "cand", seed=1, accuracy=0.70)
    res = CliRunner().invoke(app, ["report", str(base), str(cand), "-o", str(tmp_path / "c.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "c.html").read_text()
    assert 'id="verdict"' in html and "verdict-fail" in html and "McNemar" in html
    third = build_gsm8k_run(tmp_path / "third", seed=2)
    assert 'id="verdict"' not in render_compare([base, cand, third], tmp_path / "3.html").read_text()
    _edit_manifest(cand, lambda m: m["tasks"]["gsm8k"].update(version=4))
    html = render_compare([base, cand], tmp_path / "refused.html").read_text()
    assert "Verdict: not compared" in html and "task version 3 vs 4" in html


def test_config_diff_ignores_the_port_of_a_server_evalkit_started(tmp_path: Path) -> None:
    runs = []
    for name, port in (("a", "40001"), ("b", "40002")):
        argv = ["vllm", "serve", "m", "--host", "127.0.0.1", "--port", port, "--max-num-seqs", "8"]
        d = build_gsm8k_run(tmp_path / name, n=20, server_argv=argv)
        _edit_manifest(d, lambda m, p=port: m["endpoint"].update(base_url=f"http://127.0.0.1:{p}/v1"))
        runs.append(run_config(open_run(d, with_samples=False)))
    assert runs[0] == runs[1]  # only the port differed
    assert "--port" not in runs[0] and runs[0]["endpoint"] == "completions"
    external = build_gsm8k_run(tmp_path / "ext", n=20)
    _edit_manifest(external, lambda m: m.update(server=None))
    assert run_config(open_run(external, with_samples=False))["endpoint"] == "completions http://gpu-box:8000/v1"
