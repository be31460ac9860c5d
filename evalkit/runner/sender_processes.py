"""The timed phase's requests sent by several processes (``--client-processes N``), when one process's core is
not enough for the offered load.

Each sender is a child process (``python -m evalkit.runner.sender_processes``) with its own event loop and its own
:class:`~evalkit.client.http_client.Client` (its own connections), running the one scheduler
(:func:`evalkit.client.scheduler.execute`). The parent stays the only store writer: it builds the requests and
their keys, hands each to a sender, and gets the answers back in batches, which it scores and stores exactly as
one process does (``RequestPhase``'s ``on_done_many``: a batch at a time).

The split is deterministic: the request at position ``i`` of the phase (its order of sending) goes to sender
``i % N``.

- ``--concurrency C``: sender ``k`` keeps ``C // N`` in flight (the first ``C % N`` senders one more).
- an arrival process (``--request-rate``, a ramp): the parent draws the one seeded schedule and gives each request
  its due time (``Request.arrival_s``, a trace's own times kept), so sender ``k`` sends arrivals ``k, k+N, …``
  at their scheduled times and the union is exactly the schedule.

One clock: the parent names a start, ``time.time()`` a little ahead, once every sender is ready; each sender waits
for it and counts its client's times from it on its own monotonic clock, so ``start_s`` (and the schedule) of all
senders share one zero, which is also the run's ``clock_start_unix``.

Protocol: the worker's length-prefixed pickles (:mod:`evalkit.runner.worker`) on the child's stdin and stdout.
Parent to child: ``("spec", dict)``, ``("start", unix time)``, ``("requests", [(position, Request)...])``,
``("end",)``. Child to parent: ``("ready",)``, ``("answers", [(position, Response)...])``, ``("stats",
SchedulerStats)`` or ``("failed", message)``. A child whose stdin closes (the parent died: it holds the pipe
until the child has exited) exits at once. The parent writes and reads each child in threads of its own (a full
pipe never blocks its loop) and gives each sender at most its share of requests in flight plus a backlog, so
memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from evalkit.client.arrivals import Arrivals, arrival_offsets, part_of, timed
from evalkit.client.limiter import Limiter
from evalkit.client.scheduler import InFlight
from evalkit.contracts import Request, Response, SchedulerStats
from evalkit.errors import RunError, warn
from evalkit.runner.worker import _read, _write

PER_PROCESS_RPS = 150.0  # requests/s one process sends with room to spare (issue 47: it tops out near 150-200)
PER_PROCESS_IN_FLIGHT = 512  # a fixed --concurrency above this is split over more processes by default
BACKLOG = 1024  # answers on their way back (or being stored) before a sender gets no more requests
START_LEAD_S = 0.05  # the shared start is named this far ahead of the moment every sender is ready


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def sender_count(
    asked: int | None, in_flight: InFlight, arrivals: Arrivals | None, conversations: bool, task: str
) -> int:
    """How many processes send ``task``'s requests: ``asked`` (``--client-processes``), else one per
    ``PER_PROCESS_RPS`` of the arrival process's peak rate or per ``PER_PROCESS_IN_FLIGHT`` of a fixed
    concurrency, at most the cores (1 for an ordinary eval: ``--concurrency auto``, or 512 or fewer in flight).
    Never more than the requests allowed in flight; 1 for ``--concurrency auto`` (it tunes one process's) and for
    a task of conversations (its tool calls run by the task's backends, here)."""
    cores = usable_cores()
    if in_flight.concurrency == "auto":
        return 1
    if conversations:
        if asked is not None and asked > 1:
            warn(f"{task}: its requests are conversations, run by the task's tools in this process: one sender")
        return 1
    if asked is not None:
        n = asked
        if n > cores:
            warn(f"--client-processes {n} is more than the {cores} cores evalkit may use: the senders share them")
    elif arrivals is not None:
        peak = arrivals.rate if arrivals.ramp is None else max(arrivals.ramp)
        n = min(cores, math.ceil((peak or 0.0) / PER_PROCESS_RPS))
    else:
        n = min(cores, math.ceil(int(in_flight.concurrency) / PER_PROCESS_IN_FLIGHT))
    return max(1, min(n, int(in_flight.concurrency)))


def shares(concurrency: int, n: int) -> list[int]:
    """``concurrency`` split over ``n`` senders: ``concurrency // n`` each, the first ``concurrency % n`` one more."""
    return [concurrency // n + (k < concurrency % n) for k in range(n)]


@dataclass
class SenderSpec:
    """What a sender needs to build its client and scheduler (``client`` the Client's keyword arguments)."""

    urls: list[str]
    model: str
    client: dict[str, Any]
    concurrency: int
    duration_s: float | None


@dataclass
class _Sender:
    """The parent's handle on one sender process."""

    spec: SenderSpec
    proc: subprocess.Popen[bytes] = field(init=False)
    outbox: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    held: dict[int, Request] = field(default_factory=dict)  # position -> request, sent and not answered yet
    batch: list[tuple[int, Request]] = field(default_factory=list)

    def start(self, deliver: Callable[[Any], object]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evalkit.runner.sender_processes"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        threading.Thread(target=self._write_loop, daemon=True, name="sender-write").start()
        threading.Thread(target=self._read_loop, args=(deliver,), daemon=True, name="sender-read").start()
        self.outbox.put(("spec", self.spec))

    def _write_loop(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            while (msg := self.outbox.get()) is not None:
                _write(self.proc.stdin, msg)

    def _read_loop(self, deliver: Callable[[Any], object]) -> None:
        assert self.proc.stdout is not None
        msg = None
        with contextlib.suppress(OSError, ValueError):
            while (msg := _read(self.proc.stdout)) is not None:
                deliver(msg)
                if msg[0] in ("stats", "failed"):
                    return
        deliver(("failed", f"a sender process exited (code {self.proc.wait()}) before its requests were answered"))

    def stop(self, at_once: bool) -> None:
        """Let the process exit (it has sent its stats), or end it ``at_once`` (the phase was interrupted)."""
        if self.proc.returncode is not None:
            return
        self.outbox.put(None)
        if at_once and self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe and pipe.close()


class Senders:
    """Sender processes, started at once (their start overlaps what the run does before sending, e.g. its
    warm-up), then used by one :meth:`send` or closed."""

    def __init__(self, specs: list[SenderSpec]) -> None:
        self.specs = specs
        self._senders = [_Sender(spec) for spec in specs]
        self._lock = threading.Lock()
        self._early: list[tuple[int, Any]] = []  # what the senders said before send() listened
        self._receive: Callable[[int, Any], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        for k, sender in enumerate(self._senders):
            sender.start(functools.partial(self._deliver, k))

    def _deliver(self, k: int, msg: Any) -> None:
        """A message of sender ``k`` (in its reading thread): to send()'s loop, or kept until it listens."""
        with self._lock:
            if self._receive is None or self._loop is None:
                self._early.append((k, msg))
                return
            loop, receive = self._loop, self._receive
        loop.call_soon_threadsafe(receive, k, msg)

    def _listen(self, loop: asyncio.AbstractEventLoop, receive: Callable[[int, Any], None]) -> None:
        with self._lock:
            self._loop, self._receive = loop, receive
            early, self._early = self._early, []
        for k, msg in early:
            receive(k, msg)

    def close(self, at_once: bool = True) -> None:
        """End the processes (``at_once``: without waiting for them to finish what they have)."""
        for sender in self._senders:
            sender.stop(at_once)

    async def send(
        self,
        todo: AsyncIterator[Request],
        total: int,
        arrivals: Arrivals | None,
        on_done: Callable[[list[tuple[Request, Response]]], asyncio.Future[list[Any]]],
        start_at_unix: float | None = None,
    ) -> tuple[SchedulerStats, float]:
        """Send ``todo`` (``total`` requests) over the senders, calling ``on_done`` here with each batch of answers
        a sender sends back (it hands them over and returns one future, which ends once they are stored, with each
        answer's record or error: no future or task per answer); the merged stats and the start every sender
        counted from, as ``time.time()``: ``start_at_unix`` when given (``--start-at``; passed already, what is due
        goes at once), else a moment after every sender is ready. An ``on_done`` that raises, whose future fails
        or holds an error stops the sending (the answers already back are stored) and that error is raised; so is
        a sender's failure. The processes are ended when it returns."""
        loop = asyncio.get_running_loop()
        c0 = time.process_time()
        senders, specs, n = self._senders, self.specs, len(self._senders)
        ready = [loop.create_future() for _ in senders]
        finished = [loop.create_future() for _ in senders]
        credits = [Limiter(spec.concurrency + BACKLOG // n + 1) for spec in specs]
        storing: set[asyncio.Future[Any]] = set()  # batches of answers handed to on_done, not stored yet
        failed: list[BaseException] = []
        ended: list[int] = []  # the senders that sent their stats or failed (no scan of the futures per request)

        def fail(e: BaseException) -> None:
            failed.append(e)
            for c in credits:
                c.close()

        def stored(k: int, count: int, fut: asyncio.Future[list[Any]]) -> None:
            storing.discard(fut)
            if not fut.cancelled():
                if (e := fut.exception()) is not None:
                    fail(e)
                elif (bad := next((o for o in fut.result() if isinstance(o, BaseException)), None)) is not None:
                    fail(bad)
            credits[k].release(count)

        def receive(k: int, msg: Any) -> None:
            kind = msg[0]
            if kind == "ready":
                ready[k].set_result(None)
            elif kind == "answers":
                held = senders[k].held
                answers = [(held.pop(i), resp) for i, resp in msg[1]]
                try:
                    fut = on_done(answers)
                except Exception as e:
                    fail(e)
                    credits[k].release(len(answers))
                    return
                storing.add(fut)
                fut.add_done_callback(functools.partial(stored, k, len(answers)))
            elif not finished[k].done():  # its stats, or its failure: it takes no more requests
                finished[k].set_result(msg)
                ended.append(k)
                credits[k].close()
                if not ready[k].done():
                    ready[k].set_result(None)

        def flush() -> None:
            for s in senders:
                if s.batch:
                    s.outbox.put(("requests", s.batch))
                    s.batch = []

        clean = False
        try:
            self._listen(loop, receive)
            await asyncio.gather(*ready)
            start_unix = start_at_unix if start_at_unix is not None else time.time() + START_LEAD_S
            for s in senders:
                s.outbox.put(("start", start_unix))
            offsets = arrival_offsets(total, arrivals) if arrivals is not None else []
            position = 0
            async for req in todo:
                k = part_of(position, n)  # the deal of arrivals.schedule_part, one request at a time
                if not await credits[k].acquire() or ended:
                    break
                (due,) = timed([req], offsets, position)
                senders[k].held[position] = req  # the request on_done knows (its key is by identity)
                senders[k].batch.append((position, due))
                if len(senders[k].batch) == 1:
                    loop.call_soon(flush)
                position += 1
            flush()
            for s in senders:
                s.outbox.put(("end",))
            outcomes = await asyncio.gather(*finished)
            while storing:
                await asyncio.wait(list(storing))
            if failed:
                raise failed[0]
            bad = next((m for m in outcomes if m[0] == "failed"), None)
            if bad is not None:
                raise RunError(f"a sender process failed: {bad[1]}")
            stats = merge_stats([m[1] for m in outcomes], specs)
            stats.not_sent = max(0, total - stats.sent) if stats.not_sent else 0
            stats.cpu_s += time.process_time() - c0
            clean = True
            return stats, start_unix
        finally:
            self.close(at_once=not clean)


def merge_stats(parts: list[SchedulerStats], specs: list[SenderSpec]) -> SchedulerStats:
    """The senders' stats as one run's: counts and CPU summed, wall the longest, lags pooled."""
    level = sum(s.concurrency for s in specs)
    return SchedulerStats(
        concurrency_trace=[(0.0, level)],
        final_concurrency=level,
        loop_lag_ms=array("d", (x for p in parts for x in p.loop_lag_ms)),
        wall_s=max(p.wall_s for p in parts),
        cpu_s=sum(p.cpu_s for p in parts),
        origin_s=min(p.origin_s for p in parts),
        sent=sum(p.sent for p in parts),
        not_sent=sum(p.not_sent for p in parts),
        processes=len(parts),
    )


# -- the sender process -----------------------------------------------------------------------------------------
async def _serve(inbox: asyncio.Queue[Any], post: Callable[[Any], None]) -> None:
    from evalkit.client.http_client import Client
    from evalkit.client.scheduler import execute

    kind, spec = await inbox.get()
    assert kind == "spec"
    async with Client(spec.urls, spec.model, **spec.client) as client:
        post(("ready",))
        kind, start_unix = await inbox.get()
        assert kind == "start"
        await asyncio.sleep(max(0.0, start_unix - time.time()))
        client.t0 = time.perf_counter() - (time.time() - start_unix)  # start_s counts from the shared start
        positions: dict[int, int] = {}  # id(request) -> its position
        answers: list[tuple[int, Response]] = []

        def send_answers() -> None:
            if answers:
                post(("answers", answers[:]))
                answers.clear()

        def on_done(req: Request, resp: Response) -> None:
            answers.append((positions.pop(id(req)), resp))
            if len(answers) == 1:
                asyncio.get_running_loop().call_soon(send_answers)

        async def requests() -> AsyncIterator[Request]:
            while (msg := await inbox.get())[0] == "requests":
                for i, req in msg[1]:
                    positions[id(req)] = i
                    yield req

        stats = await execute(
            requests(),
            client,
            on_done,
            concurrency=spec.concurrency,
            max_concurrency=spec.concurrency,
            duration_s=spec.duration_s,
            start=client.t0,
        )
        send_answers()
        stats.not_sent = len(positions)  # more than 0: the duration ran out (the parent counts what was not sent)
        post(("stats", stats))


def main() -> None:
    """A sender process: requests on stdin, answers on stdout (the module's docstring has the protocol)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it ends this process
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write into the answers' stream
    outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def write_loop() -> None:
        while (msg := outbox.get()) is not None:
            _write(stdout, msg)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Any] = asyncio.Queue()

        def read_loop() -> None:
            while (msg := _read(stdin)) is not None:
                loop.call_soon_threadsafe(inbox.put_nowait, msg)
            os._exit(1)  # the parent is gone (it holds stdin until this process has exited): nobody would store more

        threading.Thread(target=read_loop, daemon=True).start()
        try:
            await _serve(inbox, outbox.put)
        except Exception as e:
            outbox.put(("failed", f"{type(e).__name__}: {e}"))

    writer = threading.Thread(target=write_loop)
    writer.start()
    try:
        asyncio.run(run())
    finally:
        outbox.put(None)
        writer.join()
        stdout.flush()
        os._exit(0)  # not an interpreter shutdown: the reading thread is blocked in stdin, which the parent holds


if __name__ == "__main__":
    main()
