"""Typed records that cross module boundaries: the result-store contract.

A run directory holds three files (see README "Result store"):

- ``manifest.json``  -> :class:`Manifest`-shaped dict (what was run, where, with which versions)
- ``samples.jsonl``  -> one :class:`SampleRecord` per request, appended as each request completes
- ``summary.json``   -> ``{"schema_version": 1, "tasks": {name: TaskSummary-shaped dict}}``

Everything downstream (report, gate, compare) reads only these files.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Status = Literal["ok", "truncated", "no_answer", "empty", "api_error"]
"""ok: scored normally; truncated: finish_reason=length (still scored, flagged);
no_answer: nothing extractable from the final answer text; empty: the server returned no text;
api_error: the request failed after retries (never scored)."""


class Timing(BaseModel):
    """Per-request speed, defined as in vLLM's ``vllm/benchmarks/serve.py``.

    ttft_ms: request sent -> first chunk that carries generated text (content or reasoning).
    itl_ms: gaps between successive content-carrying chunks (one entry per chunk after the first).
    tpot_ms: (e2e - ttft) / (output_tokens - 1); None when output_tokens < 2.
    e2e_ms: request sent -> stream finished.
    """

    model_config = ConfigDict(extra="forbid")

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = Field(default_factory=list)
    start_s: float | None = None  # seconds since the run's request phase began


class SampleRecord(BaseModel):
    """One line of ``samples.jsonl``: one request and what became of it."""

    model_config = ConfigDict(extra="forbid")

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
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    itl_ms: list[float] = Field(default_factory=list)
    start_s: float | None = None


class MetricValue(BaseModel):
    """One accuracy metric in ``summary.json``: value with its standard error and 95% CI over ``n`` items."""

    model_config = ConfigDict(extra="forbid")

    value: float | None
    stderr: float | None = None
    ci95: tuple[float, float] | None = None
    n: int


class Percentiles(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    n: int = 0


class Speed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: float | None
    total_tokens_per_s: float | None = None
    requests_per_s: float | None
    wall_s: float
    concurrency: int | None = None
    client_cpu_s: float | None = None
    loop_lag_ms_p99: float | None = None
    client_bound: bool | None = None


def dump_json(obj: Any) -> dict[str, Any]:
    """Plain-JSON dict of a record (for writing)."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    return dict(obj)
