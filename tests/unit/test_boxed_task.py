"""Reusable task parts: the boxed-answer scorer in scoring/, task classes and scorer functions named by module in
a task file (checked as the file is read), the boxed-answer base class's prompt and data hooks, and a new
boxed-answer task made of one YAML file and its data, run end to end against the test server."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from evalkit.contracts import GenParams, Request, Response
from evalkit.errors import DataError, TaskError
from evalkit.scoring.boxed_answer import score_boxed_answer
from evalkit.tasks.boxed_task import BoxedAnswerTask
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.tasks.registry import Registry
from evalkit.tasks.spec import TaskSettings

AIME = builtin_tasks_dir() / "data" / "aime25" / "aime25.jsonl"
CLASS = "evalkit.tasks.boxed_task:BoxedAnswerTask"
SCORER = "evalkit.scoring.boxed_answer:score_boxed_answer"
LITE = f"""\
name: math500-lite
kind: python
version: "1"
class: {CLASS}
scorer: {SCORER}
data: {{test: lite.jsonl}}
defaults: {{temperature: 1.0, num_samples: 2, max_tokens: 256}}
"""


def lite_dir(folder: Path, rows: int = 5, yaml_text: str = LITE) -> Path:
    """A task folder with one boxed-answer task file and its data: AIME 2025 problems under new ids (the test
    server knows AIME's problems, so it answers them)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = AIME.read_text().splitlines()[:rows]
    data = [{**json.loads(line), "id": f"lite-{i}"} for i, line in enumerate(lines)]
    (folder / "lite.jsonl").write_text("".join(json.dumps(r) + "\n" for r in data))
    (folder / "math500-lite.yaml").write_text(yaml_text)
    return folder


def req(target: str | None = "70") -> Request:
    return Request(task="t", doc_id=3, sample_index=0, prompt="p", gen=GenParams(max_tokens=10), target=target)


# ---------------------------------------------------------------------------------------------- the scorer


@pytest.mark.parametrize(
    ("text", "reasoning", "finish", "status", "extracted", "correct"),
    [
        (r"so $\boxed{70}$", "thought", "stop", "ok", "70", True),
        (r"\boxed{71}", None, "stop", "ok", "71", False),
        ("seventy", None, "stop", "no_answer", None, False),
        ("", "thought", "stop", "no_answer", None, False),  # stopped after thinking, never answered
        ("<think>still thinking \\boxed{70}", None, "length", "truncated", None, False),  # cut off mid-thought
        (r"\boxed{70} and then", None, "length", "truncated", "70", True),
        (None, None, "stop", "empty", None, False),
    ],
)
def test_the_boxed_answer_scorer_gives_each_status(text, reasoning, finish, status, extracted, correct):
    s = score_boxed_answer(req(), Response(text=text, reasoning=reasoning, finish_reason=finish))
    assert (s.status, s.extracted, s.correct) == (status, {"boxed": extracted}, {"boxed": correct})


def test_the_scorer_refuses_a_request_without_a_target():
    with pytest.raises(TaskError, match="t: request doc 3 has no target"):
        score_boxed_answer(req(None), Response(text=r"\boxed{1}", finish_reason="stop"))


# ----------------------------------------------------------------------------------- names in the task file


def test_a_task_file_names_its_class_and_scorer_by_module(tmp_path):
    task = Registry([lite_dir(tmp_path)]).get("math500-lite")
    assert type(task) is BoxedAnswerTask and task.scorer is score_boxed_answer
    assert [item["id"] for item in task.items] == [f"lite-{i}" for i in range(5)]
    reqs = task.build_requests(TaskSettings(limit=2, num_samples=2))
    assert [(r.doc_id, r.sample_index) for r in reqs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert reqs[0].prompt == "Put your final answer within \\boxed{}.\n\n" + task.items[0]["problem"]
    assert reqs[0].messages == ({"role": "user", "content": reqs[0].prompt},) and reqs[0].target == "70"
    assert task.metric_names(TaskSettings(num_samples=2)) == ["avg@2", "pass@1", "pass@2", "maj@2"]


def test_the_task_file_s_instruction_leads_the_prompt(tmp_path):
    lite_dir(tmp_path, yaml_text=LITE + 'instruction: "Answer in \\\\boxed{}, please."\n')
    task = Registry([tmp_path]).get("math500-lite")
    (r,) = task.build_requests(TaskSettings(limit=1, num_samples=1))
    assert r.prompt == "Answer in \\boxed{}, please.\n\n" + task.items[0]["problem"]
    (tmp_path / "math500-lite.yaml").write_text(LITE + "instruction: [1]\n")
    with pytest.raises(TaskError, match=r"math500-lite.yaml: instruction must be a string"):
        Registry([tmp_path]).get("math500-lite")


@pytest.mark.parametrize(
    ("scorer", "why"),
    [
        ("no_such_module_xyz:score", "No module named 'no_such_module_xyz'"),
        ("evalkit.scoring.boxed_answer:nope", "has no attribute 'nope'"),
        ("evalkit.scoring.boxed_answer", "is not module:attribute"),
    ],
)
def test_a_scorer_that_cannot_be_imported_fails_as_the_file_is_read_in_one_line(tmp_path, scorer, why):
    lite_dir(tmp_path, yaml_text=LITE.replace(SCORER, scorer))
    with pytest.raises(TaskError) as err:
        Registry([tmp_path])  # reading the folder, before any task is built
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'math500-lite.yaml'}: scorer {scorer!r} cannot be imported (")
    assert why in msg and "module:function" in msg and "\n" not in msg


def test_a_scorer_that_is_not_a_function_is_refused(tmp_path):
    lite_dir(tmp_path, yaml_text=LITE.replace(":score_boxed_answer", ":KEY"))
    with pytest.raises(TaskError, match=r"math500-lite.yaml: scorer 'evalkit.scoring.boxed_answer:KEY' is not a fun"):
        Registry([tmp_path])


def test_a_scorer_named_for_a_task_that_takes_none_is_refused_not_ignored(tmp_path):
    (tmp_path / "own.py").write_text(
        textwrap.dedent("""
        from evalkit.tasks.base import Task

        class Own(Task):
            data_needed = ()
            def build_requests(self, settings): return []
            def score(self, request, response): raise AssertionError

        def make_task(spec):
            return Own(spec)
        """)
    )
    (tmp_path / "own.yaml").write_text(
        "name: own\nkind: python\nversion: '1'\nmodule: own.py\n"
        "scorer: evalkit.scoring.boxed_answer:score_boxed_answer\n"
    )
    with pytest.raises(TaskError, match=r"own.yaml: Own scores with its own code and takes no 'scorer'"):
        Registry([tmp_path]).get("own")


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("class: no_such_module_xyz:Task", r"class 'no_such_module_xyz:Task' cannot be imported \(No module named"),
        ("class: evalkit.scoring.boxed_answer:KEY", "is neither a Task subclass nor a function of the spec"),
        ("class: evalkit.tasks.boxed_task:BoxedAnswerTask\nmodule: x.py", "set either 'class'"),
    ],
)
def test_a_bad_task_class_is_one_line_naming_the_file(tmp_path, line, match):
    lite_dir(tmp_path, yaml_text=LITE.replace("class: evalkit.tasks.boxed_task:BoxedAnswerTask", line))
    with pytest.raises(TaskError, match=match) as err:
        Registry([tmp_path]).get("math500-lite")
    assert str(err.value).startswith(str(tmp_path / "math500-lite.yaml")) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------ hooks and own scorers


