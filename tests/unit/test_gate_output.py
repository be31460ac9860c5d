"""The gate's outputs (gate.json, gate.md, junit.xml, the GitHub step summary) and reading run directories."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from evalkit.gating import (
    CannotCompare,
    GateInputError,
    StatusCounts,
    append_step_summary,
    evaluate,
    from_run_dir,
    policy_from_dict,
    write_outputs,
)
from tests.gate_fixtures import N_GSM8K, correctness, difficulties, metric, run, speed_records, task
from tests.report_fixtures import build_aime_run, build_gsm8k_run

FAST = policy_from_dict({"bootstrap": {"resamples": 500}})


def _failing_result():
    p = difficulties(N_GSM8K, 0.75)
    base = task({"exact_match,strict-match": metric(correctness(p, 1, seed=1))})
    cand = task(
        {"exact_match,strict-match": metric(correctness(p, 1, seed=2, scale=0.70 / 0.75))},
        speed=speed_records(seed=1, ttft_scale=1.02),
        counts=StatusCounts(total=N_GSM8K, ok=N_GSM8K - 3, api_error=3),
    )
    policy = policy_from_dict(
        {
            "rates": {"max_empty_rate": None},
            "bootstrap": {"resamples": 500},
            "speed": {"e2e_p50_ms": {"max_change": 0.1}, "min_requests": 1000},
        }
    )
    return evaluate(run("base", base), run("cand", cand), policy)


def test_gate_json_md_and_junit(tmp_path: Path) -> None:
    result = _failing_result()
    paths = write_outputs(result, tmp_path / "gate")
    data = json.loads(paths["gate.json"].read_text())
    assert data["verdict"] == "fail" and data["candidate"] == "cand" and data["baseline"] == "base"
    assert data["policy"]["accuracy"]["default"]["max_drop"] == 0.01 and data["policy"]["bootstrap"]["resamples"] == 500
    verdicts = {r["name"]: r["verdict"] for r in data["rules"]}
    assert verdicts["gsm8k: exact_match,strict-match"] == "fail" and verdicts["gsm8k: error rate"] == "fail"
    assert verdicts["gsm8k: TTFT p50"] == "skip"  # 600 requests < min_requests 1000
    accuracy = data["rules"][0]
    assert set(accuracy) >= {"observed", "budget", "p_value", "ci", "mde", "note", "decided_by"}

    md = paths["gate.md"].read_text()
    assert md.startswith("## evalkit gate: ❌ fail")
    table = [line for line in md.splitlines() if line.startswith("| gsm8k")]
    assert len(table) == len(result.rules) and all(line.count(" | ") == 6 for line in table)
    assert "| gsm8k: exact_match,strict-match | ❌ fail | -" in md and "pts (" in md

    root = ET.fromstring(paths["junit.xml"].read_bytes())
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == len(result.rules) == int(suite.get("tests", "0"))
    failed = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failed == ["gsm8k: exact_match,strict-match", "gsm8k: error rate"] and suite.get("failures") == "2"
    assert [c.get("name") for c in cases if c.find("skipped") is not None] == [
        "gsm8k: output tokens/s",
        "gsm8k: TTFT p50",
        "gsm8k: TPOT p50",
        "gsm8k: E2E latency p50",
    ]
    failure = cases[0].find("failure")
    assert failure is not None and "p=" in (failure.text or "") and failure.get("type") == "accuracy"


def test_markdown_is_appended_to_the_github_step_summary(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    assert append_step_summary("## gate\n", {"GITHUB_STEP_SUMMARY": str(summary)})
    assert summary.read_text() == "earlier step\n## gate\n\n"
    assert not append_step_summary("## gate\n", {})


def test_from_run_dir_reads_the_result_store(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "a", seed=0, concurrency=64)
    inputs = from_run_dir(run_dir)
    summary = orjson.loads((run_dir / "summary.json").read_bytes())["tasks"]["gsm8k"]
    t = inputs.tasks["gsm8k"]
    assert inputs.label == "a" and set(t.metrics) == {"exact_match,strict-match", "exact_match,flexible-extract"}
    for name, m in t.metrics.items():
        assert m.value == pytest.approx(summary["metrics"][name]["value"])
        assert sum(len(v) for v in m.items.values()) == summary["metrics"][name]["n"]
    assert t.counts == StatusCounts(**summary["counts"])
    assert len(t.speed) == summary["counts"]["total"] - summary["counts"]["api_error"]
    assert t.speed.wall_s == summary["speed"]["wall_s"] and t.speed.concurrency == 64
    assert t.identity.version == "3" and t.identity.num_fewshot == 5 and t.identity.data_sha256["test"] == "a" * 64
    assert len(t.identity.prompt_digests) == N_GSM8K and t.identity.sampling["temperature"] == 0.0
    aime = from_run_dir(
        build_aime_run(tmp_path / "aime", problems=6, samples_per_problem=4, response_chars=50, reasoning_chars=50)
    )
    m = aime.tasks["aime25"].metrics["avg@4"]
    assert m.filter == "math_verify" and m.samples_per_item == 4


def test_two_run_dirs_end_to_end(tmp_path: Path) -> None:
    base = from_run_dir(build_gsm8k_run(tmp_path / "base", seed=0, accuracy=0.78))
    cand = from_run_dir(build_gsm8k_run(tmp_path / "cand", seed=1, accuracy=0.70))
    result = evaluate(base, cand, FAST)
    failed = [r.name for r in result.failed]
    assert "gsm8k: exact_match,strict-match" in failed and "gsm8k: error rate" in failed  # 5 api errors
    changed = tmp_path / "changed"
    build_gsm8k_run(changed, seed=1)
    manifest = orjson.loads((changed / "manifest.json").read_bytes())
    manifest["tasks"]["gsm8k"]["settings"]["num_fewshot"] = 8
    (changed / "manifest.json").write_bytes(orjson.dumps(manifest))
    with pytest.raises(CannotCompare, match="num_fewshot 5 vs 8"):
        evaluate(base, from_run_dir(changed), FAST)


def test_unreadable_run_dirs_give_one_line_errors(tmp_path: Path) -> None:
    run_dir = build_gsm8k_run(tmp_path / "r", n=20)
    (run_dir / "summary.json").unlink()
    with pytest.raises(GateInputError, match=r"summary\.json is missing"):
        from_run_dir(run_dir)
    (run_dir / "summary.json").write_text("{not json")
    with pytest.raises(GateInputError, match="is not valid JSON"):
        from_run_dir(run_dir)
    with pytest.raises(GateInputError, match="not a run directory"):
        from_run_dir(tmp_path / "nope")
