"""``lm-eval:NAME`` tasks with lm-eval's chat formatting (``--apply-chat-template``, ``--fewshot-as-multiturn``,
``--system-instruction``) against the deterministic test server: the chat requests evalkit sends carry exactly the
messages, stop strings, ``max_tokens``, temperature and seed that ``lm_eval --model local-chat-completions
--apply_chat_template`` sends (lm-eval's own ``simple_evaluate`` run against the same server, its task built by
lm-eval's ``ConfigurableTask``), few-shot examples as turns or folded into one message, and the scores equal; the
task version names the formatting; the one-line errors. Parity on real vLLM: tests/system/test_lmeval_chat_vllm.py.

Here: those of its tests that run in-process; the others are in tests/integration/test_lmeval_chat.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.errors import EvalkitError
from evalkit.tasks.lmeval_source import expand_lm_eval_tasks
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from tests.integration.test_lmeval_chat import SYSTEM, tasks  # noqa: F401 (helpers and fixtures shared with that file)


def _task(folder: Path, name: str, chat: dict[str, Any] | None) -> Any:
    names, generated = expand_lm_eval_tasks([f"lm-eval:{name}"], [folder], chat=chat)
    assert generated is not None
    return Registry([generated]).get(names[0])


def test_version_endpoint_and_the_one_line_errors(tasks: Path) -> None:  # noqa: F811 (the fixture imported above)
    from evalkit.tasks.lmeval_chat import chat_options

    plain = _task(tasks, "tiny_chat", None)
    chat = _task(tasks, "tiny_chat", chat_options(True, None, None))
    single = _task(tasks, "tiny_chat", chat_options(True, False, SYSTEM))
    system_only = _task(tasks, "tiny_chat", chat_options(False, None, SYSTEM))
    assert chat.version == plain.version + "+chat-multiturn" and single.version.startswith(plain.version + "+chat+sys.")
    assert (
        system_only.version.startswith(plain.version + "+sys.") and len({t.version for t in (plain, system_only)}) == 2
    )
    assert (plain.endpoint_kind, chat.endpoint_kind) == ("completions", "chat")
    # a system instruction without the chat template: lm-eval's text prompt, the instruction first
    assert system_only.build_requests(TaskSettings(limit=1))[0].prompt.startswith(f"{SYSTEM}\n\nAnswer with one word.")
    with pytest.raises(EvalkitError, match="--apply-chat-template sends chat messages; drop --endpoint-kind"):
        chat.build_requests(TaskSettings(limit=1, endpoint_kind="completions"))
    with pytest.raises(EvalkitError, match=r"multiple_choice task is scored by loglikelihood.*without --apply-chat"):
        _task(tasks, "tiny_mc", chat_options(True, None, None))
    with pytest.raises(EvalkitError, match="--fewshot-as-multiturn needs --apply-chat-template"):
        chat_options(False, True, None)
    with pytest.raises(EvalkitError, match="apply to lm-eval:NAME tasks only"):
        expand_lm_eval_tasks(["gsm8k"], chat=chat_options(True, None, None))
    res = CliRunner().invoke(app, ["run", "lm-eval:tiny_mc", "--include-path", str(tasks), "--endpoint",
                                   "http://127.0.0.1:9/v1", "--apply-chat-template", "-q"])  # fmt: skip
    assert res.exit_code != 0 and "is for generate_until tasks" in res.output
