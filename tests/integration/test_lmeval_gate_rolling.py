"""The gate on lm-eval tasks end to end on the test server: a loglikelihood_rolling task's perplexities judged
per document (a rerun passes, a server whose logits are sharpened, so every text is less likely, fails), and a
multiple-choice run whose every request failed, which the gate cannot decide on (never a pass)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.gating.corpus import MIN_CORPUS_DOCS
from tests.integration.test_lmeval_gate import write_gate_mc

ROLL = "lm-eval:gate_roll"
SUBJECTS = ["The river", "A small bird", "Our old house", "The ship", "Every road", "That lamp", "The cloud"]
VERBS = ["runs past", "looks over", "stands near", "moves toward", "waits beside", "shines on"]
OBJECTS = ["the stone bridge", "a green field", "the quiet town", "an open door", "the white tree", "the sea"]


@pytest.fixture(autouse=True)
def _cache(lm_eval_cache: Path) -> None:
    """Each test its own evalkit cache (tests/conftest.py)."""


def write_gate_roll(folder: Path, docs: int = 24) -> Path:
    """A loglikelihood_rolling task of ``docs`` short texts of unequal length (written here for the test)."""
    folder.mkdir(parents=True, exist_ok=True)
    pages = []
    for d in range(docs):
        sentences = [
            f"{SUBJECTS[(d + i) % len(SUBJECTS)]} {VERBS[(3 * d + i) % len(VERBS)]} {OBJECTS[(d * i) % len(OBJECTS)]}."
            for i in range(2 + d % 5)
        ]
        pages.append(" ".join(sentences))
    (folder / "pages.jsonl").write_text("".join(json.dumps({"page": p}) + "\n" for p in pages))
    (folder / "gate_roll.yaml").write_text(
        f"task: gate_roll\ndataset_path: json\ntest_split: test\ndataset_kwargs:\n  data_files:\n"
        f'    test: {folder / "pages.jsonl"}\noutput_type: loglikelihood_rolling\ndoc_to_text: ""\n'
        'doc_to_target: "{{page}}"\nmetric_list:\n  - metric: word_perplexity\n  - metric: byte_perplexity\n'
        "  - metric: bits_per_byte\nmetadata:\n  version: 1.0\n"
    )
    return folder


def _run(url: str, task: str, folder: Path, out: Path, *more: str) -> None:
    args = ["run", task, "--include-path", str(folder), "--endpoint", url, "-o", str(out), "-q", *more]
    res = CliRunner().invoke(app, [*args, "--concurrency", "4", "--no-warmup", "--no-report"])
    assert res.exit_code == 0, res.output


def _gate(base: Path, cand: Path, *more: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = cand / "gate"
    res = CliRunner().invoke(app, ["gate", "-b", str(base), "-c", str(cand), "-o", str(out), *more])
    print(res.output)
    return res.exit_code, json.loads((out / "gate.json").read_text())


def _corpus_rules(data: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {r["name"]: r for r in data["rules"] if r["kind"] == "perplexity"}


def test_a_rolling_task_passes_on_a_rerun_and_fails_on_a_sharper_server(tmp_path: Path) -> None:
    from evalkit.testing.server import TestServer

    folder = write_gate_roll(tmp_path / "tasks")
    with TestServer() as srv:
        _run(srv.url, ROLL, folder, tmp_path / "base")
        _run(srv.url, ROLL, folder, tmp_path / "again")
        srv.state.behaviour.update(logit_scale=1.05)  # every logit x1.05: the texts' tokens less likely
        _run(srv.url, ROLL, folder, tmp_path / "sharper")
    summary = json.loads((tmp_path / "base" / "summary.json").read_text())["tasks"][ROLL]
    pairs = summary["detail"]["doc_pairs"]
    assert set(pairs) == {"word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none"}
    assert len(pairs["word_perplexity,none"]["docs"]) == 24 >= MIN_CORPUS_DOCS and summary["detail"]["not_gated"] == {}
    from evalkit.reporting.run_tables import detail_view

    shown = detail_view(summary["detail"])  # the report's task details leave the per-document pairs out
    assert "doc_pairs" not in {kv.key for kv in [*shown.scalars, *shown.nested]}
    policy = tmp_path / "no-speed.yaml"  # what is judged here is the perplexity; a loaded machine's speed is noise
    policy.write_text("speed: {output_tokens_per_s: null, ttft_p50_ms: null, tpot_p50_ms: null}\n")
    code, data = _gate(tmp_path / "base", tmp_path / "again", "--policy", str(policy))
    assert code == 0 and data["verdict"] == "pass" and not data["reasons"], data
    rules = _corpus_rules(data)
    assert {r["verdict"] for r in rules.values()} == {"pass"} and len(rules) == 3
    assert all(r["observed"] == 0.0 and r["budget"] == 0.01 for r in rules.values())
    code, data = _gate(tmp_path / "base", tmp_path / "sharper", "--policy", str(policy))
    assert code == 1 and data["verdict"] == "fail", data
    assert {r["name"] for r in data["rules"] if r["verdict"] == "fail"} == set(_corpus_rules(data))
    rule = _corpus_rules(data)[f"{ROLL}: word_perplexity,none change"]
    cand = json.loads((tmp_path / "sharper" / "summary.json").read_text())["tasks"][ROLL]["metrics"]
    base_ppl, cand_ppl = summary["metrics"]["word_perplexity,none"]["value"], cand["word_perplexity,none"]["value"]
    assert rule["verdict"] == "fail" and rule["observed"] == pytest.approx(cand_ppl / base_ppl - 1)
    assert rule["baseline"] == pytest.approx(base_ppl) and rule["ci"][0] > 0.01 and rule["p_value"] < 0.05


def test_a_multiple_choice_run_whose_every_request_failed_cannot_be_decided(tmp_path: Path) -> None:
    from evalkit.testing.server import TestServer

    folder = write_gate_mc(tmp_path / "tasks", docs=8)
    task = "lm-eval:gate_mc"
    with TestServer() as srv:
        _run(srv.url, task, folder, tmp_path / "base")
        srv.faults.extend({"status": 400} for _ in range(32))  # every one of the 32 requests (8 docs x 4 choices)
        _run(srv.url, task, folder, tmp_path / "failed", "--max-error-rate", "1")
    summary = json.loads((tmp_path / "failed" / "summary.json").read_text())["tasks"][task]
    assert summary["counts"]["api_error"] == summary["counts"]["total"] == 32
    assert summary["detail"]["doc_scores"] == {} or all(not v for v in summary["detail"]["doc_scores"].values())
    code, data = _gate(tmp_path / "base", tmp_path / "failed")
    assert code == 1 and data["verdict"] == "fail", data  # the default policy allows no failed request
    assert {r["name"] for r in data["rules"] if r["verdict"] == "fail"} == {f"{task}: error rate"}
    assert f"{task}: metric acc,none has scores only in the baseline, so it was not compared" in data["reasons"]
    # with failed requests allowed and no coverage asked for, the missing scores alone keep the gate from deciding
    loose = tmp_path / "loose.yaml"
    loose.write_text("rates: {max_error_rate: null}\nmin_coverage: 0\n")
    out = tmp_path / "loose-gate"
    args = [
        "gate",
        "-b",
        str(tmp_path / "base"),
        "-c",
        str(tmp_path / "failed"),
        "--policy",
        str(loose),
        "-o",
        str(out),
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    data = json.loads((out / "gate.json").read_text())
    assert data["verdict"] == "cannot_decide" and not any(r["verdict"] == "pass" for r in data["rules"])
    assert data["reasons"] == [
        f"{task}: metric {m},none has scores only in the baseline, so it was not compared" for m in ("acc", "acc_norm")
    ]
