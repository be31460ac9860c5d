"""The Berkeley Function Calling Leaderboard's AST checker for Python functions, as BFCL scores a model served
through an OpenAI-style function-calling API.

A port of ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` (``bfcl-eval`` 2026.3.23, Apache-2.0, ShishirPatil/
gorilla): same checks in the same order, same ``error_type`` strings, so that a verdict here equals BFCL's on the
same output (``tests/unit/test_bfcl_agreement.py`` holds the table BFCL's own checker produced). Function names with a
``.`` are sent to the server with ``_`` (the OpenAI API allows ``^[a-zA-Z0-9_-]{1,64}$``), and expected names
are converted the same way before comparing, as BFCL does for such models (``underscore_to_dot``).

``model_output`` is a list of ``{function name: {argument: value}}``; ``possible_answer`` BFCL's ground truth,
a list of ``{function name: {argument: [accepted values]}}`` where ``""`` among the values marks an optional
argument. A verdict is ``{"valid": bool, "error": [str], "error_type": str}``.
"""

from __future__ import annotations

import re
from typing import Any

PYTHON_TYPE_MAPPING: dict[str, type] = {
    "string": str,
    "integer": int,
    "float": float,
    "boolean": bool,
    "array": list,
    "tuple": list,
    "dict": dict,
    "any": str,
}
NESTED_TYPES = ("array", "tuple")
_STANDARDIZE = re.compile(r"[ \,\.\/\-\_\*\^]")

Verdict = dict[str, Any]


def api_name(name: str) -> str:
    """A function name as the OpenAI API allows it (``.`` becomes ``_``)."""
    return name.replace(".", "_")


def check(
    category: str,
    functions: list[dict[str, Any]],
    model_output: list[dict[str, Any]],
    possible_answer: list[dict[str, Any]],
) -> Verdict:
    """BFCL's ``ast_checker`` for the category (``simple``, ``multiple``, ``parallel``, ``parallel_multiple``)."""
    if "parallel" in category:
        return _parallel_no_order(functions, model_output, possible_answer)
    if "multiple" in category:
        return _multiple(functions, model_output, possible_answer)
    if len(model_output) != 1:
        return _bad(["Wrong number of functions."], "simple_function_checker:wrong_count")
    return simple_function_checker(functions[0], model_output[0], possible_answer[0])


def _bad(error: list[Any], error_type: str) -> Verdict:
    return {"valid": False, "error": error, "error_type": error_type}


