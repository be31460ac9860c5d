"""The answer sink: answers handed off the event loop are scored and stored in batches, each future settled with
its own record or its own error."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from evalkit.contracts import GenParams, Request, Response, SampleRecord, Score
from evalkit.runner.answer_sink import AnswerSink
from evalkit.store.identity import record_for


class Scorer:
    """Scores "bad" answers with an error, the rest correct; counts its calls (one per batch)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def score_many(self, items: list[tuple[str, Any, Any]], on_part: Any) -> Future[None]:
        self.calls.append(len(items))
        for _, _, resp in items:
            on_part(
                (False, ValueError("unscorable"))
                if resp.text == "bad"
                else (True, Score(status="ok", extracted={}, correct={}))
            )
        done: Future[None] = Future()
        done.set_result(None)
        return done


def test_answers_are_scored_and_stored_in_batches_each_with_its_own_outcome() -> None:
    scorer, writes = Scorer(), []

    def store_many(answers: list[tuple[Request, Response, str, Score | None]]) -> list[SampleRecord]:
        writes.append(len(answers))
        return [record_for(req, resp, key, score) for req, resp, key, score in answers]

    async def run() -> list[Any]:
        sink = AnswerSink(scorer, store_many, ThreadPoolExecutor(1))  # type: ignore[arg-type]
        futures = []
        for i in range(1000):
            req = Request("t", i, 0, f"p{i}", GenParams(max_tokens=4))
            resp = Response(text=None, error="HTTP 500") if i == 7 else Response(text="bad" if i == 3 else "ok")
            futures.append(sink.put(req, resp, f"k{i}"))
        return await asyncio.gather(*futures, return_exceptions=True)

    out = asyncio.run(run())
    assert isinstance(out[3], ValueError)  # its scorer's error, for it alone
    assert out[7].status == "api_error" and out[7].error == "HTTP 500"  # a failed request: stored, never scored
    assert [r.doc_id for r in out if isinstance(r, SampleRecord)] == [i for i in range(1000) if i != 3]
    assert sum(writes) == 999 and len(writes) < 20  # batches, not a write per answer
    assert sum(scorer.calls) == 999 and len(scorer.calls) < 20


def test_a_failed_store_write_fails_every_answer_of_its_batch() -> None:
    def store_many(answers: list[Any]) -> list[SampleRecord]:
        raise OSError("disk full")

    async def run() -> BaseException:
        sink = AnswerSink(Scorer(), store_many, ThreadPoolExecutor(1))  # type: ignore[arg-type]
        fut = sink.put(Request("t", 0, 0, "p", GenParams(max_tokens=4)), Response(text="ok"), "k0")
        with pytest.raises(OSError, match="disk full"):
            await fut
        return fut.exception()  # type: ignore[return-value]

    assert isinstance(asyncio.run(run()), OSError)
