"""The client's timeouts: what bounds each part of a request's wait (:class:`ClientOptions`) and what a timeout
that fired means (:func:`timeout_message`).

A streamed request's wait for its first ``data:`` event (its headers may come at once or late: its turn in the
server's queue, then its prefill) is bounded by ``ttft_timeout_s``, never by the idle timeout; from its first event
on, ``idle_timeout_s`` bounds each gap between ``data:`` events and :meth:`ClientOptions.total_timeout` the rest of
the answer. A non-streamed (scored) request's only bytes are its whole answer: its bound is ``ttft_timeout_s`` plus
:meth:`ClientOptions.scored_timeout`, scaled to the prompt tokens it scores. A request that timed out before any
event is not re-sent; one whose stream went idle or past its bound once tokens flowed is.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import TracebackType

from evalkit.contracts import Request


@dataclass(frozen=True)
class ClientOptions:
    """Timeouts and retry bounds (the module docstring says what each bounds). ``ttft_timeout_s``: the longest
    wait from a send to the first ``data:`` event; ``idle_timeout_s``: the longest gap between ``data:`` events
    once the first came; :meth:`total_timeout`: the longest a streamed answer takes from its first event to its
    end; :meth:`scored_timeout`: what a non-streamed answer may take beyond ``ttft_timeout_s``."""

    connect_timeout_s: float = 10.0
    idle_timeout_s: float = 120.0
    ttft_timeout_s: float = 1800.0
    total_base_s: float = 120.0
    total_per_token_s: float = 0.5
    total_per_prompt_token_s: float = 0.02
    max_attempts: int = 5
    max_retry_s: float = 600.0
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0

    def total_timeout(self, max_tokens: int) -> float:
        """A streamed answer's bound from its first event: a base plus ``total_per_token_s`` per token asked."""
        return self.total_base_s + max_tokens * self.total_per_token_s

    def scored_timeout(self, prompt_tokens: int, max_tokens: int) -> float:
        """A non-streamed answer's bound beyond ``ttft_timeout_s``: :meth:`total_timeout` plus
        ``total_per_prompt_token_s`` per prompt token scored."""
        return self.total_timeout(max_tokens) + prompt_tokens * self.total_per_prompt_token_s

    def first_event_timeout(self, req: Request) -> float:
        """The bound from a send to its first event: ``ttft_timeout_s``, plus :meth:`scored_timeout` for a
        non-streamed request (its first bytes are its whole answer)."""
        scored = self.scored_timeout(prompt_size(req), req.gen.max_tokens) if req.gen.scored else 0.0
        return self.ttft_timeout_s + scored


def prompt_size(req: Request) -> int:
    """At least the request's prompt tokens: its token ids where it sends them, else its characters (a token is
    never shorter than one character)."""
    if req.prompt_ids is not None:
        return len(req.prompt_ids)
    if req.messages:
        return sum(len(str(m.get("content") or "")) for m in req.messages)
    return len(req.prompt or "")


def timeout_message(
    o: ClientOptions, req: Request, first_bound: float, answer_end: float, now: float
) -> tuple[str, bool]:
    """What a timer that fired means, and whether the request is re-sent: no first event or answer within
    ``first_bound`` (not re-sent: it would wait at the back of the same queue), else a stream that went idle or
    past its answer's bound (``answer_end``, a loop time; 0: no event came) once its tokens flowed (re-sent)."""
    if req.gen.scored:
        return (
            f"timed out: no answer within {first_bound:g} s (the TTFT timeout, {o.ttft_timeout_s:g} s, plus "
            f"{first_bound - o.ttft_timeout_s:g} s for its ~{prompt_size(req)} prompt tokens and max_tokens "
            f"{req.gen.max_tokens}); not re-sent: raise --ttft-timeout for a server this loaded"
        ), False
    if not answer_end:
        return (
            f"timed out: no data event within the TTFT timeout ({o.ttft_timeout_s:g} s: the wait in the "
            "server's queue and the prefill); not re-sent: raise --ttft-timeout for a server this loaded"
        ), False
    if now >= answer_end:
        return (
            f"timed out: the answer took longer than its bound ({o.total_timeout(req.gen.max_tokens):g} s "
            f"from its first event for max_tokens {req.gen.max_tokens})"
        ), True
    return f"timed out: no data event within the idle timeout ({o.idle_timeout_s:g} s) once tokens flowed", True


class Deadline:
    """``async with Deadline(when):`` cancels its task at the loop time ``when`` and raises TimeoutError from the
    block, ``expired`` set; :meth:`reschedule` moves it (``asyncio.timeout_at`` does this from Python 3.11).

    A deadline moved later costs no timer: the armed one, when it fires early, arms itself again for the
    deadline as it then is (a stream's idle timeout moves it at every event)."""

    def __init__(self, when: float) -> None:
        self.when = when
        self.expired = False
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._armed = when  # the loop time the timer is set for (never after ``when``)

    async def __aenter__(self) -> Deadline:
        self._task = asyncio.current_task()
        self._armed = self.when
        self._handle = self._loop.call_at(self.when, self._fire)
        return self

    def _fire(self) -> None:
        if self.when > self._armed:  # moved later since the timer was armed
            self._armed = self.when
            self._handle = self._loop.call_at(self.when, self._fire)
            return
        self.expired = True
        if self._task is not None:
            self._task.cancel()

    def reschedule(self, when: float) -> None:
        if self._handle is not None and not self.expired:
            self.when = when
            if when < self._armed:
                self._handle.cancel()
                self._armed = when
                self._handle = self._loop.call_at(when, self._fire)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self.expired and exc_type is asyncio.CancelledError:
            uncancel = getattr(self._task, "uncancel", None)  # 3.11+: another cancel still pending is kept
            if uncancel is None or uncancel() == 0:
                raise TimeoutError from None
