"""The task contract: a task turns data into requests and responses into scores.

Two kinds exist (see ``evalkit/tasks/registry.py``):
- ``lm-eval``: lm-eval's own task object (prompts, filters, metrics) driven by evalkit (``lmeval_task.py``).
- ``python``: a module in ``tasks/`` with a ``make_task(spec, root)`` function returning a :class:`Task`
  (e.g. ``tasks/aime25.py``).
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from evalkit.contracts import EndpointKind, MetricValue, Request, Response, SampleRecord, Score, ToolExecutor

T = TypeVar("T")


@dataclass(frozen=True)
class TaskSettings:
    """User-facing knobs, already merged with the task's defaults by the runner."""

    limit: int | None = None
    num_fewshot: int | None = None
    num_samples: int = 1
    max_tokens: int | None = None
    max_length: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    endpoint_kind: EndpointKind | None = None
    docs: tuple[int, ...] | None = None  # only these document ids (``limit`` then caps how many of them)
    # multi-turn tool-calling tasks: leave earlier turns' reasoning out of the history sent back (None: other tasks)
    drop_reasoning: bool | None = None

    def wants(self, doc_id: int) -> bool:
        """Whether document ``doc_id`` is in the run's selection (every document when ``docs`` is None)."""
        return self.docs is None or doc_id in self.docs

    def select(self, items: Sequence[T]) -> list[tuple[int, T]]:
        """The ``(doc_id, item)`` pairs of a task's documents (doc_id = position) that the run takes: those in
        ``docs``, then at most ``limit`` of them."""
        chosen = [(d, item) for d, item in enumerate(items) if self.wants(d)]
        return chosen if self.limit is None else chosen[: max(self.limit, 0)]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Task(ABC):
    """A named, versioned evaluation task."""

    name: str
    version: str
    description: str = ""
    endpoint_kind: EndpointKind = "completions"
    data_files: dict[str, Path]
    summary_needs_text = False  # True when summarize() re-reads responses (lm-eval tasks re-run their filters)

    @functools.cached_property
    def data_sha256(self) -> dict[str, str]:
        return {split: sha256_file(p) for split, p in sorted(self.data_files.items())}

    @abstractmethod
    def defaults(self) -> dict[str, Any]:
        """Default sampling for this task: keys of TaskSettings (temperature, top_p, max_tokens, num_samples...)."""

    @abstractmethod
    def build_requests(self, settings: TaskSettings) -> list[Request]:
        """All requests of the run, in a stable order (doc_id, then sample_index)."""

    @abstractmethod
    def score(self, request: Request, response: Response) -> Score:
        """Score one response; never called for failed requests (status api_error)."""

    @abstractmethod
    def summarize(self, records: Sequence[SampleRecord]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Metrics (keyed as in lm-eval's results, e.g. ``exact_match,strict-match`` or ``pass@4``) and extra
        task-specific detail (per-problem tables...). ``records`` hold every request of the run, failed ones
        included; metrics state their denominators in ``n``."""

    def metric_names(self, settings: TaskSettings | None = None) -> list[str]:
        """The metric names summary.json will hold for a run with ``settings`` (the task's defaults when None)."""
        return []

    def quick_to_build(self, settings: TaskSettings) -> bool:
        """False when ``build_requests`` would take seconds (lm-eval with a cold prompt cache): evalkit then builds
        them in a worker process and sends each request as it comes (``stream_requests``)."""
        return True

    def count_requests(self, settings: TaskSettings) -> int:
        """How many requests ``build_requests`` returns; tasks that build slowly answer it without building."""
        return len(self.build_requests(settings))

    def stream_requests(self, settings: TaskSettings, emit: Callable[[Request], None]) -> None:
        """``build_requests``, one request at a time to ``emit`` as each is built, in the same order."""
        for req in self.build_requests(settings):
            emit(req)

    def tool_executor(self, request: Request) -> ToolExecutor | None:
        """For a request with a conversation (multi-turn tool calling): fresh backends that run its tool calls;
        None (the default) for a request answered by one exchange."""
        return None

    def prepare(self) -> None:  # noqa: B027 - an optional hook: most tasks need nothing loaded
        """Load what ``score`` needs (evalkit runs this in the scoring process as the run starts, beside setup
        and the first requests, so that the first answers do not wait for it)."""

    def preview(self, settings: TaskSettings) -> str:
        """The first request's prompt, for ``evalkit tasks show``."""
        reqs = self.build_requests(TaskSettings(**{**settings.__dict__, "limit": 1}))
        return reqs[0].prompt if reqs else ""
