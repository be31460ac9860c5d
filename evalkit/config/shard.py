"""A run's shard of a task's documents: ``--shard I/N`` runs the I-th of N parts (0-based), so that N processes
(a Kubernetes Indexed Job's pods, a Slurm array's tasks) together run exactly what the same command without
``--shard`` runs, and ``evalkit merge`` makes one run dir of theirs (docs/scale-out.md).

``I`` may come from the environment: ``--shard auto/N`` or ``--shard N`` read ``JOB_COMPLETION_INDEX`` (the
index Kubernetes gives each pod of an Indexed Job), else ``SLURM_ARRAY_TASK_ID`` (less ``SLURM_ARRAY_TASK_MIN``,
so that ``--array=1-N`` works too)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

INDEX_VARIABLES = ("JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID")
MAX_SHARDS = 100_000


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def takes(self, position: int) -> bool:
        """Whether the document at ``position`` of the unsharded run's selection (0-based, after ``--limit``) is
        this shard's: positions are dealt round robin, position mod N (as lm-eval's ``rank``/``world_size``)."""
        return position % self.count == self.index

    def share(self, total: int) -> int:
        """How many of ``total`` documents of the unsharded run are this shard's."""
        return len(range(self.index, total, self.count))


def _number(text: str, what: str) -> int:
    text = text.strip()
    if not text.isdigit():
        raise ValueError(f"{what} must be a whole number >= 0, got {text!r}")
    return int(text)


def env_index(environ: Mapping[str, str]) -> int:
    """The shard index the environment gives (a ValueError naming the variables when none does)."""
    if (value := environ.get("JOB_COMPLETION_INDEX")) is not None:
        return _number(value, "JOB_COMPLETION_INDEX")
    if (value := environ.get("SLURM_ARRAY_TASK_ID")) is not None:
        first = _number(environ.get("SLURM_ARRAY_TASK_MIN", "0"), "SLURM_ARRAY_TASK_MIN")
        return _number(value, "SLURM_ARRAY_TASK_ID") - first
    raise ValueError(
        "--shard auto/N takes its index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) or "
        "SLURM_ARRAY_TASK_ID (a Slurm array), and neither is set; give it as --shard I/N"
    )


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """``I/N``, ``auto/N`` or ``N`` (index from the environment) as a :class:`Shard`; a ValueError saying what is
    wrong and the forms it takes otherwise."""
    env = os.environ if environ is None else environ
    index_text, sep, count_text = text.strip().rpartition("/")
    if not sep:
        index_text = "auto"
    count = _number(count_text, "the shard count N of --shard I/N")
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the shard count N of --shard I/N must be 1..{MAX_SHARDS}, got {count}")
    index = (
        env_index(env) if index_text.strip().lower() == "auto" else _number(index_text, "the index I of --shard I/N")
    )
    if not 0 <= index < count:
        raise ValueError(f"shard index {index} is not in 0..{count - 1} (--shard I/N counts I from 0)")
    return Shard(index, count)
