"""The aime25 task: requests, scoring of responses, and the summary metrics checked by hand.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_aime_task.py."""

from __future__ import annotations

import pytest

from evalkit.contracts import Request, Response
from tests.unit.test_aime_task import TASKS, YAML, load_module, spec, task  # noqa: F401 (helpers and fixtures shared with that file)

# ------------------------------------------------------------------------------------------------- scoring


def req(target: str = "70") -> Request:
    from evalkit.contracts import GenParams

    return Request(task="aime25", doc_id=0, sample_index=0, prompt="p", gen=GenParams(max_tokens=10), target=target)


@pytest.mark.parametrize(
    ("text", "reasoning", "finish", "status", "extracted", "correct", "extraction"),
    [
        (r"The answer is $\boxed{70}$.", "long thought", "stop", "ok", "70", True, "boxed/integer"),
        (r"\boxed{69}", None, "stop", "ok", "69", False, "boxed/integer"),
        ("<think>\\boxed{69}</think>\\boxed{070}", None, "stop", "ok", "070", True, "boxed/integer"),
        (r"\boxed{\dfrac{140}{2}}", None, "stop", "ok", r"\dfrac{140}{2}", True, "boxed/math_verify"),
        ("The answer is 70.", None, "stop", "no_answer", None, False, "none"),
        (None, r"thinking... \boxed{70}", "stop", "no_answer", None, False, "none"),
        ("", "thinking...", "length", "truncated", None, False, "none"),
        ("<think>thinking... \\boxed{70}", None, "length", "truncated", None, False, "none"),
        (
            r"\boxed{70} but let me verify again",
            "thought",
            "length",
            "truncated",
            "70",
            True,
            "boxed/integer",
        ),
        (None, None, "stop", "empty", None, False, "none"),
        ("", "", "stop", "empty", None, False, "none"),
        ("  ", None, "length", "empty", None, False, "none"),
    ],
)
def test_score(task, text, reasoning, finish, status, extracted, correct, extraction):  # noqa: F811 (the fixture imported above)
    s = task.score(req(), Response(text=text, reasoning=reasoning, finish_reason=finish))
    assert s.status == status
    assert s.extracted == {"boxed": extracted}
    assert s.correct == {"boxed": correct}
    assert s.extraction == extraction
