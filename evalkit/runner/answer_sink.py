"""Answers handed off the event loop in batches: scored in the scoring process (one call per batch) and stored
(one write per batch) by one thread, so the loop that times the requests spends a few µs per answer on them.

The loop hands each answer over with :meth:`AnswerSink.put` and gets an asyncio future: its record once stored,
or the error that kept it from being stored (a failed store write, a scorer that raised); answers that came back
together (a sender process's batch) go over with :meth:`AnswerSink.put_many`, one future for all. Batches form by
themselves: whatever came in while the previous batch was scored and written is the next one (at most
``batch_size``), so a slow scorer or disk means fewer, larger calls and never a call per answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from evalkit.contracts import Request, Response, SampleRecord, Score
from evalkit.runner.worker import Worker

Outcome = SampleRecord | BaseException  # an answer's record once stored, or what kept it from being stored
StoreMany = Callable[[list[tuple[Request, Response, str, Score | None]]], list[SampleRecord]]
Scorer = Callable[[Request, Response], Score]


class _Handed:
    """Answers handed over together: their outcomes, filled in as their batches are stored, and the future that
    ends with the last of them (``one``: a single answer's future, with its record or its error)."""

    __slots__ = ("fut", "left", "one", "outcomes")

    def __init__(self, fut: asyncio.Future[Any], n: int, one: bool) -> None:
        self.fut, self.left, self.one = fut, n, one
        self.outcomes: list[Outcome | None] = [None] * n

    def settle(self, i: int, outcome: Outcome) -> None:
        self.outcomes[i] = outcome
        self.left -= 1
        if self.left or self.fut.done():  # more to come, or cancelled meanwhile
            return
        if not self.one:
            self.fut.set_result(self.outcomes)
        elif isinstance(outcome, BaseException):
            self.fut.set_exception(outcome)
        else:
            self.fut.set_result(outcome)


Item = tuple[Request, Response, str, _Handed, int]  # request, answer, its key, its hand-over, its place in it


class AnswerSink:
    """Scores (answers without an error only: failed requests are never scored) and stores (``store_many``: the
    records of a batch, written at once) the answers the loop hands over, in ``pool`` (one thread: batches are
    stored in the order they came). An answer is scored by ``scoring`` (the scoring process), or by its task's
    scorer in ``local`` (task name -> ``Task.score``, for tasks whose ``scores_in_run_process``) in that thread."""

    def __init__(
        self,
        scoring: Worker,
        store_many: StoreMany,
        pool: Executor,
        batch_size: int = 512,
        local: Mapping[str, Scorer] | None = None,
    ) -> None:
        self.scoring, self.store_many, self.pool, self.batch_size = scoring, store_many, pool, batch_size
        self.local = local or {}
        self._items: list[Item] = []
        self._lock = threading.Lock()
        self._draining = False

    def put(self, req: Request, resp: Response, key: str) -> asyncio.Future[SampleRecord]:
        """Hand one answer over (from the event loop); the future ends once its record is stored."""
        fut: asyncio.Future[SampleRecord] = asyncio.get_running_loop().create_future()
        self._add([(req, resp, key, _Handed(fut, 1, True), 0)])
        return fut

    def put_many(self, answers: Sequence[tuple[Request, Response, str]]) -> asyncio.Future[list[Outcome]]:
        """Hand several answers over at once (from the event loop): one future, which ends once every one of them
        is stored or failed, with their outcomes in order (no future or callback per answer)."""
        fut: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        handed = _Handed(fut, len(answers), False)
        if not answers:
            fut.set_result([])
            return fut
        self._add([(req, resp, key, handed, i) for i, (req, resp, key) in enumerate(answers)])
        return fut

    def _add(self, items: list[Item]) -> None:
        with self._lock:
            self._items += items
            if self._draining:
                return
            self._draining = True
        self.pool.submit(self._drain)

    def _drain(self) -> None:
        """In the pool's thread: batches until none is left."""
        while True:
            with self._lock:
                batch, self._items = self._items[: self.batch_size], self._items[self.batch_size :]
                if not batch:
                    self._draining = False
                    return
            try:
                outcomes: list[Outcome] = self._handle(batch)
            except BaseException as e:  # the store failed: no answer of the batch is stored
                outcomes = [e] * len(batch)
            loop = batch[0][3].fut.get_loop()
            with contextlib.suppress(RuntimeError):  # the loop is gone (the run was interrupted)
                loop.call_soon_threadsafe(_settle, batch, outcomes)

    def _handle(self, batch: list[Item]) -> list[Outcome]:
        """Score the batch's answers, store the records of those that scored (or failed as requests), and each
        item's record or scoring error."""
        scored: dict[int, tuple[bool, Any]] = {}
        to_score = []
        for i, (req, resp, _, _, _) in enumerate(batch):
            if resp.error is not None:
                continue
            if (score_here := self.local.get(req.task)) is None:
                to_score.append(i)
                continue
            try:
                scored[i] = (True, score_here(req, resp))
            except Exception as e:
                scored[i] = (False, e)
        if to_score:
            items = [(batch[i][0].task, batch[i][0], batch[i][1]) for i in to_score]
            parts: list[tuple[bool, Any]] = []
            error = self.scoring.score_many(items, parts.append).exception()
            if error is not None:  # the scoring process died mid-batch: those it scored are stored, the rest fail
                parts += [(False, error)] * (len(to_score) - len(parts))
            scored.update(zip(to_score, parts, strict=True))
        stored: list[tuple[Request, Response, str, Score | None]] = []
        outcomes: list[SampleRecord | BaseException | None] = []
        for i, (req, resp, key, _, _) in enumerate(batch):
            ok, score = scored.get(i, (True, None))
            if ok:
                stored.append((req, resp, key, score))
                outcomes.append(None)
            else:
                outcomes.append(score)
        records = iter(self.store_many(stored))
        return [next(records) if o is None else o for o in outcomes]


def _settle(batch: list[Item], outcomes: list[Outcome]) -> None:
    """In the loop: each answer's outcome to its hand-over."""
    for item, outcome in zip(batch, outcomes, strict=True):
        item[3].settle(item[4], outcome)
