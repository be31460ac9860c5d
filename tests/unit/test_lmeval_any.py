"""``lm-eval:NAME`` tasks without vLLM: names and groups resolved by lm-eval's TaskManager (``--include-path``),
``tasks list --lm-eval``, loglikelihood requests built on lm-eval's token boundaries (the test server's
``/tokenize``) and sent as local-completions sends them, a recorded vLLM answer parsed to lm-eval's own value,
per-document scoring, local data (``--data-dir``) and the one-line error without it, and the gate refusing runs
of different task versions; a task YAML that lm-eval cannot load is one line. Parity with lm-eval on real vLLM:
tests/system/test_lmeval_any_vllm.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.contracts import Response, SampleRecord
from evalkit.errors import EvalkitError
from evalkit.runner.plan import default_output_dir
from evalkit.tasks import lmeval_scored
from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from tests.lmeval_tasks import QA, write_tasks

RECORDED = Path(__file__).parents[1] / "data" / "lmeval" / "vllm_echo_answer.json"


@pytest.fixture(autouse=True)
def _cache(lm_eval_cache: Path) -> None:
    """Each test its own evalkit cache (tests/conftest.py)."""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test tasks, written once for the module (lm-eval indexes an include path once per process)."""
    return write_tasks(tmp_path_factory.mktemp("lm-eval-tasks"))


def _task(folder: Path, name: str, **options: object) -> object:
    tasks, generated = expand_lm_eval_tasks([f"lm-eval:{name}"], [folder], **options)  # type: ignore[arg-type]
    assert generated is not None
    return Registry([generated]).get(tasks[0])


def test_groups_expand_and_list(tasks: Path) -> None:
    folder = tasks
    tasks, generated = expand_lm_eval_tasks(["gsm8k", "lm-eval:tiny_group"], [folder])
    assert tasks == ["gsm8k", "lm-eval:tiny_mc", "lm-eval:tiny_roll"]
    assert generated is not None and len(list(generated.glob("*.yaml"))) == 2
    with pytest.raises(EvalkitError, match=r"no task or group 'tiny_mcc'.*did you mean 'lm-eval:tiny_mc'"):
        expand_lm_eval_tasks(["lm-eval:tiny_mcc"], [folder])
    res = CliRunner().invoke(app, ["tasks", "list", "--lm-eval", "--include-path", str(folder)])
    assert res.exit_code == 0, res.output
    assert "lm-eval:tiny_group  [group] tiny_mc, tiny_roll" in res.output
    assert "lm-eval:tiny_gen" in res.output.splitlines()[-1] and "lm-eval:mmlu  [group]" in res.output
    res = CliRunner().invoke(app, ["tasks", "show", "lm-eval:tiny_mc", "--include-path", str(folder)])
    assert res.exit_code == 0, res.output
    assert "metrics:     acc,none, acc_norm,none" in res.output
    assert res.output.rstrip().endswith("Question: What is the capital of France?\nAnswer: Paris")


def test_hugging_face_stays_online_for_lm_eval_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalkit.api import offline_environment

    for var in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    offline_environment(["run", "lm-eval:arc_easy", "--endpoint", "x"])
    assert "HF_DATASETS_OFFLINE" not in os.environ and "HF_HUB_OFFLINE" not in os.environ
    offline_environment(["run", "gsm8k"])
    assert os.environ["HF_DATASETS_OFFLINE"] == os.environ["HF_HUB_OFFLINE"] == "1"


def test_version_records_lm_eval_version_and_config_hash(tmp_path: Path, tasks: Path) -> None:
    a = _task(tasks, "tiny_gen")
    b = _task(write_tasks(tmp_path / "b", gen_prompt="Q: {{question}}\\nA:"), "tiny_gen")
    assert a.version.startswith("1.0+cfg.") and b.version.startswith("1.0+cfg.")  # type: ignore[attr-defined]
    assert a.version != b.version  # type: ignore[attr-defined]


def test_a_recorded_vllm_answer_parses_to_lm_evals_value() -> None:
    from evalkit.client.scored_answer import read_scored_answer
    from evalkit.contracts import Request

    rec = json.loads(RECORDED.read_text())
    answer = read_scored_answer(json.dumps(rec["answer"]).encode(), "smollm2-135m", None)
    req = Request(
        task="t",
        doc_id=0,
        sample_index=0,
        prompt="",
        gen=lmeval_scored.SCORED_GEN,
        target=json.dumps({"idx": 0, "window": 0, "ctxlen": rec["ctxlen"]}),
        prompt_ids=tuple(rec["request"]["prompt"]),
    )
    score = lmeval_scored.score_answer(req, Response(text=answer.text, logprobs=answer.logprobs))
    assert score.status == "ok"
    assert score.extracted["loglikelihood"] == rec["lm_eval_resp"][0]  # repr of the same float, to the last digit
    assert score.extracted["is_greedy"] == ("1" if rec["lm_eval_resp"][1] == "True" else "0")
    missing = lmeval_scored.score_answer(req, Response(text="x", logprobs={}))
    assert missing.status == "no_answer"


def _record(doc: int, index: int, ll: float, status: str = "ok") -> SampleRecord:
    extracted = {"loglikelihood": repr(ll), "is_greedy": "0", "idx": str(index)} if status == "ok" else {}
    return SampleRecord(key=f"{doc}-{index}", task="lm-eval:tiny_mc", doc_id=doc, sample_index=index, prompt="",
                        status=status, extracted=extracted)  # type: ignore[arg-type]  # fmt: skip


