"""A sharded run in the contract (re-exported by :mod:`evalkit.contracts`): the ``shard`` a ``--shard I/N`` run's
manifest records, and the ``shards`` listed by the manifest ``evalkit merge`` writes."""

from __future__ import annotations

from typing import ClassVar

from pydantic import ConfigDict, Field

from evalkit.contracts.record import Record


class ShardRecord(Record):
    """``manifest.json``'s ``shard``: this run is part ``index`` (0-based) of ``count`` of its tasks' documents."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(ge=0)
    count: int = Field(ge=1)


class MergedShard(Record):
    """One shard in a merged run's ``manifest.json`` ``shards``: where it was read from, when it ran, and by how
    many seconds its samples' ``start_s`` (and its concurrency trace) were moved to put them on the merged run's
    clock, per task (``clock_offset_s``: its request phase's start by its own machine's wall clock, less the
    earliest shard's, less the stretches before it in which no shard was sending; offsets between the machines'
    clocks themselves are not measured)."""

    model_config = ConfigDict(extra="forbid")
    written_at_default: ClassVar[frozenset[str]] = frozenset({"finished_at", "clock_offset_s"})

    index: int
    run_dir: str  # as given to evalkit merge
    created_at: str
    finished_at: str | None = None
    endpoint: str  # the first endpoint it sent to (URL without credentials)
    requests: int  # its samples, over every task
    clock_offset_s: dict[str, float] = Field(default_factory=dict)
