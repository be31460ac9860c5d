"""The watch directory: its settings (``watch.json``), one run dir per tick (``ticks/000001``) and the history
(``history.jsonl``, one line per tick, appended and fsynced as each tick ends).

A restart reads the history and carries on after its last tick; a tick that has a run dir but no history line
(the watch was killed while it ran) is run again with the same settings, so the Runner resumes it. The last
tick's verdict is the watch's outcome (:func:`exit_code`, :func:`outcome_line`).
"""

from __future__ import annotations

import fcntl
import os
import random
from pathlib import Path
from typing import IO, Any, Literal

import orjson
from pydantic import BaseModel, Field

from evalkit.contracts import speed_metric
from evalkit.errors import ConfigError
from evalkit.gating.result import EXIT_CODES
from evalkit.store.files import write_json_atomic

HISTORY, SETTINGS, TICKS = "history.jsonl", "watch.json", "ticks"
JUDGED = ("pass", "fail", "cannot_decide")  # the verdicts of a tick past the baseline ticks


class TickRecord(BaseModel):
    """One tick as the history keeps it. ``status``: ok (the run finished; its requests may still have failed)
    or failed (nothing usable: ``error`` says why). ``verdict``: the gate's on the window after this tick (pass
    or fail), ``baseline`` while the first ticks form the baseline, ``cannot_decide`` when no verdict could be
    reached (the tick failed, no usable baseline, the gate could not compare): ``reason`` says why. ``none``
    appears only in histories written before ``cannot_decide`` existed."""

    tick: int
    dir: str
    started_at: str
    finished_at: str
    status: Literal["ok", "failed"]
    error: str | None = None
    docs: list[int] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    accuracy: dict[str, float | None] = Field(default_factory=dict)  # this tick alone, per metric
    speed: dict[str, float | None] = Field(default_factory=dict)  # this tick alone, keyed by tick_speed_key()
    window: dict[str, Any] = Field(default_factory=dict)  # ticks, items, accuracy/baseline value and CI
    verdict: Literal["pass", "fail", "cannot_decide", "baseline", "none"] = "none"
    reason: str | None = None  # why the verdict is cannot_decide
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
        raise ConfigError("the watch has no documents to rotate through; pass a baseline that scored some")
    k = min(per_tick, len(order))
    start = ((tick - 1) * k) % len(order)
    return sorted(order[(start + i) % len(order)] for i in range(k))


def exit_code(history: list[TickRecord]) -> int:
    """The watch's exit status from its last tick: 0 pass, 1 fail, 2 cannot decide (that tick could not judge,
    or no tick was judged: none ran, or only baseline ticks)."""
    return EXIT_CODES.get(history[-1].verdict, 2) if history else 2


def outcome_line(history: list[TickRecord]) -> str:
    """One line on how the watch ended (what :func:`exit_code` says)."""
    last = history[-1] if history else None
    if last is None:
        return "cannot decide: no tick ran"
    if last.verdict in ("pass", "fail"):
        return f"last verdict {last.verdict} (tick {last.tick})"
    if last.verdict == "cannot_decide":
        return f"cannot decide (tick {last.tick}): {last.reason}"
    return f"cannot decide: no tick was judged (tick {last.tick} is a {last.verdict} tick)"


TICK_SPEED = ("ttft_p50_ms", "tpot_p50_ms", "e2e_p50_ms", "output_tokens_per_s")
"""The speed figures a tick records (the speed catalogue's keys, :data:`evalkit.contracts.SPEED_METRICS`)."""


def tick_speed_key(key: str) -> str:
    """The key of a speed figure in a tick record's ``speed`` (``history.jsonl``): a latency as
    ``<field>_<percentile>`` (``ttft_ms_p50``), a rate by its catalogue key."""
    m = speed_metric(key)
    return f"{m.field}_{m.stat}" if m.stat else m.key
