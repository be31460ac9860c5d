"""evalkit's BFCL checker gives BFCL's own verdict on every row of the agreement table.

The table (``tests/data/bfcl_agreement.json``) was produced by BFCL's ``ast_checker`` (``bfcl-eval`` 2026.3.23)
with ``scripts/bfcl_agreement.py``: right answers and mutations of them over the first 15 questions of each
category, and every question whose right answer BFCL itself rejects.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from evalkit.scoring.bfcl_ast import check
from evalkit.tasks.registry import Registry

TABLE = json.loads((Path(__file__).parent / "data" / "bfcl_agreement.json").read_text())
TASKS = {
    "simple": "bfcl-simple",
    "multiple": "bfcl-multiple",
    "parallel": "bfcl-parallel",
    "parallel_multiple": "bfcl-parallel-multiple",
}


def test_every_row_agrees_with_bfcl() -> None:
    reg = Registry()
    items = {}
    for name in TASKS.values():
        for item in reg.get(name).items:  # type: ignore[attr-defined]
            items[item["id"]] = item
    disagree = []
    for row in TABLE["rows"]:
        item = items[row["id"]]
        got = check(row["category"], item["function"], row["output"], item["ground_truth"])
        mine = (got["valid"], None if got["valid"] else got["error_type"])
        if mine != (row["valid"], row["error_type"]):
            disagree.append((row["id"], row["mutation"], mine, (row["valid"], row["error_type"])))
    assert not disagree, disagree[:5]


def test_the_table_covers_each_kind_of_verdict() -> None:
    kinds = Counter(r["error_type"].rsplit(":", 1)[-1] if r["error_type"] else "valid" for r in TABLE["rows"])
    for kind in (
        "valid",
        "wrong_count",
        "wrong_func_name",
        "missing_required",
        "unexpected_param",
        "simple",
        "string",
        "others",
        "cannot_find_match",
    ):
        assert kinds[kind] > 0, (kind, kinds)
