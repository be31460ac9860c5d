"""A workload's settings (the ``random``, ``sharegpt``, ``trace`` and ``sessions`` tasks, docs/load.md), named
as ``vllm bench serve`` names them, and the probes mixed into a workload (``--probe TASK:SHARE``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

SESSIONS_ONLY = ("turns", "think_time")  # the fields only the sessions workload reads


def parse_probe(text: str) -> tuple[str, float]:
    """``TASK:SHARE`` as (task, share), the share a number strictly between 0 and 1; ValueError naming the fix."""
    task, sep, share = str(text).rpartition(":")
    try:
        value = float(share)
    except ValueError:
        value = math.nan
    if not sep or not task or not math.isfinite(value):
        raise ValueError(f"{text!r} is not TASK:SHARE, e.g. gsm8k:0.05")
    if not 0 < value < 1:
        raise ValueError(f"{text!r}: the share must be between 0 and 1 (exclusive), e.g. gsm8k:0.05")
    return task, value


class WorkloadSettings(BaseModel):
    """What a workload task builds its requests from; each field is the ``vllm bench serve`` flag of the same
    name where there is one. The probes (``probe``: ``TASK:SHARE`` strings) mix a task's own requests into any
    workload's."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    num_prompts: int | None = Field(default=None, ge=1)  # None: 1000 (random, sharegpt), every trace line
    dataset_path: Path | None = None  # sharegpt: the JSON file; trace: the JSONL file
    random_input_len: int = Field(default=1024, ge=1)
    random_output_len: int = Field(default=128, ge=1)
    random_range_ratio: float = Field(default=0.0, ge=0, lt=1)
    random_prefix_len: int = Field(default=0, ge=0)
    ignore_eos: bool = False  # sharegpt: force each output to its recorded length (random and trace always do)
    trace_speed: float = Field(default=1.0, gt=0)  # trace: timestamps divided by this
    turns: int = Field(default=3, ge=1)  # sessions: user turns per conversation
    think_time: float = Field(default=0.0, ge=0)  # sessions: seconds from an answer to the next user turn
    probe: list[str] = Field(default_factory=list)  # TASK:SHARE, checked by parse_probe

    @field_validator("probe", mode="before")
    @classmethod
    def _probe(cls, v: Any) -> Any:
        items = [v] if isinstance(v, str) else list(v or [])
        for item in items:
            parse_probe(item)
        return items

    def probes(self) -> list[tuple[str, float]]:
        """The probes as (task, share), in the order given."""
        return [parse_probe(p) for p in self.probe]

    def task_options(self, workload: str) -> dict[str, Any]:
        """What the ``workload`` task (``random``, ``sessions``, ...) reads, recorded in the manifest with the
        task's settings: every field but the probes, which are tasks of their own there, and but the sessions'
        own (``turns``, ``think_time``) for the other workloads."""
        return self.model_dump(mode="json", exclude={"probe", *(() if workload == "sessions" else SESSIONS_ONLY)})
