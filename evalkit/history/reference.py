"""The reference scores evalkit ships (``reference_scores.yaml``: published numbers with their model, task,
metric, sampling, tolerance and source) and the gate's ``expected:`` rules they give for a candidate
(``evalkit gate CANDIDATE --expected-from MODEL``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalkit.config.settings_files import read_settings_file
from evalkit.errors import EvalkitError
from evalkit.store.reader import open_run

TABLE = Path(__file__).parent / "reference_scores.yaml"


class Reference(BaseModel):
    """One published score: ``value`` of ``metric`` on ``task`` for ``model`` at ``sampling`` (the task settings
    it was measured with), ``max_drop`` below it allowed, ``source`` where it comes from."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str
    task: str
    metric: str
    value: float = Field(ge=0, le=1)
    max_drop: float = Field(default=0.0, ge=0, le=1)
    sampling: dict[str, float | int | None] = Field(default_factory=dict)
    source: str


def references(path: Path = TABLE) -> list[Reference]:
    """The table (EvalkitError, one line, when it does not read)."""
    raw = read_settings_file(path, "reference scores", EvalkitError).get("references")
    try:
        return [Reference.model_validate(r) for r in raw or []]
    except ValidationError as e:
        err = e.errors()[0]
        raise EvalkitError(f"reference scores {path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None


def expected_from(model: str, candidates: Sequence[Path], path: Path = TABLE) -> list[dict[str, Any]]:
    """The ``expected:`` rules (policy entries) of ``model``'s reference scores for the tasks the candidate runs
    ran. EvalkitError (one line naming the fix) for a model the table lacks, no task in common, or a candidate
    task run with other sampling than the number was published at."""
    table = references(path)
    mine = [r for r in table if r.model == model]
    if not mine:
        known = ", ".join(sorted({r.model for r in table}))
        raise EvalkitError(f"--expected-from {model}: no reference score of that model; the table has: {known}")
    ran: dict[str, dict[str, Any]] = {}
    for d in candidates:
        manifest = open_run(d, with_samples=False).manifest_read()
        for name, task in manifest.tasks.items():
            ran.setdefault(name, dict(task.settings))
    used = [r for r in mine if r.task in ran]
    if not used:
        tasks = ", ".join(sorted({r.task for r in mine}))
        raise EvalkitError(
            f"--expected-from {model}: the candidate ran none of the tasks with a reference score ({tasks}); "
            "run one of them"
        )
    for r in used:
        differ = [f"{k} {ran[r.task].get(k)!r} (published at {v!r})" for k, v in r.sampling.items()
                  if ran[r.task].get(k) != v]  # fmt: skip
        if differ:
            raise EvalkitError(
                f"--expected-from {model}: the candidate ran {r.task} with {', '.join(differ)}; the reference "
                f"score is not comparable: rerun {r.task} with the published sampling"
            )
    return [{"task": r.task, "metric": r.metric, "value": r.value, "max_drop": r.max_drop} for r in used]
