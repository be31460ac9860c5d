"""The ``tool-calls`` task kind: function calling scored as the Berkeley Function Calling Leaderboard scores it.

A task file names BFCL-format data (one JSON object a line: ``id``, ``question`` (a list of turns, each a list
of messages; one turn), ``function`` (BFCL function documents)), BFCL's possible answers (absent for
``irrelevance``) and the checker category::

    name: bfcl-simple
    kind: tool-calls
    version: "1"
    category: simple          # simple | multiple | parallel | parallel_multiple | irrelevance
    data: {test: data/bfcl/BFCL_v4_simple_python.json, answers: data/bfcl/possible_answer/BFCL_v4_simple_python.json}
    tool_choice: auto         # sent with the tools (default auto)
    defaults: {temperature: 0.0, max_tokens: 1024}

Each question goes to the chat endpoint with the functions as OpenAI ``tools``, converted as BFCL converts them
for function-calling models (``.`` in names becomes ``_``; BFCL types to JSON Schema types, a ``float`` becomes
a ``number`` with ``format: float`` and " This is a float type value." appended to its description). Scoring
and statuses: :mod:`evalkit.scoring.tool_calls`. Metric ``accuracy,ast``: share of answered requests (not
``api_error``) whose calls BFCL's checker accepts, 95% CI; ``detail`` counts the verdicts and statuses.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from evalkit.contracts import GenParams, Request, Response, Score
from evalkit.errors import DataError, TaskError
from evalkit.scoring.bfcl_ast import api_name
from evalkit.scoring.metric_registry import WILSON_CI, Samples, count_statuses
from evalkit.scoring.tool_calls import CATEGORIES, IRRELEVANCE, KEY, score_tool_answer
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.spec import TaskSettings, TaskSpec

BUILTIN_DEFAULTS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 1024}
TOOL_CHOICES = ("auto", "required", "none")
NO_CALL = "(no call)"  # the target of an irrelevance question
METRIC = f"accuracy,{KEY}"  # lm-eval's "metric,filter" naming: accuracy of the AST checker's verdicts
# BFCL's GORILLA_TO_OPENAPI (bfcl_eval/constants/type_mappings.py), the types its Python data uses
OPENAPI_TYPES = {
    "integer": "integer", "number": "number", "float": "number", "string": "string", "boolean": "boolean",
    "bool": "boolean", "array": "array", "list": "array", "dict": "object", "object": "object", "tuple": "array",
    "any": "string",
}  # fmt: skip
SERVER_HINT = (
    "calls written as text that the server did not parse: its tool-call parser is off or does not fit the "
    "model; start vLLM with --enable-auto-tool-choice --tool-call-parser NAME (evalkit --serve takes both)"
)


def _cast_types(properties: dict[str, Any]) -> dict[str, Any]:
    """BFCL's ``_cast_to_openai_type``: BFCL types to JSON Schema types, recursively (in place)."""
    for value in properties.values():
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = OPENAPI_TYPES.get(kind, "string") if kind else "string"
        if value["type"] in ("array", "object"):
            if "properties" in value:
                value["properties"] = _cast_types(value["properties"])
            elif "items" in value:
                items = value["items"]
                items["type"] = OPENAPI_TYPES.get(items.get("type"), "string")
                if items["type"] == "array" and "items" in items:
                    items["items"]["type"] = OPENAPI_TYPES.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and "properties" in items:
                    items["properties"] = _cast_types(items["properties"])
    return properties


