"""Goodput under latency SLOs (as vllm bench serve --goodput counts it) and cost per token: the rule per request,
the arithmetic, the settings, and a run on the test server with injected TTFT/ITL checked against a count made
from the run's own samples.

Here: those of its tests that use the test server or a subprocess; the others are in tests/unit/test_goodput.py."""

from __future__ import annotations

import json
import statistics

import pytest

import evalkit


@pytest.fixture(scope="module")
def run_with_slos(tmp_path_factory):
    """GSM8K on the test server with 30 ms to the first token and 4 ms between tokens, at an e2e SLO near the
    requests' median latency (so that some are good and some are not), priced at $2.5 per GPU-hour on 2 GPUs."""
    from evalkit.testing.server import Behaviour, TestServer

    out = tmp_path_factory.mktemp("goodput")
    with TestServer(Behaviour(ttft_s=0.03, itl_s=0.004)) as srv:
        probe = evalkit.run("gsm8k", endpoint=srv.url, limit=16, concurrency=4, output_dir=out / "probe", report=False)
        e2e = statistics.median(r.e2e_ms for r in probe.open().records() if r.e2e_ms is not None)
        slos = {"ttft": 1000.0, "e2el": e2e}
        priced = dict(goodput=[f"{k}:{v}" for k, v in slos.items()], cost_per_gpu_hour=2.5, gpus_billed=2)
        result = evalkit.run("gsm8k", endpoint=srv.url, limit=16, concurrency=4, output_dir=out / "run", **priced)
        again = evalkit.run(
            "gsm8k", endpoint=srv.url, limit=16, concurrency=4, output_dir=out / "again", report=False, **priced
        )
    return probe, result, slos, again


def test_goodput_of_a_run_is_the_count_made_from_its_own_samples(run_with_slos) -> None:
    _, result, slos, _ = run_with_slos
    records = list(result.open().records())
    good = 0
    for r in records:  # vLLM's rule, written out again: TPOT (e2e - ttft) / (out - 1), 0 for one token
        tpot = 0.0 if (r.output_tokens or 0) <= 1 else (r.e2e_ms - r.ttft_ms) / (r.output_tokens - 1)
        figures = {"ttft": r.ttft_ms, "tpot": tpot, "e2el": r.e2e_ms}
        good += r.status != "api_error" and all(figures[k] <= v for k, v in slos.items())
    speed = result.summary.tasks["gsm8k"].speed
    assert 0 < good < len(records)  # the SLO splits the requests: the count is not trivially all or none
    assert speed.good_requests == good
    assert speed.goodput_requests_per_s == pytest.approx(good / speed.wall_s)
    assert speed.goodput_share == pytest.approx(good / len(records))
    usd_s = 2.5 * 2 / 3600
    assert speed.cost_per_million_output_tokens == pytest.approx(usd_s / speed.output_tokens_per_s * 1e6)
    assert speed.cost_per_1k_requests == pytest.approx(usd_s / speed.requests_per_s * 1e3)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["goodput_slos"] == slos
    assert manifest["pricing"] == {"cost_per_gpu_hour": 2.5, "gpus": 2, "gpus_from": "gpus_billed"}
    html = (result.run_dir / "report.html").read_text()
    assert "Goodput (ttft ≤ 1000 ms, e2el ≤" in html and f"of requests ({good})" in html
    assert "Cost per million output tokens ($2.5/GPU-hour × 2 GPUs)" in html
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["tasks"]["gsm8k"]["speed"]["goodput_share"] == pytest.approx(good / len(records))


def test_without_the_options_the_figures_are_absent_not_null(run_with_slos) -> None:
    probe, *_ = run_with_slos
    speed = json.loads((probe.run_dir / "summary.json").read_text())["tasks"]["gsm8k"]["speed"]
    manifest = json.loads((probe.run_dir / "manifest.json").read_text())
    assert not {"goodput_requests_per_s", "goodput_share", "good_requests", "cost_per_million_output_tokens"} & set(
        speed
    )
    assert "goodput_slos" not in manifest and "pricing" not in manifest


