"""The task file checks (TaskSpec), the metric registry against hand values, and kinds added by entry point."""

from __future__ import annotations

import math
import re
import sys
import textwrap

import pytest

from evalkit.contracts import MetricValue, SampleRecord
from evalkit.errors import TaskError
from evalkit.scoring.estimators import wilson_interval
from evalkit.scoring.metric_registry import METRICS, Samples, compute_metrics, count_statuses, metric_names
from evalkit.tasks.catalogue import builtin_tasks_dir
from evalkit.tasks.registry import KINDS, Registry
from evalkit.tasks.spec import load_spec, parse_spec

BASE = {"name": "t", "kind": "python", "version": "1", "data": {"test": "d.jsonl"}}

# ------------------------------------------------------------------------------------------------- spec


def test_spec_reads_common_keys(tmp_path):
    spec = parse_spec({**BASE, "defaults": {"temperature": 0.5}, "category": "x", "version": 2}, tmp_path / "t.yaml")
    assert (spec.name, spec.kind, spec.version, spec.root) == ("t", "python", "2", tmp_path)
    assert spec.data == {"test": (tmp_path / "d.jsonl").resolve()}
    assert spec.merged_defaults({"temperature": 1.0, "top_p": 0.9}) == {"temperature": 0.5, "top_p": 0.9}
    assert spec.options == {"category": "x"} and spec.endpoint_kind is None and spec.metrics is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"version": None, "kind": "nope"},
            "kind must be one of lm-eval, logprobs, python, tool-calls, workload, got 'nope'",
        ),
        ({"defaults": {"temprature": 1}}, "t: unknown defaults ['temprature']; allowed: ["),
        ({"endpoint_kind": "embeddings"}, "t: endpoint_kind must be chat or completions, got 'embeddings'"),
        ({"data": ["d.jsonl"]}, "'data' must map names to paths"),
        ({"defaults": [1]}, "'defaults' must be a mapping"),
        ({"metrics": ["avg", "median"]}, "t: metrics must be a list of accuracy, avg, pass, maj"),
    ],
)
def test_spec_errors_are_one_line(tmp_path, change, message):
    with pytest.raises(TaskError) as e:
        parse_spec({**BASE, **change}, tmp_path / "t.yaml", list(KINDS))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_spec_option_checks(tmp_path):
    spec = parse_spec({**BASE, "tool_choice": "sometimes", "max_steps": 0}, tmp_path / "t.yaml")
    with pytest.raises(TaskError, match=re.escape("t: the task file needs data: {answers: PATH} (t.yaml)")):
        spec.data_files("test", "answers")
    with pytest.raises(TaskError, match="t: tool_choice must be one of auto, none, got 'sometimes'"):
        spec.choice("tool_choice", ("auto", "none"), "auto")
    with pytest.raises(TaskError, match="t: max_steps must be a positive integer, got 0"):
        spec.positive_int("max_steps", 20)
    assert spec.choice("other", ("auto",), "auto") == "auto" and spec.positive_int("other", 3) == 3


def test_every_builtin_task_file_is_a_spec():
    for path in sorted(builtin_tasks_dir().glob("*.yaml")):
        spec = load_spec(path, list(KINDS))
        assert spec.kind in KINDS and all(p.exists() for p in spec.data.values()), path


def test_a_bad_task_file_fails_the_registry_with_its_name(tmp_path):
    (tmp_path / "x.yaml").write_text("name: x\nkind: python\nversion: '1'\ndefaults: {tempreture: 0}\n")
    with pytest.raises(TaskError, match="x: unknown defaults \\['tempreture'\\]"):
        Registry([tmp_path])


# ------------------------------------------------------------------------------------------------ metrics


def rec(doc: int, i: int, correct: bool | None, answer: str | None = None, status: str = "ok") -> SampleRecord:
    return SampleRecord(
        key=f"{doc}/{i}", task="t", doc_id=doc, sample_index=i, prompt="p", target="7",
        status=status, extracted={"k": answer}, correct={"k": correct},
    )  # fmt: skip


def samples(records: list[SampleRecord]) -> Samples:
    return Samples(records, "k", lambda a: a, {})


def test_accuracy_is_a_proportion_with_a_wilson_interval():
    m = compute_metrics(["accuracy"], samples([rec(0, 0, True), rec(1, 0, False), rec(2, 0, True), rec(3, 0, True)]))
    assert list(m) == ["accuracy,k"]
    assert m["accuracy,k"].value == 0.75 and m["accuracy,k"].n == 4
    assert m["accuracy,k"].stderr == pytest.approx(math.sqrt(0.75 * 0.25 / 4))
    assert m["accuracy,k"].ci95 == wilson_interval(3, 4)
    assert compute_metrics(["accuracy"], samples([])) == {"accuracy,k": MetricValue(value=None, n=0)}