def to_tools(functions: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """BFCL function documents as OpenAI ``tools`` (BFCL's ``convert_to_tool`` for OpenAI-style models)."""
    tools = []
    for f in copy.deepcopy(functions):
        f["name"] = api_name(f["name"])
        f["parameters"]["type"] = "object"
        f["parameters"]["properties"] = _cast_types(f["parameters"].get("properties", {}))
        tools.append({"type": "function", "function": f})
    return tuple(tools)


class ToolCallTask(Task):
    """One BFCL category as an evalkit task (see the module docstring)."""

    endpoint_kind = "chat"
    builtin_defaults = BUILTIN_DEFAULTS
    key = KEY  # of the samples' ``correct`` that the metric counts (``metrics``: the base's ``accuracy``)

    def __init__(self, spec: TaskSpec) -> None:
        self.category = str(spec.options.get("category", ""))
        if self.category not in CATEGORIES:
            known = ", ".join((*CATEGORIES, "multi_turn"))
            raise TaskError(f"{spec.name}: category must be one of {known}, got {self.category!r}")
        self.data_needed = ("test",) if self.category == IRRELEVANCE else ("test", "answers")
        super().__init__(spec)
        self.tool_choice = spec.choice("tool_choice", TOOL_CHOICES, "auto")
        self.items = self._load()

    def _load(self) -> list[dict[str, Any]]:
        path = self.data_files["test"]
        items = read_jsonl(path)
        answers: dict[str, Any] = {}
        if "answers" in self.data_files:
            answers = {str(r.get("id")): r.get("ground_truth") for r in read_jsonl(self.data_files["answers"])}
        for i, item in enumerate(items, 1):
            q, fns = item.get("question"), item.get("function")
            if not (isinstance(q, list) and len(q) == 1 and isinstance(q[0], list) and q[0] and isinstance(fns, list)):
                raise DataError(f"{path}: row {i} needs one turn of messages in 'question' and a 'function' list")
            if answers and not isinstance(answers.get(str(item.get("id"))), list):
                raise DataError(
                    f"{path}: row {i} ({item.get('id')}) has no possible answer in {self.data_files['answers']}"
                )
            item["ground_truth"] = answers.get(str(item.get("id")))
        if not items:
            raise DataError(f"{path}: no questions; restore the file from the package")
        return items

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        if (settings.endpoint_kind or "chat") != "chat":
            raise TaskError(f"{self.name}: tool calling needs the chat endpoint; drop --endpoint-kind completions")
        max_tokens = settings.max_tokens or self._defaults["max_tokens"]
        temperature = settings.temperature if settings.temperature is not None else self._defaults["temperature"]
        out = []
        for doc_id, item in settings.select(self.items):
            messages = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in item["question"][0])
            truth = item["ground_truth"]
            for i in range(max(1, settings.num_samples)):
                gen = GenParams(
                    max_tokens=int(max_tokens),
                    temperature=float(temperature),
                    top_p=settings.top_p,
                    seed=None if settings.seed is None else settings.seed + i,
                    chat_template_kwargs=settings.chat_template_kwargs,
                )
                out.append(
                    Request(
                        task=self.name,
                        doc_id=doc_id,
                        sample_index=i,
                        prompt=messages[-1]["content"],
                        gen=gen,
                        target=NO_CALL if truth is None else json.dumps(truth, ensure_ascii=False),
                        messages=messages,
                        tools=to_tools(item["function"]),
                        tool_choice=self.tool_choice,
                    )
                )
        return out

    def score(self, request: Request, response: Response) -> Score:
        item = self.items[request.doc_id]
        return score_tool_answer(
            self.category,
            item["function"],
            item["ground_truth"],
            response.text,
            response.reasoning,
            response.tool_calls,
            response.finish_reason,
        )

    def detail(self, samples: Samples) -> dict[str, Any]:
        statuses = count_statuses(samples.records, always=())
        verdicts = Counter((r.extraction or "").split(":", 1)[0] for r in samples.scored)
        detail: dict[str, Any] = {
            "category": self.category,
            "tool_choice": self.tool_choice,
            "requests": len(samples.records),
            "scored": len(samples.scored),
            "correct": sum(1 for r in samples.scored if samples.is_correct(r)),
            "status_counts": statuses,
            "verdicts": dict(verdicts.most_common()),
            "ci": WILSON_CI,
        }
        if statuses.get("tool_text") or statuses.get("tool_calls_empty"):
            detail["server_hint"] = SERVER_HINT
        return detail
