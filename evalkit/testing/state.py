"""Configuration and observable state of the test server (shared by the thread and subprocess forms)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from evalkit.client.warmup import WARMUP_HEADER
from evalkit.testing.hostile import check_mode
from evalkit.testing.vllm_metrics import Metrics

AnswerFn = Callable[[str, dict[str, Any], int], str]

FAULT_KEYS = {
    "status", "retry_after", "message", "type", "html", "delay_s", "drop_after_tokens", "null_content",
    "stall_s", "after_tokens", "hostile", "echo_auth", "model",
}  # fmt: skip


@dataclass
class Behaviour:
    """How the server behaves; mutable at runtime (each request reads the current values)."""

    ttft_s: float = 0.0  # delay from start of generation (after any queueing) to the first generated token
    itl_s: float = 0.0  # delay between successive chunks
    tokens_per_chunk: int = 1
    models: list[str] = field(default_factory=lambda: ["test-model"])
    max_model_len: int = 4096
    correct_ratio: float = 1.0  # share of questions answered correctly (stable sha256 bucket < ratio*1000)
    answer_fn: AnswerFn | None = None  # (prompt, body, choice_index) -> full text, replaces the policy
    reasoning: str | None = None  # chat only: streamed first, as reasoning
    reasoning_field: str = "reasoning_content"  # or "reasoning" (the name newer vLLM sends)
    api_key: str | None = None  # /v1 wants "Authorization: Bearer <api_key>"
    basic_auth: str | None = None  # "user:password": /v1 wants it as HTTP Basic auth (when api_key is None)
    redirect: dict[str, Any] | None = None  # {"status": 307, "to": "http://h:p", "paths": [...]}: see build_app
    max_num_seqs: int | None = None
    batch_knee: int | None = None  # beyond this many running requests, chunks slow in proportion: flat throughput
    knee_power: float = 1.0  # ... as (running / knee) ** knee_power: above 1, throughput falls past the knee
    fast: bool = False  # no sleeps, responses cached by request body: for CPU benchmarks of clients
    switch_after: int | None = None  # after this many generation requests arrived, apply ``switch_to`` (once)
    switch_to: dict[str, Any] | None = None  # Behaviour fields, e.g. {"correct_ratio": 0.4}: a server that drifts
    auto_tool_choice: bool = True  # False: a request with tools is refused with 400, as vLLM without the flag
    tool_variant: str = "right"  # how requests with tools are answered (evalkit.testing.tools.VARIANTS, or "mix")
    # {"paths": ["/v1/models"], "bytes": N}: those paths answer a gzip body that decompresses to N bytes (a bomb)
    gzip_bomb: dict[str, Any] | None = None
    # the first generation request of each new sampling config (temperature, top_p, top_k, min_p) holds every
    # request in flight for this long once it starts, as vLLM compiling a sampler kernel on the first batch
    first_batch_stall_s: float = 0.0
    dev_mode: bool = False  # serve POST /reset_prefix_cache, as vLLM does with VLLM_SERVER_DEV_MODE=1
    # scored requests (``prompt_logprobs``; evalkit.testing.scored): every logit times ``logit_scale``; Gaussian
    # noise of sd ``logit_noise`` on the candidates' logits, fresh per request, or fixed by ``logit_noise_seed``
    logit_scale: float = 1.0
    logit_noise: float = 0.0
    logit_noise_seed: int | None = None

    def update(self, **changes: Any) -> None:
        names = {f.name for f in fields(self)}
        for k, v in changes.items():
            if k not in names:
                raise ValueError(f"unknown Behaviour field {k!r}")
            setattr(self, k, v)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "answer_fn"}
        out["answer_fn"] = None if self.answer_fn is None else repr(self.answer_fn)
        return out


@dataclass
class RecordedRequest:
    """One generation request as the server received it."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    time: float  # wall-clock arrival (time.time())
    prompts: list[str] = field(default_factory=list)  # completions prompts, or [last user message] for chat
    fault: dict[str, Any] | None = None
    status: int | None = None  # HTTP status sent (None while in progress)
    completed: bool = False  # the whole response was sent
    aborted: bool = False  # the client went away, or a drop fault cut the connection
    first_token_time: float | None = None
    end_time: float | None = None

    @property
    def prompt(self) -> str:
        return self.prompts[0] if self.prompts else ""

    def __getitem__(self, key: str) -> Any:
        """Dict-style access (``rec["body"]``), like the JSON of ``GET /_test/requests``."""
        if key not in self.to_dict():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "body": self.body,
            "headers": self.headers,
            "time": self.time,
            "prompts": self.prompts,
            "fault": self.fault,
            "status": self.status,
            "completed": self.completed,
            "aborted": self.aborted,
            "first_token_time": self.first_token_time,
            "end_time": self.end_time,
        }


