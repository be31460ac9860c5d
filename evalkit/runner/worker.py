"""Work that holds the GIL for long runs in child processes, never in the process that times the requests.

Three jobs run this way (``python -m evalkit.runner.worker``, one process each):

- **scoring**: loading lm-eval's task (imports of lm_eval and datasets, ~2 s of pure Python), its filters and metrics
  (~0.5 ms an answer), math-verify's parsing. In a thread of the timing process each of these holds the GIL the event
  loop needs to read the next SSE chunk; on the H200 that stalled the loop for up to 0.4 s while answers streamed in,
  and inflated the timings it records. The scoring process rebuilds the run's tasks from the same registry, loads
  their scorers while the parent sets up and sends, scores answers in batches (one call each, a reply per answer as it
  is scored), and summarises each task from the store. It also turns the servers' ``/metrics`` scrapes into each
  task's ``server`` section: the histogram fit's import of scipy (~0.3 s; about a second on a busy GPU host) is made
  there, in a thread of the child while answers stream (``preload``), not at the end of the parent's run.
- **prompt building** with a cold prompt cache (lm-eval builds the 1319 GSM8K 5-shot prompts in ~6 s): the
  builder streams each task's requests back as lm-eval builds them, so the first requests go out while later
  prompts are still being built (see ``evalkit/runner/prompt_stream.py``).
- **the run history's write** after ``evalkit run`` (:meth:`Worker.call` of ``evalkit.history:record_run``): its
  writer imports SQLAlchemy's ORM (0.2-0.4 s), made in the child while the run goes on, so the command's own
  process never makes it (``evalkit/cli/recorder.py``).

A scoring process whose run ended with a small store is kept for this process's next run that would start the
same child (``kept_scoring`` / ``keep_scoring``: a sweep's combinations, repeats, ``api.run`` in a loop), which then
skips the child's imports.

Protocol: length-prefixed pickles on the child's stdin and stdout; each call is ``(id, op, args)``, each reply
``(id, ok, result or exception)``; a streaming op (``build``, ``score_many``) first sends any number of
``(id, "part", payload)``. The parent writes from a thread and reads in a thread, so neither a full pipe nor a slow
child ever blocks the event loop; results come back as ``concurrent.futures.Future``s, parts through a callback.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import gc
import importlib
import itertools
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from evalkit.errors import RunError

_LEN = struct.Struct("<Q")


def _write(out: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def _read(inp: IO[bytes]) -> Any:
    """The next message, or None at the end of the stream."""
    head = inp.read(_LEN.size)
    if len(head) < _LEN.size:
        return None
    (n,) = _LEN.unpack(head)
    data = inp.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


def settle(fut: Future[Any], result: Any, error: BaseException | None) -> None:
    """Resolve ``fut`` unless its caller cancelled it meanwhile."""
    with contextlib.suppress(InvalidStateError):
        if error is None:
            fut.set_result(result)
        else:
            fut.set_exception(error)


class WorkerError(RunError):
    """A worker process died; answers scored and stored before that are kept."""


class Worker:
    """The parent's handle on a worker process.

    Example::

        scorer = Worker(tasks_dirs)
        scorer.load("gsm8k")                         # starts loading lm-eval's task in the child
        score = scorer.score("gsm8k", req, resp).result()
        metrics, detail = scorer.summarize("gsm8k", store.dir).result()
        scorer.close()
    """

    def __init__(self, tasks_dirs: list[Path] | None = None, job: str = "scoring") -> None:
        self.job = job
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "evalkit.runner.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self._ids = itertools.count()
        self._pending: dict[int, Future[Any]] = {}
        self._parts: dict[int, Callable[[Any], None]] = {}
        self._lock = threading.Lock()
        self._dead: str | None = None
        self._outbox: queue.SimpleQueue[tuple[int, str, tuple[Any, ...]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._send_loop, name=f"{job}-send", daemon=True).start()
        threading.Thread(target=self._receive_loop, name=f"{job}-receive", daemon=True).start()
        self.reset(tasks_dirs or [])

    def reset(self, tasks_dirs: Sequence[Path]) -> Future[None]:
        """A fresh registry over ``tasks_dirs`` in the child, the tasks it prepared before dropped (a kept process
        taken by the next run)."""
        return self._call("init", [str(d) for d in tasks_dirs])

    def alive(self) -> bool:
        """Whether the child still runs and takes calls (not closed, not dead)."""
        with self._lock:
            return self._dead is None and self._proc.poll() is None

    # -- calls ---------------------------------------------------------------------------------------------
    def load(self, task: str) -> Future[None]:
        """Load ``task`` and its scorer in the child (later calls wait for it); a failure comes back here and
        again from every later call on the task."""
        return self._call("load", task)

    def score(self, task: str, request: Any, response: Any) -> Future[Any]:
        """``Task.score`` in the child; the response goes without its inter-token latencies (not scored)."""
        return self._call("score", task, request, replace(response, itl_ms=[]))

    def score_many(
        self, items: Sequence[tuple[str, Any, Any]], on_part: Callable[[tuple[bool, Any]], None]
    ) -> Future[None]:
        """``Task.score`` of each ``(task, request, response)`` in the child, sent in one call: ``on_part`` gets (in
        the receiving thread) ``(True, score)`` or ``(False, exception)`` for each, in order, as each is scored (a
        child that dies mid-batch has handed back those before). The responses go without their inter-token
        latencies."""
        batch = [(task, req, replace(resp, itl_ms=[])) for task, req, resp in items]
        return self._call("score_many", batch, on_part=on_part)

    def summarize(self, task: str, run_dir: Path, release: bool = True) -> Future[Any]:
        """``Task.summarize`` in the child over the task's records, read there from the store in ``run_dir``;
        ``release``: the child hands the records' memory back to the OS afterwards (needless when it exits next)."""
        return self._call("summarize", task, str(run_dir), release)

    def preload(self, modules: Sequence[str]) -> Future[None]:
        """Import ``modules`` in the child, in a thread beside the calls it answers, so that a later call needing
        them does not wait for the import (one that fails to import is left to fail there)."""
        return self._call("preload", list(modules))

    def server_deltas(self, observed: list[tuple[Any, Any, dict[str, Any]]], model: str) -> Future[list[Any]]:
        """:func:`evalkit.server.metrics.delta` of each ``(before, after, gauges)`` in the child (its imports made
        ahead there by :meth:`preload` of ``DELTA_IMPORTS``)."""
        return self._call("server_deltas", observed, model)

    def build(self, specs: list[tuple[str, Any]], on_part: Callable[[Any], None]) -> Future[None]:
        """Build each ``(task name, TaskSettings)``'s requests in the child, in order; ``on_part`` gets (in the
        receiving thread) ``("count", name, n)`` for every task first, then ``("requests", name, [Request...])``
        batches in order and ``("done", name)`` as each task's build ends. The future ends with the last task."""
        return self._call("build", specs, on_part=on_part)

    def call(self, target: str, *args: Any) -> Future[Any]:
        """``module:function`` called with ``args`` in the child (the module imported there on first use)."""
        return self._call("call", target, *args)

    def _call(self, op: str, *args: Any, on_part: Callable[[Any], None] | None = None) -> Future[Any]:
        fut: Future[Any] = Future()
        with self._lock:
            if self._dead is not None:
                fut.set_exception(WorkerError(self._dead))
                return fut
            call_id = next(self._ids)
            self._pending[call_id] = fut
            if on_part is not None:
                self._parts[call_id] = on_part
        self._outbox.put((call_id, op, args))
        return fut

    # -- threads -------------------------------------------------------------------------------------------
    def _send_loop(self) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        try:
            while (msg := self._outbox.get()) is not None:
                _write(stdin, msg)
        except (OSError, ValueError):
            pass  # the child is gone: the receiving thread reports it
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def _receive_loop(self) -> None:
        stdout = self._proc.stdout
        assert stdout is not None
        try:
            while (msg := _read(stdout)) is not None:
                call_id, ok, result = msg
                if ok == "part":
                    with self._lock:
                        on_part = self._parts.get(call_id)
                    if on_part is not None:
                        on_part(result)
                    continue
                with self._lock:
                    fut = self._pending.pop(call_id)
                    self._parts.pop(call_id, None)
                settle(fut, result if ok else None, None if ok else result)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):
            pass
        code = self._proc.wait()
        with self._lock:
            if self._dead is None:
                self._dead = (
                    f"the {self.job} process exited (code {code}) before finishing its work; the answers stored so "
                    "far are kept: re-run the same command to resume"
                )
            pending, self._pending, self._parts = self._pending, {}, {}
        for fut in pending.values():
            settle(fut, None, WorkerError(self._dead))

    def close(self, timeout_s: float = 10.0) -> None:
        """Let the child finish what it was sent and exit; kill it after ``timeout_s``."""
        with self._lock:
            if self._dead is None:
                self._dead = f"the {self.job} process was closed"
        self._outbox.put(None)
        try:
            self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


