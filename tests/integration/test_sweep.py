"""``evalkit sweep``: the sweep file (unknown keys refused), the table, resume, one server per server config."""

from __future__ import annotations

import csv
import json
import sys
from itertools import pairwise
from pathlib import Path

import orjson
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.sweep import load_spec, run_sweep
from evalkit.testing.server import Behaviour, TestServer

COLUMNS = [
    "config",
    "sampling",
    "concurrency",
    "output_tok_s",
    "requests_s",
    "ttft_p50_ms",
    "tpot_p50_ms",
    "ttft_p99_ms",
]
METRIC = "gsm8k exact_match,strict-match"


def sweep(*args: object) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["sweep", *map(str, args)])
    print(res.output)
    return res.exit_code, res.output


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def endpoint_file(tmp_path: Path, fast: str, slow: str) -> Path:
    return write(
        tmp_path / "sweep.yaml",
        f"""tasks: [gsm8k]
limit: 3
endpoint: {fast}
configs:
  fast: {{}}
  slow: {{endpoint: {slow}}}
sampling:
  greedy: {{max_tokens: 24, temperature: 0}}
  hot: {{max_tokens: 24, temperature: 0.7, seed: 3}}
concurrency: [1, 3]
""",
    )


def test_sweep_over_two_endpoints_writes_the_table_and_resumes(tmp_path: Path) -> None:
    with (
        TestServer(Behaviour(correct_ratio=0.6)) as fast,
        TestServer(Behaviour(correct_ratio=0.6, ttft_s=0.05)) as slow,
    ):
        spec_file = endpoint_file(tmp_path, fast.url, slow.url)
        out = tmp_path / "out"
        code, text = sweep(spec_file, "-o", out)
        assert code == 0, text
        rows = list(csv.DictReader((out / "sweep.csv").open()))
        assert len(rows) == 8 and list(rows[0])[:8] == COLUMNS
        assert {(r["config"], r["sampling"], r["concurrency"]) for r in rows} == {
            (c, s, n) for c in ("fast", "slow") for s in ("greedy", "hot") for n in ("1", "3")
        }
        assert all(r[METRIC] and r[f"{METRIC} ci95"].startswith("[") and float(r["output_tok_s"]) > 0 for r in rows)
        slow_ttft = [float(r["ttft_p50_ms"]) for r in rows if r["config"] == "slow"]
        assert min(slow_ttft) >= 50  # each config ran against its own endpoint
        run = out / "runs" / "slow__hot__c3"
        settings = json.loads((run / "manifest.json").read_text())["tasks"]["gsm8k"]["settings"]
        assert settings["temperature"] == 0.7 and settings["seed"] == 3 and settings["max_tokens"] == 24
        assert "| config | sampling | concurrency | output_tok_s |" in (out / "sweep.md").read_text()
        html = (out / "compare.html").read_text()
        assert '"sweep-throughput"' in html and '"sweep-ttft"' in html and "slow__hot__c3" in html

        # re-running skips every finished combination: nothing is sent again
        sent = len(fast.state.requests) + len(slow.state.requests)
        code, text = sweep(spec_file, "-o", out)
        assert code == 0 and "skipped 8 finished combination(s)" in text
        assert len(fast.state.requests) + len(slow.state.requests) == sent

        # a combination killed mid-run (no finished_at, its last answers missing) resumes in its run dir
        manifest = orjson.loads((run / "manifest.json").read_bytes())
        manifest["finished_at"] = None
        (run / "manifest.json").write_bytes(orjson.dumps(manifest))
        lines = (run / "samples.jsonl").read_bytes().splitlines(keepends=True)
        (run / "samples.jsonl").write_bytes(b"".join(lines[:1]))
        code, text = sweep(spec_file, "-o", out)
        assert code == 0 and "skipped 7 finished combination(s)" in text
        assert len(slow.state.requests) + len(fast.state.requests) == sent + len(lines) - 1  # only the missing
        assert json.loads((run / "manifest.json").read_text())["finished_at"]


def test_sweep_starts_one_server_per_config_and_records_it(tmp_path: Path) -> None:
    spec_file = write(
        tmp_path / "s.yaml",
        f"""tasks: [gsm8k]
limit: 2
server:
  model: test-model
  command: [{sys.executable}, -m, evalkit.testing.server]
  launcher: module
  batch_invariant: true
  startup_timeout_s: 60
configs:
  a: {{max_num_seqs: 2}}
  b: {{max_num_seqs: 4}}
sampling:
  s: {{max_tokens: 16}}
concurrency: [1, 2]
""",
    )
    result = run_sweep(load_spec(spec_file), tmp_path / "out")
    assert result.ran == ["a__s__c1", "a__s__c2", "b__s__c1", "b__s__c2"] and not result.failed
    servers = {}
    for name in result.ran:
        m = json.loads((tmp_path / "out" / "runs" / name / "manifest.json").read_text())
        assert m["server"]["env_overrides"] == {"VLLM_BATCH_INVARIANT": "1"}
        servers.setdefault(name[0], set()).add(m["endpoint"]["base_url"])
        argv = m["server"]["argv"]
        assert ("--max-num-seqs", "2" if name[0] == "a" else "4") in pairwise(argv)
    assert all(len(urls) == 1 for urls in servers.values())  # one server for both levels of a config
    assert (tmp_path / "out" / "servers" / "a" / "server.log").is_file()
    assert [r["concurrency"] for r in result.rows] == [1, 2, 1, 2]
