"""Run many requests against the server with bounded (fixed or self-tuning) concurrency."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import time
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from evalkit.client.arrivals import Arrivals, arrival_offsets
from evalkit.client.auto_concurrency import AutoConcurrency
from evalkit.client.http_client import Client
from evalkit.client.limiter import Limiter
from evalkit.contracts import Request, Response, SchedulerStats
from evalkit.errors import warn

OnDone = Callable[[Request, Response], "Awaitable[Any] | None"]


@dataclass(frozen=True)
class InFlight:
    """How many requests a run may have in flight: as asked, or capped by the open-file limit (``cap`` then says
    so: ``{"requested", "cap", "open_files_limit"}``). ``capped`` False: no cap was asked (an arrival process
    alone sets the load), ``concurrency`` is then as many as the open-file limit allows."""

    concurrency: int | str
    max_concurrency: int
    cap: dict[str, int] | None = None
    capped: bool = True


def _open_descriptors() -> int:
    for folder in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(folder))
    return 32


UNCAPPED = 65536  # requests in flight with no cap where the platform has no open-file limit


def fit_open_files(concurrency: int | str | None, max_concurrency: int, reserve: int = 64) -> InFlight:
    """Each request in flight holds a socket, so ``concurrency`` (for "auto": ``max_concurrency``) of them must fit
    in this process's open-file limit (RLIMIT_NOFILE) beside the descriptors open now and ``reserve`` more (the
    store, /metrics scrapes, the workers' pipes, the report). The soft limit is raised towards the hard one as far
    as needed; where even that is too small, the concurrency is capped and a line on stderr says so: past the
    limit, connections fail with "Too many open files", the client's limit and not the server's.

    ``concurrency`` None: no cap asked; the soft limit is raised to the hard one and as many go in flight as it
    allows (a schedule that needs more is not kept, and the task's ``load`` says so)."""
    try:
        import resource
    except ImportError:  # not POSIX: no such limit
        return InFlight(concurrency or UNCAPPED, max_concurrency, capped=concurrency is not None)
    if concurrency is None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != soft:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
        room = UNCAPPED if soft == resource.RLIM_INFINITY else soft - _open_descriptors() - reserve
        return InFlight(max(1, min(room, UNCAPPED)), max_concurrency, capped=False)
    wanted = max_concurrency if concurrency == "auto" else int(concurrency)
    in_use = _open_descriptors()
    need = wanted + in_use + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return InFlight(concurrency, max_concurrency)
    raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if raised > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft >= need:
        return InFlight(concurrency, max_concurrency)
    cap = max(1, soft - in_use - reserve)
    flag = "--max-concurrency" if concurrency == "auto" else "--concurrency"
    warn(
        f"{flag} {wanted} needs about {need} open files but this process may open only {soft} (ulimit -n): at "
        f"most {cap} requests go in flight; raise the limit (e.g. ulimit -n {need}) for more"
    )
    return InFlight(
        concurrency if concurrency == "auto" else cap,
        min(max_concurrency, cap),
        {"requested": wanted, "cap": cap, "open_files_limit": soft},
    )


async def _loop_lag(stats: SchedulerStats, interval: float = 0.05) -> None:
    while True:
        t = time.perf_counter()
        await asyncio.sleep(interval)
        stats.loop_lag_ms.append(max(0.0, (time.perf_counter() - t - interval) * 1000.0))


async def _each(requests: Iterable[Request] | AsyncIterable[Request]) -> AsyncGenerator[Request, None]:
    if isinstance(requests, AsyncIterable):
        async for req in requests:
            yield req
    else:
        for req in requests:
            yield req


def _due(req: Request, t0: float, offsets: list[float], index: int) -> float | None:
    """When ``req``, the ``index``-th sent, is due on the perf_counter clock (None: at once)."""
    if req.arrival_s is not None:
        return t0 + req.arrival_s
    return t0 + offsets[index] if index < len(offsets) else None


async def execute(
    requests: Iterable[Request] | AsyncIterable[Request],
    client: Client,
    on_done: OnDone,
    *,
    total: int | None = None,
    concurrency: int | str = 64,
    max_concurrency: int = 512,
    metrics_url: str | list[str] | None = None,
    auto_start: int = 128,
    backlog: int = 1024,
    send: Callable[[Request], Awaitable[Response]] | None = None,
    arrivals: Arrivals | None = None,
    duration_s: float | None = None,
    start: float | None = None,
    start_at_unix: float | None = None,
) -> SchedulerStats:
    """Send every request, at most ``concurrency`` at a time ("auto" tunes it), calling ``on_done`` as each
    completes (in completion order).

    ``concurrency`` bounds the requests in flight over all of the client's endpoints together (a sharded run:
    the client gives each request to its least loaded endpoint); "auto" reads ``metrics_url``, one URL per
    endpoint, summed.

    ``requests`` may be an async iterable (prompts still being built): each is sent as soon as it comes and a slot
    is free. "auto" needs ``total``, how many will come (for a plain iterable it counts them itself).

    A request's slot is freed as soon as its answer is in, so slow scoring never lowers the concurrency the
    server sees; at most ``backlog`` answers wait for ``on_done`` before sending pauses (memory stays bounded).
    When the run stops early (it was interrupted, or an ``on_done`` raised: then nothing more is sent and that
    error is raised), requests in flight are cancelled but answers already in finish their ``on_done``: nothing
    already computed is dropped.

    ``send`` answers one request (default: ``client.generate``; a multi-turn conversation makes several requests
    through the client for one sample, which holds one slot).

    A request is sent no earlier than it is due: at its ``arrival_s``, else at the ``arrivals`` process's next
    offset (evalkit.client.arrivals), both seconds from the phase's start; one that is late (no slot was free,
    the loop was busy) goes as soon as it can. Its Response's ``scheduled_s`` says when it was due. With
    ``duration_s`` no request is sent (or due) that many seconds after the start or later: requests in flight
    then finish and are recorded; the rest are counted in ``not_sent``. ``start``: the phase's start on the
    ``time.perf_counter()`` clock, which due times count from (default: now; a sender process of several gives
    their shared start). With ``start_at_unix`` the schedule's zero is that wall-clock time, the same for every
    sender given it: the phase waits for it, or (started late) sends what is already due at once, its lateness in
    the send lag."""
    stats = SchedulerStats()
    answer = send or client.generate
    auto = AutoConcurrency(auto_start, max_concurrency, metrics_url) if concurrency == "auto" else None
    reqs = requests
    if (auto or arrivals) and total is None:  # they need to know how many are left, the schedule how many come
        if isinstance(requests, AsyncIterable):
            raise ValueError("concurrency 'auto' or an arrival process over an async iterable needs its total")
        reqs = list(requests)
        total = len(reqs)
    if auto:
        auto.total = total or 0
        auto.limit = min(auto.limit, max(1, total or 0))  # never above the requests there are
    offsets = arrival_offsets(total or 0, arrivals) if arrivals else []
    limit = auto.limit if auto else int(concurrency)
    limiter = Limiter(limit)
    # requests in flight + answers not yet handled by on_done
    unfinished = Limiter((max_concurrency if auto else limit) + backlog)
    stats.concurrency_trace.append((0.0, limit))
    late = 0.0  # seconds the phase starts after ``start_at_unix``: the schedule's zero stays there
    if start_at_unix is not None:
        if (wait := start_at_unix - time.time()) > 0:
            await asyncio.sleep(wait)
        late = max(0.0, time.time() - start_at_unix)
    t0, c0 = time.perf_counter() if start is None else start, time.process_time()
    zero = t0 - late  # the schedule's zero on the perf_counter clock
    stats.origin_s = zero - client.t0
    deadline = zero + duration_s if duration_s is not None else None
    lag_task = asyncio.create_task(_loop_lag(stats))
    assert client._session is not None
    auto_task = asyncio.create_task(auto.run(limiter, client, stats, t0)) if auto else None
    pending: set[asyncio.Task[None]] = set()
    answered: set[asyncio.Task[None]] = set()  # tasks past their request, in on_done
    failed: list[Exception] = []  # errors of on_done (e.g. the store could not write): sending stops at the first

    async def one(req: Request, due: float | None) -> None:
        try:
            try:
                resp = await answer(req)
            finally:
                limiter.release()
            if due is not None:
                resp.scheduled_s = due - client.t0
            current = asyncio.current_task()
            if current is not None:
                answered.add(current)
            if auto:
                auto.observe(resp)
            result = on_done(req, resp)
            if inspect.isawaitable(result):
                await result
        except Exception as e:
            failed.append(e)
            limiter.close()  # the sender stops at once, also while it waits for a slot
        finally:
            unfinished.release()

    source = _each(reqs)
    try:
        while True:
            await unfinished.acquire()
            if not await limiter.acquire():  # closed: an on_done failed, send no more
                unfinished.release()
                break
            waited = time.perf_counter()
            try:
                req = await source.__anext__()
            except StopAsyncIteration:
                limiter.release()
                unfinished.release()
                break
            due = _due(req, zero, offsets, stats.sent)
            if deadline is not None and (due if due is not None else time.perf_counter()) >= deadline:
                limiter.release()
                unfinished.release()
                stats.not_sent = max(0, (total or 0) - stats.sent)
                break
            if due is not None and (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            if failed:  # while the next request was coming (or was not due yet)
                limiter.release()
                unfinished.release()
                break
            if auto:
                auto.starved_s += time.perf_counter() - waited
                auto.sent += 1
            stats.sent += 1
            task = asyncio.create_task(one(req, due))
            pending.add(task)
            task.add_done_callback(pending.discard)
            task.add_done_callback(answered.discard)
        if pending and not failed:  # one wake-up when the last finishes (or one fails), not one wait per answer
            drained = asyncio.get_running_loop().create_future()

            def settle(_: object = None) -> None:
                if (failed or not pending) and not drained.done():
                    drained.set_result(None)

            for task in pending:
                task.add_done_callback(settle)
            settle()
            await drained
        if failed:
            raise failed[0]
    finally:
        await source.aclose()
        for t in (lag_task, auto_task, *(p for p in pending if p not in answered)):
            if t is not None:
                t.cancel()
        await asyncio.gather(lag_task, *(t for t in [auto_task] if t), *pending, return_exceptions=True)
        stats.wall_s = time.perf_counter() - t0
        stats.cpu_s = time.process_time() - c0
        stats.final_concurrency = auto.limit if auto else limit
        stats.auto_levels = auto.levels if auto else []
    return stats
