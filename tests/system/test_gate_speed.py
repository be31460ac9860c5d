"""Speed verdicts from run-to-run variation: several runs per side (Welch's test over runs), one run per side
against the noise budget, load that does not match left unjudged; the sweep's interleaved repeats. Runs are real
run dirs written by evalkit against test servers of known speed over HTTP."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.config import load_config
from evalkit.gating.stats import speed_runs_change
from evalkit.runner import Runner
from evalkit.sweep.combinations import plan
from evalkit.sweep.sweep_file import SweepSpec
from evalkit.testing.server import Behaviour, TestServer

N = 40
SPEED_ONLY = "accuracy: {default: {enabled: false}}\nrates: {max_error_rate: 0.0}\n"


def run(url: str, out: Path, concurrency: int = 8) -> Path:
    cfg = {"tasks": ["gsm8k"], "endpoint": url, "limit": N, "output_dir": out, "report": False}
    Runner(load_config({**cfg, "concurrency": concurrency, "max_tokens": 24, "max_attempts": 1})).run()
    return out


def gate(*args: object, out: Path | None = None) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    """``evalkit gate ARGS [-o out]``: exit code, output and gate.json (when ``out`` holds one)."""
    res = CliRunner().invoke(app, ["gate", *map(str, args), *(["-o", str(out)] if out else [])])
    print(res.output)
    written = out / "gate.json" if out else None
    return res.exit_code, res.output, json.loads(written.read_text()) if written and written.is_file() else {}


def verdicts(data: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {r["name"].split(": ", 1)[1]: r["verdict"] for r in data["rules"] if r["kind"] == "speed"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """base/same: 3 runs each of one server (TTFT 40 ms, 8 ms per token); slow: 3 runs of one 1.6x slower per
    token; other_load: one run of the base server at concurrency 2; twice: one run of a server 2x slower per token."""
    root = tmp_path_factory.mktemp("speed")
    out: dict[str, list[Path]] = {"base": [], "same": [], "slow": []}
    with (
        TestServer(Behaviour(ttft_s=0.04, itl_s=0.008)) as fast,
        TestServer(Behaviour(ttft_s=0.04, itl_s=0.0128)) as slow,
    ):
        for i in range(3):  # interleaved, as a sweep with repeats runs them
            out["base"].append(run(fast.url, root / f"base{i}"))
            out["same"].append(run(fast.url, root / f"same{i}"))
            out["slow"].append(run(slow.url, root / f"slow{i}"))
        out["other_load"] = [run(fast.url, root / "c2", concurrency=2)]
    with TestServer(Behaviour(ttft_s=0.04, itl_s=0.016)) as twice:
        out["twice"] = [run(twice.url, root / "twice")]
    return out


def sides(base: list[Path], cand: list[Path]) -> list[str]:
    return [*(x for b in base for x in ("-b", str(b))), *(x for c in cand for x in ("-c", str(c)))]


def test_three_runs_per_side_pass_identical_and_fail_a_slower_candidate(
    runs: dict[str, list[Path]], tmp_path: Path
) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(SPEED_ONLY)
    code, out, data = gate(*sides(runs["base"], runs["same"]), "-p", p, out=tmp_path / "same")
    assert code == 0, out
    assert set(verdicts(data).values()) == {"pass"}
    code, out, data = gate(*sides(runs["base"], runs["slow"]), "-p", p, out=tmp_path / "slow")
    assert code == 1, out
    v = verdicts(data)
    assert v["TPOT p50"] == "fail" and v["output tokens/s"] == "fail", v
    tpot = next(r for r in data["rules"] if r["name"] == "gsm8k: TPOT p50")
    assert tpot["method"].startswith("Welch's t-test on log per-run figures (3 vs 3 runs")
    assert 0.45 < tpot["observed"] < 0.75 and tpot["p_value"] < 0.05  # 12.8 / 8 ms per token
    assert data["baseline"] == "base0 + base1 + base2"


def test_one_run_per_side_uses_the_noise_budget(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    p = tmp_path / "p.yaml"
    p.write_text(SPEED_ONLY)
    code, out, data = gate(runs["base"][0], runs["same"][1], "-p", p, out=tmp_path / "one")
    assert code == 0, out
    ttft = next(r for r in data["rules"] if r["name"] == "gsm8k: TTFT p50")
    assert ttft["decided_by"] == "threshold" and ttft["p_value"] is None and "noise budget" in ttft["note"]
    # 1.6x the per-token latency is within the 80% TPOT noise budget of one run per side (identical H200 runs
    # moved up to +69%): one run cannot tell it from noise; three runs per side fail it (the test above)
    code, out, data = gate(runs["base"][0], runs["slow"][0], "-p", p, out=tmp_path / "slow")
    assert verdicts(data)["TPOT p50"] == "pass", out
    tpot = next(r for r in data["rules"] if r["name"] == "gsm8k: TPOT p50")
    assert 0.45 < tpot["observed"] < 0.75 and "within the run-to-run noise budget of 80%" in tpot["note"]
    # the same slowdown takes about a third off output tokens/s (224 -> 334 ms a request; -38% seen on loaded
    # cores), at the edge of that metric's 35% budget: its verdict follows the budget, the exit code the verdicts
    tok_s = next(r for r in data["rules"] if r["name"] == "gsm8k: output tokens/s")
    assert -0.45 < tok_s["observed"] < -0.25, out
    assert tok_s["verdict"] == ("fail" if tok_s["observed"] < -0.35 else "pass"), out
    assert code == (1 if tok_s["verdict"] == "fail" else 0), out


def test_one_run_per_side_still_fails_twice_the_per_token_latency(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    """A gross slowdown fails on one run per side: 2x the time per token is beyond the 80% TPOT noise budget and
    roughly halves output tokens/s (beyond its 35%)."""
    p = tmp_path / "p.yaml"
    p.write_text(SPEED_ONLY)
    code, out, data = gate(runs["base"][0], runs["twice"][0], "-p", p, out=tmp_path / "twice")
    assert code == 1, out
    v = verdicts(data)
    assert v["TPOT p50"] == "fail" and v["output tokens/s"] == "fail", v
    tpot = next(r for r in data["rules"] if r["name"] == "gsm8k: TPOT p50")
    assert 0.8 < tpot["observed"] < 1.3 and "beyond the run-to-run noise budget of 80%" in tpot["note"]


def test_speed_at_another_concurrency_is_not_judged(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    code, out, data = gate(runs["base"][0], runs["other_load"][0], out=tmp_path / "g")
    assert code == 0, out  # accuracy judged and equal; speed at concurrency 2 against 8 says nothing
    assert set(verdicts(data).values()) == {"skip"}
    assert all(
        "speed not judged: baseline ran at concurrency 8, candidate at 2" in r["note"]
        for r in data["rules"]
        if r["kind"] == "speed"
    )


def test_several_runs_of_one_side_must_be_one_setup(runs: dict[str, list[Path]], tmp_path: Path) -> None:
    with TestServer(Behaviour()) as srv:
        cfg = {"tasks": ["gsm8k"], "endpoint": srv.url, "limit": N - 1, "output_dir": tmp_path / "short"}
        Runner(load_config({**cfg, "report": False, "max_tokens": 24})).run()
    code, out, _ = gate("-b", runs["base"][0], "-b", tmp_path / "short", "-c", runs["same"][0])
    assert code == 2 and "the baseline runs base0 and short are not runs of one config (limit 40 vs 39)" in out


@pytest.mark.parametrize("sd", [0.05, 0.15])
def test_false_fail_rate_of_the_speed_rule_on_identical_configs(sd: float) -> None:
    """Identical configs whose runs spread log-normally by ``sd`` (run-to-run, as measured on the H200): the
    3-vs-3 rule (10% budget, alpha 0.05) fails at most 5% of pairs; its power against a 25% slowdown is
    printed (docs/benchmarks/archive/gate-statistics.md states it)."""
    rng = np.random.default_rng(0)
    sims = 2000

    def fails(slowdown: float) -> float:
        n = 0
        for _ in range(sims):
            b = np.exp(rng.normal(0.0, sd, 3)) * 100.0
            c = np.exp(rng.normal(0.0, sd, 3)) * 100.0 * slowdown
            est = speed_runs_change(list(b), list(c), lower_is_better=True, budget=0.10, alpha=0.05)
            n += est.value > 0.10 and est.p_value < 0.05
        return n / sims

    false_fail, power = fails(1.0), fails(1.25)
    print(f"sd {sd}: false-fail rate {false_fail:.3f}, power against +25% {power:.3f}")
    assert false_fail <= 0.05
    assert power > (0.6 if sd <= 0.05 else 0.05)


def test_sweep_repeats_are_interleaved() -> None:
    spec = SweepSpec(
        tasks=["gsm8k"], endpoint="http://127.0.0.1:9/v1", configs={"a": {}, "b": {}}, concurrency=[4], repeats=3
    )
    names = [c.name for c in plan(spec)]
    assert names == [f"{cfg}__default__c4__r{k}" for k in (1, 2, 3) for cfg in ("a", "b")]
    assert len({c.point for c in plan(spec)}) == 2


def test_a_watch_on_a_healthy_endpoint_raises_no_speed_alarm_in_30_ticks(tmp_path: Path) -> None:
    from evalkit.watch import Watch, WatchSettings

    with TestServer(Behaviour(ttft_s=0.01, itl_s=0.002)) as srv:
        s = WatchSettings(
            task="gsm8k", endpoint=srv.url, out=tmp_path / "w", every_s=0.01, per_tick=8, window=4,
            baseline_ticks=4, concurrency=2, request_rate=None, ticks=30, run={"max_tokens": 16},
        )  # fmt: skip
        history = Watch(s).run()
    judged = [r for r in history if r.verdict in ("pass", "fail", "cannot_decide")]
    assert len(judged) == 26 and all(r.verdict == "pass" for r in judged), [(r.tick, r.failed_rules) for r in judged]
    full = [r for r in judged if len(r.window["ticks"]) == 4]  # 32 requests: enough to judge speed
    speed = [rule for r in full for rule in r.rules if rule["name"].endswith(("TTFT p50", "TPOT p50"))]
    assert len(speed) == 2 * len(full) >= 40
    assert all(rule["verdict"] == "pass" for rule in speed)  # judged (the canary's own load), never failed


def test_run_repeats_writes_one_run_dir_per_repeat_that_the_gate_judges_together(tmp_path: Path) -> None:
    with TestServer(Behaviour(ttft_s=0.02, itl_s=0.004)) as srv:
        for side in ("base", "cand"):
            args = ["run", "gsm8k", "--endpoint", srv.url, "--limit", "32", "--max-tokens", "16", "--concurrency", "8"]
            res = CliRunner().invoke(app, [*args, "--repeats", "3", "-o", str(tmp_path / side), "-q"])
            assert res.exit_code == 0, res.output
        sent = len(srv.state.requests)
    assert sorted(p.name for p in (tmp_path / "base").iterdir()) == ["repeat-1", "repeat-2", "repeat-3"]
    assert sent >= 6 * 32  # every repeat sent its requests (nothing was reused from another repeat)
    dirs = sides(sorted((tmp_path / "base").iterdir()), sorted((tmp_path / "cand").iterdir()))
    code, out, data = gate(*dirs, out=tmp_path / "g")
    assert code == 0, out
    assert any(r["method"] and "3 vs 3 runs" in r["method"] for r in data["rules"] if r["kind"] == "speed")
    res = CliRunner().invoke(app, ["run", "gsm8k", "--endpoint", "http://127.0.0.1:9/v1", "--repeats", "2"])
    assert res.exit_code == 2 and "--repeats needs --output-dir DIR" in res.output


def test_each_repeats_timings_are_its_own(tmp_path: Path) -> None:
    """``evalkit run --repeats 3`` as a command: each repeat's ``timings_s`` count its own phases, so the three
    add up to at most the command's wall time, and a later repeat's start-up is not the repeats before it."""
    import subprocess
    import time

    with TestServer(Behaviour(ttft_s=0.02, itl_s=0.004)) as srv:
        args = ["run", "gsm8k", "--endpoint", srv.url, "--limit", "8", "--max-tokens", "16", "--no-report", "-q"]
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-m", "evalkit.cli", *args, "--repeats", "3", "-o", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        wall = time.perf_counter() - t0
    assert res.returncode == 0, res.stderr
    runs = [tmp_path / "r" / f"repeat-{k}" for k in (1, 2, 3)]
    timings = [json.loads((d / "summary.json").read_text())["timings_s"] for d in runs]
    totals = [sum(v for v in t.values() if v is not None) for t in timings]
    print(f"startup {[t['startup'] for t in timings]} s, phases {totals} s, command {wall:.2f} s")
    assert sum(totals) <= wall + 0.1  # no phase is counted in two repeats (0.1 s: /proc clock ticks, rounding)
    for k in (1, 2):  # a later repeat's start-up is its own: less than the whole repeat before it
        assert timings[k]["startup"] < totals[k - 1] and timings[k]["startup"] < 1.0


def test_run_repeats_with_serve_starts_the_server_once(tmp_path: Path) -> None:
    from evalkit import api

    server = {
        "model": "test-model",
        "command": [sys.executable, "-m", "evalkit.testing.server"],
        "launcher": "module",
        "startup_timeout_s": 60,
    }
    results = api.run_repeats(
        "gsm8k", 2, server=server, limit=4, max_tokens=16, output_dir=tmp_path / "r", report=False
    )
    urls = {r.manifest.endpoint.base_url for r in results}
    assert [r.run_dir.name for r in results] == ["repeat-1", "repeat-2"]
    assert len(urls) == 1 and all(r.manifest.server for r in results), urls  # one server (one port) served both


def test_the_gate_judges_speed_over_the_steady_state_when_both_runs_have_one() -> None:
    """A candidate whose ramp-up and drain (outside its steady-state window) decode 3x slower: over the steady
    state it is as fast as the baseline; over the whole run its TPOT p50 looks far worse."""
    import dataclasses

    from evalkit.gating import evaluate, policy_from_dict
    from tests.gate_fixtures import N_GSM8K, correctness, difficulties, metric, speed_records, task
    from tests.gate_fixtures import run as run_inputs

    base = dataclasses.replace(speed_records(seed=0), steady=(15.0, 45.0))
    cand = speed_records(seed=1)
    slow = [s is not None and not 15.0 <= s <= 44.0 for s in cand.start_s]
    tpot = [t * 3 if k and t is not None else t for t, k in zip(cand.tpot_ms, slow, strict=True)]
    e2e = [e + (t2 - t1) * ((n or 1) - 1) if t1 is not None and t2 is not None and e is not None else e
           for e, t1, t2, n in zip(cand.e2e_ms, cand.tpot_ms, tpot, cand.output_tokens, strict=True)]  # fmt: skip
    cand = dataclasses.replace(cand, tpot_ms=tpot, e2e_ms=e2e, steady=(15.0, 45.0))
    p = difficulties(N_GSM8K, 0.75)
    items = metric(correctness(p, 1, seed=1))

    def tpot_rule(b: object, c: object) -> object:
        res = evaluate(run_inputs("b", task({"m,f": items}, speed=b)), run_inputs("c", task({"m,f": items}, speed=c)),
                       policy_from_dict({"bootstrap": {"resamples": 1000}}))  # fmt: skip
        return next(r for r in res.rules if r.name.endswith("TPOT p50"))

    steady = tpot_rule(base, cand)
    assert steady.verdict == "pass" and "steady state" in steady.note, steady.note  # type: ignore[attr-defined]
    whole = tpot_rule(dataclasses.replace(base, steady=None), dataclasses.replace(cand, steady=None))
    assert whole.verdict == "fail" and "steady state" not in whole.note, whole.note  # type: ignore[attr-defined]
