"""Record BFCL's own AST checker's verdicts on a table of model outputs: ``tests/data/bfcl_agreement.json``.

``tests/unit/test_bfcl_agreement.py`` asserts that evalkit's checker (``evalkit/scoring/bfcl_ast.py``) gives the same
verdict (``valid`` and ``error_type``) on every row. Run it in a virtual environment of its own, because
``bfcl-eval`` pins numpy 1.26 and pulls many SDKs (it is never an evalkit dependency)::

    python3 -m venv /tmp/bfcl-venv
    /tmp/bfcl-venv/bin/pip install --no-deps bfcl-eval==2026.3.23
    PYTHONPATH=. /tmp/bfcl-venv/bin/python scripts/bfcl_agreement.py

Only ``bfcl_eval.constants.model_config`` needs the SDKs (it imports every model handler); the checker reads
one flag from it, ``underscore_to_dot`` (True for a model behind an OpenAI-style function-calling API, whose
function names have ``_`` for ``.``), so the script stands in a one-entry mapping for that module.

Rows: for the first ``PER_CATEGORY`` questions of each category with possible answers, one right answer (the
first accepted value of each argument, see ``evalkit.testing.tools.expected_calls``) and mutations of it (wrong
value, wrong type, an int where a float is expected, a dropped argument, an extra argument, an unknown or dotted
function name, one call too many, reversed call order, upper-cased strings with extra spaces, optional arguments
given or left out); plus, over all questions, every right answer (with or without its optional arguments) that
BFCL itself rejects.
"""

from __future__ import annotations

import copy
import json
import sys
import types
from pathlib import Path
from typing import Any

from evalkit.testing.tools import expected_calls, pick

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tasks" / "data" / "bfcl"
OUT = ROOT / "tests" / "data" / "bfcl_agreement.json"
CATEGORIES = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
}
PER_CATEGORY = 15
MODEL = "evalkit-openai-fc"


def _stub_model_config() -> None:
    config = types.SimpleNamespace(underscore_to_dot=True)
    module = types.ModuleType("bfcl_eval.constants.model_config")
    module.MODEL_CONFIG_MAPPING = {MODEL.replace("_", "/"): config}  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = module


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 7
    if isinstance(value, str):
        return value + "x"
    return "changed"


def mutations(truth: list[dict[str, Any]], functions: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Model outputs (``[{name: arguments}]``) derived from one right answer."""
    right = [{n: a} for n, a in expected_calls(truth, functions)]
    out: dict[str, list[dict[str, Any]]] = {"right": right}

    def first_call() -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
        calls = copy.deepcopy(right)
        name = next(iter(calls[0]))
        return calls, name, calls[0][name]

    calls, name, args = first_call()
    if args:
        key = next(iter(args))
        args[key] = _changed(args[key])
        out["wrong_value"] = calls
        calls, name, args = first_call()
        args[key] = 5 if isinstance(args[key], str) else str(args[key])
        out["wrong_type"] = calls
        calls, name, args = first_call()
        del args[key]
        out["dropped_argument"] = calls
    calls, name, args = first_call()
    floats = [k for k, v in args.items() if isinstance(v, float) and v.is_integer()]
    if floats:
        args[floats[0]] = int(args[floats[0]])
        out["int_for_float"] = calls
    calls, name, args = first_call()
    strings = [k for k, v in args.items() if isinstance(v, str)]
    if strings:
        args[strings[0]] = " " + args[strings[0]].upper() + " "
        out["string_case_space"] = calls
    calls, name, args = first_call()
    args["zzz_extra"] = 1
    out["extra_argument"] = calls
    calls, name, args = first_call()
    out["unknown_function"] = [{name + "_v2": args}, *calls[1:]]
    dotted = next(iter(truth[0]))
    if "." in dotted:
        calls, name, args = first_call()
        out["dotted_name"] = [{dotted: args}, *calls[1:]]
    out["one_call_too_many"] = [*copy.deepcopy(right), copy.deepcopy(right[0])]
    if len(right) > 1:
        out["reversed_order"] = list(reversed(copy.deepcopy(right)))
    given = copy.deepcopy(right)  # every optional argument given, documented or not
    for call, expected in zip(given, truth, strict=True):
        params = next(iter(expected.values()))
        next(iter(call.values())).update({k: pick(v) for k, v in params.items() if v != [""]})
    if given != right:
        out["optional_given"] = given
    omitted = copy.deepcopy(right)  # every optional argument left out, required by the document or not
    for call, expected in zip(omitted, truth, strict=True):
        params = next(iter(expected.values()))
        args = next(iter(call.values()))
        for k in [k for k in args if "" in params.get(k, [])]:
            del args[k]
    if omitted != right:
        out["optional_left_out"] = omitted
    return out


def main() -> None:
    _stub_model_config()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    table = []
    for category, stem in CATEGORIES.items():
        questions = _rows(DATA / f"BFCL_v4_{stem}.json")
        truths = {r["id"]: r["ground_truth"] for r in _rows(DATA / "possible_answer" / f"BFCL_v4_{stem}.json")}
        for n, q in enumerate(questions):
            truth = truths[q["id"]]
            cases = mutations(truth, q["function"])
            if n >= PER_CATEGORY:  # beyond the first questions: right answers that BFCL rejects
                cases = {k: v for k, v in cases.items() if k in ("right", "optional_given", "optional_left_out")}
            for mutation, output in cases.items():
                verdict = ast_checker(q["function"], output, truth, Language.PYTHON, category, MODEL)
                if n >= PER_CATEGORY and verdict["valid"]:
                    continue
                table.append(
                    {
                        "id": q["id"],
                        "category": category,
                        "mutation": mutation,
                        "output": output,
                        "valid": verdict["valid"],
                        "error_type": verdict.get("error_type") if not verdict["valid"] else None,
                    }
                )
    OUT.write_text(
        json.dumps(
            {"bfcl_eval": "2026.3.23", "model_style": "OpenAI function calling (underscore_to_dot)", "rows": table},
            indent=0,
        )
        + "\n"
    )
    print(f"{len(table)} rows -> {OUT}")


if __name__ == "__main__":
    main()
