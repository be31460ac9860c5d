"""``evalkit capacity`` end to end against real vLLM (CPU build, SmolLM2-135M), started by the search itself
(``--serve`` through a config file's ``server:``): one small rate search of a ``random`` workload, vLLM started
once with the first point and serving every point, each point an ordinary run dir of vLLM's answers, the answer
with its bracket in ``capacity.json`` and on the console.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); one vLLM start (~45-60 s on 2 cores), then half a
minute or so of load points (4 s each, coarse tolerance). vLLM serves one request at a time (``--max-num-seqs 1``),
so the answer is a few requests per second and the search reaches it in a few doublings from 2 req/s. The SLO
(90% within TTFT ≤ 5 s) is loose so that a 2-core machine busy with other work still holds the start (at TTFT
≤ 1 s from 1 req/s, one such machine, load average 25, did not: the search said so, exit 1)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.store.capacity_dir import open_capacity
from tests.vllm_env import NAME, VLLM_MARKS, smollm2_server

pytestmark = VLLM_MARKS


def test_a_small_rate_search_on_cpu_vllm(tmp_path: Path) -> None:
    config = tmp_path / "serve.json"
    server = smollm2_server(extra_args=["--max-num-seqs", "1"])
    config.write_text(json.dumps({"server": server.model_dump(mode="json", exclude_none=True)}))
    out = tmp_path / "cap"
    res = CliRunner().invoke(
        app,
        ["capacity", "random", "--config", str(config), "--random-input-len", "32", "--random-output-len", "8",
         "--goodput", "ttft:5000", "--slo-share", "0.9", "--start-rate", "2", "--tolerance", "0.25",
         "--point-duration", "4s", "--warmup", "2", "--max-duration", "8m", "-o", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, (res.stdout, res.stderr)
    cap = open_capacity(out).record
    assert cap.status == "ok" and cap.capacity_rps is not None and cap.bracket is not None
    low, high = cap.bracket
    assert low == cap.capacity_rps and high is not None and high - low <= 0.25 * low + 1e-9
    assert res.stdout.startswith(f"holds {cap.capacity_rps:,.3g} req/s (bracket ")
    assert cap.server.model == NAME and cap.server.serve is not None and cap.server.serve["vllm_version"]
    # vLLM started once, with the first point, and served them all
    logs = sorted(p.parent.name for p in (out / "points").glob("*/server.log"))
    assert logs == [cap.points[0].run_dir.split("/")[1]], logs
    read = open_capacity(out)
    for p in cap.points:
        run = read.point_run(p)
        assert run.typed_manifest().request_rate == p.offered and len(run.samples) == p.requests > 0
        answered = [r for r in run.records() if r.status != "api_error"]
        assert answered and all(r.output_tokens == 8 for r in answered)  # the forced lengths, as vLLM counted them
    held = [c for c in cap.curve if c.holds]
    assert held and max(c.offered for c in held) == cap.capacity_rps
    assert (out / "capacity.html").is_file()