# --------------------------------------------------------------------------------------- the kept scoring process
# One idle scoring process, kept after a run for the next run of this process (a sweep's combinations, repeats,
# api.run called in a loop, a test session), which then skips the child's imports (lm-eval with `datasets` and
# pandas, scipy, evalkit's own). It is taken again only by a run whose child would start the same:
# the same tasks folders, working directory, interpreter and environment (PYTEST_CURRENT_TEST, which pytest
# rewrites before each test, left out); it is closed when another is kept and when this process exits.
_kept: tuple[tuple[Any, ...], Worker] | None = None
_kept_lock = threading.Lock()


def _identity(tasks_dirs: Sequence[Path]) -> tuple[Any, ...]:
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"))
    return tuple(str(d) for d in tasks_dirs), os.getcwd(), sys.executable, env


def _take_kept() -> tuple[tuple[Any, ...], Worker] | None:
    global _kept
    with _kept_lock:
        kept, _kept = _kept, None
    return kept


def kept_scoring(tasks_dirs: Sequence[Path]) -> Worker | None:
    """The kept scoring process, reset for ``tasks_dirs``, when one is alive and a new one for them would start the
    same (see above); None otherwise (one kept for something else is closed)."""
    kept = _take_kept()
    if kept is None:
        return None
    identity, worker = kept
    if identity == _identity(tasks_dirs) and worker.alive():
        worker.reset(tasks_dirs)
        return worker
    worker.close()
    return None


