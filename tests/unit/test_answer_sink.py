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


def test_a_task_scored_in_the_run_process_is_never_handed_to_the_scoring_process() -> None:
    """Answers of a task in ``local`` are scored by its scorer in the sink's thread (its error for that answer
    alone); the other tasks' still go to the scoring process, and failed requests to neither."""
    scorer, here = Scorer(), []

    def score_here(req: Request, resp: Response) -> Score:
        here.append(req.doc_id)
        if resp.text == "bad":
            raise ValueError("unscorable here")
        return Score(status="empty" if not resp.text else "ok", extracted={}, correct={})

    def store_many(answers: list[tuple[Request, Response, str, Score | None]]) -> list[SampleRecord]:
        return [record_for(req, resp, key, score) for req, resp, key, score in answers]

    async def run() -> list[Any]:
        sink = AnswerSink(scorer, store_many, ThreadPoolExecutor(1), local={"w": score_here})  # type: ignore[arg-type]
        futures = []
        for i in range(40):
            req = Request("w" if i % 2 else "t", i, 0, f"p{i}", GenParams(max_tokens=4))
            resp = Response(text=None, error="HTTP 500") if i == 5 else Response(text="bad" if i == 7 else "ok")
            futures.append(sink.put(req, resp, f"k{i}"))
        return await asyncio.gather(*futures, return_exceptions=True)

    out = asyncio.run(run())
    assert sorted(here) == [i for i in range(1, 40, 2) if i != 5]  # the local task's answers, the failed one not
    assert sum(scorer.calls) == 20  # the other task's, all of them
    assert isinstance(out[7], ValueError) and str(out[7]) == "unscorable here"
    assert out[5].status == "api_error"
    assert [r.doc_id for r in out if isinstance(r, SampleRecord)] == [i for i in range(40) if i != 7]


def test_answers_handed_over_together_get_one_future_with_each_ones_outcome_in_order() -> None:
    """``put_many``: one future per hand-over, its outcomes in the order given (a record, or the error of that answer
    alone), ending only once every answer of it is stored, even when a hand-over spans several store batches."""
    writes: list[int] = []

    def store_many(answers: list[tuple[Request, Response, str, Score | None]]) -> list[SampleRecord]:
        writes.append(len(answers))
        return [record_for(req, resp, key, score) for req, resp, key, score in answers]

    async def run() -> list[list[Any]]:
        sink = AnswerSink(Scorer(), store_many, ThreadPoolExecutor(1), batch_size=8)  # type: ignore[arg-type]
        handed = []
        for g in range(5):
            answers = []
            for j in range(20):
                i = 20 * g + j
                req = Request("t", i, 0, f"p{i}", GenParams(max_tokens=4))
                answers.append((req, Response(text="bad" if i == 23 else "ok"), f"k{i}"))
            handed.append(sink.put_many(answers))
        empty = sink.put_many([])
        assert empty.done() and empty.result() == []
        return list(await asyncio.gather(*handed))

    out = asyncio.run(run())
    assert len(writes) >= 12  # every hand-over spans store batches of at most 8
    assert [len(o) for o in out] == [20] * 5
    assert isinstance(out[1][3], ValueError)  # the error of answer 23 alone
    assert [r.doc_id for o in out for r in o if isinstance(r, SampleRecord)] == [i for i in range(100) if i != 23]
