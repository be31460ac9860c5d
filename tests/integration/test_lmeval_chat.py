"""``lm-eval:NAME`` tasks with lm-eval's chat formatting (``--apply-chat-template``, ``--fewshot-as-multiturn``,
``--system-instruction``) against the deterministic test server: the chat requests evalkit sends carry exactly the
messages, stop strings, ``max_tokens``, temperature and seed that ``lm_eval --model local-chat-completions
--apply_chat_template`` sends (lm-eval's own ``simple_evaluate`` run against the same server, its task built by
lm-eval's ``ConfigurableTask``), few-shot examples as turns or folded into one message, and the scores equal; the
task version names the formatting; the one-line errors. Parity on real vLLM: tests/system/test_lmeval_chat_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.tasks.lmeval_source import task_manager
from evalkit.testing.server import TestServer
from tests.lmeval_tasks import QA, write_tasks

SYSTEM = "You are a terse quiz bot."


@pytest.fixture(autouse=True)
def _cache(lm_eval_cache: Path) -> None:
    """Each test its own evalkit cache (tests/conftest.py)."""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tasks(tmp_path_factory.mktemp("lm-eval-tasks"))


def _sent(srv: TestServer) -> dict[str, dict[str, Any]]:
    """The chat requests the server received, by their messages: the fields lm-eval's chat model sets."""
    out = {}
    for r in srv.requests:
        assert r.path == "/v1/chat/completions", r.path
        b = r.body
        key = orjson.dumps(b["messages"]).decode()
        out[key] = {k: b.get(k) for k in ("messages", "stop", "max_tokens", "temperature", "seed")}
    return out


def _lm_eval(srv: TestServer, folder: Path, multiturn: bool, system: str | None) -> dict[str, Any]:
    """lm-eval's simple_evaluate with its local-chat-completions model and --apply_chat_template on ``srv``."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.models.openai_completions import LocalChatCompletion

    lm = LocalChatCompletion(base_url=srv.url + "/chat/completions", model="test-model", num_concurrent=1)
    tm = task_manager((str(folder.resolve()),))  # lm-eval's TaskManager over the include path
    out = simple_evaluate(
        model=lm, tasks=["tiny_chat"], task_manager=tm, apply_chat_template=True,
        fewshot_as_multiturn=multiturn, system_instruction=system, log_samples=False,
    )  # fmt: skip
    assert out is not None
    return dict(out["results"]["tiny_chat"])


def _evalkit(srv: TestServer, folder: Path, out: Path, *extra: str) -> dict[str, Any]:
    args = ["run", "lm-eval:tiny_chat", "--include-path", str(folder), "--endpoint", srv.url, "-o", str(out), "-q"]
    res = CliRunner().invoke(app, [*args, "--concurrency", "2", "--no-warmup", "--no-report", *extra])
    assert res.exit_code == 0, res.output
    return dict(json.loads((out / "summary.json").read_text())["tasks"]["lm-eval:tiny_chat"])


@pytest.mark.parametrize("multiturn", [True, False], ids=["multiturn", "single-turn"])
def test_chat_requests_equal_lm_evals_local_chat_completions(tmp_path: Path, tasks: Path, multiturn: bool) -> None:
    with TestServer() as srv:
        theirs_results = _lm_eval(srv, tasks, multiturn, SYSTEM)
        theirs = _sent(srv)
        srv.reset()
        flag = "--fewshot-as-multiturn" if multiturn else "--no-fewshot-as-multiturn"
        summary = _evalkit(srv, tasks, tmp_path / "run", "--apply-chat-template", flag, "--system-instruction", SYSTEM)
        ours = _sent(srv)
    assert len(theirs) == len(QA) and ours == theirs
    first = next(iter(ours.values()))
    assert first["stop"] == ["\n\n", ".", "Question:", "<|im_end|>"]  # lm-eval sends four stop strings at most
    assert first["max_tokens"] == 6 and first["seed"] == 1234 and first["temperature"] == 0.0
    msgs = first["messages"]
    assert msgs[0] == {"role": "system", "content": f"{SYSTEM}\n\nAnswer with one word."}
    if multiturn:  # two examples as user/assistant turns, then the question
        assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user"]
    else:
        assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"].count("Question:") == 3
    assert summary["metrics"]["exact_match,none"]["value"] == theirs_results["exact_match,none"]
    assert summary["counts"]["total"] == len(QA)


def test_runs_with_and_without_the_chat_template_are_never_mixed(tmp_path: Path, tasks: Path) -> None:
    """Another formatting is another task version: its run dir is not resumed, and the gate refuses the pair."""
    with TestServer() as srv:
        _evalkit(srv, tasks, tmp_path / "chat", "--apply-chat-template")
        _evalkit(srv, tasks, tmp_path / "plain", "--endpoint-kind", "chat")
        args = ["run", "lm-eval:tiny_chat", "--include-path", str(tasks), "--endpoint", srv.url, "--no-warmup", "-q"]
        res = CliRunner().invoke(app, [*args, "--endpoint-kind", "chat", "-o", str(tmp_path / "chat")])
    assert res.exit_code != 0 and "holds a run with a different config" in res.output
    res = CliRunner().invoke(app, ["gate", "-b", str(tmp_path / "plain"), "-c", str(tmp_path / "chat")])
    assert res.exit_code == 2 and "+chat-multiturn" in res.output, res.output
