"""The gate's inputs: small typed records of one run, independent of how a run directory is stored.

:func:`evalkit.gating.load.from_run_dir` builds a :class:`RunInputs` from a run directory; tests build them
directly. Everything the gate decides is computed from these records alone.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from evalkit.contracts import STATUSES, MetricValue, PromptPositions


@dataclass(frozen=True)
class Identity:
    """What makes two runs of a task comparable.

    ``data_sha256``: split -> sha256 of the data file; ``prompt_digests``: doc_id -> a short hash of the
    prompt (or chat messages) sent for it; ``prompt_hash``: one hash over all of them; ``sampling``: the
    generation settings (temperature, top_p, seed, max_tokens, ...), compared but never a reason to refuse.
    """

    version: str | None = None
    data_sha256: dict[str, str] = field(default_factory=dict)
    limit: int | None = None
    num_fewshot: int | None = None
    num_samples: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    prompt_hash: str | None = None
    prompt_digests: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricSamples:
    """One accuracy metric as per-sample correctness: ``items`` maps doc_id -> one 0/1 per scored sample.

    ``name`` is the metric's key in summary.json (``exact_match,strict-match``, ``avg@8``); ``filter`` the key
    of the samples' ``correct`` dict it comes from. Failed requests (api_error) are not in ``items``.
    """

    name: str
    filter: str
    items: dict[int, tuple[int, ...]]

    @property
    def value(self) -> float | None:
        """Mean over all scored samples (the metric's value in summary.json)."""
        n = sum(len(v) for v in self.items.values())
        return sum(sum(v) for v in self.items.values()) / n if n else None

    @property
    def samples_per_item(self) -> int:
        """The largest number of scored samples any item has (1 for greedy single-sample tasks)."""
        return max((len(v) for v in self.items.values()), default=0)


@dataclass(frozen=True)
class CorpusMetric:
    """One corpus metric of lm-eval's (``word_perplexity``, ``byte_perplexity``, ``bits_per_byte``): ``items`` maps
    doc_id -> (its total loglikelihood, its length in words or bytes), as lm-eval's ``process_results`` returns
    them; ``aggregation``: ``weighted_perplexity`` (exp of minus loglikelihood per unit) or ``bits_per_byte``
    (minus loglikelihood per byte, in bits). Lower is better."""

    name: str
    aggregation: str
    items: dict[int, tuple[float, float]]

    @property
    def value(self) -> float | None:
        """The metric over all its documents, as lm-eval aggregates it."""
        if not self.items:
            return None
        ll = sum(v[0] for v in self.items.values())
        units = sum(v[1] for v in self.items.values())
        return math.exp(-ll / units) if self.aggregation == "weighted_perplexity" else -ll / units / math.log(2)


@dataclass(frozen=True)
class SpeedRecords:
    """Per-request speed of the requests that got an answer (api_error excluded), aligned by position.

    ``start_s``: when each request was sent, in seconds since the request phase began; ``wall_s``: the request
    phase's wall time (first send -> last completion); ``trace``: (seconds, concurrency limit) each time the
    limit changed; ``levels``: the limits ``--concurrency auto`` measured (empty for a fixed concurrency).
    """

    ttft_ms: list[float | None] = field(default_factory=list)
    tpot_ms: list[float | None] = field(default_factory=list)
    e2e_ms: list[float | None] = field(default_factory=list)
    output_tokens: list[int | None] = field(default_factory=list)
    start_s: list[float | None] = field(default_factory=list)
    wall_s: float | None = None
    concurrency: int | None = None
    trace: list[tuple[float, int]] = field(default_factory=list)
    levels: list[int] = field(default_factory=list)
    request_rate: float | None = None  # the run's --request-rate (None: as fast as the concurrency allowed)
    # the steady-state window (start_s, end_s) the run's summary gives (speed.steady_state), None when it has none
    steady: tuple[float, float] | None = None
    # the summary's goodput and cost figures (evalkit.gating.economics.FIGURES) that it has, as numbers
    figures: dict[str, float] = field(default_factory=dict)
    # the SLOs (key -> milliseconds) the run's goodput was counted under: its manifest's goodput_slos (None: none)
    goodput_slos: dict[str, float] | None = None

    def __len__(self) -> int:
        return len(self.e2e_ms)


@dataclass(frozen=True)
class StatusCounts:
    """How many requests ended in each status (``total`` = all requests of the task): a field per status of
    :data:`evalkit.contracts.STATUSES`, in its order."""

    total: int = 0
    ok: int = 0
    truncated: int = 0
    no_answer: int = 0
    empty: int = 0
    api_error: int = 0
    tool_text: int = 0
    tool_calls_empty: int = 0
    bad_arguments: int = 0
    bad_positions: int = 0

    def rate(self, *statuses: str) -> float | None:
        """Share of all requests with one of ``statuses``; None when the task has no requests."""
        return sum(getattr(self, s) for s in statuses) / self.total if self.total else None

    @classmethod
    def of(cls, statuses: Iterable[object]) -> StatusCounts:
        """The counts of a list of sample statuses (every one counts in ``total``, known or not)."""
        seen = list(statuses)
        return cls(total=len(seen), **{s: sum(1 for x in seen if x == s) for s in STATUSES})

    @classmethod
    def combined(cls, parts: Iterable[StatusCounts]) -> StatusCounts:
        """The counts of several runs (or ticks) added up, every status included."""
        parts = list(parts)
        return cls(**{f.name: sum(getattr(p, f.name) for p in parts) for f in fields(cls)})


@dataclass(frozen=True)
class NumericsInputs:
    """A task's teacher-forced positions (the ``numerics`` task) by doc_id: ``main`` the main pass
    (``sample_index`` 0), ``again`` the noise-floor pass (``sample_index`` 1, a slice of the texts sent again in
    another order). Only requests whose sample record got an answer count."""

    main: dict[int, PromptPositions]
    again: dict[int, PromptPositions] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskInputs:
    """Everything the gate needs about one task of one run."""

    name: str
    identity: Identity
    metrics: dict[str, MetricSamples]
    speed: SpeedRecords
    counts: StatusCounts
    # the documents the run was asked for (its manifest: the selection, limit and request count); None when
    # unknown. Coverage (the share of them scored) is measured against these.
    asked_docs: frozenset[int] | None = None
    # the documents with at least one sample that got an answer (not api_error); None: those in ``metrics``
    scored_docs: frozenset[int] | None = None
    # several runs of one side merged (evalkit gate --baseline A --baseline B): each run's speed, for rules judged
    # on run-to-run variation; empty for one run (``speed`` is then its speed)
    runs: tuple[SpeedRecords, ...] = ()
    # what makes this run's records untrustworthy (samples that disagree with the summary): the gate cannot decide
    problems: tuple[str, ...] = ()
    # the task's teacher-forced positions (None: the task recorded none); judged by the numerics rules
    numerics: NumericsInputs | None = None
    # metrics the task scored with no per-document value the gate can pair, each with the reason
    not_gated: dict[str, str] = field(default_factory=dict)
    # a workload (its manifest settings hold ``workload``): speed only by design, judged by the speed rules alone
    speed_only: bool = False
    # lm-eval's corpus metrics (perplexities, bits per byte) as per-document (loglikelihood, length) pairs
    corpus: dict[str, CorpusMetric] = field(default_factory=dict)
    # the metrics as the run's summary.json stores them (value, its 95% interval and ci_method), for the outputs;
    # empty for several runs merged (no one run's interval is theirs)
    stored: dict[str, MetricValue] = field(default_factory=dict)

    def speeds(self) -> tuple[SpeedRecords, ...]:
        """Each run's speed: ``runs`` when several runs were merged, else the one run's ``speed``."""
        return self.runs or (self.speed,)

    def scored(self) -> frozenset[int]:
        """The documents scored in this run (``scored_docs``, else every item of any metric)."""
        if self.scored_docs is not None:
            return self.scored_docs
        docs = {d for m in self.metrics.values() for d in m.items}
        return frozenset(docs | {d for c in self.corpus.values() for d in c.items})


@dataclass(frozen=True)
class RunInputs:
    """One run: a label (its directory name), its tasks by name, and ``notes``: what the loader ignored in the
    run dir (a malformed summary field that decides nothing), one line each."""

    label: str
    tasks: dict[str, TaskInputs]
    concurrency_setting: str | None = None  # "auto" or the fixed number, as the run was asked for
    notes: list[str] = field(default_factory=list)
    endpoints: tuple[str, ...] = ()  # the endpoints its manifest says it sent to (URLs without credentials)
    # its answers (samples not api_error) by the endpoint that gave them (a sample naming none: the manifest's)
    answered_by: dict[str, int] = field(default_factory=dict)

    def answered_elsewhere(self) -> dict[str, int]:
        """Its answers given by endpoints its manifest does not name (kept from a run against another server)."""
        return {u: n for u, n in self.answered_by.items() if u not in self.endpoints}