def test_sampled_metrics_by_hand():
    # doc 0: 2 of 2 right; doc 1: 1 of 2 right (answers 7, 5); doc 2: 0 of 2 (answers 5, 5); doc 3: only a failure
    rs = [
        rec(0, 0, True, "7"), rec(0, 1, True, "7"), rec(1, 0, True, "7"), rec(1, 1, False, "5"),
        rec(2, 0, False, "5"), rec(2, 1, False, "5"), rec(3, 0, None, status="api_error"),
    ]  # fmt: skip
    m = compute_metrics(["avg", "pass", "maj"], samples(rs))
    assert list(m) == ["avg@2", "pass@1", "pass@2", "maj@2"]
    avg = m["avg@2"]
    assert avg.value == pytest.approx(0.5) and avg.n == 6
    se = math.sqrt(3 / 2 * (1.0**2 + 0.0**2 + 1.0**2) / 36)  # CR1: residual sums 1, 0, -1 over N = 6
    assert avg.stderr == pytest.approx(se)
    # Wilson at the effective sample size of the clustered stderr: 0.5 * 0.5 / se**2 = 3 (kept within 3 problems
    # and 6 samples)
    assert 0.5 * 0.5 / se**2 == pytest.approx(3.0)
    assert avg.ci95 == pytest.approx(wilson_interval(1.5, 3)) and avg.ci_method == "wilson-clustered"
    assert m["pass@1"].value == pytest.approx(0.5) and m["pass@1"].n == 3
    assert m["pass@2"].value == pytest.approx(2 / 3) and m["pass@2"].n == 3
    assert m["maj@2"].value == pytest.approx((1 + 0.5 + 0) / 3) and m["maj@2"].n == 3  # doc 1: a 7-5 tie
    # pass@k and maj@K: Wilson over the problems (each problem's estimate lies in [0, 1])
    assert m["pass@2"].ci95 == pytest.approx(wilson_interval(2, 3)) and m["pass@2"].ci_method == "wilson"
    assert m["maj@2"].ci95 == pytest.approx(wilson_interval(1.5, 3)) and m["maj@2"].ci_method == "wilson"
    assert metric_names(["avg", "pass", "maj"], 8, "k") == ["avg@8", "pass@1", "pass@2", "pass@4", "pass@8", "maj@8"]
    assert set(METRICS) == {"accuracy", "avg", "pass", "maj", "logprob", "top1"}


def test_status_counts_follow_contracts_order():
    rs = [rec(0, 0, True), rec(1, 0, False, status="tool_text"), rec(2, 0, None, status="api_error")]
    assert count_statuses(rs) == {"ok": 1, "truncated": 0, "no_answer": 0, "empty": 0, "api_error": 1, "tool_text": 1}
    assert count_statuses(rs, always=()) == {"ok": 1, "api_error": 1, "tool_text": 1}


# -------------------------------------------------------------------------------------------- entry point

PLUGIN = '''
from evalkit.contracts import GenParams, Request, Score
from evalkit.tasks.base import Task


class EchoTask(Task):
    """Asks for the data file's line; right when the answer repeats it."""

    builtin_defaults = {"max_tokens": 4}
    key = "echo"

    def __init__(self, spec):
        super().__init__(spec)
        words = self.data_files["test"].read_text().split()
        self.items = [{"id": str(i), "answer": word} for i, word in enumerate(words)]

    def build_requests(self, settings):
        gen = GenParams(max_tokens=self.setting(settings, "max_tokens"))
        return [Request(task=self.name, doc_id=d, sample_index=0, prompt=it["answer"], gen=gen, target=it["answer"])
                for d, it in settings.select(self.items)]

    def score(self, request, response):
        right = response.text.strip() == request.target
        return Score(status="ok", extracted={"echo": response.text}, correct={"echo": right})
'''


def test_a_package_adds_a_kind_by_entry_point(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "echo_kind").mkdir(parents=True)
    (site / "echo_kind" / "__init__.py").write_text(PLUGIN)
    dist = site / "echo_kind-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-kind\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[evalkit.task_kinds]\necho = echo_kind:EchoTask\n")
    monkeypatch.syspath_prepend(str(site))
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "words.txt").write_text("alpha beta\n")
    (folder / "echo.yaml").write_text(
        textwrap.dedent("""\
        name: echo
        kind: echo
        version: "1"
        data: {test: words.txt}
        defaults: {temperature: 0.0}
        """)
    )
    reg = Registry([folder])
    assert reg.entry("echo").kind == "echo"
    task = reg.get("echo")
    assert type(task).__name__ == "EchoTask" and task.defaults() == {"max_tokens": 4, "temperature": 0.0}
    assert task.metric_names() == ["accuracy,echo"]
    from evalkit.contracts import Response
    from evalkit.tasks.spec import TaskSettings

    reqs = task.build_requests(TaskSettings())
    records = []
    for req, text in zip(reqs, ["alpha", "gamma"], strict=True):
        s = task.score(req, Response(text=text))
        records.append(
            SampleRecord(
                key=str(req.doc_id), task="echo", doc_id=req.doc_id, prompt=req.prompt, target=req.target,
                status=s.status, extracted=s.extracted, correct=s.correct,
            )
        )  # fmt: skip
    metrics, detail = task.summarize(records)
    assert metrics["accuracy,echo"].value == 0.5 and metrics["accuracy,echo"].n == 2
    assert [p["id"] for p in detail["per_problem"]] == ["0", "1"] and detail["status_counts"]["ok"] == 2
    sys.modules.pop("echo_kind", None)


def test_unknown_kind_names_the_known_ones(tmp_path):
    (tmp_path / "x.yaml").write_text("name: x\nkind: nope\nversion: '1'\n")
    with pytest.raises(TaskError, match="kind must be one of lm-eval, logprobs, python, tool-calls"):
        Registry([tmp_path])


def test_a_python_task_module_with_the_old_make_task_signature_still_loads(tmp_path):
    (tmp_path / "old.yaml").write_text("name: old\nkind: python\nversion: '1'\nmodule: old.py\nextra: 3\n")
    (tmp_path / "old.py").write_text(
        "def make_task(spec, root):\n    return (spec['extra'], root)\n"  # a stand-in for a Task
    )
    assert Registry([tmp_path]).get("old") == (3, tmp_path)  # type: ignore[comparison-overlap]
