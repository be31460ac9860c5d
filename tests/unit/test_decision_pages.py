"""Decision pages (issue 49): the gate's compare.html and the comparison of two runs open with the decision, a
side of several runs is named by its common parent, and a gate of several runs a side pairs baseline runs with
candidate runs (flips pooled as the gate pools them; charts draw sides, not runs)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evalkit.gating.gate_runs import run_gate
from evalkit.reporting import render_compare_html, write_gate_compare
from evalkit.reporting.analysis import compute_flips
from evalkit.store.reader import open_run
from tests.report_fixtures import build_gsm8k_run


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    root = tmp_path_factory.mktemp("sides")
    bases = [build_gsm8k_run(root / "base" / f"repeat-{i}", n=120, seed=i) for i in (1, 2, 3)]
    cands = [build_gsm8k_run(root / "cand" / f"repeat-{i}", n=120, seed=10 + i, accuracy=0.7) for i in (1, 2, 3)]
    return bases, cands


def charts(html: str) -> list[dict]:
    return json.loads(re.search(r'id="report-data">(.*?)</script>', html, re.S).group(1))["charts"]


def decision(html: str) -> str:
    m = re.search(r'<div id="decision"[^>]*>(.*?)</div>', html, re.S)
    assert m, "no decision banner"
    return re.sub(r"<[^>]+>", "", m.group(1))


def test_a_side_of_several_runs_is_named_by_its_common_parent(
    sides: tuple[list[Path], list[Path]], tmp_path: Path
) -> None:
    bases, cands = sides
    out = run_gate(bases, cands, out_dir=tmp_path / "g", write_compare=write_gate_compare)
    assert (out.result.baseline, out.result.candidate) == ("base", "cand")  # was "repeat-1 + repeat-2 + repeat-3"
    html = out.files["compare.html"].read_text()
    assert "<title>Release gate: cand vs base</title>" in html
    assert decision(html).startswith(out.result.verdict.upper())
    assert "candidate cand against baseline base" in decision(html)


def test_multi_run_flips_pair_baseline_with_candidate(sides: tuple[list[Path], list[Path]]) -> None:
    bases, cands = sides
    html = render_compare_html([*bases, *cands], n_baseline=3)
    flips = html[html.index('<section id="flips">') :]
    # the i-th baseline run against the i-th candidate run, summed: not baseline repeat-1 against repeat-2
    pairs = [compute_flips(open_run(b).samples, open_run(c).samples) for b, c in zip(bases, cands, strict=True)]
    broken, fixed = sum(len(f.broken) for f in pairs), sum(len(f.fixed) for f in pairs)
    assert f"broken (correct in baseline, wrong in candidate) {broken:,}" in flips
    assert f"fixed (wrong in baseline, correct in candidate) {fixed:,}" in flips
    assert "Flips: baseline → candidate" in flips and "<h2>Flips: A → B</h2>" not in html
    assert "Per-problem accuracy changes" in flips  # three samples per problem, as the gate's rules pool them
    (timeline,) = [c for c in charts(html) if c["kind"] == "timeline"]
    assert [s["label"] for s in timeline["series"]] == [
        "baseline base (mean of 3 runs)",
        "candidate cand (mean of 3 runs)",
    ]
    one = timeline_of_one(bases[0])
    assert 0.5 * max(one) < max(timeline["series"][0]["tok_s"]) < 2 * max(one)  # a mean of runs, not their sum
    (scatter,) = [c for c in charts(html) if c["kind"] == "scatter"]
    assert scatter["sides"] == ["baseline base (3 runs)", "candidate cand (3 runs)"]
    assert [p["side"] for p in scatter["points"]] == [0, 0, 0, 1, 1, 1]


def timeline_of_one(run_dir: Path) -> list[float]:
    (c,) = [c for c in charts(render_compare_html([run_dir, run_dir])) if c["kind"] == "timeline"]
    return c["series"][0]["tok_s"]


def test_two_runs_that_cannot_be_compared_say_so_first(tmp_path: Path) -> None:
    a = build_gsm8k_run(tmp_path / "five-shot", n=60)
    b = build_gsm8k_run(tmp_path / "zero-shot", n=60, seed=1)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["tasks"]["gsm8k"]["settings"]["num_fewshot"] = 0  # another task setup: the gate refuses the pair
    (b / "manifest.json").write_text(json.dumps(manifest))
    html = render_compare_html([a, b])
    text = decision(html)
    assert text.startswith("CANNOT DECIDE") and "candidate zero-shot against baseline five-shot" in text
    assert "num_fewshot" in text  # why, in one line
    assert html.index('id="decision"') < html.index('<section id="runs">')


def test_a_comparison_of_three_runs_is_no_decision_page(sides: tuple[list[Path], list[Path]]) -> None:
    html = render_compare_html(sides[0])
    assert 'id="decision"' not in html and "<h1>Comparison of 3 runs</h1>" in html


def test_the_gate_console_prints_the_budgets_it_applied(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from evalkit.cli import app

    a = build_gsm8k_run(tmp_path / "a", n=80, seed=0)
    b = build_gsm8k_run(tmp_path / "b", n=80, seed=1)
    out = CliRunner().invoke(app, ["gate", str(a), str(b), "-o", str(tmp_path / "g")]).output
    flat = " ".join(out.split())
    # one run per side: judged at each figure's noise budget, not at the policy's 10% (which it used to print)
    assert "speed (one run per side, against each figure's run-to-run noise): output tokens/s worse by > 35%" in flat
    assert "TTFT p50 worse by > 100%; TPOT p50 worse by > 80% fails" in flat
    assert "evalkit run --repeats 3 on each side enables the tests of changes > 10%" in flat
    assert "numerics:" not in out and "VLLM_BATCH_INVARIANT" not in out  # no teacher-forced positions here
