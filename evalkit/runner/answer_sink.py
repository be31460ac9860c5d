"""Answers handed off the event loop in batches: scored in the scoring process (one call per batch) and stored
(one write per batch) by one thread, so the loop that times the requests spends a few µs per answer on them.

The loop hands each answer over with :meth:`AnswerSink.put` and gets an asyncio future: its record once stored,
or the error that kept it from being stored (a failed store write, a scorer that raised). Batches form by
themselves: whatever came in while the previous batch was scored and written is the next one (at most
``batch_size``), so a slow scorer or disk means fewer, larger calls and never a call per answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from evalkit.contracts import Request, Response, SampleRecord, Score
from evalkit.runner.worker import Worker

Item = tuple[Request, Response, str, "asyncio.Future[SampleRecord]"]  # request, answer, its key, its future
StoreMany = Callable[[list[tuple[Request, Response, str, Score | None]]], list[SampleRecord]]


class AnswerSink:
    """Scores (``scoring``, answers without an error only: failed requests are never scored) and stores
    (``store_many``: the records of a batch, written at once) the answers the loop hands over, in ``pool``
    (one thread: batches are stored in the order they came)."""

    def __init__(self, scoring: Worker, store_many: StoreMany, pool: Executor, batch_size: int = 512) -> None:
        self.scoring, self.store_many, self.pool, self.batch_size = scoring, store_many, pool, batch_size
        self._items: list[Item] = []
        self._lock = threading.Lock()
        self._draining = False

    def put(self, req: Request, resp: Response, key: str) -> asyncio.Future[SampleRecord]:
        """Hand one answer over (from the event loop); the future ends once its record is stored."""
        fut: asyncio.Future[SampleRecord] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._items.append((req, resp, key, fut))
            if self._draining:
                return fut
            self._draining = True
        self.pool.submit(self._drain)
        return fut

    def _drain(self) -> None:
        """In the pool's thread: batches until none is left."""
        while True:
            with self._lock:
                batch, self._items = self._items[: self.batch_size], self._items[self.batch_size :]
                if not batch:
                    self._draining = False
                    return
            try:
                outcomes: list[SampleRecord | BaseException] = list(self._handle(batch))
            except BaseException as e:  # the store failed: no answer of the batch is stored
                outcomes = [e] * len(batch)
            loop = batch[0][3].get_loop()
            with contextlib.suppress(RuntimeError):  # the loop is gone (the run was interrupted)
                loop.call_soon_threadsafe(_settle, [item[3] for item in batch], outcomes)

    def _handle(self, batch: list[Item]) -> list[SampleRecord | BaseException]:
        """Score the batch's answers, store the records of those that scored (or failed as requests), and each
        item's record or scoring error."""
        to_score = [i for i, (_, resp, _, _) in enumerate(batch) if resp.error is None]
        scored: dict[int, tuple[bool, Any]] = {}
        if to_score:
            items = [(batch[i][0].task, batch[i][0], batch[i][1]) for i in to_score]
            parts: list[tuple[bool, Any]] = []
            error = self.scoring.score_many(items, parts.append).exception()
            if error is not None:  # the scoring process died mid-batch: those it scored are stored, the rest fail
                parts += [(False, error)] * (len(to_score) - len(parts))
            scored = dict(zip(to_score, parts, strict=True))
        stored: list[tuple[Request, Response, str, Score | None]] = []
        outcomes: list[SampleRecord | BaseException | None] = []
        for i, (req, resp, key, _) in enumerate(batch):
            ok, score = scored.get(i, (True, None))
            if ok:
                stored.append((req, resp, key, score))
                outcomes.append(None)
            else:
                outcomes.append(score)
        records = iter(self.store_many(stored))
        return [next(records) if o is None else o for o in outcomes]


def _settle(futures: list[asyncio.Future[SampleRecord]], outcomes: list[SampleRecord | BaseException]) -> None:
    for fut, outcome in zip(futures, outcomes, strict=True):
        if fut.done():  # cancelled meanwhile
            continue
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)
