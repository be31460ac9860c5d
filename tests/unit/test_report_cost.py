"""What writing a run report costs: the sample block is compressed once for both of its candidate forms (with and
without the few-shot examples) and comes out byte-identical to compressing the chosen form alone; a run report
of a run without teacher-forced positions loads neither the gate nor scipy."""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from evalkit.reporting.sample_data import _encode, encode_with_optional_tail
from tests import report_fixtures as rf

REPO = Path(__file__).resolve().parents[1]


def _data(seed: int, rows: int, fewshot: int) -> tuple[dict[str, Any], list[Any]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(400)]

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    head = {
        "tasks": ["gsm8k"],
        "texts": [text(40) for _ in range(rows)],
        "rows": [{"t": 0, "q": i} for i in range(rows)],
    }
    return head, [[text(60), text(20), 3, 90] for _ in range(fewshot)]


@pytest.mark.parametrize(("rows", "fewshot"), [(50, 0), (300, 40), (2000, 3000)])
def test_the_block_is_the_one_compressing_the_chosen_form_gives(rows: int, fewshot: int) -> None:
    """At targets just under, at and above the size with the examples: the examples are kept exactly when that
    block fits, and the block equals :func:`_encode` of the form chosen, byte for byte."""
    head, tail = _data(rows + fewshot, rows, fewshot)
    full, bare = _encode({**head, "fewshot": tail}), _encode({**head, "fewshot": None})
    for target in (len(full) - 1, len(full), len(full) + 1, len(bare) - 1, 10**9):
        encoded, kept = encode_with_optional_tail(head, "fewshot", tail, target)
        assert kept == (len(full) <= target)
        assert encoded == (full if kept else bare)
        assert orjson.loads(gzip.decompress(base64.b64decode(encoded)))["fewshot"] == (tail if kept else None)


def test_the_tail_key_must_come_last() -> None:
    with pytest.raises(ValueError, match="left out of head"):
        encode_with_optional_tail({"fewshot": 1, "rows": []}, "fewshot", [], 100)


def test_a_run_report_loads_neither_the_gate_nor_scipy(tmp_path: Path) -> None:
    """Writing the report of a run without positions.bin imports no gate module and no scipy (their imports
    are most of the command's time); the comparison still has them."""
    run = rf.build_gsm8k_run(tmp_path / "run", n=40)
    code = (
        "import sys, json; from pathlib import Path; from evalkit.reporting import render_run; "
        f"render_run(Path({str(run)!r}), Path({str(tmp_path / 'r.html')!r})); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('scipy', 'evalkit.gating')))))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd=REPO)
    assert json.loads(out.stdout) == []
    assert (tmp_path / "r.html").stat().st_size > 0
