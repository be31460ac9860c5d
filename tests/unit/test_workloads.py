"""Workloads (random, sharegpt, trace, sessions: evalkit/tasks/workload_task.py) and probes (``--probe TASK:SHARE``,
evalkit/runner/probes.py) against the deterministic test server: exact lengths, the body's forcing fields, the
trace's timings and shared blocks, ShareGPT's filter, the probes' scores, the gate on speed only, bad input.

Here: those of its tests that run in-process; the others are in tests/integration/test_workloads.py."""

from __future__ import annotations

import numpy as np

from evalkit.client.answer_fields import length_note
from evalkit.contracts import GenParams, Request
from evalkit.tasks import workload_data as wd


def test_random_prompts_follow_vllm_random_dataset() -> None:
    vocab = np.arange(100, 200)
    built = wd.random_prompts(vocab, 4, 10, 5, 0.0, 3, seed=0)
    rng = np.random.default_rng(0)  # vLLM's order of draws: input lens, output lens, offsets, then the prefix
    rng.integers(10, 11, size=4), rng.integers(5, 6, size=4)
    offsets = rng.integers(0, 100, size=4)
    prefix = vocab[rng.integers(0, 100, size=3)].tolist()
    assert built.prompt_ids[2] == prefix + vocab[(offsets[2] + 2 + np.arange(10)) % 100].tolist()
    assert built.output_lens == [5, 5, 5, 5]


def test_usage_differing_from_asked_lengths_is_noted() -> None:
    req = Request("random", 0, 0, "", GenParams(max_tokens=8, min_tokens=8, ignore_eos=True), prompt_ids=(1, 2, 3))
    assert length_note(req, {"prompt_tokens": 3, "completion_tokens": 8, "reasoning_tokens": None}) is None
    note = length_note(req, {"prompt_tokens": 4, "completion_tokens": 5, "reasoning_tokens": None})
    assert note is not None and "4 prompt tokens for 3" in note and "5 output tokens, 8 asked" in note
