"""The sweep's goodput and cost columns and its recommendation, over test servers of known speed and accuracy:
it names the combination the arithmetic says, the rule each other one lost on, and "none qualifies" (with why)
when the SLOs are out of reach."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evalkit.sweep import load_spec, run_sweep
from evalkit.testing.server import Behaviour, TestServer

PRICE = 2.0


def _spec(tmp_path: Path, urls: dict[str, str], gpus: dict[str, int], ttft_slo: float) -> Path:
    configs = "\n".join(f"  {n}: {{endpoint: {u}, gpus_billed: {gpus[n]}}}" for n, u in urls.items())
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"""tasks: [gsm8k]
limit: 40
endpoint: {urls["a"]}
configs:
{configs}
concurrency: [4]
goodput: {{ttft: {ttft_slo}}}
cost_per_gpu_hour: {PRICE}
recommend: {{reference: a, min_goodput_share: 0.9}}
"""
    )
    return path


def test_the_recommendation_is_the_most_good_requests_per_dollar_among_those_that_qualify(tmp_path: Path) -> None:
    fast = dict(ttft_s=0.01, itl_s=0.001)
    with (
        TestServer(Behaviour(correct_ratio=0.9, **fast)) as a,  # the reference, on 4 GPUs
        TestServer(Behaviour(correct_ratio=0.9, **fast)) as b,  # as accurate and as fast, on 1 GPU: the pick
        TestServer(Behaviour(correct_ratio=0.3, **fast)) as c,  # fast and cheap, but less accurate
        TestServer(Behaviour(correct_ratio=0.9, ttft_s=0.4, itl_s=0.001)) as d,  # accurate, cheap, misses the TTFT SLO
    ):
        urls = {"a": a.url, "b": b.url, "c": c.url, "d": d.url}
        gpus = {"a": 4, "b": 1, "c": 1, "d": 1}
        out = tmp_path / "out"
        result = run_sweep(load_spec(_spec(tmp_path, urls, gpus, ttft_slo=200)), out)
        rows = {r["config"]: r for r in csv.DictReader((out / "sweep.csv").open())}
        for name, row in rows.items():  # good requests per dollar: goodput over the GPUs' dollars per second
            per_usd = float(row["goodput_req_s"]) / (PRICE * gpus[name] / 3600)
            assert float(row["good_requests_per_usd"]) == pytest.approx(per_usd)
            assert float(row["cost_per_m_out_tok"]) == pytest.approx(
                PRICE * gpus[name] / 3600 / float(row["output_tok_s"]) * 1e6
            )
        qualify = [n for n in ("a", "b") if float(rows[n]["goodput_share"]) >= 0.9]
        pick = max(qualify, key=lambda n: float(rows[n]["good_requests_per_usd"]))
        assert pick == "b"
        md = (out / "sweep.md").read_text()
        assert "## Recommendation" in md and f"**{pick}__default__c4**: the most good requests per dollar" in md
        assert "- c__default__c4: accuracy: gsm8k: " in md  # lost on the gate's paired accuracy rule
        assert "- d__default__c4: goodput: 0.0% of requests within the SLOs, below the 90% asked for" in md
        assert "- a__default__c4: cost: " in md and "fewer than b__default__c4's" in md
        assert not result.failed
        again = run_sweep(load_spec(_spec(tmp_path, urls, gpus, ttft_slo=200)), out)  # the same SLOs and price
        assert len(again.skipped) == 4 and not again.moved and not again.ran
        # compare.html's Pareto views gain goodput and cost axes: b, as accurate as a at a quarter of the cost,
        # is on the cost front and a is not
        html = (out / "compare.html").read_text()
        # the page opens with the recommendation, then a table with goodput, cost and accuracy per combination
        body = html.split("<body>", 1)[1]
        assert body.index('RECOMMENDED: <span class="mono">b__default__c4</span>') < body.index('id="runs"')
        table = body.split('id="combinations"', 1)[1].split("</table>", 1)[0]
        for heading in (
            "goodput (req/s within SLOs)",
            "share within SLOs",
            "$ per M output tokens",
            "good requests per $",
        ):
            assert f"<th>{heading}</th>" in table
        assert "<th>gsm8k exact_match" in table and "95% CI" in table
        assert table.count("<tr") == 1 + 4 and "<b>recommended</b>" in table and "accuracy: gsm8k: " in table
        # its flips compare the pick with the reference config's run it was judged against
        flips = body.split('<section id="flips">', 1)[1]
        assert 'A = <span class="mono">a__default__c4</span>, B = <span class="mono">b__default__c4</span>' in flips
        data = json.loads(html.split('id="report-data">', 1)[1].split("</script>", 1)[0])
        charts = {c["id"]: c for c in data["charts"]}
        assert {"scatter-goodput-0", "scatter-cost-0"} <= set(charts)
        on_front = {p["label"].split()[1]: p["front"] for p in charts["scatter-cost-0"]["points"]}
        assert on_front["b__default__c4"] and not on_front["a__default__c4"]
        assert charts["scatter-cost-0"]["x"] == "$ per million output tokens"

        # SLOs out of reach: the runs counted against other SLOs are run again, and none qualifies
        result = run_sweep(load_spec(_spec(tmp_path, urls, gpus, ttft_slo=1)), out)
        assert set(result.moved) == {f"{n}__default__c4" for n in urls}
        md = (out / "sweep.md").read_text()
        assert "None qualifies: no combination has accuracy not worse than config a" in md
        assert "ttft ≤ 1 ms" in md
        assert "- a__default__c4: goodput: 0.0% of requests within the SLOs" in md
        assert "- c__default__c4: accuracy: " in md


def test_when_every_combination_failed_each_line_says_why(tmp_path: Path) -> None:
    """Nothing ran (both endpoints down): "none qualifies" says no combination has a run to judge, and each
    combination's line gives its run's failure (it used to print only the rule, with no line at all)."""
    with TestServer(Behaviour()) as a, TestServer(Behaviour()) as b:  # started and stopped: their ports are closed
        urls = {"a": a.url, "b": b.url}
    out = tmp_path / "out"
    result = run_sweep(load_spec(_spec(tmp_path, urls, {"a": 1, "b": 1}, ttft_slo=200)), out)
    assert set(result.failed) == {"a__default__c4", "b__default__c4"}
    md = (out / "sweep.md").read_text()
    advice = md.split("## Recommendation", 1)[1]
    assert "None qualifies: no combination has a finished run to judge (each line says why)." in advice
    for name in result.failed:
        (line,) = [x for x in advice.splitlines() if x.startswith(f"- {name}: ")]
        assert line == f"- {name}: run: {result.failed[name]}", line