def is_warmup(headers: dict[str, str]) -> bool:
    """Whether a request carries evalkit's warm-up header (evalkit.client.warmup.WARMUP_HEADER)."""
    wanted = WARMUP_HEADER.lower()
    return any(k.lower() == wanted for k in headers)


def validate_fault(fault: Any) -> dict[str, Any] | None:
    """``None`` / ``{}`` mean "no fault for this request"; anything else must use the known keys."""
    if fault is None:
        return None
    if not isinstance(fault, dict):
        raise ValueError(f"a fault is a dict, got {fault!r}")
    unknown = set(fault) - FAULT_KEYS
    if unknown:
        raise ValueError(f"unknown fault keys {sorted(unknown)}; known: {sorted(FAULT_KEYS)}")
    if "hostile" in fault:
        check_mode(fault["hostile"])
    return fault or None


class ServerState:
    """Everything a test may look at or change; safe to read from other threads."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.faults: list[dict[str, Any] | None] = []
        self.metrics = Metrics()
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._warmup: list[RecordedRequest] = []  # requests sent with evalkit's warm-up header, kept apart
        self.generation_requests = 0  # since start (reset() does not zero it: switch_after counts from start)
        self.seen: list[tuple[str, str, dict[str, str]]] = []  # every request: method, path, headers
        self.inflight = 0
        self.max_concurrency_seen = 0
        self.arrivals: Counter[str] = Counter()
        # scheduler (only touched from the server's event loop)
        self.running = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.cache: dict[tuple[Any, ...], Any] = {}  # fast mode: prebuilt responses
        self.sampling_seen: set[tuple[Any, ...]] = set()  # first_batch_stall_s: configs "compiled" already
        self.stall_until = 0.0  # event-loop time until which every request in flight waits
        self.prefix_cache_resets = 0

    # ---- requests
    def record(self, rec: RecordedRequest) -> None:
        """Note a generation request. One with evalkit's warm-up header goes to ``warmup_requests``, not
        ``requests``, takes no fault and does not count towards ``switch_after``: tests see the run's requests."""
        with self._lock:
            self.inflight += 1
            self.max_concurrency_seen = max(self.max_concurrency_seen, self.inflight)
            if is_warmup(rec.headers):
                self._warmup.append(rec)
                return
            self._requests.append(rec)
            self.generation_requests += 1
            b = self.behaviour
            if b.switch_after is not None and self.generation_requests > b.switch_after:
                changes, b.switch_after, b.switch_to = b.switch_to or {}, None, None
                b.update(**changes)  # this request already sees the new behaviour

    def done(self) -> None:
        with self._lock:
            self.inflight -= 1

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def warmup_requests(self) -> list[RecordedRequest]:
        """The generation requests that carried evalkit's warm-up header."""
        with self._lock:
            return list(self._warmup)

    def completed_count(self, prompt: str) -> int:
        return sum(1 for r in self.requests if r.completed and prompt in r.prompts)

    def next_fault(self) -> dict[str, Any] | None:
        try:
            return validate_fault(self.faults.pop(0))
        except IndexError:
            return None

    def reset(self) -> None:
        with self._lock:
            self._requests = []
            self._warmup = []
            self.seen = []
            self.max_concurrency_seen = self.inflight
            self.arrivals.clear()
            self.faults.clear()
            self.cache.clear()
        self.metrics.reset()

    # ---- max_num_seqs scheduling
    def _can_run(self) -> bool:
        limit = self.behaviour.max_num_seqs
        return limit is None or self.running < limit

    def wake(self) -> None:
        while self.waiters and self._can_run():
            fut = self.waiters.popleft()
            if not fut.done():
                self.running += 1
                fut.set_result(None)

    async def acquire(self, model: str) -> None:
        if not self.waiters and self._can_run():
            self.running += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(fut)
        self.metrics.gauge_add(model, waiting=1)
        try:
            while not fut.done():
                # poll too, so that raising max_num_seqs at runtime lets waiters in
                await asyncio.wait({fut}, timeout=0.05)
                self.wake()
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()
            else:
                fut.cancel()
                if fut in self.waiters:
                    self.waiters.remove(fut)
            raise
        finally:
            self.metrics.gauge_add(model, waiting=-1)

    def release(self) -> None:
        self.running -= 1
        self.wake()
