"""Prompts that take seconds to build (lm-eval with a cold prompt cache) are built in a worker process and sent
as they come: the first request goes out while lm-eval is still building the later prompts.

The builder (``evalkit/runner/worker.py``) loads every such task, reports how many requests each has (the run is
planned, and its manifest written, from these counts), then builds them in order with lm-eval's own loop, streaming each
request back and writing the prompt cache at the end. Here each task's requests wait in a ``RequestStream`` until
the event loop takes them.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from evalkit.contracts import Request
from evalkit.runner.worker import Worker, settle
from evalkit.tasks.spec import TaskSettings


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class RequestStream:
    """One task's requests as the builder sends them: ``count`` (a future) first, then batches, in order.

    Fed from the builder's receiving thread; read by the event loop with ``async for batch in stream.batches()``.
    A build that fails ends the stream with its error, raised to the reader (and from ``count`` if not yet set).
    """

    def __init__(self) -> None:
        self.count: Future[int] = Future()
        self._lock = threading.Lock()
        self._batches: deque[list[Request]] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def feed(self, batch: list[Request]) -> None:
        with self._lock:
            self._batches.append(batch)
            self._notify()

    def end(self, error: BaseException | None = None) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended, self._error = True, error
            self._notify()
        if error is not None:
            settle(self.count, None, error)

    def _notify(self) -> None:  # under the lock
        if self._waiter is not None:
            loop, fut = self._waiter
            self._waiter = None
            loop.call_soon_threadsafe(_wake, fut)

    async def batches(self) -> AsyncIterator[list[Request]]:
        loop = asyncio.get_running_loop()
        while True:
            waiter: asyncio.Future[None] | None = None
            with self._lock:
                if self._batches:
                    batch = self._batches.popleft()
                elif self._ended:
                    if self._error is not None:
                        raise self._error
                    return
                else:
                    waiter = loop.create_future()
                    self._waiter = (loop, waiter)
            if waiter is not None:
                await waiter
                continue
            yield batch


class PromptBuilder:
    """Builds the given tasks' requests in a worker process, one ``RequestStream`` per task.

    Example::

        builder = PromptBuilder(tasks_dirs, [("gsm8k", settings)])
        n = builder.streams["gsm8k"].count.result()       # once lm-eval's task is loaded there
        async for batch in builder.streams["gsm8k"].batches(): ...
        builder.close(wait=True)                          # lets the build finish: it writes the prompt cache
    """

    def __init__(self, tasks_dirs: list[Path] | None, specs: list[tuple[str, TaskSettings]]) -> None:
        self.streams = {name: RequestStream() for name, _ in specs}
        self._worker = Worker(tasks_dirs, job="prompt building")
        self.done = self._worker.build(specs, self._dispatch)
        self.done.add_done_callback(self._finished)

    def _dispatch(self, part: tuple[Any, ...]) -> None:
        kind, name, *rest = part
        stream = self.streams[name]
        if kind == "count":
            settle(stream.count, int(rest[0]), None)
        elif kind == "requests":
            stream.feed(rest[0])
        elif kind == "done":
            stream.end()

    def _finished(self, fut: Future[None]) -> None:
        error = fut.exception()
        if error is None:
            error = RuntimeError("the prompt builder finished without ending every task's requests")
        for stream in self.streams.values():
            stream.end(error)  # a no-op for streams that ended

    def close(self, wait: bool) -> None:
        """``wait``: let the build run to its end (it writes the prompt cache; a run with ``--limit`` sends its
        requests before lm-eval has built every document); else stop it now."""
        self._worker.close(timeout_s=600.0 if wait else 1.0)