@pytest.fixture
def own_module(tmp_path, monkeypatch):
    """An importable module of the user's (on sys.path): a subclass overriding the hooks, and a scorer."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "my_boxed.py").write_text(
        textwrap.dedent("""
        from evalkit.contracts import Score
        from evalkit.errors import DataError
        from evalkit.tasks.boxed_task import BoxedAnswerTask

        class Lite(BoxedAnswerTask):
            def build_prompt(self, item):
                return f"Problem {item['id']}: {item['problem']}\\nBox the answer: \\\\boxed{{}}"

            def parse_row(self, path, number, row):
                if "skip" in row:
                    raise DataError(f"{path}: row {number} is marked skip")
                return super().parse_row(path, number, row)

        def always_right(request, response):
            return Score(status="ok", extracted={"boxed": "x"}, correct={"boxed": True})

        def wrong_key(request, response):
            return Score(status="ok", extracted={"exact": "x"}, correct={"exact": True})
        """)
    )
    monkeypatch.syspath_prepend(str(pkg))
    yield "my_boxed"
    sys.modules.pop("my_boxed", None)


def test_a_subclass_by_module_name_overrides_the_prompt_and_data_hooks(tmp_path, own_module):
    folder = lite_dir(tmp_path / "t", yaml_text=LITE.replace(CLASS, "my_boxed:Lite"))
    task = Registry([folder]).get("math500-lite")
    (r,) = task.build_requests(TaskSettings(limit=1, num_samples=1))
    assert r.prompt == f"Problem lite-0: {task.items[0]['problem']}\nBox the answer: \\boxed{{}}"
    with (folder / "lite.jsonl").open("a") as f:
        f.write('{"id": "z", "problem": "p", "answer": "1", "skip": true}\n')
    with pytest.raises(DataError, match=r"lite.jsonl: row 6 is marked skip"):
        Registry([folder]).get("math500-lite")


def test_the_file_s_scorer_scores_and_must_give_the_task_s_key(tmp_path, own_module):
    folder = lite_dir(
        tmp_path / "t",
        yaml_text=LITE.replace(SCORER, "my_boxed:always_right"),
    )
    task = Registry([folder]).get("math500-lite")
    assert task.score(req(), Response(text="nothing boxed", finish_reason="stop")).correct == {"boxed": True}
    (folder / "math500-lite.yaml").write_text(LITE.replace(SCORER, "my_boxed:wrong_key"))
    task = Registry([folder]).get("math500-lite")
    with pytest.raises(TaskError, match=r"math500-lite: scorer my_boxed:wrong_key gave no 'boxed' verdict"):
        task.score(req(), Response(text="x", finish_reason="stop"))


def test_the_data_must_hold_id_problem_and_answer(tmp_path):
    folder = lite_dir(tmp_path)
    (folder / "lite.jsonl").write_text('{"id": "a", "answer": "1"}\n')
    with pytest.raises(DataError, match=r"lite.jsonl: row 1 lacks problem; fix the task's data file"):
        Registry([folder]).get("math500-lite")
    (folder / "lite.jsonl").write_text("\n")
    with pytest.raises(DataError, match=r"lite.jsonl: no problems; fix the task's data file"):
        Registry([folder]).get("math500-lite")
