"""An lm-eval group's aggregate score in ``summary.json`` equals lm-eval's own to the last digit: three tiny
multiple-choice tasks of different sizes (data written here), a group of two of them aggregating ``acc`` by size and
``acc_norm`` unweighted, a group of that group and the third task (nested), and a group with no
``aggregate_metric_list``; evalkit and lm-eval's ``simple_evaluate(model="local-completions")`` each run them on the
deterministic test server (its echo logprobs; its ``/tokenize`` is lm-eval's remote tokenizer). Then a group whose
task did not complete has no aggregate and says why, and the console and the HTML report show the group rows.

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_lmeval_groups.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from tests.lmeval_tasks import METRICS_MC, QA

SIZES = {"grp_a": 6, "grp_b": 3, "grp_c": 4}  # documents per task: unequal, so weighting by size matters


def write_group_tasks(folder: Path) -> Path:
    """Three multiple-choice tasks (QA's first 6, 3 and 4 questions, two prompt styles) and three groups."""
    for name, size in SIZES.items():
        rows = [{"question": q, "answer": a, "choices": c, "label": c.index(a)} for q, a, c in QA[:size]]
        data = folder / f"{name}.jsonl"
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        prompt = "Q: {{question}}\\nA:" if name == "grp_b" else "Question: {{question}}\\nAnswer:"
        (folder / f"{name}.yaml").write_text(
            f"task: {name}\ndataset_path: json\ntest_split: test\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
            f'output_type: multiple_choice\ndoc_to_text: "{prompt}"\ndoc_to_target: label\n'
            f'doc_to_choice: "{{{{choices}}}}"\n{METRICS_MC}metadata:\n  version: 1.0\n'
        )
    (folder / "grp_pair.yaml").write_text(
        "group: grp_pair\ntask:\n  - grp_a\n  - grp_b\naggregate_metric_list:\n  - metric: acc\n"
        "    weight_by_size: true\n  - metric: acc_norm\n    weight_by_size: false\nmetadata:\n  version: 1.0\n"
    )
    (folder / "grp_nest.yaml").write_text(
        "group: grp_nest\ntask:\n  - grp_pair\n  - grp_c\naggregate_metric_list:\n  - metric: acc\n"
        "    weight_by_size: false\n    filter_list: [none]\n  - metric: acc_norm\n    weight_by_size: true\n"
        "metadata:\n  version: 1.0\n"
    )
    (folder / "grp_bare.yaml").write_text("group: grp_bare\ntask:\n  - grp_c\nmetadata:\n  version: 1.0\n")
    return folder


def _lm_eval(url: str, model: str, folder: Path, tasks: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """lm-eval's simple_evaluate with local-completions on the test server, tokenizing at its ``/tokenize``."""
    from lm_eval import evaluator
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import RemoteTokenizer

    # the test server has vLLM's /tokenize but not /tokenizer_info (no BOS/EOS: every context here is non-empty)
    monkeypatch.setattr(RemoteTokenizer, "_validate_server", lambda self: None)
    monkeypatch.setattr(RemoteTokenizer, "tokenizer_info", property(lambda self: {}))
    args = {"base_url": url.rstrip("/") + "/completions", "model": model, "tokenizer_backend": "remote",
            "tokenized_requests": True, "num_concurrent": 1, "max_retries": 1}  # fmt: skip
    out = evaluator.simple_evaluate(
        model="local-completions", model_args=args, tasks=tasks, task_manager=TaskManager(include_path=str(folder))
    )
    return out["results"]


def test_group_aggregates_equal_lm_evals_to_the_last_digit(
    tmp_path: Path, test_server: Any, monkeypatch: pytest.MonkeyPatch, lm_eval_cache: Path
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the console table's rows unwrapped
    folder = write_group_tasks(tmp_path / "tasks")
    url, model = test_server.url, "test-model"
    out = tmp_path / "run"
    args = ["run", "lm-eval:grp_nest", "lm-eval:grp_bare", "--include-path", str(folder), "--endpoint", url]
    res = CliRunner().invoke(app, [*args, "-o", str(out), "--concurrency", "2", "--no-warmup"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    groups = summary["groups"]
    assert list(groups) == ["lm-eval:grp_pair", "lm-eval:grp_nest", "lm-eval:grp_bare"]  # children first
    lm = _lm_eval(url, model, folder, ["grp_nest"], monkeypatch)
    for task in SIZES:  # the members themselves agree (the premise of the comparison)
        for key in ("acc,none", "acc_norm,none"):
            assert summary["tasks"][f"lm-eval:{task}"]["metrics"][key]["value"] == lm[task][key]
    compared = 0
    for name in ("grp_pair", "grp_nest"):
        mine = groups[f"lm-eval:{name}"]
        assert "reason" not in mine and set(mine["metrics"]) == {"acc,none", "acc_norm,none"}
        for key, m in mine["metrics"].items():
            metric, _, filt = key.partition(",")
            assert m["value"] == lm[name][key] and m["stderr"] == lm[name][f"{metric}_stderr,{filt}"]
            compared += 1
    assert compared == 4
    nest = groups["lm-eval:grp_nest"]
    assert nest["members"] == ["lm-eval:grp_pair", "lm-eval:grp_c"]
    assert nest["tasks"] == ["lm-eval:grp_a", "lm-eval:grp_b", "lm-eval:grp_c"]
    assert nest["sizes"] == {f"lm-eval:{t}": n for t, n in SIZES.items()} and nest["metrics"]["acc,none"]["n"] == 13
    pair = groups["lm-eval:grp_pair"]["metrics"]
    a, b = (summary["tasks"][f"lm-eval:{t}"]["metrics"] for t in ("grp_a", "grp_b"))
    assert pair["acc_norm,none"]["value"] == pytest.approx(
        (a["acc_norm,none"]["value"] + b["acc_norm,none"]["value"]) / 2
    )
    assert pair["acc,none"]["value"] == pytest.approx((6 * a["acc,none"]["value"] + 3 * b["acc,none"]["value"]) / 9)
    accs = [summary["tasks"][f"lm-eval:{t}"]["metrics"]["acc,none"]["value"] for t in SIZES]
    assert groups["lm-eval:grp_nest"]["metrics"]["acc,none"]["value"] == pytest.approx(sum(accs) / 3)  # unweighted
    assert len(set(accs)) > 1 and 0 < pair["acc,none"]["value"] < 1  # the comparison is not of constants
    assert all(0 <= x <= 1 for m in pair.values() for x in m["ci95"])  # a proportion's interval within [0, 1]
    bare = groups["lm-eval:grp_bare"]
    assert bare["metrics"] == {} and "no aggregate_metric_list" in bare["reason"]

    html = (out / "report.html").read_text()
    assert "lm-eval:grp_nest" in html and "group of 3 tasks" in html
    rows = [line for line in res.output.splitlines() if "lm-eval:grp_nest (group of 3 tasks)" in line]
    shown = f"{groups['lm-eval:grp_nest']['metrics']['acc,none']['value']:.4f}"
    assert len(rows) == 2 and "acc,none" in rows[0] and shown in rows[0]
    assert f"<td>{shown}</td>" in html and "No group score: its lm-eval config has no aggregate_metric_list" in html
    assert "lm-eval:grp_bare: no group score: its lm-eval config has no aggregate_metric_list" in res.output
    _compare_and_sweep_show_groups(out, summary)


def _compare_and_sweep_show_groups(out: Path, summary: dict[str, Any]) -> None:
    """The comparison report (the run against itself) and a sweep table row carry the run's group values."""
    from evalkit.reporting import render_compare_html
    from evalkit.reporting.compare_view import build_compare_view
    from evalkit.store.reader import open_run
    from evalkit.sweep.combination_runs import table_row
    from evalkit.sweep.combinations import Combination

    nest = summary["groups"]["lm-eval:grp_nest"]["metrics"]["acc,none"]
    shown = f"{nest['value']:.4f} ± {nest['stderr']:.4f}"
    view = build_compare_view([open_run(out), open_run(out)], None)
    rows = {(g.group, g.metric): g.cells for g in view.groups}
    assert rows[("lm-eval:grp_nest", "acc,none")] == [shown, shown]
    bare = rows[("lm-eval:grp_bare", "")]
    assert all("no aggregate_metric_list" in c for c in bare)  # no score: its reason
    html = render_compare_html([out, out])
    assert "lm-eval groups" in html and f'<td class="n">{shown}</td>' in html
    cells = table_row(Combination("c", "s", 2, None), summary, ["lm-eval:grp_a"])
    assert cells["lm-eval:grp_nest acc,none"] == nest["value"] and "lm-eval:grp_bare acc,none" not in cells
    assert cells["lm-eval:grp_nest acc,none ci95"] == f"[{nest['ci95'][0]:.4f}, {nest['ci95'][1]:.4f}]"
