"""The run history's writes of ``evalkit run``, made in a process of its own.

The history's writer imports SQLAlchemy's ORM (0.2-0.4 s; more on a busy GPU host). Made in the command's own
process, that import sat on the whole command's path (in the warm-up's import thread, sharing the GIL with its
event loop, or after the run). A :class:`RunRecorder` starts a worker process (``evalkit/runner/worker.py``, job
``history``) as the command starts, which imports the writer while the run goes on, on another core, and records
each finished run dir there; :meth:`RunRecorder.close` waits for those writes before the command ends, so the run
is in the history when the command returns, as before. A write that fails is one warning line (the child returns
it, this process prints it on the command's stderr) and the result stands; if the child cannot start or dies, the
run is recorded here instead.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

RECORD_RUN = "evalkit.history:record_run_told"
NICE = 10  # the child's niceness, added to the command's


class RunRecorder:
    """Records finished run dirs in the run history from a child process (none while the history is off)."""

    def __init__(self) -> None:
        from evalkit.history import writer_modules

        self._worker: Any = None
        self._pending: list[tuple[Path, Future[Any]]] = []
        modules = writer_modules()
        if not modules:  # the history is off: nothing to record, no process
            self._on = False
            return
        self._on = True
        from evalkit.runner.worker import Worker

        try:
            self._worker = Worker(job="history")
        except OSError:  # no process to be had: the run is recorded in this one
            return
        # at a lower priority: on a machine whose cores are all busy, its imports wait for the command's own work
        # (the start-up imports it runs beside) instead of slowing it; on idle cores they run at full speed
        self._worker.call("os:nice", NICE)
        self._worker.preload(modules)

    def record(self, run_dir: Path) -> None:
        """Record ``run_dir`` (the child starts at once; :meth:`close` waits for it)."""
        if not self._on:
            return
        if self._worker is None:
            self._record_here(run_dir)
            return
        self._pending.append((run_dir, self._worker.call(RECORD_RUN, str(run_dir))))

    def close(self) -> None:
        """Wait for every write sent, recording here any the child could not make (it died), and end the child."""
        pending, self._pending = self._pending, []
        for run_dir, fut in pending:
            try:
                told = fut.result()
            except Exception:  # the child died or could not import the writer: record it in this process
                self._record_here(run_dir)
                continue
            if told:  # the child's warning (a failed write), printed here where the command's output goes
                print(told, end="", file=sys.stderr, flush=True)
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    @staticmethod
    def _record_here(run_dir: Path) -> None:
        from evalkit.history import record_run

        record_run(run_dir)
