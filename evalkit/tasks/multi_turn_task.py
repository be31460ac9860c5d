"""BFCL's multi-turn categories as a ``tool-calls`` task (``category: multi_turn``): conversations whose tool
calls run against BFCL's own backends, scored by BFCL's multi-turn checker::

    name: bfcl-multi-turn-base
    kind: tool-calls
    version: "1"
    category: multi_turn
    data: {test: data/bfcl/BFCL_v4_multi_turn_base.json,
           answers: data/bfcl/possible_answer/BFCL_v4_multi_turn_base.json,
           functions: data/bfcl/multi_turn_func_doc}    # BFCL's function documents, one file per backend class
    max_steps: 20                                       # tool-calling requests per turn (BFCL's MAXIMUM_STEP_LIMIT)
    defaults: {temperature: 0.0, max_tokens: 1024, drop_reasoning: true}

Each entry (``id``, ``question``: one list of user messages per turn, ``initial_config``, ``involved_classes``)
becomes one request whose :class:`evalkit.contracts.Conversation` holds the later turns; the tools are the
function documents of the involved classes (BFCL's ``populate_test_cases_with_predefined_functions``, with its
" Note that the provided function is in Python 3 syntax." hint), converted as the single-turn task converts them.
The runner runs the conversation (:mod:`evalkit.client.conversation`) with :meth:`tool_executor`'s backends;
scoring and verdicts: :mod:`evalkit.scoring.bfcl_multi_turn`. ``drop_reasoning`` (``--drop-reasoning/--keep-reasoning``,
config ``drop_reasoning``) is recorded in the manifest's task settings.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from evalkit.contracts import Conversation, GenParams, Request, Response, Score, ToolExecutor
from evalkit.errors import DataError, TaskError
from evalkit.scoring.bfcl_exec import FUNC_DOCS, MODULES, Backends
from evalkit.scoring.bfcl_multi_turn import KEY, score_conversation
from evalkit.tasks.base import Task
from evalkit.tasks.data import read_jsonl
from evalkit.tasks.spec import TaskSettings, TaskSpec
from evalkit.tasks.tool_task import BUILTIN_DEFAULTS, TOOL_CHOICES, ToolCallTask, to_tools

PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


class MultiTurnToolTask(ToolCallTask):
    """One BFCL multi-turn category as an evalkit task (see the module docstring)."""

    key = KEY
    builtin_defaults: ClassVar[dict[str, Any]] = {**BUILTIN_DEFAULTS, "drop_reasoning": True}
    data_needed = ("test", "answers", "functions")

    def __init__(self, spec: TaskSpec) -> None:
        self.category = "multi_turn"
        Task.__init__(self, spec)
        self.tool_choice = spec.choice("tool_choice", TOOL_CHOICES, "auto")
        self.max_steps = spec.positive_int("max_steps", 20)
        docs = self.data_files.pop("functions")
        self.data_files.update({f"functions/{f}": docs / f for f in sorted(FUNC_DOCS.values())})
        self.items = self._load()

    def _load(self) -> list[dict[str, Any]]:
        path = self.data_files["test"]
        docs: dict[str, list[dict[str, Any]]] = {}
        for cls, file in FUNC_DOCS.items():
            doc_path = self.data_files[f"functions/{file}"]
            if not doc_path.is_file():
                raise DataError(f"{doc_path}: missing; restore the task's function documents from the package")
            docs[cls] = read_jsonl(doc_path)
        answers = {str(r.get("id")): r.get("ground_truth") for r in read_jsonl(self.data_files["answers"])}
        items = read_jsonl(path)
        for i, item in enumerate(items, 1):
            q, classes = item.get("question"), item.get("involved_classes")
            if not (isinstance(q, list) and q and all(isinstance(t, list) and t for t in q)):
                raise DataError(f"{path}: row {i} needs one list of messages per turn in 'question'")
            if not (isinstance(classes, list) and all(c in MODULES for c in classes)):
                raise DataError(f"{path}: row {i} needs 'involved_classes' among {', '.join(MODULES)}")
            truth = answers.get(str(item.get("id")))
            if not (isinstance(truth, list) and len(truth) == len(q)):
                raise DataError(f"{path}: row {i} ({item.get('id')}) has no ground truth of {len(q)} turns")
            item["ground_truth"] = truth
            item["function"] = [{**f, "description": f["description"] + PYTHON_HINT} for c in classes for f in docs[c]]
        if not items:
            raise DataError(f"{path}: no questions; restore the file from the package")
        return items

    def build_requests(self, settings: TaskSettings) -> list[Request]:
        if (settings.endpoint_kind or "chat") != "chat":
            raise TaskError(f"{self.name}: tool calling needs the chat endpoint; drop --endpoint-kind completions")
        max_tokens = settings.max_tokens or self._defaults["max_tokens"]
        temperature = settings.temperature if settings.temperature is not None else self._defaults["temperature"]
        drop = self._defaults["drop_reasoning"] if settings.drop_reasoning is None else settings.drop_reasoning
        out = []
        for doc_id, item in settings.select(self.items):
            turns = tuple(
                tuple({"role": str(m["role"]), "content": str(m["content"])} for m in t) for t in item["question"]
            )
            conversation = Conversation(turns=turns[1:], drop_reasoning=bool(drop), max_steps=self.max_steps)
            for i in range(max(1, settings.num_samples)):
                gen = GenParams(
                    max_tokens=int(max_tokens), temperature=float(temperature), top_p=settings.top_p,
                    seed=None if settings.seed is None else settings.seed + i,
                    chat_template_kwargs=settings.chat_template_kwargs,
                )  # fmt: skip
                out.append(
                    Request(
                        task=self.name, doc_id=doc_id, sample_index=i, prompt=turns[0][-1]["content"], gen=gen,
                        target=json.dumps(item["ground_truth"], ensure_ascii=False), messages=turns[0],
                        tools=to_tools(item["function"]), tool_choice=self.tool_choice, conversation=conversation,
                    )
                )  # fmt: skip
        return out

    def tool_executor(self, request: Request) -> ToolExecutor | None:
        item = self.items[request.doc_id]
        return Backends(item["initial_config"], item["involved_classes"])

    def score(self, request: Request, response: Response) -> Score:
        item = self.items[request.doc_id]
        names = [f["name"] for f in item["function"]]
        return score_conversation(item, item["ground_truth"], response.turns or [], names)


def tool_calls_task(spec: TaskSpec) -> Task:
    """The ``tool-calls`` kind (the registry's kinds table names this): a single-turn category's
    :class:`ToolCallTask`, or ``category: multi_turn``'s conversations."""
    return MultiTurnToolTask(spec) if spec.options.get("category") == "multi_turn" else ToolCallTask(spec)
