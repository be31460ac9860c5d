"""What a task asks and what the server answered, in memory (re-exported by :mod:`evalkit.contracts`):
:class:`Request` with its :class:`GenParams` and :class:`Conversation`, :class:`Response`, and what the scheduler
measured of its own sending (:class:`SchedulerStats`). Plain and frozen dataclasses, not pydantic: millions are made
per run on the event loop, where validation would cost client CPU that the speed numbers measure."""

from __future__ import annotations

from array import array
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any, Protocol, TypeVar

_T = TypeVar("_T")


def _pickled_by_fields(cls: type[_T]) -> type[_T]:
    """Pickles the slotted dataclass ``cls`` as a call of ``cls`` with its field values: each request sent is
    pickled to the scoring process, and the ``__getstate__`` that ``dataclass(slots=True)`` adds left a tuple
    per pickling that only the cyclic garbage collector frees."""
    values = attrgetter(*(f.name for f in fields(cls)))  # type: ignore[arg-type]

    def __reduce__(self: _T) -> tuple[type[_T], tuple[Any, ...]]:
        return cls, values(self)

    cls.__reduce__ = __reduce__  # type: ignore[assignment,method-assign]
    return cls


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class GenParams:
    """What is sent to the server for one request (besides the prompt)."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    chat_template_kwargs: dict[str, Any] | None = None
    # scored requests (sent without streaming, answered with token ids): top-K logprobs of the prompt's positions
    # (``prompt_logprobs``) and of the generated ones (``logprobs``), ``echo`` the prompt back (lm-eval's scoring)
    prompt_logprobs: int | None = None
    logprobs: int | None = None
    echo: bool = False
    # vLLM's extensions of the completions API: at least ``min_tokens`` generated, generation past the EOS token
    # (``ignore_eos``); a workload sets both to force each answer's length (evalkit/tasks/workload_task.py)
    min_tokens: int | None = None
    ignore_eos: bool = False

    @property
    def scored(self) -> bool:
        """True when the answer carries logprobs of the prompt (vLLM sends those only without streaming)."""
        return self.prompt_logprobs is not None or self.echo

    def as_dict(self) -> dict[str, Any]:
        """The fields that make a request's key; those of scored requests only when set (older keys unchanged)."""
        out: dict[str, Any] = {
            "max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p,
            "seed": self.seed, "stop": list(self.stop), "chat_template_kwargs": self.chat_template_kwargs,
        }  # fmt: skip
        extra = {
            "prompt_logprobs": self.prompt_logprobs, "logprobs": self.logprobs, "echo": self.echo or None,
            "min_tokens": self.min_tokens, "ignore_eos": self.ignore_eos or None,
        }  # fmt: skip
        return out | {k: v for k, v in extra.items() if v is not None}


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Conversation:
    """A multi-turn sample: the user turns after the first (``Request.messages``), whether the reasoning of
    earlier turns is left out of the history sent back, how many tool-calling requests one turn may make before
    the conversation is stopped (BFCL's ``MAXIMUM_STEP_LIMIT``: the turn stops once more than ``max_steps``
    requests called tools), and the seconds the user thinks between a turn's answer and the next user turn
    (``think_s``, the ``sessions`` workload's ``--think-time``)."""

    turns: tuple[tuple[dict[str, str], ...], ...]
    drop_reasoning: bool = True
    max_steps: int = 20
    think_s: float = 0.0


class ToolExecutor(Protocol):
    """Runs one step's tool calls (``(name, arguments)``) against a sample's backends; one result text each."""

    def __call__(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> list[str]: ...


@_pickled_by_fields
@dataclass(frozen=True, slots=True)
class Request:
    """One request a task wants answered. ``prompt`` is the completions prompt, or for chat the text of the
    last user message; ``messages`` is set for chat requests."""

    task: str
    doc_id: int
    sample_index: int
    prompt: str
    gen: GenParams
    target: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    tools: tuple[dict[str, Any], ...] | None = None  # chat only: OpenAI ``tools`` (function definitions)
    tool_choice: str | None = None  # "auto", "required" or "none" (sent with ``tools``)
    conversation: Conversation | None = None  # multi-turn: the later turns (evalkit.client.conversation)
    # completions only: the prompt as token ids, sent instead of ``prompt`` (which stays its text, for the record)
    prompt_ids: tuple[int, ...] | None = None
    # seconds from the timed phase's start at which the request is due (a trace's timestamps); None: the run's
    # arrival process (or none) schedules it
    arrival_s: float | None = None


@dataclass
class Response:
    """What came back for a request (filled by the client)."""

    text: str | None
    reasoning: str | None = None
    finish_reason: str | None = None
    error: str | None = None  # set when the request failed after retries
    note: str | None = None  # what was odd in an answer that did come back (e.g. usage that was ignored)
    http_status: int | None = None  # HTTP status of the final failure, when there was one
    attempts: int = 1
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    # latencies count from the request's first send (a re-sent request's include its failed attempts)
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = field(default_factory=list)
    start_s: float | None = None  # the first send, in seconds since the client started
    scheduled_s: float | None = None  # when it was due, on start_s's clock (None: sent as soon as a slot was free)
    retry_lost_s: float | None = None  # a re-sent request: seconds from its first send to its answered attempt's
    endpoint: str | None = None  # the URL (no credentials) that answered, when the run has several endpoints
    # the tool calls as streamed (``[{"id", "name", "arguments"}]``, arguments the raw JSON text); None when no
    # chunk carried a ``tool_calls`` field, [] when the server sent an empty list
    tool_calls: list[dict[str, Any]] | None = None
    # a conversation (Request.conversation): per user turn ``{"user": [its messages], "requests": [...]}``, each
    # request (step) ``{"text", "reasoning", "finish_reason", "tool_calls", "results", "prompt_tokens",
    # "output_tokens", "ttft_ms", "e2e_ms"}`` (``results``: the tool results sent back); None for single requests
    turns: list[dict[str, Any]] | None = None
    # a scored request (GenParams.scored): the choice's ``prompt_token_ids``, ``prompt_logprobs``, ``token_ids``
    # and ``logprobs`` as the server sent them (not streamed, so no TTFT/ITL); None for streamed requests
    logprobs: dict[str, Any] | None = None


@dataclass
class SchedulerStats:
    """What the scheduler measured about its own sending (input to the speed summary)."""

    concurrency_trace: list[tuple[float, int]] = field(default_factory=list)  # (seconds since start, limit)
    final_concurrency: int = 0
    auto_levels: list[dict[str, Any]] = field(default_factory=list)  # what --concurrency auto measured
    # the event loop's lateness, sampled every 50 ms of the request phase (8 bytes a sample: an hour is 0.6 MB)
    loop_lag_ms: MutableSequence[float] = field(default_factory=lambda: array("d"))
    wall_s: float = 0.0
    cpu_s: float = 0.0
    origin_s: float = 0.0  # the phase's start (the schedule's zero) on the client's clock (``start_s``'s)
    sent: int = 0  # requests sent
    not_sent: int = 0  # requests left unsent when the duration ran out
    processes: int = 1  # the processes that sent (cpu_s is their sum; evalkit/runner/sender_processes.py)
