"""The aime25 task: requests, scoring of responses, and the summary metrics checked by hand."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalkit.contracts import Response, SampleRecord
from evalkit.errors import DataError
from evalkit.scoring.estimators import wilson_interval
from evalkit.tasks.base import Task
from evalkit.tasks.spec import TaskSettings, parse_spec

TASKS = Path(__file__).resolve().parents[2] / "tasks"
YAML = TASKS / "aime25.yaml"
DATA_SHA256 = "4213712e99507f03469175b1cbfb02cd7746c34b04f28e1ea62290626a582e5d"
INSTRUCTION = "Put your final answer within \\boxed{}.\nThe answer is an integer between 0 and 999 inclusive."


def load_module() -> Any:
    spec = yaml.safe_load(YAML.read_text())
    mod_spec = importlib.util.spec_from_file_location("evalkit_task_aime25_test", YAML.parent / spec["module"])
    assert mod_spec and mod_spec.loader
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return yaml.safe_load(YAML.read_text())


@pytest.fixture(scope="module")
def task(spec) -> Any:
    return load_module().make_task(parse_spec(spec, YAML))


# ------------------------------------------------------------------------------------------------- loading


def test_yaml_declares_the_task(spec):
    assert spec["name"] == "aime25"
    assert spec["version"] == "1"
    assert spec["kind"] == "python"
    assert spec["module"] == "aime25.py"
    assert spec["data"] == {"test": "data/aime25/aime25.jsonl"}
    assert spec["endpoint_kind"] == "chat"
    assert spec["defaults"] == {"temperature": 1.0, "top_p": 0.95, "num_samples": 8, "max_tokens": 32768}
    assert spec["description"]


def test_make_task(task):
    assert issubclass(type(task), Task)
    assert (task.name, task.version, task.endpoint_kind) == ("aime25", "1", "chat")
    assert task.data_sha256 == {"test": DATA_SHA256}
    assert task.defaults() == {"temperature": 1.0, "top_p": 0.95, "num_samples": 8, "max_tokens": 32768}
    assert task.metric_names() == ["avg@8", "pass@1", "pass@2", "pass@4", "pass@8", "maj@8"]
    assert len(task.problems) == 30
    assert task.problems[0] == {
        "id": "2025-I-1",
        "problem": "Find the sum of all integer bases $b>9$ for which $17_b$ is a divisor of $97_b.$",
        "answer": "70",
    }
    assert task.problems[-1]["id"] == "2025-II-15"


def test_the_task_file_is_the_one_source_of_its_defaults(spec):
    """The class states no defaults of its own: a task file's ``defaults:`` are the task's, whole."""
    narrowed = load_module().make_task(parse_spec({**spec, "defaults": {"max_tokens": 100}}, YAML))
    assert narrowed.defaults() == {"max_tokens": 100}
    assert load_module().Aime25Task.builtin_defaults == {}


def test_make_task_rejects_bad_data(tmp_path, spec):
    (tmp_path / "d.jsonl").write_text('{"id": "x", "problem": "p", "answer": "seventy"}\n')
    with pytest.raises(DataError, match="not an integer"):
        load_module().make_task(parse_spec({**spec, "data": {"test": "d.jsonl"}}, tmp_path / "aime25.yaml"))
    (tmp_path / "e.jsonl").write_text('{"id": "x", "answer": "7"}\n')
    with pytest.raises(DataError, match="lacks problem"):
        load_module().make_task(parse_spec({**spec, "data": {"test": "e.jsonl"}}, tmp_path / "aime25.yaml"))


# ------------------------------------------------------------------------------------------------ requests


def test_build_requests_chat(task):
    settings = TaskSettings(
        limit=2,
        num_samples=3,
        max_tokens=1000,
        temperature=0.6,
        top_p=0.9,
        seed=100,
        chat_template_kwargs={"enable_thinking": True},
        endpoint_kind="chat",
    )
    reqs = task.build_requests(settings)
    assert len(reqs) == 6
    assert [(r.doc_id, r.sample_index) for r in reqs] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert [r.gen.seed for r in reqs] == [100, 101, 102, 100, 101, 102]
    assert [r.target for r in reqs] == ["70"] * 3 + ["588"] * 3
    r = reqs[0]
    assert r.task == "aime25"
    assert r.prompt == INSTRUCTION + "\n\n" + task.problems[0]["problem"]
    assert r.messages == ({"role": "user", "content": r.prompt},)
    assert r.gen.max_tokens == 1000
    assert (r.gen.temperature, r.gen.top_p) == (0.6, 0.9)
    assert r.gen.chat_template_kwargs == {"enable_thinking": True}
    assert r.gen.stop == ()
    assert reqs[3].prompt == INSTRUCTION + "\n\n" + task.problems[1]["problem"]
    assert "\\boxed{}" in reqs[3].prompt and "between 0 and 999 inclusive" in reqs[3].prompt


def test_build_requests_defaults_and_no_seed(task):
    reqs = task.build_requests(TaskSettings(num_samples=8))
    assert len(reqs) == 30 * 8
    assert {r.gen.seed for r in reqs} == {None}
    g = reqs[0].gen
    assert (g.max_tokens, g.temperature, g.top_p, g.chat_template_kwargs) == (32768, 1.0, 0.95, None)
    assert reqs[0].messages is not None  # the task's endpoint kind (chat) when the settings leave it open
    assert [r.sample_index for r in reqs[:8]] == list(range(8))
    assert len({(r.doc_id, r.sample_index) for r in reqs}) == len(reqs)


def test_build_requests_completions(task):
    reqs = task.build_requests(TaskSettings(limit=1, num_samples=2, endpoint_kind="completions", seed=0))
    assert len(reqs) == 2
    assert all(r.messages is None for r in reqs)
    assert reqs[0].prompt == INSTRUCTION + "\n\n" + task.problems[0]["problem"]
    assert [r.gen.seed for r in reqs] == [0, 1]


def test_preview(task):
    assert task.preview(TaskSettings()).startswith("Put your final answer within \\boxed{}.")


# ----------------------------------------------------------------------------------------------- summarize


def rec(doc_id, i, status, extracted, correct, target, out=None, reason=None, task="aime25") -> SampleRecord:
    return SampleRecord(
        key=f"{task}-{doc_id}-{i}",
        task=task,
        doc_id=doc_id,
        sample_index=i,
        prompt="p",
        status=status,
        target=target,
        extracted={} if status == "api_error" else {"boxed": extracted},
        correct={} if status == "api_error" else {"boxed": correct},
        error="HTTP 500" if status == "api_error" else None,
        output_tokens=out,
        reasoning_tokens=reason,
    )


def synthetic_records() -> list[SampleRecord]:
    return [
        # doc 0 (gold 70): 2 of 4 correct; votes 70, 70, 69, 69 -> tie -> maj 1/2
        rec(0, 0, "ok", "70", True, "70", out=100, reason=80),
        rec(0, 1, "ok", "070", True, "70", out=200, reason=150),
        rec(0, 2, "ok", "69", False, "70", out=300, reason=250),
        rec(0, 3, "ok", "69", False, "70", out=400, reason=300),
        # doc 1 (gold 588): one api_error -> 3 scored, 2 correct; votes 588, 588 -> maj 1
        rec(1, 0, "ok", "588", True, "588", out=1000, reason=900),
        rec(1, 1, "no_answer", None, False, "588", out=50),
        rec(1, 2, "api_error", None, None, "588"),
        rec(1, 3, "truncated", "588", True, "588", out=32768, reason=32000),
        # doc 2 (gold 16): 1 of 4 correct (written as a fraction); votes 15, 15, -, 16 -> maj 0
        rec(2, 0, "ok", "15", False, "16", out=10),
        rec(2, 1, "ok", "15", False, "16", out=20),
        rec(2, 2, "empty", None, False, "16", out=0),
        rec(2, 3, "ok", r"\dfrac{32}{2}", True, "16", out=30),
        # another task's record is ignored
        rec(0, 9, "ok", "1", True, "1", task="gsm8k"),
    ]


def test_summarize_by_hand(task):
    metrics, extra = task.summarize(synthetic_records())
    assert set(metrics) == {"avg@4", "pass@1", "pass@2", "pass@4", "maj@4"}

    # avg@4: 5 correct of 11 scored; CR1 variance: residual sums 2-4m, 2-3m, 1-4m with m = 5/11
    #   = 2/11, 7/11, -9/11 -> var = 3/2 * (4 + 49 + 81)/121 / 121
    avg = metrics["avg@4"]
    se = math.sqrt(1.5 * (4 + 49 + 81) / 121 / 121)
    assert avg.value == pytest.approx(5 / 11)
    assert avg.n == 11
    assert avg.stderr == pytest.approx(se)
    # Wilson at the effective sample size of the clustered stderr, (5/11)(6/11)/se**2 = 18.1, kept within the 3
    # problems and the 11 samples: 11
    assert (5 / 11) * (6 / 11) / se**2 > 11
    assert avg.ci95 == pytest.approx(wilson_interval(5, 11)) and avg.ci_method == "wilson-clustered"

    # pass@1: mean of per-problem accuracies 2/4, 2/3, 1/4
    p1 = metrics["pass@1"]
    assert p1.value == pytest.approx((1 / 2 + 2 / 3 + 1 / 4) / 3)
    assert p1.n == 3
    vals = [1 / 2, 2 / 3, 1 / 4]
    m = sum(vals) / 3
    assert p1.stderr == pytest.approx(math.sqrt(sum((v - m) ** 2 for v in vals) / 2 / 3))
    # pass@2: 1 - C(2,2)/C(4,2) = 5/6; n - c = 1 < 2 -> 1; 1 - C(3,2)/C(4,2) = 1/2
    assert metrics["pass@2"].value == pytest.approx((5 / 6 + 1 + 1 / 2) / 3)
    assert metrics["pass@2"].n == 3
    # pass@4: doc 1 has only 3 scored samples and is left out; both others have a correct sample
    assert metrics["pass@4"].value == pytest.approx(1.0)
    assert metrics["pass@4"].n == 2
    # maj@4: 1/2 (tie), 1, 0
    maj = metrics["maj@4"]
    assert maj.value == pytest.approx(0.5)
    assert maj.n == 3
    assert maj.stderr == pytest.approx(0.5 / math.sqrt(3))
    # Wilson over the problems (each problem's estimate lies in [0, 1]); 2 of 2 at pass@4 keeps a width
    assert maj.ci95 == pytest.approx(wilson_interval(1.5, 3)) and maj.ci_method == "wilson"
    p2 = metrics["pass@2"].value
    assert p2 is not None and metrics["pass@2"].ci95 == pytest.approx(wilson_interval(3 * p2, 3))
    assert metrics["pass@4"].ci95 == pytest.approx(wilson_interval(2, 2)) and metrics["pass@4"].ci95[0] < 0.35

    assert extra["num_samples"] == 4
    assert extra["num_problems"] == 3
    assert extra["requests"] == 12
    assert extra["scored"] == 11
    assert extra["status_counts"] == {"ok": 8, "truncated": 1, "no_answer": 1, "empty": 1, "api_error": 1}
    assert extra["rates"] == pytest.approx(
        {"truncated": 1 / 12, "no_answer": 1 / 12, "empty": 1 / 12, "api_error": 1 / 12}
    )
    assert extra["verify_timeouts"] == 0

    p0, p1_, p2 = extra["per_problem"]
    assert p0 == {
        "doc_id": 0,
        "id": "2025-I-1",
        "target": "70",
        "n": 4,
        "correct": 2,
        "accuracy": 0.5,
        "answers": {"70": 2, "69": 2},
        "no_answer": 0,
        "truncated": 0,
        "api_error": 0,
    }
    assert (p1_["id"], p1_["n"], p1_["correct"], p1_["api_error"], p1_["no_answer"], p1_["truncated"]) == (
        "2025-I-2",
        3,
        2,
        1,
        1,
        1,
    )
    assert p1_["answers"] == {"588": 2}
    assert p1_["accuracy"] == pytest.approx(2 / 3)
    assert p2["answers"] == {"15": 2, r"\dfrac{32}{2}": 1}
    assert p2["no_answer"] == 1

    out = extra["tokens"]["output"]
    scored_out = [100, 200, 300, 400, 1000, 50, 32768, 10, 20, 0, 30]
    assert out["n"] == 11
    assert out["mean"] == pytest.approx(sum(scored_out) / 11)
    assert out["p50"] == 100
    assert out["max"] == 32768
    reasoning = extra["tokens"]["reasoning"]
    assert reasoning["n"] == 6
    assert reasoning["p50"] == pytest.approx((250 + 300) / 2)
    assert reasoning["max"] == 32000


def test_summarize_counts_verifier_timeouts_as_wrong(task):
    records = [rec(0, 0, "ok", "70", True, "70"), rec(0, 1, "ok", "9^{9^{9^9}}", None, "70")]
    metrics, extra = task.summarize(records)
    assert metrics["avg@2"].value == pytest.approx(0.5)
    assert extra["verify_timeouts"] == 1


def test_summarize_all_api_errors(task):
    records = [rec(0, i, "api_error", None, None, "70") for i in range(2)]
    metrics, extra = task.summarize(records)
    assert metrics["avg@2"].value is None and metrics["avg@2"].n == 0
    assert metrics["pass@1"].value is None and metrics["pass@1"].n == 0
    assert metrics["maj@2"].n == 0
    assert extra["rates"]["api_error"] == 1.0
    assert extra["per_problem"][0]["n"] == 0 and extra["per_problem"][0]["accuracy"] is None


def test_summarize_no_records(task):
    metrics, extra = task.summarize([])
    assert metrics == {}
    assert extra["requests"] == 0 and extra["rates"]["api_error"] is None


def test_end_to_end_requests_scores_summary(task):
    reqs = task.build_requests(TaskSettings(limit=2, num_samples=2, seed=1))
    answers = {(0, 0): r"\boxed{70}", (0, 1): r"\boxed{71}", (1, 0): "no idea", (1, 1): r"$\boxed{588}$"}
    records = []
    for r in reqs:
        resp = Response(text=answers[(r.doc_id, r.sample_index)], finish_reason="stop", output_tokens=5)
        s = task.score(r, resp)
        records.append(
            SampleRecord(
                key=f"{r.doc_id}-{r.sample_index}",
                task=r.task,
                doc_id=r.doc_id,
                sample_index=r.sample_index,
                prompt=r.prompt,
                status=s.status,
                target=r.target,
                extracted=s.extracted,
                correct=s.correct,
                extraction=s.extraction,
                output_tokens=resp.output_tokens,
            )
        )
    metrics, extra = task.summarize(records)
    assert metrics["avg@2"].value == pytest.approx(0.5)
    assert metrics["pass@2"].value == pytest.approx(1.0)
    assert metrics["maj@2"].value == pytest.approx(0.75)  # doc 0: tie 70/71 -> 1/2; doc 1: 588 alone -> 1
    assert extra["status_counts"]["no_answer"] == 1
