"""The records that cross layers: what a task asks (:class:`Request`), what the server answered
(:class:`Response`), the verdict (:class:`Score`), and the run directory's three files:

- ``manifest.json``  -> :class:`Manifest` (what was run, where, with which versions)
- ``samples.jsonl``  -> one :class:`SampleRecord` per request, appended as each request completes
- ``summary.json``   -> :class:`RunSummary` (``{"schema_version": 2, "tasks": {name: TaskSummary}}``)
- ``positions.bin``  -> one :class:`PromptPositions` per scored text of a ``logprobs`` task (``numerics``)

A run sharded over several endpoints adds ``endpoint`` to each sample, ``endpoints`` to the manifest and to each
task's summary; the fields are absent (not null) in a run against one endpoint, so its files read as before.

Requests and responses are frozen/plain dataclasses: millions are made per run on the event loop, where pydantic
validation would cost client CPU that the speed numbers measure. What is written to or read from disk is pydantic.
Everything downstream (report, gate, compare) reads only the run directory, through :mod:`evalkit.store`.
Their models derive from :class:`~evalkit.contracts.record.Record`: a field added with a default is left out of the
files while unset, so the files of older runs read and write back unchanged.
``evalkit schema summary|manifest`` prints the JSON Schema of those files. ``capacity.json`` (``evalkit capacity``,
beside the run dirs of its load points) -> :class:`CapacityRecord` (:mod:`evalkit.contracts.capacity`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

from pydantic import BaseModel, ConfigDict, Field

from evalkit.contracts.capacity import (  # noqa: F401 - part of the contract
    CapacityDecision,
    CapacityPoint,
    CapacityRecord,
    LoadFigures,
    ServerIdentity,
)
from evalkit.contracts.exchange import (  # noqa: F401 - part of the contract
    Conversation,
    GenParams,
    Request,
    Response,
    SchedulerStats,
    ToolExecutor,
)
from evalkit.contracts.load import LoadSeries, LoadSummary  # noqa: F401 - part of the contract
from evalkit.contracts.positions import PromptPositions
from evalkit.contracts.record import Record
from evalkit.contracts.shards import MergedShard, ShardRecord
from evalkit.contracts.speed_catalogue import (  # noqa: F401 - part of the contract
    LATENCIES,
    QUANTILES,
    SPEED,
    SPEED_METRICS,
    Direction,
    Latency,
    Percentiles,
    Speed,
    SpeedMetric,
    SteadyState,
    speed_metric,
)

SCHEMA_VERSION = 2  # 2: the optional fields of a run sharded over several endpoints (absent otherwise)
"""The version of the run dir's files (``summary.json``'s and ``manifest.json``'s ``schema_version``). A field
added with a default needs no bump (:class:`~evalkit.contracts.record.Record` leaves it out while unset); a
required field, a rename, a change of meaning or unit, or a field written at its default does (ARCHITECTURE.md,
Rules)."""

Status = Literal[
    "ok", "truncated", "no_answer", "empty", "api_error", "tool_text", "tool_calls_empty", "bad_arguments",
    "bad_positions",
]  # fmt: skip
"""ok: scored normally; truncated: finish_reason=length (still scored, flagged);
no_answer: nothing extractable from the final answer text (tool tasks: text but no call where one was expected);
empty: the server returned no text (and no call); api_error: the request failed after retries (never scored).
Tool-calling tasks only (scored as wrong where a call was expected, flagged): tool_text: a call written as text that
the server did not parse (its tool-call parser is off or wrong); tool_calls_empty: finish_reason tool_calls with an
empty or missing list of calls; bad_arguments: a call's arguments are not a JSON object.
``logprobs`` tasks only (not scored, flagged): bad_positions: the answer's ``prompt_logprobs`` do not fit its
``prompt_token_ids`` (missing, empty, of another length, without the actual token) or the prompt's token count."""
STATUSES: tuple[Status, ...] = get_args(Status)
BASE_STATUSES: tuple[Status, ...] = STATUSES[:5]
"""The statuses any task can produce: a summary's ``counts`` always lists them, the others only when they occur."""

EndpointKind = Literal["completions", "chat"]


CORPUS_AGGREGATIONS = ("weighted_perplexity", "bits_per_byte")
"""lm-eval's aggregations of per-document (loglikelihood, length) pairs over a corpus (``word_perplexity``,
``byte_perplexity``, ``bits_per_byte``): a summary's ``detail.doc_pairs`` records each such metric's pairs, which
the gate compares document by document."""

UNRECORDED = "unrecorded"  # a sharded run's per-endpoint key for samples stored without an endpoint