def keep_scoring(worker: Worker, tasks_dirs: Sequence[Path]) -> None:
    """Keep ``worker`` (the scoring process of a run that has ended) for the next run, closing any kept before; a
    closed or dead one is left as it is."""
    global _kept
    if not worker.alive():
        return
    with _kept_lock:
        old, _kept = _kept, (_identity(tasks_dirs), worker)
    if old is not None:
        old[1].close()


@atexit.register
def _close_kept() -> None:
    kept = _take_kept()
    if kept is not None:
        kept[1].close()


# ------------------------------------------------------------------------------------------------ the child


class _Child:
    def __init__(self) -> None:
        self.registry: Any = None
        self.tasks: dict[str, Any] = {}

    def init(self, tasks_dirs: list[str]) -> None:
        """The registry over ``tasks_dirs``; tasks prepared for an earlier run of a kept process are dropped (its
        imports stay: what keeping it saves)."""
        from evalkit.tasks.registry import Registry

        self.registry = Registry([Path(d) for d in tasks_dirs])
        self.tasks = {}

    def task(self, name: str) -> Any:
        if name not in self.tasks:
            task = self.registry.get(name)
            task.prepare()
            self.tasks[name] = task
        return self.tasks[name]

    def load(self, name: str) -> None:
        self.task(name)

    def score(self, name: str, request: Any, response: Any) -> Any:
        return self.task(name).score(request, response)

    def score_many(self, items: list[tuple[str, Any, Any]], emit: Callable[[Any], None]) -> None:
        for name, request, response in items:
            try:
                emit((True, self.task(name).score(request, response)))
            except Exception as e:
                emit((False, _portable(e)))

    def build(self, specs: list[tuple[str, Any]], emit: Callable[[Any], None]) -> None:
        """See ``Worker.build``. Every task is loaded (and counted) before the first is built, so the parent can
        plan the whole run as soon as the first prompts arrive."""
        tasks = [(self.registry.get(name), settings) for name, settings in specs]
        counts = []
        for task, settings in tasks:
            counts.append(task.count_requests(settings))
            emit(("count", task.name, counts[-1]))
        for (task, settings), count in zip(tasks, counts, strict=True):
            batch = _Batch(functools.partial(_send_requests, emit, task.name), count)
            task.stream_requests(settings, batch.add)
            batch.flush()
            emit(("done", task.name))

    def summarize(self, name: str, run_dir: str, release: bool) -> Any:
        from evalkit.store import RunStore
        from evalkit.store.writer import load_for_summary

        task = self.task(name)
        records = load_for_summary(RunStore(Path(run_dir)), name, keep_text=task.summary_needs_text, keep_itl=False)
        try:
            return task.summarize(records)
        finally:
            del records
            if release:  # hand the records' memory back before the parent reads its own copy
                _release_memory()

    def preload(self, modules: list[str]) -> None:
        threading.Thread(target=_import_all, args=(modules,), name="preload", daemon=True).start()

    def call(self, target: str, *args: Any) -> Any:
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name)(*args)

    def server_deltas(self, observed: list[tuple[Any, Any, dict[str, Any]]], model: str) -> list[Any]:
        from evalkit.server.metrics import delta

        return [delta(before, after, model, gauges=gauges) for before, after, gauges in observed]


