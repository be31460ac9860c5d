"""``evalkit report LOADED --rest-run REST``: a probed load run's probe section shows each probe task's accuracy at
rest beside its accuracy under the load, the difference and its significance by the gate's own paired test (the
figures ``evalkit gate REST LOADED`` gives), and the load it was measured at; model text and names escaped; a
rest run that cannot be compared refused with one line (exit 2). Against the deterministic test server."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from evalkit.testing.server import Behaviour, TestServer
from tests.cli_errors import assert_one_error_line, invoke

LOAD = ("random", "--random-input-len", "20", "--random-output-len", "4", "--num-prompts", "30",
        "--probe", "gsm8k:0.25", "--request-rate", "40", "--seed", "1")  # fmt: skip
PROBE_DOCS = 10  # 30 x 0.25 / 0.75: gsm8k's first 10 documents


def _run(srv: TestServer, out: Path, *args: str) -> None:
    res = invoke(["run", *args, "--endpoint", srv.url, "-o", str(out), "-q", "--no-warmup", "--no-report"])
    assert res.code == 0, (res.stderr, res.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A probed load run against a server that answers every GSM8K question wrong, and runs at rest against one
    that answers every one right: over the probe's documents, over more, of another model, without gsm8k."""
    root = tmp_path_factory.mktemp("rest")
    out = {name: root / name for name in ("loaded", "rest", "rest_wide", "same", "other_model", "no_probe_task")}
    out["hostile"] = root / "rest<script>alert(1)</script>"
    with TestServer(Behaviour(correct_ratio=0.0)) as srv:
        _run(srv, out["loaded"], *LOAD)
        _run(srv, out["same"], "gsm8k", "--limit", str(PROBE_DOCS), "--seed", "1")  # as wrong at rest as under load
    with TestServer(Behaviour(correct_ratio=1.0)) as srv:
        _run(srv, out["rest"], "gsm8k", "--limit", str(PROBE_DOCS), "--seed", "1")
        _run(srv, out["rest_wide"], "gsm8k", "--limit", "25", "--seed", "1")
        _run(srv, out["hostile"], "gsm8k", "--limit", str(PROBE_DOCS), "--seed", "1")
        _run(srv, out["no_probe_task"], "random", "--random-input-len", "20", "--random-output-len", "4",
             "--num-prompts", "5")  # fmt: skip
    with TestServer(Behaviour(models=["other-model"])) as srv:
        _run(srv, out["other_model"], "gsm8k", "--limit", str(PROBE_DOCS), "--seed", "1")
    return out


def _report(runs: dict[str, Path], rest: str, tmp_path: Path) -> str:
    target = tmp_path / f"{rest}.html"
    res = invoke(["report", str(runs["loaded"]), "--rest-run", str(runs[rest]), "-o", str(target)])
    assert res.code == 0, res.stderr
    return target.read_text()


def _probe_section(page: str) -> str:
    start = page.index('<section id="probes">')
    return page[start : page.index("</section>", start)]


def _gate_rule(runs: dict[str, Path], rest: str, tmp_path: Path) -> dict:
    res = invoke(["gate", str(runs[rest]), str(runs["loaded"]), "-o", str(tmp_path / f"gate-{rest}")])
    gate = json.loads((tmp_path / f"gate-{rest}" / "gate.json").read_text())
    assert res.code in (0, 1, 2)
    (rule,) = [r for r in gate["rules"] if r["kind"] == "accuracy" and r["task"] == "gsm8k" and "strict" in r["name"]]
    return rule


def test_accuracy_under_load_beside_at_rest_with_the_gates_paired_test(runs: dict[str, Path], tmp_path: Path) -> None:
    section = _probe_section(_report(runs, "rest", tmp_path))
    loaded = json.loads((runs["loaded"] / "summary.json").read_text())["tasks"]
    rest = json.loads((runs["rest"] / "summary.json").read_text())["tasks"]["gsm8k"]["metrics"]
    assert "exact_match,strict-match" in section
    # at rest 1.0 and under load 0.0, each with its interval as its summary stores it
    for metrics in (rest, loaded["gsm8k"]["metrics"]):
        m = metrics["exact_match,strict-match"]
        assert f"{m['value']:.4f} [{m['ci95'][0]:.4f}, {m['ci95'][1]:.4f}] (n={m['n']})" in section
    # the difference and p-value are the gate's own (exact McNemar over the 10 documents paired)
    rule = _gate_rule(runs, "rest", tmp_path)
    assert rule["observed"] == pytest.approx(-1.0) and rule["p_value"] < 0.05
    assert f"{rule['observed'] * 100:+.2f} points" in section
    assert f"significantly worse under load (p={rule['p_value']:.3g} &lt; 0.05)" in section
    assert f"{PROBE_DOCS} of {PROBE_DOCS}" in section
    # the load it was measured at: the workload's offered and achieved rate
    load = loaded["random"]["load"]
    assert f"offered {load['offered_rps']:,.3f} req/s" in section and "achieved" in section


def test_a_wider_rest_run_is_paired_on_the_probes_documents(runs: dict[str, Path], tmp_path: Path) -> None:
    section = _probe_section(_report(runs, "rest_wide", tmp_path))
    assert "(n=25)" in section and f"{PROBE_DOCS} of {PROBE_DOCS}" in section  # its own figure, paired on 10
    same = _probe_section(_report(runs, "same", tmp_path))
    assert "+0.00 points" in same and "not significantly worse under load (p=1 ≥ 0.05)" in same


