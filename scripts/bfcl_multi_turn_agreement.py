"""Record BFCL's own multi-turn checker's verdicts on a table of conversations:
``tests/data/bfcl_multi_turn_agreement.json``.

``tests/unit/test_bfcl_agreement.py`` asserts that evalkit's checker (``evalkit/scoring/bfcl_multi_turn.py``) gives
the same verdict (``valid`` and the error type) on every row. Run it in the venv of ``scripts/bfcl_agreement.py``
(``bfcl-eval`` 2026.3.23 installed with ``--no-deps``; ``mpmath`` is needed for the math backend)::

    PYTHONPATH=. /tmp/bfcl-venv/bin/python scripts/bfcl_multi_turn_agreement.py

Each row is a model's conversation as decoded calls per turn and per request (step). BFCL's checker gets them as
BFCL's ``convert_to_function_call`` writes them (``name(k=repr(v),...)``; its module needs SDKs, so its five lines
are repeated here) and a model name of its own per row (BFCL keeps backend instances in ``globals()`` keyed by
model name and entry id); a conversation with fewer turns than the ground truth fails as ``force_terminated``, as
BFCL's ``eval_runner`` rules before its checker runs.

Rows, over the first ``ENTRIES`` entries of ``multi_turn_base``: the ground truth as one request per turn, each
call in a request of its own, a call dropped, a first string argument changed, a turn left empty, the last turn
missing, an unknown function called, an extra read-only call repeated, one turn's calls made a turn early.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

ROOT = Path(__file__).resolve().parent.parent
# evalkit's call parser, loaded from its file: the package's __init__ needs dependencies this venv lacks
_spec = importlib.util.spec_from_file_location("bfcl_exec", ROOT / "evalkit" / "scoring" / "bfcl_exec.py")
assert _spec is not None and _spec.loader is not None
bfcl_exec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bfcl_exec)
DATA = ROOT / "tasks" / "data" / "bfcl"
OUT = ROOT / "tests" / "data" / "bfcl_multi_turn_agreement.json"
ENTRIES = 40
Turns = list[list[list[list[Any]]]]  # per turn, per step, [name, arguments]


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _functions(entry: dict[str, Any]) -> list[dict[str, Any]]:
    docs = DATA / "multi_turn_func_doc"
    return [f for c in entry["involved_classes"] for f in _rows(docs / bfcl_exec.FUNC_DOCS[c])]


def _truth(entry: dict[str, Any], truth: list[list[str]]) -> Turns:
    fns = _functions(entry)
    return [
        [[list(bfcl_exec.named_arguments(bfcl_exec.parse_call(c), fns)) for c in turn]] if turn else []
        for turn in truth
    ]


def _changed(turns: Turns) -> Turns | None:
    for t, steps in enumerate(turns):
        for s, step in enumerate(steps):
            for c, (name, args) in enumerate(step):
                key = next((k for k, v in args.items() if isinstance(v, str)), None)
                if key is not None:
                    out = json.loads(json.dumps(turns))
                    out[t][s][c] = [name, {**args, key: args[key] + "_x"}]
                    return out
    return None


def mutations(turns: Turns) -> dict[str, Turns | None]:
    """The conversations of one entry (None: the mutation does not apply to it)."""
    copy = json.loads(json.dumps(turns))
    busy = [t for t, steps in enumerate(turns) if steps]
    last = busy[-1] if busy else None
    out: dict[str, Turns | None] = {"right": copy, "split_steps": [[[c] for s in steps for c in s] for steps in turns]}
    if last is not None:
        dropped = json.loads(json.dumps(turns))
        dropped[last][0] = dropped[last][0][:-1]
        dropped[last] = [s for s in dropped[last] if s]
        out["call_dropped"] = dropped
        empty = json.loads(json.dumps(turns))
        empty[last] = []
        out["turn_empty"] = empty
        unknown = json.loads(json.dumps(turns))
        unknown[last].append([["not_a_tool", {}]])
        out["unknown_function"] = unknown
        again = json.loads(json.dumps(turns))
        again[busy[0]].append([again[busy[0]][0][0]])
        out["first_call_repeated"] = again
    out["argument_changed"] = _changed(turns)
    out["last_turn_missing"] = copy[:-1] if len(copy) > 1 else None
    if len(busy) > 1:
        early = json.loads(json.dumps(turns))
        early[busy[0]] = early[busy[0]] + early[busy[1]]
        early[busy[1]] = []
        out["calls_a_turn_early"] = early
    return out


def bfcl_verdict(entry: dict[str, Any], truth: list[list[str]], turns: Turns, model: str) -> dict[str, Any]:
    if len(turns) != len(truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated"}
    decoded = [
        [[f"{n}({','.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in step] for step in steps] for steps in turns
    ]
    got = multi_turn_checker(decoded, truth, entry, "multi_turn_base", model)
    return {"valid": bool(got["valid"]), "error_type": None if got["valid"] else got["error_type"]}


def main() -> None:
    entries = _rows(DATA / "BFCL_v4_multi_turn_base.json")[:ENTRIES]
    truths = {r["id"]: r["ground_truth"] for r in _rows(DATA / "possible_answer" / "BFCL_v4_multi_turn_base.json")}
    rows = []
    for entry in entries:
        truth = truths[entry["id"]]
        for mutation, turns in mutations(_truth(entry, truth)).items():
            if turns is None:
                continue
            verdict = bfcl_verdict(entry, truth, turns, f"agreement_{len(rows)}")
            rows.append({"id": entry["id"], "mutation": mutation, "turns": turns, **verdict})
    OUT.write_text(json.dumps({"bfcl_eval": "2026.3.23", "rows": rows}, indent=0) + "\n")
    kinds: dict[str, int] = {}
    for r in rows:
        kinds[str(r["error_type"])] = kinds.get(str(r["error_type"]), 0) + 1
    print(f"{len(rows)} rows -> {OUT}: {kinds}")


if __name__ == "__main__":
    main()
