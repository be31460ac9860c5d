"""The run's warm-ups (evalkit/client/warmup.py) before each task's timed phase: each sampling config is
warmed once per run, and what every warm-up did is kept for ``summary.json`` and the manifest. While the first
warm-up waits on the server, the modules the run needs once its requests are over are imported in a thread."""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Sequence
from typing import Any

from evalkit.client import warmup
from evalkit.client.http_client import ClientOptions
from evalkit.client.scheduler import InFlight
from evalkit.config import RunConfig
from evalkit.config.endpoint import server_root
from evalkit.contracts import WarmupSummary
from evalkit.runner.plan import TaskRun
from evalkit.runner.resume import EarlierWarmup


class Warmups:
    """The warm-ups of one run of ``cfg``: the sampling configs warmed so far and, per task, what its warm-up
    did."""

    def __init__(self, cfg: RunConfig, imports: Sequence[str] = ()) -> None:
        """``imports``: modules needed after the requests (the report's, the run history's), imported in a thread
        during the first warm-up (the client is idle then, waiting on the server) and joined before the timed
        phase, whose event loop never shares the GIL with them."""
        self.cfg = cfg
        self._imports = list(imports)  # emptied once the first warm-up has imported them
        self._warmed: set[warmup.SamplingKey] = set()  # the sampling configs warmed so far in this run
        self._results: list[tuple[str, warmup.WarmupResult]] = []  # (task, what its warm-up did)
        self.earlier = EarlierWarmup()  # what the runs before this one in a resumed run dir warmed

    def warm_up(
        self,
        p: TaskRun,
        urls: list[str],
        api_key: str | None,
        model: str,
        max_model_len: int | None,
        in_flight: InFlight,
        options: ClientOptions,
        extra: dict[str, Any],
        left: int,
        server: Any,
    ) -> bool:
        """The warm-up before the task's timed phase, for its sampling configs not warmed yet in this run:
        ``--warmup`` requests each (default: the run's level of requests in flight, capped by the ``left``
        requests to send), at that level; none with ``--warmup 0`` or nothing left. ``server``: a VLLMServer
        evalkit started (its prefix cache is reset after the warm-up), or None. True when requests were sent."""
        if self.cfg.warmup == 0 or left == 0:
            return False
        c = in_flight.concurrency
        # "auto", or no cap under an arrival process: where auto would start
        level = min(self.cfg.auto_start, in_flight.max_concurrency) if c == "auto" or not in_flight.capped else int(c)
        count = self.cfg.warmup if self.cfg.warmup is not None else min(level, left)
        reset_root = server_root(server.base_url) if server is not None else None

        async def go() -> warmup.WarmupResult:
            return await warmup.run(
                urls,
                model,
                p.kind,
                await p.peek(),
                count=count,
                level=level,
                options=options,
                api_key=api_key,
                extra_body=extra,
                headers=self.cfg.headers,
                skip=self._warmed,
                max_model_len=max_model_len,
                reset_root=reset_root,
            )

        importing = import_in_thread(self._imports)
        self._imports = []
        try:
            result = asyncio.run(go())
        finally:
            if importing is not None:
                importing.join()
        if not result.points:
            return False
        self._warmed |= {pt.key for pt in result.points}
        self._results.append((p.task.name, result))
        return True

    def configs(self) -> list[dict[str, Any]]:
        """The manifest's ``warmup.configs``: every sampling config warmed, with its task (a resumed run dir's
        earlier ones first)."""
        return [*self.earlier.configs, *(pt.record(name) for name, w in self._results for pt in w.points)]

    def wall_s(self, task: str, this_run: float | None) -> float | None:
        """``timings_s["<task>.warmup"]``: the seconds the task's warm-ups took, in this run (``this_run``, None
        when it sent none) and in the earlier runs of a resumed run dir."""
        earlier = self.earlier.timings.get(f"{task}.warmup")
        if earlier is None or this_run is None:
            return this_run if earlier is None else earlier
        return round(earlier + this_run, 3)

    def summary(self) -> WarmupSummary | None:
        """``summary.json``'s ``warmup``: every task's warm-up together, with a resumed run dir's earlier ones
        (None: none was sent)."""
        before = self.earlier.summary
        if not self._results:
            return before
        results = [w for _, w in self._results]
        resets = [w.prefix_cache_reset for w in results if w.prefix_cache_reset is not None]
        errors = [before.first_error] if before is not None else []
        return WarmupSummary(
            requests=sum(w.requests for w in results) + (before.requests if before else 0),
            failed=sum(w.failed for w in results) + (before.failed if before else 0),
            wall_s=round(sum(w.wall_s for w in results) + (before.wall_s if before else 0.0), 3),
            first_error=next((e for e in [*errors, *(w.first_error for w in results)] if e), None),
            prefix_cache_reset=all(resets) if resets else None,
            prefix_cache_note=next((w.prefix_cache_note for w in results if w.prefix_cache_note), None),
        )


def import_in_thread(modules: Sequence[str]) -> threading.Thread | None:
    """A started daemon thread importing ``modules`` one after another (None: no modules). A module that fails to
    import is left to its caller's own import, which then raises where it would have without this thread."""
    if not modules:
        return None

    def load() -> None:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception:  # reported by the caller's own import of it
                continue

    thread = threading.Thread(target=load, name="warmup-imports", daemon=True)
    thread.start()
    return thread
