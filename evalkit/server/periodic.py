"""A background thread that calls ``sample_once`` every ``interval_s`` seconds while a task runs."""

from __future__ import annotations

import threading
from typing import TypeVar

S = TypeVar("S", bound="PeriodicSampler")


class PeriodicSampler:
    """Subclasses implement :meth:`sample_once` (and ``summary``); use as a context manager.

    Example::

        with GpuSampler(interval_s=1.0) as gpu:
            ...  # the work being observed
        gpu.summary()
    """

    thread_name = "evalkit-sampler"

    def __init__(self, interval_s: float, timeout: float) -> None:
        self.interval_s = interval_s
        self.timeout = timeout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def enabled(self) -> bool:
        return True

    def sample_once(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self.interval_s):
                return

    def start(self: S) -> S:
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + self.interval_s + 1)

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