def _find(functions: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((f for f in functions if f["name"] == name), None)


def _answer_type(possible: list[Any]) -> type | None:
    return next((type(a) for a in possible if a != ""), None)


def _type_check(
    param: str, value: Any, possible: list[Any], described: str, expected: type, nested: type | None
) -> Verdict:
    result: Verdict = {"valid": True, "error": [], "is_variable": False, "error_type": "type_error:simple"}
    answer_type = _answer_type(possible)
    is_variable = answer_type is not None and answer_type is not expected
    exact = type(value) is expected  # exact types, as BFCL (a bool is not an int here)
    if exact:
        if nested is None:
            result["is_variable"] = is_variable
            return result
        for item in possible:
            ok = True
            if type(item) is list:
                for v in value:
                    if not _type_check(param, v, item, str(nested), nested, None)["valid"]:
                        ok = False
                        break
            if ok:
                return {"valid": True, "error": [], "is_variable": is_variable}
        result["valid"] = False
        result["error"] = [
            f"Nested type checking failed for parameter {param!r}. Expected outer type {described} with inner "
            f"type {nested}. Parameter value: {value!r}."
        ]
        result["error_type"] = "type_error:nested"
    if answer_type is not None and type(value) is answer_type:  # a variable name given as a string
        result["is_variable"] = True
        return result
    result["valid"] = False
    result["error"].append(
        f"Incorrect type for parameter {param!r}. Expected type {described}, got {type(value).__name__}. "
        f"Parameter value: {value!r}."
    )
    result["error_type"] = "type_error:simple"
    return result


def standardize(text: str) -> str:
    """BFCL's string normalisation: no spaces or ``,./-_*^``, lower case, single quotes as double quotes."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def _std_list(values: list[Any]) -> list[Any]:
    return [standardize(v) if type(v) is str else v for v in values]


def _string_check(param: str, value: str, possible: list[Any]) -> Verdict:
    if standardize(value) not in [standardize(p) for p in possible if type(p) is str]:
        return _bad(
            [f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible}. Case insensitive."],
            "value_error:string",
        )
    return {"valid": True, "error": []}


def _list_check(param: str, value: list[Any], possible: list[Any]) -> Verdict:
    if _std_list(list(value)) not in [_std_list(p) for p in possible]:
        return _bad(
            [f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible}."], "value_error:list/tuple"
        )
    return {"valid": True, "error": []}


def _dict_check(value: dict[str, Any], possibles: list[Any]) -> Verdict:
    result: Verdict = _bad([], "dict_checker:unclear")
    for possible in possibles:
        if possible == "":
            continue
        result = _bad([], "dict_checker:unclear")
        ok = True
        for key, v in value.items():
            if key not in possible:
                result["error"].append(f"Unexpected dict key parameter: '{key}'.")
                result["error_type"] = "value_error:dict_key"
                ok = False
                break
            std = standardize(v) if type(v) is str else v
            accepted = _std_list(possible[key])
            if std not in accepted:
                result["error"].append(f"Invalid value for parameter {key!r}: {v!r}. Expected one of {accepted}.")
                result["error_type"] = "value_error:dict_value"
                ok = False
                break
        for key, v in possible.items():
            if key not in value and "" not in v:
                result["error"].append(f"Missing dict key parameter: '{key}'.")
                result["error_type"] = "value_error:dict_key"
                ok = False
                break
        if ok:
            return {"valid": True, "error": []}
    return result


def _list_dict_check(value: list[Any], possibles: list[Any]) -> Verdict:
    result: Verdict = _bad([], "list_dict_checker:unclear")
    for possible in possibles:
        ok = True
        if len(value) != len(possible):
            result = _bad(["Wrong number of dictionaries in the list."], "value_error:list_dict_count")
            continue
        for i in range(len(value)):
            result = _dict_check(value[i], [possible[i]])
            if not result["valid"]:
                ok = False
                break
        if ok:
            return {"valid": True, "error": []}
    return result


def simple_function_checker(function: dict[str, Any], output: dict[str, Any], answer: dict[str, Any]) -> Verdict:
    """One call against one expected call (BFCL's ``simple_function_checker``, Python)."""
    possible = next(iter(answer.values()))
    details = function["parameters"]["properties"]
    name = api_name(function["name"])
    if name not in output:
        return _bad([f"Function name {name!r} not found in model output."], "simple_function_checker:wrong_func_name")
    params = output[name]
    for param in function["parameters"]["required"]:
        if param not in params:
            return _bad([f"Missing required parameter: {param!r}."], "simple_function_checker:missing_required")
    for param, value in params.items():
        if param not in details or param not in possible:
            return _bad([f"Unexpected parameter: {param!r}."], "simple_function_checker:unexpected_param")
        described = details[param]["type"]
        expected = PYTHON_TYPE_MAPPING[described]
        nested = PYTHON_TYPE_MAPPING[details[param]["items"]["type"]] if described in NESTED_TYPES else None
        if described == "tuple" and type(value) is tuple:
            value = list(value)
        if described == "float" and type(value) is int:  # Python's int -> float is allowed
            value = float(value)
        typed = _type_check(param, value, possible[param], described, expected, nested)
        if not typed["valid"]:
            return typed
        if not typed["is_variable"]:
            if expected is dict:
                sub = _dict_check(value, possible[param])
            elif expected is list and nested is dict:
                sub = _list_dict_check(value, possible[param])
            elif expected is str:
                sub = _string_check(param, value, possible[param])
            elif expected is list:
                sub = _list_check(param, value, possible[param])
            else:
                sub = None
            if sub is not None:
                if not sub["valid"]:
                    return sub
                continue
        if value not in possible[param]:
            return _bad(
                [f"Invalid value for parameter {param!r}: {value!r}. Expected one of {possible[param]}."],
                "value_error:others",
            )
    for param in possible:
        if param not in params and "" not in possible[param]:
            return _bad(
                [f"Optional parameter {param!r} not provided and not marked as optional."],
                "simple_function_checker:missing_optional",
            )
    return {"valid": True, "error": [], "error_type": "simple_function_checker:unclear"}


def _parallel_no_order(
    functions: list[dict[str, Any]], output: list[dict[str, Any]], answers: list[dict[str, Any]]
) -> Verdict:
    if len(output) != len(answers):
        return _bad(["Wrong number of functions."], "parallel_function_checker_no_order:wrong_count")
    matched: list[int] = []
    result: Verdict = {"valid": True, "error": []}
    for i, answer in enumerate(answers):
        function = _find(functions, next(iter(answer)))
        assert function is not None, f"expected function {next(iter(answer))} is not among the offered tools"
        errors: list[Any] = []
        for index in range(len(output)):
            if index in matched:
                continue
            result = simple_function_checker(function, output[index], answer)
            if result["valid"]:
                matched.append(index)
                break
            errors.append(
                {f"Model Result Index {index}": {"sub_error": result["error"], "sub_error_type": result["error_type"]}}
            )
        if not result["valid"]:
            left = [j for j in range(len(output)) if j not in matched]
            errors.insert(
                0,
                f"Could not find a matching function among index {left} of model output for index {i} "
                "of possible answers.",
            )
            return _bad(errors, "parallel_function_checker_no_order:cannot_find_match")
    return {"valid": True, "error": []}


def _multiple(functions: list[dict[str, Any]], output: list[dict[str, Any]], answers: list[dict[str, Any]]) -> Verdict:
    if len(output) != len(answers):
        return _bad(["Wrong number of functions."], "multiple_function_checker:wrong_count")
    function = _find(functions, next(iter(answers[0])))
    assert function is not None, f"expected function {next(iter(answers[0]))} is not among the offered tools"
    return simple_function_checker(function, output[0], answers[0])
