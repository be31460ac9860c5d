"""The numerics run side (issue 28): the ``logprobs`` task kind and the built-in ``numerics`` tasks on the test
server: its requests, the positions stored in ``positions.bin`` against what the server sent, the samples'
figures and the summary, resume, the noise-floor pass, failed and misfit answers, the chat variant, the sweep;
and the test server's prompt logprobs (vLLM's shape, /tokenize, perturbations of known size).

Here: those of its tests that run in-process; the others are in tests/integration/test_numerics_run.py."""

from __future__ import annotations

import pytest

from evalkit.contracts import GenParams, Request, Response
from evalkit.errors import TaskError
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings
from tests.integration.test_numerics_run import TEXT


# ------------------------------------------------------------------------------------------- the task
def test_numerics_requests_main_pass_then_reversed_noise_floor() -> None:
    task = Registry().get("numerics")
    reqs = task.build_requests(TaskSettings(num_samples=2, endpoint_kind="completions"))
    main, again = reqs[:64], reqs[64:]
    assert len(reqs) == 80 and [r.doc_id for r in main] == list(range(64))
    assert [r.doc_id for r in again] == list(range(15, -1, -1)) and {r.sample_index for r in again} == {1}
    assert all(r.gen == GenParams(max_tokens=64, temperature=0.0, prompt_logprobs=20) for r in reqs)
    assert main[0].prompt.startswith("Question: Janet") and "\nAnswer: Janet sells 16 - 3 - 4" in main[0].prompt
    assert main[0].prompt.endswith("#### 18") and again[-1].prompt == main[0].prompt
    few = task.build_requests(TaskSettings(limit=5, num_samples=2, endpoint_kind="completions"))
    assert [(r.doc_id, r.sample_index) for r in few] == [(d, 0) for d in range(5)] + [(d, 1) for d in range(4, -1, -1)]
    # one sample: no noise-floor pass, one request per document (what evalkit watch checks)
    assert task.count_requests(TaskSettings(num_samples=1, docs=(3,))) == 1
    with pytest.raises(TaskError, match="num_samples must be 2"):
        task.build_requests(TaskSettings(num_samples=3))
    chat = Registry().get("numerics-chat").build_requests(TaskSettings(limit=1, endpoint_kind="chat"))
    assert chat[0].messages is not None and [m["role"] for m in chat[0].messages] == ["user", "assistant"]


def test_misfit_answers_are_bad_positions_not_crashes() -> None:
    task = Registry().get("numerics")
    req = Request("numerics", 0, 0, TEXT, GenParams(max_tokens=4, prompt_logprobs=20))
    for raw in (
        {},
        {"prompt_token_ids": [1, 2, 3], "prompt_logprobs": []},
        {"prompt_token_ids": [1, 2], "prompt_logprobs": [None, {"9": {"logprob": -1.0, "rank": 1}}]},
        {"prompt_token_ids": [1], "prompt_logprobs": [None]},
    ):
        score = task.score(req, Response(text="x", finish_reason="length", logprobs=raw))
        assert score.status == "bad_positions" and score.positions is None and score.figures is None
        assert score.extraction and "positions do not fit" in score.extraction