def _is_none(value: Any) -> bool:
    """Fields of sharded runs are left out of the files (not written as null) where unused."""
    return value is None


@dataclass(frozen=True)
class Score:
    """A verdict. ``answer``/``reasoning``, when set, replace what is stored as the sample's response and
    reasoning (e.g. after splitting inline ``<think>`` text out of the content)."""

    status: Status
    extracted: dict[str, str | None]
    correct: dict[str, bool | None]
    extraction: str | None = None
    answer: str | None = None
    reasoning: str | None = None
    figures: dict[str, float] | None = None  # per-sample figures (SampleRecord.figures)
    # a ``logprobs`` task's teacher-forced positions (its ``key`` left "" for the runner, which knows the request's
    # key, to fill in); the runner writes them to ``positions.bin`` before the sample's record
    positions: PromptPositions | None = None


class Timing(Record):
    """Per-request speed, defined as in vLLM's ``vllm/benchmarks/serve.py``.

    ttft_ms: request sent -> first chunk that carries generated text (content, reasoning or a tool-call fragment).
    itl_ms: gaps between successive such chunks (one entry per chunk after the first).
    tpot_ms: (e2e - ttft) / (output_tokens - 1); None when output_tokens < 2.
    e2e_ms: request sent -> stream finished.
    """

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({"ttft_ms", "tpot_ms", "e2e_ms", "itl_ms", "start_s"})  # schema 2

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = Field(default_factory=list)
    start_s: float | None = None  # seconds since the run's request phase began


class SampleRecord(Record):
    """One line of ``samples.jsonl``: one request and what became of it."""

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({  # schema 2
        "sample_index", "messages", "response", "reasoning", "finish_reason", "error", "attempts", "target",
        "extracted", "correct", "extraction", "prompt_tokens", "output_tokens", "reasoning_tokens", "ttft_ms",
        "tpot_ms", "e2e_ms", "itl_ms", "start_s",
    })  # fmt: skip

    key: str  # request key: sha256 over model, endpoint kind, task+version, data hash, prompt, sampling, index
    task: str
    doc_id: int
    sample_index: int = 0
    prompt: str  # the exact text sent (completions) or the rendered user message (chat)
    messages: list[dict[str, str]] | None = None  # chat requests only
    response: str | None = None  # final answer text (content), never the reasoning
    reasoning: str | None = None  # reasoning text, stored apart and never scored
    finish_reason: str | None = None
    status: Status
    error: str | None = None  # api_error: why it failed; otherwise what was odd in the answer (ignored usage)
    attempts: int = 1
    target: str | None = None
    extracted: dict[str, str | None] = Field(default_factory=dict)  # per filter / extractor
    correct: dict[str, bool | None] = Field(default_factory=dict)  # per filter / extractor
    extraction: str | None = None  # how the answer was extracted (custom scorers)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    # TTFT and E2E count from the request's first send: a re-sent request's include its failed attempts and their
    # backoff, as a user waits them (vllm bench serve never re-sends); ``start_s`` is that first send
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = Field(default_factory=list)
    start_s: float | None = None
    # a re-sent request that was answered: seconds its failed attempts and their backoff took (from its first send
    # to the answered attempt's); left out of the line otherwise
    retry_lost_s: float | None = Field(default=None, exclude_if=_is_none)
    # a request sent on a schedule (an arrival process, or its own arrival time): when it was due, on ``start_s``'s
    # clock (its send lag is start_s - scheduled_s); left out of the line otherwise
    scheduled_s: float | None = Field(default=None, exclude_if=_is_none)
    # the endpoint (URL without credentials) that answered: in a run sharded over several endpoints, and on answers
    # a resumed run kept from another endpoint; None: the manifest's endpoint
    endpoint: str | None = Field(default=None, exclude_if=_is_none)
    # tool-calling tasks: the calls as the server sent them (``[{"id", "name", "arguments"}]``; [] an empty list);
    # left out of the line when None, so records of tasks without tools keep the line they always had
    tool_calls: list[dict[str, Any]] | None = Field(default=None, exclude_if=_is_none)
    # multi-turn tool-calling tasks: per user turn its messages, requests and the tool results sent back
    # (``{"user", "requests"}``, Response.turns); left out of the line when None
    turns: list[dict[str, Any]] | None = Field(default=None, exclude_if=_is_none)
    # per-sample figures of tasks that measure rather than judge (``logprobs``: ``positions``, ``mean_logprob``,
    # ``top1_rate``); left out of the line when None
    figures: dict[str, float] | None = Field(default=None, exclude_if=_is_none)


