"""``evalkit sweep`` fails closed: a config that cannot run is recorded and the rest still run (exit 1 at the
end, the table naming it); a finished run is reused only when its recorded settings match the sweep file."""

from __future__ import annotations

import csv
import json
import socket
import sys
from pathlib import Path

import orjson

from evalkit.sweep import load_spec, run_sweep
from evalkit.testing.server import Behaviour, TestServer
from tests.integration.test_sweep import METRIC
from tests.unit.test_sweep import sweep, write


def dead_port() -> int:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rows_of(out: Path) -> dict[str, dict[str, str]]:
    rows = csv.DictReader((out / "sweep.csv").open())
    return {f"{r['config']}__{r['sampling']}": r for r in rows}


def test_unreachable_and_wrong_model_configs_are_recorded_and_the_rest_run(tmp_path: Path) -> None:
    port = dead_port()
    with (
        TestServer(Behaviour(correct_ratio=0.6)) as good,
        TestServer(Behaviour(models=["other-model"])) as other,
    ):
        spec_file = write(
            tmp_path / "sweep.yaml",
            f"""tasks: [gsm8k]
limit: 2
endpoint: {good.url}
model: test-model
configs:
  dead: {{endpoint: "http://127.0.0.1:{port}"}}
  other: {{endpoint: "{other.url}"}}
  good: {{}}
sampling:
  a: {{max_tokens: 16}}
  b: {{max_tokens: 16, temperature: 0.5, seed: 1}}
concurrency: [2]
""",
        )
        out = tmp_path / "out"
        code, text = sweep(spec_file, "-o", out)
        assert code == 1, text
        rows = rows_of(out)  # one row per combination, the failed ones saying why
        assert list(rows) == ["dead__a", "dead__b", "other__a", "other__b", "good__a", "good__b"]
        for name in ("dead__a", "dead__b"):
            assert f"cannot connect to http://127.0.0.1:{port}/v1" in rows[name]["error"]
            assert not rows[name][METRIC] and not rows[name]["output_tok_s"]
        for name in ("other__a", "other__b"):
            assert "model 'test-model' is not served" in rows[name]["error"] and "other-model" in rows[name]["error"]
        for name in ("good__a", "good__b"):  # the configs after the failed ones ran
            assert rows[name][METRIC] and float(rows[name]["output_tok_s"]) > 0 and not rows[name]["error"]
        assert len(good.state.requests) == 4 and other.state.requests == []
        md = (out / "sweep.md").read_text()
        assert "| error |" in md and "cannot connect" in md and "is not served" in md
        assert f"evalkit: dead__a__c2: cannot connect to http://127.0.0.1:{port}/v1" in text
        assert "4 of 6 combination(s) failed" in text
        html = (out / "compare.html").read_text()
        # the page's table lists every combination, a failed one with its error; only finished runs are compared
        lead, compared = html.split('<section id="runs">', 1)
        assert "dead__a__c2" in lead and f"cannot connect to http://127.0.0.1:{port}/v1" in lead
        assert "good__a__c2" in compared and "dead__a__c2" not in compared

        # the same command again: the finished ones are reused, the failed ones tried again (and still failing)
        code, text = sweep(spec_file, "-o", out)
        assert code == 1 and "skipped 2 finished combination(s)" in text
        assert len(good.state.requests) == 4
        assert set(rows_of(out)) == {"dead__a", "dead__b", "other__a", "other__b", "good__a", "good__b"}


def test_a_sweep_where_every_combination_failed_exits_1_with_its_table(tmp_path: Path) -> None:
    port = dead_port()
    spec_file = write(tmp_path / "s.yaml", f"tasks: [gsm8k]\nlimit: 2\nendpoint: http://127.0.0.1:{port}/v1\n")
    code, text = sweep(spec_file, "-o", tmp_path / "out")
    assert code == 1, text
    rows = rows_of(tmp_path / "out")
    assert list(rows) == ["default__default"] and "cannot connect" in rows["default__default"]["error"]
    assert "1 of 1 combination(s) failed" in text
    assert not (tmp_path / "out" / "compare.html").exists()  # no run to compare


def test_a_server_config_that_does_not_start_is_recorded_and_the_next_runs(tmp_path: Path) -> None:
    spec_file = write(
        tmp_path / "s.yaml",
        f"""tasks: [gsm8k]
limit: 2
server:
  model: test-model
  command: [{sys.executable}, -m, evalkit.testing.server]
  launcher: module
  startup_timeout_s: 60
configs:
  broken: {{command: [{sys.executable}, -c, "raise SystemExit(3)"]}}
  ok: {{max_num_seqs: 4}}
sampling:
  s: {{max_tokens: 16}}
concurrency: [1, 2]
""",
    )
    out = tmp_path / "out"
    result = run_sweep(load_spec(spec_file), out)
    assert list(result.failed) == ["broken__s__c1", "broken__s__c2"]
    assert all("config broken:" in why and "exited with code 3" in why for why in result.failed.values())
    assert result.ran == ["ok__s__c1", "ok__s__c2"] and result.missing == ["broken__s__c1", "broken__s__c2"]
    rows = {f"{r['config']}__c{r['concurrency']}": r for r in csv.DictReader((out / "sweep.csv").open())}
    assert "exited with code 3" in rows["broken__c1"]["error"] and not rows["broken__c1"][METRIC]
    assert rows["ok__c2"][METRIC] and not rows["ok__c2"]["error"]
    code, text = sweep(spec_file, "-o", out)  # the CLI: the same, exit 1
    assert code == 1 and "2 of 4 combination(s) failed" in text and "skipped 2 finished" in text


