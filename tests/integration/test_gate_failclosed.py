"""The gate fails closed: it says "cannot decide" (exit 2, with the reason) when it compared less than it claims,
and never PASS on nothing. Runs are real run dirs written by evalkit against the test server over HTTP, then
damaged the ways a hostile environment damages them (all requests failed, samples emptied or cut, a stale
summary, a run still being written, the same run twice, every rule skipped)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.gating import evaluate, from_run_dir, policy_from_dict
from evalkit.runner import Runner
from evalkit.store.writer import RunStore
from evalkit.testing.server import Behaviour, TestServer

N = 40
ACCURACY_ONLY = "speed: {output_tokens_per_s: null, ttft_p50_ms: null, tpot_p50_ms: null}\n"


def run(url: str, out: Path, **extra: object) -> Path:
    cfg = {"tasks": ["gsm8k"], "endpoint": url, "limit": N, "output_dir": out, "report": False}
    cfg.update({"concurrency": 8, "max_tokens": 48, "max_attempts": 1, "max_error_rate": 1.0, **extra})
    Runner(load_config(cfg)).run()
    return out


def gate(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["gate", *map(str, args)])
    print(res.output)
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """good: 100% right; worse: ~60% right (37+ points below); dead: every request failed (HTTP 500); dead200:
    every request answered HTTP 200 with an error object instead of a stream."""
    root = tmp_path_factory.mktemp("runs")
    out: dict[str, Path] = {}
    with TestServer(Behaviour()) as srv:
        out["good"] = run(srv.url, root / "good")
        out["good2"] = run(srv.url, root / "good2")
        srv.faults = [{"status": 500}] * N
        out["dead"] = run(srv.url, root / "dead")
        srv.faults = [{"status": 200}] * N  # as filed: HTTP 200 whose body is an error object
        out["dead200"] = run(srv.url, root / "dead200")
        srv.faults = []
        srv.behaviour.update(correct_ratio=0.6)
        out["worse"] = run(srv.url, root / "worse")
    return out


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("gate"))
    return dst


def policy(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "policy.yaml"
    p.write_text(text)
    return p


def samples(run_dir: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in (run_dir / "samples.jsonl").read_bytes().splitlines() if line]


def write_samples(run_dir: Path, rows: list[dict[str, object]]) -> None:
    (run_dir / "samples.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def test_a_pair_of_good_runs_passes(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out = gate(runs["good"], runs["good2"], "-p", policy(tmp_path, ACCURACY_ONLY), "-o", tmp_path / "g")
    assert code == 0, out
    assert json.loads((tmp_path / "g" / "gate.json").read_text())["verdict"] == "pass"


@pytest.mark.parametrize("dead", ["dead", "dead200"])
def test_all_error_baseline_cannot_approve_a_worse_candidate(runs: dict[str, Path], tmp_path: Path, dead: str) -> None:
    # case 1: before, PASS (accuracy "only in the candidate", speed skipped)
    assert {r["status"] for r in samples(runs[dead])} == {"api_error"}
    code, out = gate(runs[dead], runs["worse"], "-o", tmp_path / "g")
    assert code == 2, out
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert data["verdict"] == "cannot_decide"
    assert any(f"the baseline scored only 0 of {N} (0%)" in r and f"{N} failed requests" in r for r in data["reasons"])
    assert "evalkit: cannot decide: gsm8k: the baseline scored only 0" in out
    assert (tmp_path / "g" / "gate.md").read_text().startswith("## evalkit gate: ⚠️ cannot decide")


def test_all_error_candidate_fails(runs: dict[str, Path], tmp_path: Path) -> None:
    code, out = gate(runs["good"], runs["dead"], "-o", tmp_path / "g")
    assert code == 1, out  # a broken candidate is a failure (its error rate), not "cannot decide"
    assert "gsm8k: error rate" in out


@pytest.mark.parametrize("content", [b"", b"\0" * 4096])
def test_empty_or_nul_samples_cannot_pass(runs: dict[str, Path], tmp_path: Path, content: bytes) -> None:
    # case 2: before, PASS
    cand = copy(runs["good2"], tmp_path / "cand")
    (cand / "samples.jsonl").write_bytes(content)
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY))
    assert code == 2, out
    reasons = json.loads((cand / "gate" / "gate.json").read_text())["reasons"]
    assert any(f"the candidate scored only 0 of {N}" in r for r in reasons)
    assert any(f"samples.jsonl holds 0 requests but summary.json counts {N}" in r for r in reasons)


@pytest.mark.parametrize("keep", ["half", "right"])
def test_missing_documents_cannot_pass(runs: dict[str, Path], tmp_path: Path, keep: str) -> None:
    # case 3: half the documents missing, or only the right answers kept: before, PASS with a note
    cand = copy(runs["worse"], tmp_path / "cand")
    rows = samples(cand)
    kept = rows[: N // 2] if keep == "half" else [r for r in rows if r["correct"]["strict-match"]]  # type: ignore[index]
    assert 0 < len(kept) < 0.95 * N
    write_samples(cand, kept)
    code, out = gate(
        runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY + "accuracy: {default: {enabled: false}}\n")
    )
    assert code == 2, out
    reasons = json.loads((cand / "gate" / "gate.json").read_text())["reasons"]
    assert any(f"the candidate scored only {len(kept)} of {N}" in r for r in reasons)


def test_empty_truncated_and_no_answer_documents_count_as_scored(runs: dict[str, Path], tmp_path: Path) -> None:
    """Only api_error leaves a document unscored: a candidate whose answers are a quarter each empty, truncated and
    no_answer covers every document, so the gate decides (on those answers, scored as they are)."""
    cand = copy(runs["worse"], tmp_path / "cand")
    rows = samples(cand)
    for i, row in enumerate(rows[: 3 * N // 4]):
        row["status"] = ("empty", "truncated", "no_answer")[i % 3]
    write_samples(cand, rows)
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY), "-o", tmp_path / "g")
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert code == 1 and data["verdict"] == "fail", out  # decided: 37+ points worse
    assert not any("scored only" in r for r in data.get("reasons", [])), data.get("reasons")


def test_min_coverage_from_the_policy_decides_how_much_may_be_missing(runs: dict[str, Path], tmp_path: Path) -> None:
    """A candidate whose first 20 of 40 requests failed, under a policy that tolerates failed requests: cannot
        decide at the default 95% coverage; a policy asking 40% lets the gate decide on the documents both scored (a
    pass: the candidate answers as the baseline)."""
    with TestServer(Behaviour()) as srv:  # answers as the good baseline's: nothing fails once it can decide
        srv.faults = [{"status": 500}] * (N // 2)
        cand = run(srv.url, tmp_path / "cand", concurrency=1)
    assert sum(r["status"] == "api_error" for r in samples(cand)) == N // 2
    tolerant = ACCURACY_ONLY + "rates: {max_error_rate: 1.0}\n"
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, tolerant))
    assert code == 2 and f"the candidate scored only {N // 2} of {N} (50%)" in out, out
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, tolerant + "min_coverage: 0.4\n"), "-o", tmp_path / "g")
    data = json.loads((tmp_path / "g" / "gate.json").read_text())
    assert data["verdict"] == "pass" and code == 0, out
    assert not any("scored only" in r for r in data.get("reasons", [])), data.get("reasons")


def test_a_summary_without_metrics_still_compares_the_task_metrics(runs: dict[str, Path], tmp_path: Path) -> None:
    # case 4: before, accuracy rules silently skipped and PASS
    cand = copy(runs["worse"], tmp_path / "cand")
    summary = orjson.loads((cand / "summary.json").read_bytes())
    summary["tasks"]["gsm8k"]["metrics"] = {}
    (cand / "summary.json").write_bytes(orjson.dumps(summary))
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY))
    assert code == 1, out
    rules = json.loads((cand / "gate" / "gate.json").read_text())["rules"]
    acc = {r["name"]: r["verdict"] for r in rules if r["kind"] == "accuracy"}
    assert acc == {"gsm8k: exact_match,strict-match": "fail", "gsm8k: exact_match,flexible-extract": "fail"}
    # an older store whose manifest has no metric names: the task registry names them
    manifest = orjson.loads((cand / "manifest.json").read_bytes())
    del manifest["tasks"]["gsm8k"]["metrics"]
    (cand / "manifest.json").write_bytes(orjson.dumps(manifest))
    inputs = from_run_dir(cand)
    assert set(inputs.tasks["gsm8k"].metrics) == {"exact_match,strict-match", "exact_match,flexible-extract"}


def test_a_metric_scored_on_one_side_only_cannot_pass(runs: dict[str, Path], tmp_path: Path) -> None:
    cand = copy(runs["good2"], tmp_path / "cand")
    rows = samples(cand)
    for r in rows:
        r["correct"] = {"strict-match": r["correct"]["strict-match"]}  # type: ignore[index]
    write_samples(cand, rows)
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY))
    assert code == 2, out
    assert "metric exact_match,flexible-extract has scores only in the baseline" in out


def test_a_run_still_being_written_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    # case 5: before, a verdict on partial data
    cand = copy(runs["good2"], tmp_path / "cand")
    store = RunStore(cand).lock()
    try:
        code, out = gate(runs["good"], cand)
    finally:
        store.unlock()
    assert code == 2, out
    assert "the candidate" in out and "is still being written (evalkit run pid" in out
    assert not (cand / "gate").exists()
    code, out = gate(runs["good"], cand, "-p", policy(tmp_path, ACCURACY_ONLY))
    assert code == 0, out  # once the run let go, the same pair is judged


def test_the_same_run_twice_is_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    # case 6: before, PASS with no note
    for other in (runs["good"], copy(runs["good"], tmp_path / "copy")):
        code, out = gate(runs["good"], other)
        assert code == 2, out
        assert "cannot decide: the baseline and the candidate are the same run" in out


def test_every_rule_skipped_is_not_a_pass(runs: dict[str, Path], tmp_path: Path) -> None:
    # case 6: max_error_rate 1.0 with an all-error candidate: before, PASS with zero rules evaluated
    p = policy(tmp_path, ACCURACY_ONLY + "rates: {max_error_rate: 1.0}\n")
    code, out = gate(runs["good"], runs["dead"], "-p", p, "-o", tmp_path / "g")
    assert code == 2, out
    # and in the engine: inputs that evaluate no rule at all
    base, cand = from_run_dir(runs["good"]), from_run_dir(runs["good2"])
    off = policy_from_dict(
        {
            "accuracy": {"default": {"enabled": False}},
            "speed": {"output_tokens_per_s": None, "ttft_p50_ms": None, "tpot_p50_ms": None},
            "rates": {"max_error_rate": None},
        }
    )
    result = evaluate(base, cand, off)
    assert result.verdict == "cannot_decide"
    assert result.reasons == ["no rule was evaluated (every rule was skipped or turned off)"]


def test_expected_scores_need_coverage_too(runs: dict[str, Path], tmp_path: Path) -> None:
    p = policy(
        tmp_path,
        "rates: {max_error_rate: 1.0}\nexpected:\n  - {task: gsm8k, metric: 'exact_match,strict-match', value: 0.5}\n",
    )
    cand = copy(runs["good"], tmp_path / "cand")
    write_samples(cand, samples(cand)[:10])
    code, out = gate(cand, "-p", p)
    assert code == 2, out  # 10 right answers meet the expected score, but 10 of 40 documents decide nothing
    assert "the candidate scored only 10 of 40 (25%) of the documents it was asked for" in out
    code, out = gate(runs["good"], "-p", p, "-o", tmp_path / "g")
    assert code == 0, out