class SampleFields(Protocol):
    """What summarising reads of a sample: a :class:`SampleRecord`, or a row of the store's column-wise copy of a
    task's records (:class:`evalkit.store.sample_rows.SampleRows`, which a long run's summary reads: 180,000
    records as models are ~400 MB). Read-only; the fields and their types are :class:`SampleRecord`'s."""

    __slots__ = ()

    @property
    def key(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def doc_id(self) -> int: ...
    @property
    def sample_index(self) -> int: ...
    @property
    def prompt(self) -> str: ...
    @property
    def messages(self) -> list[dict[str, str]] | None: ...
    @property
    def response(self) -> str | None: ...
    @property
    def reasoning(self) -> str | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def status(self) -> Status: ...
    @property
    def error(self) -> str | None: ...
    @property
    def attempts(self) -> int: ...
    @property
    def target(self) -> str | None: ...
    @property
    def extracted(self) -> dict[str, str | None]: ...
    @property
    def correct(self) -> dict[str, bool | None]: ...
    @property
    def extraction(self) -> str | None: ...
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def ttft_ms(self) -> float | None: ...
    @property
    def tpot_ms(self) -> float | None: ...
    @property
    def e2e_ms(self) -> float | None: ...
    @property
    def itl_ms(self) -> list[float]: ...
    @property
    def start_s(self) -> float | None: ...
    @property
    def retry_lost_s(self) -> float | None: ...
    @property
    def scheduled_s(self) -> float | None: ...
    @property
    def endpoint(self) -> str | None: ...
    @property
    def tool_calls(self) -> list[dict[str, Any]] | None: ...
    @property
    def turns(self) -> list[dict[str, Any]] | None: ...
    @property
    def figures(self) -> dict[str, float] | None: ...


CI_METHODS: dict[str, str] = {
    "wilson": "Wilson score interval of the share over its n documents (problems for pass@k and maj@K)",
    "wilson-clustered": "Wilson score interval at the effective sample size of the stderr clustered by problem",
    "normal": "value ± 1.96 stderr (mean over texts)",
    "lm-eval-normal": "value ± 1.96 × lm-eval's stderr, clipped to [0, 1] for a share",
}
"""``MetricValue.ci_method``: how a metric's 95% interval was computed (evalkit.scoring.estimators), once, when
the metric was; every output shows that interval."""


class MetricValue(Record):
    """One accuracy metric in ``summary.json``: value with its standard error and 95% CI over ``n`` items;
    ``ci_method``: a key of :data:`CI_METHODS` (absent in run dirs written before it was recorded)."""

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({"stderr", "ci95"})  # schema 2

    value: float | None
    stderr: float | None = None
    ci95: tuple[float, float] | None = None
    n: int
    ci_method: str | None = Field(default=None, exclude_if=_is_none)

    def ci_text(self) -> str:
        """The stored interval as the text outputs show it: ``[0.3852, 0.6523] wilson`` ("-" without one)."""
        if self.ci95 is None:
            return "-"
        method = f" {self.ci_method}" if self.ci_method else ""
        return f"[{self.ci95[0]:.4f}, {self.ci95[1]:.4f}]{method}"


class EndpointSummary(Record):
    """One endpoint of a sharded run in its task's summary: the requests it answered and their speed."""

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({"server"})  # schema 2

    endpoint: str  # URL without credentials, as in the samples' ``endpoint``; "unrecorded": samples without one
    counts: dict[str, int]  # "total" (samples whose latest record names this endpoint) and one per Status
    speed: Speed  # over this endpoint's answered requests, wall time from its first send to its last answer
    server: dict[str, Any] | None = None  # its /metrics deltas over the task (None: not scraped or not served)


class ResentSummary(Record):
    """A task's requests that were sent more than once (after a failed attempt: a dropped connection, 408/409/429/
    5xx, a stream that stalled once its tokens flowed), in its summary's ``resent``; absent when none was."""

    model_config = ConfigDict(extra="forbid")

    requests: int  # samples with a request sent more than once (answered or not)
    lost_s: float  # seconds the answered ones lost to their failed attempts and backoff (their retry_lost_s, summed)


class TaskSummary(Record):
    """One task's entry in ``summary.json``: accuracy, request outcomes, speed and what the server and GPUs did."""

    model_config = ConfigDict(extra="allow")
    written_at_default = frozenset({"server", "gpu"})  # schema 2

    version: str
    metrics: dict[str, MetricValue]  # keyed as lm-eval's results (``exact_match,strict-match``) or ``pass@4``
    counts: dict[str, int]  # "total" and one count per Status
    speed: Speed
    concurrency_trace: list[tuple[float, int]]  # (seconds into the run, requests allowed in flight)
    concurrency_levels: list[dict[str, Any]]  # what --concurrency auto measured at each level it tried
    detail: dict[str, Any]  # task-specific (per-problem tables, token statistics...)
    server: dict[str, Any] | None = None  # /metrics deltas over the task (evalkit.server.metrics)
    gpu: dict[str, Any] | None = None  # GPU sampling over the task (evalkit.server.gpu)
    # a run sharded over several endpoints: per endpoint (``speed`` above is all of them together)
    endpoints: list[EndpointSummary] | None = Field(default=None, exclude_if=_is_none)
    resent: ResentSummary | None = Field(default=None, exclude_if=_is_none)  # absent: no request was re-sent
    # requests sent on a schedule: offered and achieved rate, send lag, per-second series (absent otherwise)
    load: LoadSummary | None = Field(default=None, exclude_if=_is_none)
    # a --shard run: Unix time, by this machine's clock, that its start_s and concurrency_trace count from (for merge)
    started_at_unix: float | None = Field(default=None, exclude_if=_is_none)


class WarmupSummary(Record):
    """What the warm-up before the timed phases did (``summary.json``'s ``warmup``; absent with ``--no-warmup``):
    its requests are in no speed figure, no metric and no line of ``samples.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    requests: int  # warm-up requests sent, over every task
    failed: int  # of those, failed after their attempts (the run goes on: the timed phase records its own errors)
    wall_s: float  # seconds the warm-up took (also in ``timings_s`` as ``<task>.warmup``)
    first_error: str | None = Field(default=None, exclude_if=_is_none)
    # only when evalkit started the server: whether its prefix cache was reset after the warm-up, and why not
    prefix_cache_reset: bool | None = Field(default=None, exclude_if=_is_none)
    prefix_cache_note: str | None = Field(default=None, exclude_if=_is_none)


class GroupSummary(Record):
    """One lm-eval group's entry in ``summary.json``'s ``groups``: its aggregate metrics as lm-eval computes them
    from its tasks' values, stderrs and sizes (its config's ``aggregate_metric_list``), or why it has none."""

    model_config = ConfigDict(extra="allow")
    written_at_default = frozenset({"sizes", "metrics"})  # schema 2

    members: list[str]  # its direct members, tasks and groups, as the run names them (``lm-eval:mmlu_stem``)
    tasks: list[str]  # the tasks its aggregate is over (nested groups' tasks too, as lm-eval aggregates them)
    # the group config's aggregate_metric_list (lm-eval's AggMetricConfig fields); [] for a group lm-eval shows no
    # score for
    aggregate_metric_list: list[dict[str, Any]]
    sizes: dict[str, int] = Field(default_factory=dict)  # per task of ``tasks`` that completed: its documents
    # keyed as lm-eval's results (``acc,none``); ``stderr`` None where lm-eval prints N/A
    metrics: dict[str, MetricValue] = Field(default_factory=dict)
    reason: str | None = Field(default=None, exclude_if=_is_none)  # why there is no aggregate


class RunSummary(Record):
    """``summary.json``: one :class:`TaskSummary` per task, and where the command's time went."""

    model_config = ConfigDict(extra="allow")
    written_at_default = frozenset({"schema_version", "tasks", "timings_s"})  # schema 2

    schema_version: int = SCHEMA_VERSION
    tasks: dict[str, TaskSummary] = Field(default_factory=dict)
    timings_s: dict[str, float | None] = Field(default_factory=dict)  # phase -> seconds
    # lm-eval groups the run's lm-eval:NAME tasks name (nested ones too); absent without groups
    groups: dict[str, GroupSummary] | None = Field(default=None, exclude_if=_is_none)
    warmup: WarmupSummary | None = Field(default=None, exclude_if=_is_none)


