"""The task contract: a task turns data into requests and responses into scores.

A task is built from its checked task file (:class:`evalkit.tasks.spec.TaskSpec`) by its kind, a class in the
kinds table of ``evalkit/tasks/registry.py`` (``lm-eval``, ``python``, ``tool-calls``, or one a package adds
through the ``evalkit.task_kinds`` entry point group). A task writes two methods, :meth:`Task.build_requests`
and :meth:`Task.score`; :meth:`Task.summarize` computes the metrics it names (``metrics``, see
:mod:`evalkit.scoring.metric_registry`) from the scores, unless the task brings its own (lm-eval's aggregations).
A ``python`` task is an importable class its YAML names (``class: module:Class``) or a module beside its YAML
with ``make_task(spec)`` (e.g. ``tasks/aime25.py``); boxed-answer math tasks subclass
:class:`evalkit.tasks.boxed_task.BoxedAnswerTask`.
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from evalkit.contracts import EndpointKind, MetricValue, Request, Response, SampleFields, Score, ToolExecutor
from evalkit.tasks.spec import TaskSettings, TaskSpec

if TYPE_CHECKING:  # the metrics (and numpy) are imported when a summary is computed, not to list tasks
    from evalkit.scoring.metric_registry import Samples


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Task(ABC):
    """A named, versioned evaluation task.

    The default constructor takes the checked task file; a kind with more to read extends it::

        class MyTask(Task):
            builtin_defaults = {"temperature": 0.0, "max_tokens": 1024}
            metrics = ("accuracy",)              # names in evalkit.scoring.metric_registry.METRICS
            key = "exact"                        # of Score.correct / Score.extracted the metrics read

            def build_requests(self, settings): ...
            def score(self, request, response): ...
    """

    name: str
    version: str
    description: str = ""
    endpoint_kind: EndpointKind = "completions"
    data_files: dict[str, Path]
    summary_needs_text = False  # True when summarize() re-reads responses (lm-eval tasks re-run their filters)
    builtin_defaults: ClassVar[Mapping[str, Any]] = {}  # the kind's defaults, under the task file's
    data_needed: tuple[str, ...] = ("test",)  # the ``data`` entries the default constructor requires
    metrics: tuple[str, ...] = ("accuracy",)  # what the default summarize() reports (a task file's ``metrics``)
    key = "correct"  # the key of the scores' ``correct`` / ``extracted`` that the metrics read
    items: Sequence[dict[str, Any]] = ()  # the documents; the default summary reads their ``id`` / ``answer``
    takes_scorer: ClassVar[bool] = False  # True when ``score`` uses the task file's ``scorer`` (the registry
    # refuses a file that names one for a task that does not)
    scores_in_run_process: ClassVar[bool] = False  # True when ``score`` takes a few µs of the GIL and needs nothing
    # the scoring process loads: the run scores its answers in the store's thread, without a hand-off to that process

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.version = spec.version
        self.description = spec.description
        self.endpoint_kind = spec.endpoint_kind or self.endpoint_kind
        self.data_files = spec.data_files(*self.data_needed)
        self._defaults = spec.merged_defaults(self.builtin_defaults)
        self.metrics = spec.metrics or self.metrics

    @classmethod
    def from_spec(cls, spec: TaskSpec) -> Task:
        """The task a checked task file declares (the registry calls this on the kind's class)."""
        return cls(spec)

    @functools.cached_property
    def data_sha256(self) -> dict[str, str]:
        return {split: sha256_file(p) for split, p in sorted(self.data_files.items())}

    def defaults(self) -> dict[str, Any]:
        """Default sampling for this task: keys of TaskSettings (temperature, top_p, max_tokens, num_samples...)."""
        return dict(self._defaults)

    def setting(self, settings: TaskSettings, key: str) -> Any:
        """``settings``' value of ``key``, or the task's default where the run leaves it unset."""
        value = getattr(settings, key)
        return self._defaults.get(key) if value is None else value

    @abstractmethod
    def build_requests(self, settings: TaskSettings) -> list[Request]:
        """All requests of the run, in a stable order (doc_id, then sample_index)."""

    @abstractmethod
    def score(self, request: Request, response: Response) -> Score:
        """Score one response; never called for failed requests (status api_error)."""

    @staticmethod
    def canonical(answer: str | None) -> Hashable | None:
        """An extracted answer in a form where equal answers compare equal (maj@K votes, the per-item table)."""
        return answer

    def samples(self, records: Sequence[SampleFields]) -> Samples:
        """This task's records grouped by item, as the metrics read them."""
        from evalkit.scoring.metric_registry import Samples

        gold = {d: str(item["answer"]) for d, item in enumerate(self.items) if "answer" in item}
        return Samples([r for r in records if r.task == self.name], self.key, self.canonical, gold)

    def summarize(self, records: Sequence[SampleFields]) -> tuple[dict[str, MetricValue], dict[str, Any]]:
        """Metrics (keyed as in lm-eval's results, e.g. ``exact_match,strict-match`` or ``pass@4``) and extra
        task-specific detail (per-problem tables...). ``records`` hold every request of the run, failed ones
        included; metrics state their denominators in ``n``."""
        from evalkit.scoring.metric_registry import compute_metrics

        samples = self.samples(records)
        return compute_metrics(self.metrics, samples), self.detail(samples)

    def detail(self, samples: Samples) -> dict[str, Any]:
        """The summary's ``detail``: by default request outcomes, token statistics and a table per item."""
        from evalkit.scoring.metric_registry import sampled_detail

        def item_id(doc_id: int) -> str | None:
            return str(self.items[doc_id]["id"]) if 0 <= doc_id < len(self.items) else None

        return sampled_detail(samples, self.metrics, item_id)

    def metric_names(self, settings: TaskSettings | None = None) -> list[str]:
        """The metric names summary.json will hold for a run with ``settings`` (the task's defaults when None)."""
        from evalkit.scoring.metric_registry import metric_names

        k = settings.num_samples if settings is not None else int(self.defaults().get("num_samples", 1))
        return metric_names(self.metrics, k, self.key)

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

    def use_endpoint(self, base_url: str, api_key: str | None) -> None:  # noqa: B027 - an optional hook
        """The run's server, told before ``build_requests`` (a task whose prompts are tokenised there keeps it)."""

    def prepare(self) -> None:  # noqa: B027 - an optional hook: most tasks need nothing loaded
        """Load what ``score`` needs (evalkit runs this in the scoring process as the run starts, beside setup
        and the first requests, so that the first answers do not wait for it)."""

    def preview(self, settings: TaskSettings) -> str:
        """The first request's prompt, for ``evalkit tasks show``."""
        reqs = self.build_requests(TaskSettings(**{**settings.__dict__, "limit": 1}))
        return reqs[0].prompt if reqs else ""