def test_without_a_rest_run_the_section_says_how_to_give_one(runs: dict[str, Path], tmp_path: Path) -> None:
    res = invoke(["report", str(runs["loaded"]), "-o", str(tmp_path / "plain.html")])
    assert res.code == 0, res.stderr
    section = _probe_section((tmp_path / "plain.html").read_text())
    assert "--rest-run" in section and "no rest run given" in section
    res = invoke(["report", str(runs["rest"]), "-o", str(tmp_path / "rest.html")])
    assert 'id="probes"' not in (tmp_path / "rest.html").read_text()  # not a probed run: no section


def test_names_are_escaped(runs: dict[str, Path], tmp_path: Path) -> None:
    page = _report(runs, "hostile", tmp_path)
    assert "<script>alert(1)</script>" not in page
    assert html.escape(runs["hostile"].name, quote=False) in _probe_section(page)


@pytest.mark.parametrize(
    ("rest", "needles"),
    [
        ("other_model", ["a run of other-model", "the load run of test-model", "give a rest run of test-model"]),
        ("no_probe_task", ["no scored samples of the probe task gsm8k", "evalkit run gsm8k --limit N"]),
        ("loaded_twice", ["has no probe tasks", "--probe TASK:SHARE"]),
        ("missing", ["is not a run dir", "--rest-run"]),
    ],
)
def test_a_rest_run_that_cannot_be_compared_is_one_line(
    runs: dict[str, Path], tmp_path: Path, rest: str, needles: list[str]
) -> None:
    loaded = runs["rest"] if rest == "loaded_twice" else runs["loaded"]  # a plain run has no probes to compare
    given = runs["loaded"] if rest == "loaded_twice" else runs.get(rest, tmp_path / "nowhere")
    res = invoke(["report", str(loaded), "--rest-run", str(given), "-o", str(tmp_path / "x.html")])
    assert_one_error_line(res, *needles)
    assert not (tmp_path / "x.html").exists()


def test_other_documents_or_prompts_are_refused(runs: dict[str, Path], tmp_path: Path) -> None:
    with TestServer(Behaviour()) as srv:
        _run(srv, tmp_path / "fewshot", "gsm8k", "--limit", str(PROBE_DOCS), "--seed", "1", "--num-fewshot", "0")
        (tmp_path / "docs.yaml").write_text("docs: [40, 41, 42]\n")
        _run(srv, tmp_path / "others", "gsm8k", "--seed", "1", "--config", str(tmp_path / "docs.yaml"))
    res = invoke(["report", str(runs["loaded"]), "--rest-run", str(tmp_path / "fewshot"), "-o", str(tmp_path / "x")])
    assert_one_error_line(res, "sent with other prompts", "the probe's settings")
    res = invoke(["report", str(runs["loaded"]), "--rest-run", str(tmp_path / "others"), "-o", str(tmp_path / "x")])
    assert_one_error_line(res, "scored none of the probe's gsm8k documents", "--limit 10")
    res = invoke(["report", str(runs["loaded"]), str(runs["rest"]), "--rest-run", str(runs["rest"])])
    assert_one_error_line(res, "--rest-run goes with one load run")


def test_evalkit_run_takes_the_rest_run_into_its_report(runs: dict[str, Path], tmp_path: Path) -> None:
    with TestServer(Behaviour(correct_ratio=0.0)) as srv:
        out = tmp_path / "probed"
        res = invoke(["run", *LOAD, "--endpoint", srv.url, "-o", str(out), "-q", "--no-warmup",
                      "--rest-run", str(runs["rest"])])  # fmt: skip
        assert res.code == 0, res.stderr
        section = _probe_section((out / "report.html").read_text())
        assert "significantly worse under load" in section and f"{PROBE_DOCS} of {PROBE_DOCS}" in section
        # refused before anything is sent: no probes to compare, a rest run of another model, not a run dir
        sent = len(srv.requests)
        for i, (args, needles) in enumerate(
            (
                (["gsm8k", "--limit", "3", "--rest-run", str(runs["rest"])], ["give --probe TASK:SHARE"]),
                (
                    [*LOAD, "--rest-run", str(runs["other_model"])],
                    ["a run of other-model", "give a rest run of test-model"],
                ),
                ([*LOAD, "--rest-run", str(tmp_path / "nowhere")], ["is not a run dir"]),
            )
        ):
            res = invoke(["run", *args, "--endpoint", srv.url, "-o", str(tmp_path / f"refused{i}"), "-q"])
            assert_one_error_line(res, *needles)
        assert [r for r in srv.requests[sent:] if "completions" in r.path] == []
        # a rest run found not comparable once the run is done: the run and its report are kept, one line says why
        res = invoke(["run", *LOAD, "--endpoint", srv.url, "-o", str(tmp_path / "late"), "-q", "--no-warmup",
                      "--rest-run", str(runs["no_probe_task"])])  # fmt: skip
        assert_one_error_line(res, "no scored samples of the probe task gsm8k", "the run is complete")
        assert (tmp_path / "late" / "report.html").is_file() and (tmp_path / "late" / "summary.json").is_file()


def test_a_probed_run_cut_short_still_reports_without_the_section(runs: dict[str, Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut"
    shutil.copytree(runs["loaded"], cut)
    (cut / "summary.json").unlink()  # interrupted before its summary: the report shows what there is
    res = invoke(["report", str(cut), "-o", str(tmp_path / "cut.html")])
    assert res.code == 0, res.stderr
    assert 'id="probes"' not in (tmp_path / "cut.html").read_text()
    res = invoke(["report", str(cut), "--rest-run", str(runs["rest"]), "-o", str(tmp_path / "cut2.html")])
    assert_one_error_line(res, "summary.json")
