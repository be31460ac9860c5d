"""What writing a run report costs: the sample block is compressed once for both of its candidate forms (with and
without the few-shot examples) and comes out byte-identical to compressing the chosen form alone; a run report
of a run without teacher-forced positions loads neither the gate nor scipy."""

from __future__ import annotations

import base64
import gzip
import random
from typing import Any

import orjson
import pytest

from evalkit.reporting.sample_data import _encode, encode_with_optional_tail


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