def _gate(base, cand, tmp_path, speed_policy: dict) -> dict[str, tuple[str, str]]:
    """The goodput and cost rules of a gate of ``cand`` against ``base`` under ``speed_policy``: name ->
    (verdict, note)."""
    tmp_path.mkdir()
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"speed": speed_policy}))
    outcome = evalkit.gate(base, cand, policy=policy, output=tmp_path / "gate")
    return {
        r.name: (r.verdict, r.note)
        for r in outcome.result.rules
        if any(w in r.name for w in ("goodput", "SLOs", "cost"))
    }


def test_the_gate_judges_goodput_and_cost_against_the_policy(run_with_slos, tmp_path) -> None:
    probe, result, _, again = run_with_slos
    speed = result.summary.tasks["gsm8k"].speed
    share, cost = speed.goodput_share, speed.cost_per_million_output_tokens
    within = {"min_goodput_share": share, "min_goodput": speed.goodput_requests_per_s,
              "max_cost_per_million_output_tokens": cost}  # fmt: skip
    rules = _gate(again.run_dir, result.run_dir, tmp_path / "a", {**within, "max_goodput_drop": 1.0})
    assert {v for v, _ in rules.values()} == {"pass"} and len(rules) == 4, rules
    beyond = {"min_goodput_share": share + 0.01, "max_cost_per_million_output_tokens": cost * 0.99}
    rules = _gate(again.run_dir, result.run_dir, tmp_path / "b", beyond)
    assert [v for v, _ in rules.values()] == ["fail", "fail"], rules
    # a candidate run without --goodput / a price: its rules are skipped and the gate cannot decide (exit 2),
    # naming the options
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "policy.yaml").write_text(json.dumps({"speed": {**within, "max_goodput_drop": 0.5}}))
    outcome = evalkit.gate(
        result.run_dir, probe.run_dir, policy=tmp_path / "c" / "policy.yaml", output=tmp_path / "c" / "g"
    )
    skipped = [r for r in outcome.result.rules if any(w in r.name for w in ("goodput", "SLOs", "cost"))]
    assert len(skipped) == 4 and {r.verdict for r in skipped} == {"skip"}, skipped
    assert outcome.result.verdict == "cannot_decide" and outcome.exit_code == 2
    reasons = " ".join(outcome.result.reasons)
    assert "--goodput" in reasons and "--cost-per-gpu-hour" in reasons


def test_the_run_command_takes_the_options_and_prints_the_figures(tmp_path) -> None:
    from typer.testing import CliRunner

    from evalkit.cli import app
    from evalkit.testing.server import Behaviour, TestServer

    with TestServer(Behaviour(ttft_s=0.01)) as srv:
        common = ["run", "gsm8k", "--endpoint", srv.url, "--limit", "4", "--concurrency", "2", "--no-report"]
        priced = ["--goodput", "ttft:5000", "--goodput", "e2el:60000", "--cost-per-gpu-hour", "3", "--gpus-billed", "4"]
        res = CliRunner().invoke(app, [*common, "-o", str(tmp_path / "r"), *priced])
        assert res.exit_code == 0, res.output
        printed = " ".join(res.output.split())  # the console wraps long lines
        assert "gsm8k: goodput " in printed and "(100.0% of requests within the SLOs)" in printed
        assert "per million output tokens" in printed
        manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
        assert manifest["goodput_slos"] == {"ttft": 5000.0, "e2el": 60000.0} and manifest["pricing"]["gpus"] == 4
        # a price on an endpoint without its GPU count is refused before anything is sent
        sent = len(srv.state.requests)
        res = CliRunner().invoke(app, [*common, "-o", str(tmp_path / "s"), "--cost-per-gpu-hour", "3"])
        assert res.exit_code == 2 and "give --gpus-billed N" in " ".join(res.output.split())
        assert len(srv.state.requests) == sent
