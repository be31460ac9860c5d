"""The shard run dirs ``evalkit merge`` is given, read and checked before anything is written: each a finished
``--shard I/N`` run that no process is writing, all of one run (the same model, endpoint kind, tasks, task
versions, data and settings, and the same N), every index 0..N-1 once. Any other set is refused with one line
(a :class:`~evalkit.errors.ConfigError`, exit 2) naming the shard and the fix."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalkit.contracts import Manifest, RunSummary
from evalkit.errors import ConfigError
from evalkit.store.files import MANIFEST, SUMMARY, read_json
from evalkit.store.manifest import fingerprint
from evalkit.store.reader import writer_pid


class ShardsNotReady(ConfigError):
    """A shard that is not there yet, still being written or not finished: ``evalkit merge --wait`` waits."""


@dataclass(frozen=True)
class ShardRun:
    """One shard's run dir as merge reads it: the manifest and summary as written and validated."""

    dir: Path
    raw_manifest: dict[str, Any]
    manifest: Manifest
    summary: RunSummary

    @property
    def index(self) -> int:
        assert self.manifest.shard is not None
        return self.manifest.shard.index

    @property
    def count(self) -> int:
        assert self.manifest.shard is not None
        return self.manifest.shard.count


def _read(path: Path, what: str, run_dir: Path) -> Any:
    try:
        return read_json(path)
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"{run_dir}: its {what} does not read ({e}); give the shard's run dir as evalkit run wrote it"
        ) from None


def read_shard(run_dir: Path) -> ShardRun:
    """``run_dir`` as a finished shard (ConfigError: not a run dir, still being written, not finished, not a
    shard, or files that do not read as evalkit writes them)."""
    if not (run_dir / MANIFEST).is_file():
        raise ShardsNotReady(f"{run_dir} is not a run dir (no {MANIFEST}); give the run dirs the shards wrote")
    pid = writer_pid(run_dir)
    if pid is not None:
        raise ShardsNotReady(
            f"{run_dir} is still being written (evalkit pid {pid} holds its lock); merge once every shard has finished"
        )
    raw = _read(run_dir / MANIFEST, MANIFEST, run_dir)
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{run_dir}/{MANIFEST} is not shaped as evalkit writes it ({e.errors()[0]['msg']})") from None
    if manifest.shard is None:
        raise ConfigError(
            f"{run_dir} is not a shard (its manifest has no shard); merge the run dirs of evalkit run --shard I/N"
        )
    if manifest.finished_at is None or not (run_dir / SUMMARY).is_file():
        raise ShardsNotReady(
            f"{run_dir} (shard {manifest.shard.index}/{manifest.shard.count}) has not finished (no finish time in its "
            "manifest); resume it with the same command, then merge"
        )
    try:
        summary = RunSummary.model_validate(_read(run_dir / SUMMARY, SUMMARY, run_dir))
    except ValidationError as e:
        raise ConfigError(f"{run_dir}/{SUMMARY} is not shaped as evalkit writes it ({e.errors()[0]['msg']})") from None
    for name in manifest.tasks:
        task = summary.tasks.get(name)
        if task is None or task.started_at_unix is None:
            raise ConfigError(
                f"{run_dir}: task {name} has no summary with its clock (started_at_unix); resume the shard with the "
                "same command (an evalkit that records it), then merge"
            )
    return ShardRun(run_dir, raw, manifest, summary)


def _difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What differs between two fingerprints (without their shards), as words and values."""
    for key, what in (("model", "model"), ("endpoint_kind", "endpoint kind")):
        if a.get(key) != b.get(key):
            return f"{what} ({a.get(key)!r} against {b.get(key)!r})"
    if list(a["tasks"]) != list(b["tasks"]):
        return f"tasks ({', '.join(a['tasks'])} against {', '.join(b['tasks'])})"
    for name, ta in a["tasks"].items():
        tb = b["tasks"][name]
        for key, what in (("version", "version"), ("data_sha256", "data")):
            if ta.get(key) != tb.get(key):
                return f"task {name}'s {what} ({ta.get(key)!r} against {tb.get(key)!r})"
        sa, sb = ta.get("settings") or {}, tb.get("settings") or {}
        for key in sorted(set(sa) | set(sb)):
            if sa.get(key) != sb.get(key):
                return f"task {name}'s setting {key} ({sa.get(key)!r} against {sb.get(key)!r})"
    return "settings"


def wait_for_shards(dirs: Sequence[Path], wait_s: float, poll_s: float = 10.0) -> list[ShardRun]:
    """:func:`check_shards`, again every ``poll_s`` for up to ``wait_s`` seconds while a shard is not there yet,
    still being written or not finished (:class:`ShardsNotReady`); any other refusal at once."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return check_shards(dirs)
        except ShardsNotReady:
            if time.monotonic() + poll_s > deadline:
                raise
            time.sleep(poll_s)


def check_shards(dirs: Sequence[Path]) -> list[ShardRun]:
    """The shards of ``dirs`` in index order, once each is read (:func:`read_shard`) and they are found to be
    exactly the N parts of one run (ConfigError naming the first problem otherwise)."""
    if not dirs:
        raise ConfigError("give the shard run dirs to merge: evalkit merge SHARD_DIR... -o RUN_DIR")
    shards = [read_shard(Path(d)) for d in dirs]
    first = shards[0]
    base = {k: v for k, v in fingerprint(first.raw_manifest).items() if k != "shard"}
    for s in shards[1:]:
        other = {k: v for k, v in fingerprint(s.raw_manifest).items() if k != "shard"}
        if other != base:
            raise ConfigError(
                f"{s.dir} is not a shard of the same run as {first.dir}: its {_difference(other, base)} differs; "
                "shards of one run have the same model, task versions, data and settings"
            )
    for s in shards[1:]:
        if s.count != first.count:
            raise ConfigError(
                f"{s.dir} is shard {s.index}/{s.count} but {first.dir} is {first.index}/{first.count}: "
                "the shards of one run share N"
            )
    seen: dict[int, ShardRun] = {}
    for s in shards:
        if s.index in seen:
            raise ConfigError(
                f"shard {s.index}/{s.count} is given twice ({seen[s.index].dir} and {s.dir}); give each shard once"
            )
        seen[s.index] = s
    missing = [i for i in range(first.count) if i not in seen]
    if missing:
        shown = ", ".join(f"{i}/{first.count}" for i in missing)
        raise ShardsNotReady(
            f"shard{'s' if len(missing) > 1 else ''} {shown} missing: a merge needs all {first.count} shards of the "
            "run (run the missing ones with the same command and --shard I/N)"
        )
    return [seen[i] for i in range(first.count)]