def _import_all(modules: list[str]) -> None:
    for name in modules:
        with contextlib.suppress(Exception):  # left to fail, if it does, in the call that needs it
            importlib.import_module(name)


def _send_requests(emit: Callable[[Any], None], name: str, reqs: list[Any]) -> None:
    emit(("requests", name, reqs))


class _Batch:
    """Requests sent on in batches: the first at once, then whatever a build yielded within ``every_s`` (at most
    ``size``), and the last of the ``expected`` at once (a build with ``--limit`` goes on, for the cache, after its
    last request); so the parent gets each prompt within a few ms without a message per prompt."""

    def __init__(self, send: Callable[[list[Any]], None], expected: int, size: int = 64, every_s: float = 0.02) -> None:
        self.send, self.expected, self.size, self.every_s = send, expected, size, every_s
        self.items: list[Any] = []
        self.added = 0
        self.last = -float("inf")

    def add(self, item: Any) -> None:
        self.items.append(item)
        self.added += 1
        now = time.perf_counter()
        if len(self.items) >= self.size or now - self.last >= self.every_s or self.added == self.expected:
            self.flush()
            self.last = now

    def flush(self) -> None:
        if self.items:
            self.send(self.items)
            self.items = []


def _release_memory() -> None:
    """Return freed memory to the OS: a collection, then glibc's ``malloc_trim`` (freed heap pages stay mapped
    otherwise: ~90 MB after summarising 20,000 records); a no-op where there is no glibc."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _portable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling, else a RuntimeError naming it."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return RuntimeError(f"{type(e).__name__}: {e}")


_STREAMING = {"build", "score_many"}  # ops that get an ``emit`` for their parts


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes our stdin
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints (ours, lm-eval's, C libraries') go to stderr, not into the protocol
    sys.stdout = sys.stderr
    child = _Child()
    while (msg := _read(inp)) is not None:
        call_id, op, args = msg
        if op in _STREAMING:
            args = (*args, lambda payload, call_id=call_id: _write(out, (call_id, "part", payload)))
        try:
            reply = (call_id, True, getattr(child, op)(*args))
        except Exception as e:
            reply = (call_id, False, _portable(e))
        try:
            _write(out, reply)
        except BrokenPipeError:  # the parent is gone (killed, or ended without closing us): nothing to answer
            break
    # the parent closed our stdin: every reply is written; skip the interpreter's teardown of lm-eval and friends
    # (~0.3 s the parent would wait for), stopping math-verify's worker as atexit would
    if "evalkit.scoring.math_answer" in sys.modules:
        sys.modules["evalkit.scoring.math_answer"].shutdown_verifier()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