class Endpoint(Record):
    model_config = ConfigDict(extra="allow")

    base_url: str  # credentials redacted
    kind: EndpointKind


class ManifestTask(Record):
    """One task as it was run: its identity (version, data hashes, settings) and how its requests were made."""

    model_config = ConfigDict(extra="allow")
    written_at_default = frozenset({"description", "prompts_streamed", "max_tokens_clamp"})  # schema 2

    version: str
    description: str = ""
    data_sha256: dict[str, str]  # split -> sha256 of the data file
    settings: dict[str, Any]  # the task's settings after defaults (evalkit.tasks.spec.TaskSettings)
    requests: int
    prompts_streamed: bool = False  # built while the first requests were sent (cold prompt cache)
    max_tokens_clamp: dict[str, Any] | None = None  # per-prompt max_tokens cut to the server's context length
    # the task's metric names (as in summary.json) from its definition, so that a reader knows what must be
    # there; left out for a task that declares none
    metrics: list[str] | None = Field(default=None, exclude_if=_is_none)


class WarmupSettings(Record):
    """How the warm-up was asked for and what it sent (``manifest.json``'s ``warmup``; absent with
    ``--no-warmup``). ``configs``: one entry per sampling config warmed (``task``: the first task that uses it,
    ``endpoint_kind``, ``temperature``, ``top_p``, ``seeded``, ``requests``, ``concurrency``, ``max_tokens``),
    filled in as each task's timed phase begins."""

    model_config = ConfigDict(extra="forbid")
    written_at_default = frozenset({"configs"})  # schema 2

    requests: int | None  # per sampling config as asked (--warmup N); None: the run's concurrency level
    max_tokens: int  # the most each warm-up request generates (less where the run's requests ask for less)
    prompts_sha256: str  # the shipped warm-up text (evalkit/client/warmup.txt)
    configs: list[dict[str, Any]] = Field(default_factory=list)