def test_multiple_choice_scored_per_document_by_lm_eval(tasks: Path) -> None:
    task = _task(tasks, "tiny_mc")
    records = []
    for doc, (_, answer, choices) in enumerate(QA):
        wrong = doc == 0  # doc 0: the longest wrong choice wins
        best = max(range(4), key=lambda i: len(choices[i])) if wrong else choices.index(answer)
        records += [_record(doc, i, -1.0 if i == best else -9.0) for i in range(4)]
    records[-1] = _record(len(QA) - 1, 3, 0.0, status="api_error")  # the last document is not scored
    metrics, detail = task.summarize(records)  # type: ignore[attr-defined]
    assert detail["docs_scored"] == len(QA) - 1 and "prefill" in detail
    assert metrics["acc,none"].value == pytest.approx(4 / 5) and metrics["acc,none"].n == 5
    assert metrics["acc,none"].stderr == pytest.approx((0.8 * 0.2 / 4) ** 0.5)


def test_data_from_a_folder_or_one_line_naming_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    folder = write_tasks(tmp_path / "t")
    text = (folder / "tiny_gen.yaml").read_text()
    start, end = text.index("dataset_path"), text.index("output_type")
    hub = text[:start] + "dataset_path: evalkit-tests/no-such-dataset\ntest_split: test\n" + text[end:]
    (folder / "tiny_gen.yaml").write_text(hub)
    with pytest.raises(EvalkitError) as err:
        _task(folder, "tiny_gen").build_requests(TaskSettings())  # type: ignore[attr-defined]
    line = str(err.value)
    assert "\n" not in line and "evalkit-tests/no-such-dataset" in line and "--data-dir DIR (DIR/tiny_gen/" in line
    data = tmp_path / "local" / "tiny_gen"
    data.mkdir(parents=True)
    (data / "test.jsonl").write_text((folder / "data" / "qa.jsonl").read_text())
    task = _task(folder, "tiny_gen", data_dir=tmp_path / "local")
    reqs = task.build_requests(TaskSettings(limit=3))  # type: ignore[attr-defined]
    assert [r.prompt for r in reqs] == [f"Question: {q}\nAnswer:" for q, _, _ in QA[:3]]
    assert [r.target for r in reqs] == [f" {a}" for _, a, _ in QA[:3]]
    with pytest.raises(EvalkitError, match=r"no test\.jsonl under --data-dir"):
        _task(folder, "tiny_gen", data_dir=tmp_path)


def test_requests_sent_as_token_ids_are_not_clamped_by_their_text() -> None:
    """A rolling window's record keeps the whole document as its text; its ids are what is sent (and counted)."""
    import asyncio

    from evalkit.client.clamp import clamp_max_tokens
    from evalkit.contracts import Request

    req = Request(task="t", doc_id=0, sample_index=0, prompt="word " * 500, gen=lmeval_scored.SCORED_GEN,
                  prompt_ids=(1, 2, 3))  # fmt: skip
    assert asyncio.run(clamp_max_tokens([req], "http://127.0.0.1:9/v1", "m", "completions", 64)) == ([req], None)


def test_a_run_config_is_expanded_once(tasks: Path) -> None:
    """The sweep expands its runs' configs and each Runner does again: the task files' folder is added once."""
    from evalkit.config import load_config
    from evalkit.runner.plan import lm_eval_expanded

    folder = tasks
    cfg = load_config({"tasks": ["lm-eval:tiny_group"], "include_path": [folder], "tokenizer": "tok"})
    once = lm_eval_expanded(cfg)
    twice = lm_eval_expanded(once)
    assert once.tasks == twice.tasks == ["lm-eval:tiny_mc", "lm-eval:tiny_roll"]
    assert once.tasks_dir == twice.tasks_dir and len(twice.tasks_dir) == 1
    spec = Registry(twice.tasks_dir).entry("lm-eval:tiny_roll").spec
    assert spec.options["lm_eval"]["tokenizer"] == "tok"
    assert spec.options["lm_eval"]["yaml"] == str((folder / "tiny_roll.yaml").resolve())


def test_a_task_named_like_a_path_keeps_its_prompt_cache_inside_the_cache_dir(tmp_path: Path) -> None:
    """An include-path task named ``../../../escaped``: its prompt cache file is one name inside
    ``$EVALKIT_CACHE_DIR/prompts`` (it was written to ``$EVALKIT_CACHE_DIR/escaped-<key>.json``, and with more
    ``../`` anywhere); a run's default output dir is one folder inside ``reports/``."""
    folder = write_tasks(tmp_path / "inc")
    text = (folder / "tiny_gen.yaml").read_text().replace("task: tiny_gen\n", "task: ../../../escaped\n")
    (folder / "tiny_gen.yaml").write_text(text)
    task = _task(folder, "../../../escaped")
    assert len(task.build_requests(TaskSettings(limit=2))) == 2  # type: ignore[attr-defined]
    prompts = tmp_path / "cache" / "prompts"
    written = [p for p in tmp_path.rglob("*escaped*") if p.is_file()]
    assert written and all(p.parent == prompts for p in written), written
    assert [p.name.rsplit("-", 1)[0] for p in written] == ["lm-eval_.._.._.._escaped"]
    assert task.build_requests(TaskSettings(limit=2))  # type: ignore[attr-defined]  # read back from the cache
    out = default_output_dir(load_config({"tasks": ["lm-eval:../../../escaped"]}), "org/m")
    assert out.parent == Path("reports") and out.name.startswith("lm-eval_.._.._.._escaped-m-"), out
