"""Behaviour pinned byte for byte: GSM8K and AIME25 runs against the deterministic test server give the recorded
``samples.jsonl``, ``summary.json`` and ``manifest.json`` (timing and environment fields masked), and the report
rendered from the recorded store is the recorded ``report.html`` (timing-derived text masked).

Regenerate after an intended change of output:
``EVALKIT_GOLDEN_UPDATE=1 pytest tests/integration/test_behaviour_golden.py``.
The files are stored with their volatile values masked too (a string ``<volatile>``, a number 0, a list empty, a
measured flag false; keys, None and the other flags kept, so they still read as a run dir), so that regenerating
shows only what behaviour changed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.store.files import write_json_atomic
from evalkit.testing.server import Behaviour, TestServer

GOLDEN = Path(__file__).parents[1] / "data" / "golden"
UPDATE = os.environ.get("EVALKIT_GOLDEN_UPDATE") == "1"
RUNS = {
    "gsm8k": ["--limit", "12"],
    "aime25": ["--limit", "4", "--num-samples", "2", "--seed", "1", "--max-tokens", "256"],
}
FILES = ("samples.jsonl", "summary.json", "manifest.json")
# Values that depend on time, the machine or the port; everything else must match exactly, key order included.
VOLATILE = {
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "itl_ms",
    "start_s",
    "wall_s",  # the warm-up's seconds (a speed's wall_s is inside "speed")
    "timings_s",
    "speed",
    "concurrency_trace",
    "concurrency_levels",
    "server",
    "gpu",
    "created_at",
    "finished_at",
    "command",
    "base_url",
    "versions",
}
MASK = "<volatile>"


def _blank(value: Any) -> Any:
    """A volatile value: an object keeps its keys (their presence and order are behaviour), the rest is masked."""
    return {k: _blank(v) for k, v in value.items()} if isinstance(value, dict) else MASK


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _blank(v) if k in VOLATILE else _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


MEASURED_FLAGS = {"client_bound"}  # flags that measure (stored false); the others say what a server offers


def _placeholder(value: Any) -> Any:
    """A volatile value as the golden files store it: of a type the run dir's models accept, its content masked."""
    if isinstance(value, dict):
        return {k: False if k in MEASURED_FLAGS else _placeholder(v) for k, v in value.items()}
    if isinstance(value, list):
        return []
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return type(value)(0)
    return MASK


def _masked_for_storing(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _placeholder(v) if k in VOLATILE else _masked_for_storing(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_for_storing(v) for v in value]
    return value


def store_masked(source: Path, target: Path) -> None:
    """``source`` written to ``target`` as RunStore writes it, with its volatile values masked for storing."""
    if source.suffix == ".jsonl":
        lines = source.read_bytes().splitlines()
        target.write_bytes(b"".join(orjson.dumps(_masked_for_storing(orjson.loads(s))) + b"\n" for s in lines))
    else:
        write_json_atomic(target, _masked_for_storing(orjson.loads(source.read_bytes())))


def normalised(path: Path) -> str:
    """The file with volatile values masked, one JSON document per line, key order kept."""
    if path.suffix == ".jsonl":
        docs = [json.loads(line) for line in path.read_text().splitlines()]
    else:
        docs = [json.loads(path.read_text())]
    return "\n".join(json.dumps(_mask(d), ensure_ascii=False) for d in docs) + "\n"


def run_task(task: str, url: str, out: Path) -> None:
    args = ["run", task, "--endpoint", url, *RUNS[task], "--concurrency", "1", "-o", str(out), "-q", "--no-report"]
    res = CliRunner().invoke(app, args)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    assert res.exit_code == 0, res.stderr


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(RUNS))
def test_run_output_is_unchanged(task: str, tmp_path: Path) -> None:
    out = tmp_path / task
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        run_task(task, srv.url, out)
    for name in FILES:
        if UPDATE:
            (GOLDEN / task).mkdir(parents=True, exist_ok=True)
            store_masked(out / name, GOLDEN / task / name)
        assert normalised(out / name) == normalised(GOLDEN / task / name), f"{task}/{name} changed"