class Manifest(Record):
    """``manifest.json``: what was run, against what, with which versions; written at start and at the end."""

    model_config = ConfigDict(extra="allow")
    written_at_default = frozenset({"schema_version", "finished_at", "concurrency_cap", "server"})  # schema 2

    schema_version: int = SCHEMA_VERSION
    evalkit_version: str
    created_at: str  # ISO 8601, UTC
    finished_at: str | None = None
    command: list[str]  # argv, secrets redacted
    endpoint: Endpoint  # with several endpoints: the first
    # a run sharded over several endpoints: each one's URL without credentials, in the order given
    endpoints: list[str] | None = Field(default=None, exclude_if=_is_none)
    model: str
    concurrency: int | Literal["auto"]
    concurrency_cap: dict[str, int] | None = None  # set when the open-file limit allowed fewer in flight
    # --request-rate (the arrival process's mean rate, requests/s); left out when requests were sent as fast as allowed
    request_rate: float | None = Field(default=None, exclude_if=_is_none)
    # the arrival process (``process``, ``request_rate``, ``burstiness``, ramp, ``seed``), ``duration_s`` and
    # ``max_in_flight`` (None: no cap); left out when requests went as fast as the concurrency allowed
    arrivals: dict[str, Any] | None = Field(default=None, exclude_if=_is_none)
    versions: dict[str, str | None]
    tasks: dict[str, ManifestTask]
    server: dict[str, Any] | None = None  # provenance of a server evalkit started (--serve)
    resumed_at: list[str] | None = None  # one timestamp per resume; absent for a run never resumed
    warmup: WarmupSettings | None = Field(default=None, exclude_if=_is_none)  # absent with --no-warmup
    # --goodput: the latency SLOs (ttft, tpot, e2el; milliseconds) the summary's goodput figures count against
    goodput_slos: dict[str, float] | None = Field(default=None, exclude_if=_is_none)
    # --cost-per-gpu-hour: {"cost_per_gpu_hour": dollars, "gpus": billed, "gpus_from": "server" | "gpus_billed"}
    pricing: dict[str, Any] | None = Field(default=None, exclude_if=_is_none)
    shard: ShardRecord | None = Field(default=None, exclude_if=_is_none)  # --shard I/N: this run's part
    shards: list[MergedShard] | None = Field(default=None, exclude_if=_is_none)  # evalkit merge: the parts


def summary_json(summary: RunSummary) -> dict[str, Any]:
    """``summary.json``'s content."""
    return summary.model_dump(mode="json")


def manifest_json(manifest: Manifest) -> dict[str, Any]:
    """``manifest.json``'s content (``resumed_at`` only once the run was resumed)."""
    return manifest.model_dump(mode="json")


SCHEMAS = ("summary", "manifest", "sample", "capacity")
"""The files ``evalkit schema NAME`` gives the JSON Schema of."""


def json_schema(name: Literal["summary", "manifest", "sample", "capacity"]) -> dict[str, Any]:
    """The JSON Schema of ``summary.json``, ``manifest.json``, one line of ``samples.jsonl`` or ``capacity.json``."""
    models: dict[str, type[BaseModel]] = {
        "summary": RunSummary, "manifest": Manifest, "sample": SampleRecord, "capacity": CapacityRecord,
    }  # fmt: skip
    return models[name].model_json_schema(mode="serialization")
