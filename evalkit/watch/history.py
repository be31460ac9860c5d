"""The watch directory: its settings (``watch.json``), one run dir per tick (``ticks/000001``) and the history
(``history.jsonl``, one line per tick, appended and fsynced as each tick ends).

A restart reads the history and carries on after its last tick; a tick that has a run dir but no history line
(the watch was killed while it ran) is run again with the same settings, so the Runner resumes it.
"""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path
from typing import IO, Any, Literal

import orjson
from pydantic import BaseModel, Field

from evalkit.errors import ConfigError
from evalkit.store.files import write_json_atomic

HISTORY, SETTINGS, TICKS = "history.jsonl", "watch.json", "ticks"


class TickRecord(BaseModel):
    """One tick as the history keeps it. ``status``: ok (the run finished; its requests may still have failed)
    or failed (nothing usable: ``error`` says why). ``verdict``: the gate's on the window after this tick,
    ``baseline`` while the first ticks form the baseline, ``none`` when no verdict could be made."""

    tick: int
    dir: str
    started_at: str
    finished_at: str
    status: Literal["ok", "failed"]
    error: str | None = None
    docs: list[int] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    accuracy: dict[str, float | None] = Field(default_factory=dict)  # this tick alone, per metric
    speed: dict[str, float | None] = Field(default_factory=dict)  # this tick alone
    window: dict[str, Any] = Field(default_factory=dict)  # ticks, items, accuracy/baseline value and CI
    verdict: Literal["pass", "fail", "cannot_decide", "baseline", "none"] = "none"
    p_value: float | None = None
    failed_rules: list[str] = Field(default_factory=list)
    rules: list[dict[str, Any]] = Field(default_factory=list)
    server: dict[str, Any] = Field(default_factory=dict)


def tick_dir(root: Path, tick: int) -> Path:
    return root / TICKS / f"{tick:06d}"


def read_history(root: Path) -> list[TickRecord]:
    """The ticks recorded so far (a torn last line, from a kill mid-write, is left out)."""
    path = root / HISTORY
    if not path.is_file():
        return []
    out: list[TickRecord] = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(TickRecord.model_validate(orjson.loads(line)))
        except (orjson.JSONDecodeError, ValueError):
            continue
    return out


def append_history(root: Path, record: TickRecord) -> None:
    path = root / HISTORY
    data = orjson.dumps(record.model_dump(mode="json")) + b"\n"
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def check_settings(root: Path, settings: dict[str, Any]) -> None:
    """Record the watch's settings on first start; on a restart refuse settings that would change which
    documents the ticks hold (task, slice size, seed, baseline, window)."""
    path = root / SETTINGS
    if path.is_file():
        old = orjson.loads(path.read_bytes())
        changed = sorted(k for k in settings if old.get(k) != settings[k])
        if changed:
            raise ConfigError(
                f"{root} holds a watch with other settings ({', '.join(changed)} differ); restart it with the same "
                "options, or pass another -o"
            )
        return
    root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, settings)


def lock(root: Path) -> IO[str]:
    """Hold the watch dir for this process (one watch per dir); the lock goes with the process."""
    root.mkdir(parents=True, exist_ok=True)
    f = open(root / ".watch.lock", "w")  # noqa: SIM115 - held for the watch's life
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise ConfigError(f"another evalkit watch is running on {root}; stop it or pass another -o") from None
    return f


def rotation(pool: list[int], seed: int) -> list[int]:
    """The documents in the order the ticks take them: a seeded permutation of ``pool``."""
    order = sorted(pool)
    random.Random(seed).shuffle(order)
    return order


def slice_for(order: list[int], tick: int, per_tick: int) -> list[int]:
    """The documents of tick ``tick`` (from 1): the next ``per_tick`` of the rotation, wrapping around, so that
    every document is covered once per ``len(order) / per_tick`` ticks."""
    if not order:
        return []
    k = min(per_tick, len(order))
    start = ((tick - 1) * k) % len(order)
    return sorted(order[(start + i) % len(order)] for i in range(k))
