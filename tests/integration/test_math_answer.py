"""Extraction, normalisation, verification and reasoning split for AIME-style \boxed{} answers.

Here: those of its tests that use math-verify's worker process; the others are in tests/unit/test_math_answer.py."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from evalkit.scoring import math_answer
from evalkit.scoring.math_answer import (
    score_answer,
    verify,
)
from evalkit.scoring.reasoning import split_reasoning
from tests.unit.test_math_answer import CASES, case  # noqa: F401 (helpers and fixtures shared with that file)

# fmt: on


@pytest.mark.parametrize(
    ("content", "reasoning", "finish", "gold", "status", "extracted", "correct", "how"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_realistic_outputs(content, reasoning, finish, gold, status, extracted, correct, how):
    answer, _ = split_reasoning(content, reasoning)
    got = score_answer(answer, gold, finish_reason=finish)
    assert (got.status, got.extracted, got.correct, got.how) == (status, extracted, correct, how)


def test_verify_falls_back_to_math_verify():
    assert verify(r"\dfrac{140}{2}", "70") == (True, "math_verify")
    assert verify(r"\frac{1}{2}", "70") == (False, "math_verify")
    assert verify(r"\sqrt{4900}", "70") == (True, "math_verify")


def test_verify_from_worker_threads():
    # math-verify's own signal-based timeout raises off the main thread; the out-of-process verifier must not.
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda s: verify(s, "70"), [r"\dfrac{140}{2}", r"\frac{280}{4}", "70", "2^{6}+6"]))
    assert results == [(True, "math_verify"), (True, "math_verify"), (True, "integer"), (True, "math_verify")]


def test_verify_hard_timeout_on_a_hanging_expression():
    # sympy never finishes comparing 9^(9^(9^9)) with 70; the worker is killed after timeout_s.
    t0 = time.monotonic()
    assert verify(r"9^{9^{9^{9}}}", "70", timeout_s=1.0) == (None, "timeout")
    assert time.monotonic() - t0 < 15
    # the verifier recovers with a fresh worker
    assert verify(r"\dfrac{210}{3}", "70") == (True, "math_verify")


def test_worker_timeout_kills_and_restarts():
    worker = math_answer._VerifierProcess()
    try:
        assert worker.request({"extracted": r"\frac{4}{2}", "gold": "2"}, timeout=30) == {"verdict": True}
        starts = worker.starts
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            worker.request({"op": "sleep", "seconds": 60}, timeout=0.5)
        assert time.monotonic() - t0 < 5
        assert worker._proc is None
        assert worker.request({"extracted": r"\frac{4}{2}", "gold": "3"}, timeout=30) == {"verdict": False}
        assert worker.starts == starts + 1
    finally:
        worker.close()
