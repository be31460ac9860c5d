"""Tolerant reading of a run directory (``manifest.json``, ``summary.json``, ``samples.jsonl``).

Reports must render old, partial or hand-edited runs, so nothing here validates strictly: every value is
checked for its type where it is used, and problems are collected as human-readable notes instead of raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

MANIFEST = "manifest.json"
SUMMARY = "summary.json"
SAMPLES = "samples.jsonl"

# Per-sample fields the report never shows (inter-token latencies are summarised in summary.json).
_DROP_FIELDS = ("itl_ms",)


def as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    return x if isinstance(x, list) else []


def as_num(x: Any) -> float | None:
    """A finite number, else None (bools are not numbers here)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    f = float(x)
    return f if math.isfinite(f) else None


def as_int(x: Any) -> int | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return None


def as_str(x: Any) -> str | None:
    if x is None:
        return None
    return x if isinstance(x, str) else str(x)


@dataclass
class RunData:
    path: Path
    label: str
    manifest: dict[str, Any]
    summary: dict[str, Any]
    samples: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # problems found while reading

    @property
    def summary_tasks(self) -> dict[str, dict[str, Any]]:
        return {str(k): as_dict(v) for k, v in as_dict(self.summary.get("tasks")).items()}

    @property
    def manifest_tasks(self) -> dict[str, dict[str, Any]]:
        return {str(k): as_dict(v) for k, v in as_dict(self.manifest.get("tasks")).items()}

    def task_names(self) -> list[str]:
        """Tasks in summary order, then any only in the manifest, then any only in the samples."""
        names: list[str] = []
        for name in [*self.summary_tasks, *self.manifest_tasks, *(str(s.get("task")) for s in self.samples)]:
            if name not in names:
                names.append(name)
        return names


def _read_json(path: Path, notes: list[str]) -> dict[str, Any]:
    if not path.is_file():
        notes.append(f"{path.name} is missing")
        return {}
    try:
        data = orjson.loads(path.read_bytes())
    except (orjson.JSONDecodeError, OSError) as e:
        notes.append(f"{path.name} could not be read: {e}")
        return {}
    if not isinstance(data, dict):
        notes.append(f"{path.name} is not a JSON object")
        return {}
    return data


def read_samples(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    """Samples keyed by (task, doc_id, sample_index); a later line for a key replaces an earlier one."""
    if not path.is_file():
        notes.append(f"{path.name} is missing")
        return []
    by_key: dict[tuple[str, str, str], dict[str, Any]] = {}
    bad = 0
    replaced = 0
    with path.open("rb") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                bad += 1
                continue
            if not isinstance(rec, dict):
                bad += 1
                continue
            for k in _DROP_FIELDS:
                rec.pop(k, None)
            rec["task"] = as_str(rec.get("task")) or "?"
            key = (rec["task"], str(rec.get("doc_id")), str(rec.get("sample_index", 0)))
            if key in by_key:
                replaced += 1
            by_key[key] = rec
    if bad:
        notes.append(f"{path.name}: {bad} line(s) could not be parsed and were skipped")
    if replaced:
        notes.append(f"{path.name}: {replaced} repeated request(s); the last record of each is shown")
    return sorted(by_key.values(), key=_sample_sort_key)


def _sample_sort_key(s: dict[str, Any]) -> tuple[str, int, str, int]:
    doc = as_int(s.get("doc_id"))
    idx = as_int(s.get("sample_index"))
    return (str(s.get("task")), doc if doc is not None else 1 << 62, str(s.get("doc_id")), idx or 0)


def load_run(run_dir: Path, *, with_samples: bool = True, label: str | None = None) -> RunData:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"not a run directory: {run_dir}")
    notes: list[str] = []
    manifest = _read_json(run_dir / MANIFEST, notes)
    summary = _read_json(run_dir / SUMMARY, notes)
    samples = read_samples(run_dir / SAMPLES, notes) if with_samples else []
    return RunData(
        path=run_dir,
        label=label or run_dir.resolve().name,
        manifest=manifest,
        summary=summary,
        samples=samples,
        notes=notes,
    )