def test_an_edited_sweep_file_reruns_the_changed_combinations_and_keeps_the_old_runs(tmp_path: Path) -> None:
    def spec(limit: int, temperature: float) -> Path:
        return write(
            tmp_path / "sweep.yaml",
            f"""tasks: [gsm8k]
limit: {limit}
endpoint: {srv.url}
sampling:
  t: {{max_tokens: 16, temperature: {temperature}, seed: 1}}
  greedy: {{max_tokens: 16, temperature: 0}}
concurrency: [2]
""",
        )

    def settings(run: Path) -> dict[str, object]:
        return dict(json.loads((run / "manifest.json").read_text())["tasks"]["gsm8k"]["settings"])

    out = tmp_path / "out"
    runs = out / "runs"
    run = runs / "default__t__c2"
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        code, text = sweep(spec(2, 0.6), "-o", out)
        assert code == 0, text
        assert len(srv.state.requests) == 4

        # limit 2 -> 4, temperature 0.6 -> 1.5: every combination's settings changed (limit), all re-run
        code, text = sweep(spec(4, 1.5), "-o", out)
        assert code == 0, text
        assert "skipped" not in text and len(srv.state.requests) == 4 + 8
        assert settings(run)["limit"] == 4 and settings(run)["temperature"] == 1.5
        summary = json.loads((run / "summary.json").read_text())
        assert summary["tasks"]["gsm8k"]["counts"]["total"] == 4
        stale = sorted(runs.glob("default__t__c2.stale-*"))
        assert len(stale) == 1 and settings(stale[0])["limit"] == 2 and settings(stale[0])["temperature"] == 0.6
        assert (stale[0] / "samples.jsonl").read_bytes().count(b"\n") == 2  # nothing computed is deleted
        assert f"moved it to {stale[0]}" in text and "limit: run 2, sweep file 4" in text
        assert "temperature: run 0.6, sweep file 1.5" in text
        rows = list(csv.DictReader((out / "sweep.csv").open()))
        assert len(rows) == 2 and all(r[METRIC] for r in rows)  # the stale runs are not tabulated
        assert ".stale-" not in (out / "compare.html").read_text()

        # the same file again: everything is reused, nothing sent
        code, text = sweep(spec(4, 1.5), "-o", out)
        assert code == 0 and "skipped 2 finished combination(s)" in text and len(srv.state.requests) == 12

        # --collect runs nothing, and does not tabulate a run whose settings are not the sweep file's
        spec(4, 0.6)
        code, text = sweep(tmp_path / "sweep.yaml", "-o", out, "--collect")
        assert code == 1, text
        by_name = {r["sampling"]: r for r in csv.DictReader((out / "sweep.csv").open())}
        assert "temperature: run 1.5, sweep file 0.6" in by_name["t"]["error"] and not by_name["t"][METRIC]
        assert by_name["greedy"][METRIC] and not by_name["greedy"]["error"]
        assert len(srv.state.requests) == 12 and settings(run)["temperature"] == 1.5

        # an interrupted run with other settings is moved aside too (the Runner would refuse its dir)
        manifest = orjson.loads((run / "manifest.json").read_bytes())
        manifest["finished_at"] = None
        (run / "manifest.json").write_bytes(orjson.dumps(manifest))
        code, text = sweep(spec(4, 0.6), "-o", out)
        assert code == 0 and "skipped 1 finished combination(s)" in text, text
        assert settings(run)["temperature"] == 0.6 and len(sorted(runs.glob("default__t__c2.stale-*"))) == 2


def test_a_task_the_registry_does_not_know_is_bad_input_before_anything_runs(tmp_path: Path) -> None:
    """Bad input in the sweep file stays exit 2 with one line, not a failed combination per row."""
    with TestServer() as srv:
        spec_file = write(tmp_path / "s.yaml", f"tasks: [gsm8kk]\nendpoint: {srv.url}\nconcurrency: [1, 2]\n")
        code, text = sweep(spec_file, "-o", tmp_path / "out")
        assert code == 2 and len(text.strip().splitlines()) == 1 and "gsm8kk" in text, text
        assert not (tmp_path / "out" / "sweep.csv").exists() and srv.state.requests == []


def test_a_finished_run_with_failed_requests_is_retried_not_reused(tmp_path: Path) -> None:
    with TestServer(Behaviour(correct_ratio=0.6)) as srv:
        srv.state.faults = [{"status": 400, "message": "engine hiccup"}]  # the first request fails
        spec_file = write(tmp_path / "s.yaml", f"tasks: [gsm8k]\nlimit: 2\nendpoint: {srv.url}\nconcurrency: [1]\n")
        out = tmp_path / "out"
        code, text = sweep(spec_file, "-o", out)
        assert code == 1 and "1 of 2 requests failed" in text, text
        (row,) = csv.DictReader((out / "sweep.csv").open())
        assert "1 of 2 requests failed" in row["error"] and row[METRIC]  # its numbers, and why they fail
        sent = len(srv.state.requests)

        code, text = sweep(spec_file, "-o", out)  # resumed: only the failed request is sent again
        assert code == 0 and "skipped" not in text, text
        assert len(srv.state.requests) == sent + 1
        (row,) = csv.DictReader((out / "sweep.csv").open())
        assert row[METRIC] and "error" not in row
