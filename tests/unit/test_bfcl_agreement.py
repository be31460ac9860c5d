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
from evalkit.scoring.bfcl_multi_turn import check_conversation
from evalkit.tasks.registry import Registry

TABLE = json.loads((Path(__file__).parents[1] / "data" / "bfcl_agreement.json").read_text())
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


# ------------------------------------------------------------------------------------------- multi-turn

MULTI = json.loads((Path(__file__).parents[1] / "data" / "bfcl_multi_turn_agreement.json").read_text())
BFCL_KINDS = {
    "multi_turn:instance_state_mismatch": "state_mismatch",
    "multi_turn:execution_response_mismatch": "response_mismatch",
    "multi_turn:empty_turn_model_response": "empty_turn",
    "multi_turn:force_terminated": "force_terminated",
}


def test_every_conversation_agrees_with_bfcls_multi_turn_checker() -> None:
    """The table: ``scripts/bfcl_multi_turn_agreement.py`` (BFCL's ``multi_turn_checker``, ``bfcl-eval`` 2026.3.23)
    over conversations of the first 40 ``multi_turn_base`` entries: right ones and mutations of them."""
    items = {item["id"]: item for item in Registry().get("bfcl-multi-turn-base").items}  # type: ignore[attr-defined]
    disagree = []
    for row in MULTI["rows"]:
        item = items[row["id"]]
        turns = [[[(name, args) for name, args in step] for step in steps] for steps in row["turns"]]
        got = check_conversation(item, item["ground_truth"], turns)
        mine = (got["valid"], None if got["valid"] else got["error_type"])
        if mine != (row["valid"], BFCL_KINDS.get(row["error_type"], row["error_type"])):
            disagree.append((row["id"], row["mutation"], mine, (row["valid"], row["error_type"])))
    assert not disagree, disagree[:5]
    kinds = Counter(str(r["error_type"]) for r in MULTI["rows"])
    assert len(kinds) == 5 and min(kinds.values()) >= 10, kinds  # every verdict, several times
