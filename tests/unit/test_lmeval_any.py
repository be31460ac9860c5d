"""``lm-eval:NAME`` tasks without vLLM: names and groups resolved by lm-eval's TaskManager (``--include-path``),
``tasks list --lm-eval``, loglikelihood requests built on lm-eval's token boundaries (the test server's
``/tokenize``) and sent as local-completions sends them, a recorded vLLM answer parsed to lm-eval's own value,
per-document scoring, local data (``--data-dir``) and the one-line error without it, and the gate refusing runs
of different task versions; a task YAML that lm-eval cannot load is one line. Parity with lm-eval on real vLLM:
tests/test_lmeval_any_vllm.py."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import orjson
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

RECORDED = Path(__file__).parent / "data" / "lmeval" / "vllm_echo_answer.json"


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALKIT_CACHE_DIR", str(tmp_path / "cache"))


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


def _tokens(url: str, text: str) -> list[int]:
    body = json.dumps({"prompt": text, "add_special_tokens": False}).encode()
    req = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return list(json.loads(r.read())["tokens"])


def test_multiple_choice_requests_on_lm_evals_token_boundaries(tasks: Path, test_server: object) -> None:
    from evalkit.client.http_client import Client

    url = test_server.url.removesuffix("/v1")  # type: ignore[attr-defined]
    task = _task(tasks, "tiny_mc")
    task.use_endpoint(url + "/v1", None)  # type: ignore[attr-defined]
    reqs = task.build_requests(TaskSettings(limit=2))  # type: ignore[attr-defined]
    assert [(r.doc_id, r.sample_index) for r in reqs] == [(d, i) for d in range(2) for i in range(4)]
    for r in reqs:
        question, _, choices = QA[r.doc_id]
        context = f"Question: {question}\nAnswer:"
        target = orjson.loads(r.target)
        assert target["idx"] == r.sample_index
        assert list(r.prompt_ids) == _tokens(url, context + " " + choices[r.sample_index])
        assert target["ctxlen"] == len(_tokens(url, context))
    with pytest.raises(EvalkitError, match="need a completions endpoint, not chat"):
        task.build_requests(TaskSettings(limit=1, endpoint_kind="chat"))  # type: ignore[attr-defined]
    body = Client(url + "/v1", "m").payload(reqs[0])
    assert body["prompt"] == list(reqs[0].prompt_ids)
    sent = {k: body[k] for k in ("echo", "logprobs", "max_tokens", "temperature", "seed", "stream")}
    assert sent == {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0.0, "seed": 1234, "stream": False}


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


def test_a_run_and_the_gate_refusing_another_task_version(tmp_path: Path, tasks: Path, test_server: object) -> None:
    url = test_server.url  # type: ignore[attr-defined]
    runs = []
    for version in ("1.0", "2.0"):
        folder = tasks if version == "1.0" else write_tasks(tmp_path / f"t{version}", version=version)
        out = tmp_path / f"run{version}"
        args = ["run", "lm-eval:tiny_gen", "--include-path", str(folder), "--endpoint", url, "-o", str(out), "-q"]
        res = CliRunner().invoke(app, [*args, "--concurrency", "2", "--no-warmup", "--no-report"])
        assert res.exit_code == 0, res.output
        summary = json.loads((out / "summary.json").read_text())["tasks"]["lm-eval:tiny_gen"]
        assert set(summary["metrics"]) == {"exact_match,none"} and summary["counts"]["total"] == len(QA)
        runs.append(out)
    res = CliRunner().invoke(app, ["gate", "-b", str(runs[0]), "-c", str(runs[1])])
    assert res.exit_code == 2, res.output
    assert "task version 1.0+cfg." in res.output


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


def test_a_sweep_runs_a_group_and_tabulates_its_tasks(
    tmp_path: Path, tasks: Path, test_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import csv

    extra = tmp_path / "groups"
    extra.mkdir()
    (extra / "gen_group.yaml").write_text(
        "group: gen_group\ntask:\n  - tiny_gen\naggregate_metric_list:\n  - metric: exact_match\n"
        "metadata:\n  version: 1.0\n"
    )
    monkeypatch.setenv("EVALKIT_INCLUDE_PATH", json.dumps([str(tasks), str(extra)]))
    spec = tmp_path / "sweep.yaml"
    url = test_server.url  # type: ignore[attr-defined]
    spec.write_text(f'tasks: ["lm-eval:gen_group"]\nendpoint: {url}\nconcurrency: [2]\nwarmup: 0\n')
    res = CliRunner().invoke(app, ["sweep", str(spec), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((tmp_path / "out" / "sweep.csv").open()))
    assert len(rows) == 1 and rows[0]["lm-eval:tiny_gen exact_match,none"] and float(rows[0]["requests_s"]) > 0
    (summary,) = [json.loads(p.read_text()) for p in (tmp_path / "out").rglob("summary.json")]
    group = summary["groups"]["lm-eval:gen_group"]  # the sweep's run records the group's aggregate too
    task = summary["tasks"]["lm-eval:tiny_gen"]["metrics"]["exact_match,none"]
    assert group["metrics"]["exact_match,none"]["value"] == task["value"] and group["sizes"] == {"lm-eval:tiny_gen": 6}


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


def test_a_task_whose_function_does_not_import_is_one_line(tmp_path: Path, test_server: object) -> None:
    """A ``!function`` whose module is missing (or lacks the function) was a 269-line traceback, exit 1: one line
    naming the task's file and the import that failed, exit 2, nothing sent."""
    from tests.test_bad_input import assert_one_error_line, invoke

    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "d.jsonl").write_text('{"question": "q", "answer": "a"}\n')
    (folder / "utils.py").write_text("def other(doc):\n    return doc['question']\n")
    for name, fn in (("bad_module", "missing_module.fn"), ("bad_function", "utils.missing_fn")):
        (folder / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'd.jsonl'}\n"
            f"test_split: test\noutput_type: generate_until\ndoc_to_text: !function {fn}\n"
            'doc_to_target: "{{answer}}"\nmetric_list:\n  - metric: exact_match\n'
        )
    url = test_server.url  # type: ignore[attr-defined]
    run = ["run", "lm-eval:bad_module", "--include-path", str(folder), "--endpoint", url, "-o", str(tmp_path / "o")]
    assert_one_error_line(invoke(run), "lm-eval task 'bad_module'", "bad_module.yaml", "'missing_module'")
    assert test_server.requests == [] and not (tmp_path / "o" / "samples.jsonl").exists()  # type: ignore[attr-defined]
    show = ["tasks", "show", "lm-eval:bad_function", "--include-path", str(folder)]
    assert_one_error_line(invoke(show), "lm-eval task 'bad_function'", "bad_function.yaml", "missing_fn")


