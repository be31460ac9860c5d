"""What the servers did over a task's requests: each endpoint's ``/metrics`` scraped before and after (the
deltas, computed in the scoring process), its gauges and the GPUs sampled once a second while the requests go out
(a context manager around the timed phase)."""

from __future__ import annotations

import contextlib
from concurrent.futures import Future
from typing import Any

from evalkit.config.endpoint import credentials, server_root
from evalkit.runner.worker import Worker
from evalkit.server import metrics
from evalkit.server.gpu import EnergyDevices, GpuSampler
from evalkit.server.metrics import MetricsSampler, Snapshot, scrape


def preload(worker: Worker) -> None:
    """Have ``worker`` import what the deltas of :meth:`ServerObserver.server_deltas` need (the metrics module, and
    scipy's root finder for the histogram fit) while the run sets up and sends, so that the end of each task does
    not wait for it."""
    worker.preload([metrics.__name__, *metrics.DELTA_IMPORTS])


class ServerObserver:
    """One task's observation of the endpoints ``urls`` serving ``model``: :meth:`snapshot` before the timed
    phase, ``with`` around it (the samplers), :meth:`server_deltas` and :meth:`gpu_summary` after it. ``devices``:
    the GPUs whose energy counts (:func:`~evalkit.server.gpu.energy_devices`; default every GPU NVML lists)."""

    def __init__(self, urls: list[str], api_key: str | None, model: str, devices: EnergyDevices | None = None) -> None:
        self.model = model
        self._devices = devices
        self._roots = [server_root(u) for u in urls]
        self._auths = [credentials(u, api_key)[1] for u in urls]
        self._before: list[Snapshot | None] = []
        self._gauges: list[MetricsSampler] = []
        self._gpu: GpuSampler | None = None
        self._stack = contextlib.ExitStack()

    def _scrape(self) -> list[Snapshot | None]:
        return [scrape(root, headers=auth) for root, auth in zip(self._roots, self._auths, strict=True)]

    def snapshot(self) -> None:
        """Every endpoint's ``/metrics`` before the requests."""
        self._before = self._scrape()

    def __enter__(self) -> ServerObserver:
        stack = self._stack
        self._gauges = [
            stack.enter_context(MetricsSampler(r, interval_s=1.0, model_name=self.model)) for r in self._roots
        ]
        self._gpu = stack.enter_context(GpuSampler(1.0, devices=self._devices))
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        return self._stack.__exit__(*exc)

    def server_deltas(self, worker: Worker) -> Future[list[dict[str, Any]]]:
        """Each endpoint's ``/metrics`` scraped again: its deltas over the task, with its sampled gauges, computed
        in ``worker``'s process (see :func:`preload`)."""
        after = self._scrape()
        observed = [(b, a, g.summary()) for b, a, g in zip(self._before, after, self._gauges, strict=True)]
        return worker.server_deltas(observed, self.model)

    def gpu_summary(self) -> dict[str, Any]:
        """The GPU sampling over the task."""
        assert self._gpu is not None
        return self._gpu.summary()
