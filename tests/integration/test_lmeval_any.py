"""``lm-eval:NAME`` tasks without vLLM: names and groups resolved by lm-eval's TaskManager (``--include-path``),
``tasks list --lm-eval``, loglikelihood requests built on lm-eval's token boundaries (the test server's
``/tokenize``) and sent as local-completions sends them, a recorded vLLM answer parsed to lm-eval's own value,
per-document scoring, local data (``--data-dir``) and the one-line error without it, and the gate refusing runs
of different task versions; a task YAML that lm-eval cannot load is one line. Parity with lm-eval on real vLLM:
tests/system/test_lmeval_any_vllm.py.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_lmeval_any.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.errors import EvalkitError
from evalkit.tasks.spec import TaskSettings
from tests.lmeval_tasks import QA, write_tasks
from tests.unit.test_lmeval_any import _task, tasks  # noqa: F401 (helpers and fixtures shared with that file)


def _tokens(url: str, text: str) -> list[int]:
    body = json.dumps({"prompt": text, "add_special_tokens": False}).encode()
    req = urllib.request.Request(url + "/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return list(json.loads(r.read())["tokens"])


def test_multiple_choice_requests_on_lm_evals_token_boundaries(tasks: Path, test_server: object) -> None:  # noqa: F811 (the fixture imported above)
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


def test_a_run_and_the_gate_refusing_another_task_version(tmp_path: Path, tasks: Path, test_server: object) -> None:  # noqa: F811 (the fixture imported above)
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


def test_a_sweep_runs_a_group_and_tabulates_its_tasks(
    tmp_path: Path,
    tasks: Path,  # noqa: F811 (the fixture imported above)
    test_server: object,
    monkeypatch: pytest.MonkeyPatch,
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


def test_a_task_whose_function_does_not_import_is_one_line(tmp_path: Path, test_server: object) -> None:
    """A ``!function`` whose module is missing (or lacks the function) was a 269-line traceback, exit 1: one line
    naming the task's file and the import that failed, exit 2, nothing sent."""
    from tests.cli_errors import assert_one_error_line, invoke

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
    tmp_path: Path,
    tasks: Path,  # noqa: F811 (the fixture imported above)
    test_server: object,
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