def _malformed_echo(mode: int, logprobs: dict[str, Any]) -> None:
    """An echoed answer's logprobs made malformed in one way (``mode`` 1 to 5)."""
    if mode == 1:
        logprobs["token_logprobs"] = None
    elif mode == 2:
        logprobs["token_logprobs"] = [None, *(str(v) for v in logprobs["token_logprobs"][1:])]
    elif mode == 3:
        del logprobs["top_logprobs"]
    elif mode == 4:
        logprobs["top_logprobs"] = None
    elif mode == 5:
        logprobs["top_logprobs"] = [None] * len(logprobs["top_logprobs"])


def test_a_malformed_echoed_answer_is_that_requests_failure_and_a_resume_passes_it(
    tmp_path: Path, tasks: Path, test_server: object
) -> None:
    """Echoed token_logprobs null or strings, top_logprobs missing or null ended the run in lm-eval's
    parse_logprobs (a traceback, no summary) and its resume on the same answer: each is now that request's
    no_answer with the reason, its document left out of the metrics, the rest scored, the summary written."""
    from tests.tampering import TamperingProxy

    modes: dict[tuple[int, ...], int] = {}  # the first five prompts (doc 0's four choices, doc 1's first): a mode each

    def tamper(path: str, body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
        if body.get("echo") and answer.get("choices"):
            prompt = tuple(body["prompt"])
            if prompt not in modes and len(modes) < 5:
                modes[prompt] = len(modes) + 1
            if prompt in modes:
                _malformed_echo(modes[prompt], answer["choices"][0]["logprobs"])
        return answer

    out = tmp_path / "run"
    args = ["run", "lm-eval:tiny_mc", "--include-path", str(tasks), "-o", str(out), "-q", "--concurrency", "1",
            "--no-warmup", "--no-report"]  # fmt: skip
    srv = test_server
    with TamperingProxy(srv.url.removesuffix("/v1"), tamper) as proxy:  # type: ignore[attr-defined]
        for attempt in ("first", "resume"):
            res = CliRunner().invoke(app, [*args, "--endpoint", proxy.url])
            if res.exception is not None and not isinstance(res.exception, SystemExit):
                raise res.exception
            assert res.exit_code == 0, res.output
            records = [orjson.loads(x) for x in (out / "samples.jsonl").read_bytes().splitlines()]
            failed = {(r["doc_id"], r["sample_index"]): r["extraction"] for r in records if r["status"] != "ok"}
            assert sorted(failed) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)] and len(records) == 4 * len(QA)
            assert "no echoed prompt logprobs" in failed[(0, 0)]
            assert "token_logprobs holds '-" in failed[(0, 1)] and "top_logprobs is NoneType" in failed[(0, 3)]
            assert "top_logprobs is NoneType" in failed[(0, 2)] and "not a mapping" in failed[(1, 0)]
            summary = json.loads((out / "summary.json").read_text())["tasks"]["lm-eval:tiny_mc"]
            assert summary["counts"]["no_answer"] == 5 and summary["metrics"]["acc,none"]["n"] == len(QA) - 2
            if attempt == "first":  # a run that died on these answers kept none of them: the resume sends them
                kept = [x for x, r in zip((out / "samples.jsonl").read_bytes().splitlines(), records, strict=True)
                        if r["status"] == "ok"]  # fmt: skip
                (out / "samples.jsonl").write_bytes(b"".join(x + b"\n" for x in kept))
                (out / "summary.json").unlink()
                sent = len(srv.requests)  # type: ignore[attr-defined]
    assert len(srv.requests) - sent == 5  # type: ignore[attr-defined]
