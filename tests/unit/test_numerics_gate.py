"""The numerics rules of the gate, the watch's window and the sweep's columns over synthetic ``numerics`` run dirs
(tests/numerics_fixtures.py), and the report's numerics sections (hostile token text escaped)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.gating import evaluate, from_run_dir, policy_from_dict
from evalkit.reporting import render_compare_html, render_run_html
from evalkit.sweep.numerics_columns import add_numerics_columns
from evalkit.watch.window import merge, tick_inputs
from tests.numerics_fixtures import TASK, build_numerics_run, positions, side, text_logits
from tests.report_fixtures import CANARY, HOSTILE, IMG
from tests.unit.test_report import assert_self_contained

RULES = ["top-1 agreement", "mean KL", "p99 KL", "mean abs d-logprob"]


def gate(*args: object) -> tuple[int, dict]:  # type: ignore[type-arg]
    out = Path(str(args[1])) / "gate"
    res = CliRunner().invoke(app, ["gate", *map(str, args), "-o", str(out)])
    print(res.output)
    data = json.loads((out / "gate.json").read_text()) if (out / "gate.json").is_file() else {}
    return res.exit_code, data


def _run(path: Path, noise: float, seed: int, floor_noise: float = 1e-4, docs: int = 12) -> Path:
    main = side(docs, noise=noise, seed=seed)
    again = side(4, noise=noise, seed=seed + 100, sample_index=1)
    again = {d: positions_noise(again[d], floor_noise, seed + 200 + d) for d in again}
    return build_numerics_run(path, main, again, seed=seed)


def positions_noise(p, sd: float, seed: int):  # type: ignore[no-untyped-def]
    """``p`` with its logits moved by Gaussian noise of ``sd`` (the noise-floor pass of a server)."""
    logits, ids = text_logits(p.doc_id)
    rng = np.random.default_rng(seed)
    return positions(logits + rng.normal(0.0, sd, logits.shape), ids, doc_id=p.doc_id, sample_index=p.sample_index)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return _run(tmp_path / "base", 0.0, 1)


def _verdicts(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {r["name"]: r["verdict"] for r in data["rules"] if r["kind"] == "numerics"}


def test_the_same_server_twice_passes_with_every_numerics_rule(tmp_path: Path, base: Path) -> None:
    code, data = gate(base, _run(tmp_path / "cand", 0.0, 2))
    assert code == 0 and data["verdict"] == "pass"
    assert _verdicts(data) == {f"{TASK}: {r}": "pass" for r in RULES}
    top1 = next(r for r in data["rules"] if r["name"] == f"{TASK}: top-1 agreement")
    assert top1["observed"] == 1.0 and top1["budget"] == 0.995 and top1["baseline"] > 0.99  # its noise floor
    assert not [r for r in data["rules"] if r["kind"] == "speed"]  # answers not streamed: no speed rules
    assert not data["reasons"]


def test_a_perturbed_server_fails_on_the_numerics_rules(tmp_path: Path, base: Path) -> None:
    code, data = gate(base, _run(tmp_path / "fp8", 0.3, 2))  # like online FP8: every rule far beyond
    assert code == 1 and _verdicts(data) == {f"{TASK}: {r}": "fail" for r in RULES}
    code, data = gate(base, _run(tmp_path / "f32", 0.03, 3))  # like bf16 vs float32: |dlp| ~0.02, top-1 ~98%
    verdicts = _verdicts(data)
    assert code == 1 and verdicts[f"{TASK}: mean abs d-logprob"] == "fail"
    assert verdicts[f"{TASK}: top-1 agreement"] == "fail" and verdicts[f"{TASK}: mean KL"] == "pass"


def test_a_budget_inside_the_interval_cannot_decide(tmp_path: Path, base: Path) -> None:
    cand = _run(tmp_path / "cand", 0.03, 3)
    b, c = from_run_dir(base), from_run_dir(cand)
    observed = evaluate(b, c).rules
    dlp = next(r for r in observed if r.name.endswith("mean abs d-logprob"))
    assert dlp.ci is not None and dlp.ci[0] < dlp.observed < dlp.ci[1]
    policy = policy_from_dict({"numerics": {"max_mean_abs_dlp": dlp.observed, "min_top1_agreement": 0.9}})
    result = evaluate(b, c, policy)
    assert result.verdict == "cannot_decide"
    assert [r.verdict for r in result.rules if r.name.endswith("mean abs d-logprob")] == ["skip"]
    assert any("mean abs d-logprob: the budget lies inside the interval" in r for r in result.reasons)
    off = policy_from_dict({"numerics": {"max_mean_abs_dlp": None, "min_top1_agreement": 0.9}})
    assert evaluate(b, c, off).verdict == "pass"


def test_a_baseline_noisier_than_the_budget_cannot_decide(tmp_path: Path) -> None:
    noisy = _run(tmp_path / "noisy", 0.0, 1, floor_noise=0.3)
    code, data = gate(noisy, _run(tmp_path / "cand", 0.0, 2))
    assert code == 2 and data["verdict"] == "cannot_decide"
    assert any("baseline noise floor" in r and "beyond the budget" in r for r in data["reasons"])


def test_texts_tokenised_differently_exit_2_naming_the_first(tmp_path: Path, base: Path) -> None:
    main = side(12, seed=2)
    logits, ids = text_logits(5)
    ids = ids.copy()
    ids[9] = (ids[9] + 1) % 64
    main[5] = positions(logits, ids, doc_id=5)
    code, data = gate(base, build_numerics_run(tmp_path / "cand", main, seed=2))
    assert code == 2 and not _verdicts(data)
    assert any("doc 5 was tokenised differently" in r and "position 9" in r for r in data["reasons"])


def test_a_missing_text_exits_2_naming_it(tmp_path: Path, base: Path) -> None:
    cand = build_numerics_run(tmp_path / "cand", side(12, seed=2), seed=2)
    samples = [json.loads(line) for line in (cand / "samples.jsonl").read_text().splitlines()]
    for s in samples:
        s["status"] = "api_error" if s["doc_id"] == 7 else s["status"]  # its positions no longer count
    (cand / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    policy = tmp_path / "policy.yaml"
    policy.write_text("rates: {max_error_rate: 0.5}\n")
    code, data = gate(base, cand, "--policy", policy)
    assert code == 2 and not _verdicts(data)
    assert any("numerics: the baseline scored doc 7; the candidate did not" in r for r in data["reasons"])


def test_the_noise_floor_pass_is_not_counted_as_documents_asked_for(base: Path) -> None:
    task = from_run_dir(base).tasks[TASK]
    assert task.asked_docs == frozenset(range(12)) and task.numerics is not None and len(task.numerics.again) == 4


def test_the_watch_judges_a_window_of_ticks_against_the_baseline_by_the_same_rules(tmp_path: Path) -> None:
    baseline = from_run_dir(_run(tmp_path / "base", 0.0, 1))
    full_same, full_off = side(12, seed=2), side(12, noise=0.3, seed=2)
    ticks = []
    for i, docs in enumerate(([0, 1, 2, 3], [4, 5, 6, 7])):
        d = build_numerics_run(tmp_path / f"tick{i}", {x: full_same[x] for x in docs}, seed=i)
        ticks.append(tick_inputs(d, TASK))
    window = merge("window", TASK, [t for t in ticks if t is not None])
    assert window.tasks[TASK].numerics is not None and sorted(window.tasks[TASK].numerics.main) == list(range(8))
    assert evaluate(baseline, window).verdict == "pass"
    bad = build_numerics_run(tmp_path / "tick-bad", {x: full_off[x] for x in (8, 9, 10)}, seed=9)
    bad_inputs = tick_inputs(bad, TASK)
    assert bad_inputs is not None
    result = evaluate(baseline, merge("window", TASK, [bad_inputs]))
    assert result.verdict == "fail" and {r.name for r in result.failed} >= {f"{TASK}: mean KL"}


def test_sweep_rows_hold_the_divergence_from_the_first_combination(tmp_path: Path) -> None:
    dirs = [_run(tmp_path / "a", 0.0, 1), _run(tmp_path / "b", 0.0, 2), _run(tmp_path / "c", 0.3, 3)]
    rows: list[dict] = [{} for _ in dirs]  # type: ignore[type-arg]
    add_numerics_columns(list(zip(rows, dirs, strict=True)), [TASK, "gsm8k"])
    assert rows[0][f"{TASK} mean_kl vs first"] == 0.0 and rows[1][f"{TASK} top1 vs first"] == 1.0
    assert rows[2][f"{TASK} mean_kl vs first"] > 0.01 and rows[2][f"{TASK} top1 vs first"] < 0.95
    assert 0 < rows[0][f"{TASK} mean_abs_dlp floor"] < 1e-3
    assert not any(k.startswith("gsm8k") for r in rows for k in r)


def _hostile_run(path: Path, noise: float, seed: int) -> Path:
    main = {}
    for d in range(6):
        logits, ids = text_logits(d)
        tokens = tuple(HOSTILE if i % 3 == 0 else f"w{i}\n" for i in range(len(ids)))
        rng = np.random.default_rng(seed + d)
        main[d] = positions(logits + rng.normal(0, noise, logits.shape), ids, doc_id=d, tokens=tokens,
                            continuation=[1, 2, 3 + seed % 2, 4])  # fmt: skip
    again = {d: positions(*text_logits(d), doc_id=d, sample_index=1) for d in range(2)}
    return build_numerics_run(path, main, again, seed=seed)


def test_the_comparison_report_shows_divergence_in_context_with_token_text_escaped(tmp_path: Path) -> None:
    a, b = _hostile_run(tmp_path / "a", 0.0, 1), _hostile_run(tmp_path / "b", 0.2, 2)
    html = render_compare_html([a, b])
    section = html[html.index('<section id="numerics-0">') :]
    assert CANARY not in html and IMG not in html and "&lt;/script&gt;&lt;script&gt;" in section
    assert '<svg class="hist"' in section and section.count("<rect ") == 11
    assert 'class="nd' in section and ' at"' in section  # tokens coloured, the focus outlined
    assert "texts got the same greedy continuation from both runs; where they split" in section
    assert "mean abs d-logprob" in section and "A&#39;s noise floor" in section
    assert_self_contained(html)  # the CSP hashes the style block with the numerics stylesheet
    assert "pre.nx .nd5" in html


def test_a_single_run_report_shows_its_noise_floor(tmp_path: Path) -> None:
    html = render_run_html(_hostile_run(tmp_path / "a", 0.0, 1))
    assert '<section id="numerics-floor">' in html and "over 2 texts" in html
    assert CANARY not in html
    assert_self_contained(html)
