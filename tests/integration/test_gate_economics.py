"""The gate's goodput and cost rules as the console, gate.md, junit.xml and the HTML verdict view show them: a
limit rule shows the candidate's figure and the policy's limit with their units (never as a change), and the
goodput change rule compares only goodput counted under the same SLOs. With several runs per side every run counts:
a limit holds in each candidate run, the goodput change is Welch's test over the runs, and runs counted under
different SLOs within a side are not compared.

Here: those of its tests that use the test server or a subprocess; the others are in
tests/unit/test_gate_economics.py."""

from __future__ import annotations


def test_the_gate_reads_each_runs_slos_from_its_manifest(tmp_path) -> None:
    import json

    import evalkit
    from evalkit.testing.server import Behaviour, TestServer

    priced = {"cost_per_gpu_hour": 3.5, "gpus_billed": 1, "limit": 8, "concurrency": 4, "report": False}
    with TestServer(Behaviour(itl_s=0.001)) as srv:
        a = evalkit.run("gsm8k", endpoint=srv.url, goodput=["ttft:200", "tpot:20"], output_dir=tmp_path / "A", **priced)
        b = evalkit.run("gsm8k", endpoint=srv.url, goodput=["ttft:500", "tpot:20"], output_dir=tmp_path / "B", **priced)
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"speed": {"max_goodput_drop": 0.1, "max_cost_per_million_output_tokens": 1e6}}))
    outcome = evalkit.gate(a.run_dir, b.run_dir, policy=policy, output=tmp_path / "gate")
    assert outcome.result.verdict == "cannot_decide" and outcome.exit_code == 2
    (reason,) = outcome.result.reasons
    assert "baseline ttft ≤ 200 ms, tpot ≤ 20 ms; candidate ttft ≤ 500 ms, tpot ≤ 20 ms" in reason
    md = (tmp_path / "gate" / "gate.md").read_text()
    assert "≤ $1,000,000.00 |" in md and "| ➖ skip |" in md
    assert "≤ $1,000,000.00" in (tmp_path / "gate" / "compare.html").read_text()  # the HTML verdict view


def test_the_gate_judges_every_run_of_a_side(tmp_path) -> None:
    import json

    import evalkit
    from evalkit.testing.server import Behaviour, TestServer

    opts = {"limit": 8, "concurrency": 4, "report": False, "cost_per_gpu_hour": 3.5, "gpus_billed": 1}
    with TestServer(Behaviour(itl_s=0.001)) as srv:
        runs = {
            name: evalkit.run("gsm8k", endpoint=srv.url, goodput=[f"ttft:{ttft}"], output_dir=tmp_path / name, **opts)
            for name, ttft in (("A1", 200), ("A2", 500), ("B1", 200), ("B2", 200))
        }
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps({"speed": {"max_goodput_drop": 0.5, "max_cost_per_million_output_tokens": 1e6}}))
    both = evalkit.gate(
        baselines=[runs["A1"].run_dir, runs["A2"].run_dir],
        candidates=[runs["B1"].run_dir, runs["B2"].run_dir],
        policy=policy,
        output=tmp_path / "gate",
    )
    assert both.result.verdict == "cannot_decide" and both.exit_code == 2
    (reason,) = both.result.reasons  # the second baseline run's SLOs differ from the first's
    assert "the baseline runs' goodput was counted under different SLOs (ttft ≤ 200 ms; ttft ≤ 500 ms)" in reason
    (cost,) = [r for r in both.result.rules if r.figure == "cost_per_million_output_tokens"]
    assert cost.verdict == "pass" and "the worst of 2 runs" in cost.note
