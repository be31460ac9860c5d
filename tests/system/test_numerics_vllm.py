"""The numerics tasks on the real vLLM (CPU build, SmolLM2-135M): ``evalkit run numerics --limit 8`` stores in
``positions.bin`` exactly what a direct request with the same body gets back, the noise-floor pass matches the
main pass on one server, and ``numerics-chat`` scores the reply as written (``continue_final_message``).

The numerics run sends one request at a time, as the direct request is sent: on a CPU whose bf16 kernels depend on
the batch (Intel AMX), a text's logprobs in a batch differ from its logprobs alone by up to 0.05 (the noise floor
of a batched run read 0.026-0.042 mean |d-logprob| on 5 of 8 texts), so only a text computed alone can be
compared with a direct request, on every CPU.

Also the numerics gate (issue 28's "Done when"): two runs of ``numerics`` on one bfloat16 server pass the gate, a
run on a float32 server fails it on a numerics rule.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); runs on the module's shared vLLM (tests/conftest.py's
``smollm2_shared``), and the gate test starts a server of the other dtype."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.gating import from_run_dir
from evalkit.scoring.numerics import FIGURES, compare_runs, texts_to_separate
from evalkit.server.vllm_process import VLLMServer
from evalkit.store.positions_file import read_positions
from tests.vllm_env import NAME, SHARED_MARKS, served_dtype, smollm2_server

pytestmark = SHARED_MARKS


@pytest.fixture
def live_server(smollm2_shared: VLLMServer) -> VLLMServer:
    """The session's shared vLLM."""
    return smollm2_shared


def run(task: str, url: str, out: Path, limit: int, *extra: str) -> None:
    args = ["run", task, "--endpoint", url, "--limit", str(limit), "-o", str(out), "-q", "--no-report", *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr


def test_numerics_positions_match_a_direct_request(tmp_path: Path, live_server: VLLMServer) -> None:
    url = live_server.base_url + "/v1"
    out = tmp_path / "run"
    t0 = time.monotonic()
    run("numerics", url, out, 8, "--concurrency", "1")  # each text computed alone, as the direct request is
    print(f"\n[numerics] 8 texts + 8 noise-floor texts in {time.monotonic() - t0:.1f} s")
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    positions = read_positions(out, "numerics")
    assert len(recs) == len(positions) == 16 and all(r["status"] == "ok" for r in recs)
    first = next(r for r in recs if r["doc_id"] == 0 and r["sample_index"] == 0)
    p = positions[first["key"]]
    body: dict[str, Any] = {
        "model": NAME, "prompt": first["prompt"], "max_tokens": 64, "temperature": 0.0, "prompt_logprobs": 20,
        "stream": False, "return_token_ids": True, "echo": False,
    }  # fmt: skip
    choice = httpx.post(url + "/completions", json=body, timeout=300).json()["choices"][0]
    ids, raw = choice["prompt_token_ids"], choice["prompt_logprobs"]
    assert p.token_ids.tolist() == ids and p.k == 20 and p.n == first["figures"]["positions"] + 1
    assert p.continuation_ids.tolist() == choice["token_ids"]
    want = np.array([raw[i][str(ids[i])]["logprob"] for i in range(1, len(ids))], dtype=np.float32)
    assert np.allclose(p.token_logprobs[1:], want, atol=1e-4)
    top = [sorted((e["rank"], int(t)) for t, e in raw[i].items() if e["rank"] <= 20) for i in range(1, len(ids))]
    agree = np.mean([p.top_ids[i + 1, 0] == row[0][1] for i, row in enumerate(top)])
    assert agree > 0.99  # the same top-1 token at (nearly) every position
    assert "".join(p.tokens) == first["prompt"]  # the decoded tokens give the text back
    # the noise floor: the same server, the same texts again in reverse order, each alone: the same numbers
    by = {(q.doc_id, q.sample_index): q for q in positions.values()}
    diffs = [np.nanmean(np.abs(by[d, 0].token_logprobs - by[d, 1].token_logprobs)) for d in range(8)]
    print(f"[numerics] noise floor: mean abs d-logprob per text {[round(float(x), 5) for x in diffs]}")
    assert max(diffs) < 1e-4
    summary = json.loads((out / "summary.json").read_text())["tasks"]["numerics"]
    assert summary["metrics"]["mean_token_logprob"]["n"] == 8 and summary["speed"]["ttft_ms"]["mean"] is None


def test_numerics_chat_on_real_vllm(tmp_path: Path, live_server: VLLMServer) -> None:
    out = tmp_path / "chat"
    run("numerics-chat", live_server.base_url + "/v1", out, 2)
    recs = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    positions = read_positions(out, "numerics-chat")
    assert len(positions) == 4 and all(r["status"] == "ok" for r in recs)
    p = positions[recs[0]["key"]]
    assert p.n == recs[0]["prompt_tokens"] and p.tokens[-1].strip() in recs[0]["messages"][-1]["content"]


TEXTS = 8


def _server(dtype: str, log_dir: Path, shared: VLLMServer) -> contextlib.AbstractContextManager[VLLMServer]:
    """A SmolLM2 server computing in ``dtype``: the shared one where it does, else one started in ``log_dir``."""
    if served_dtype(shared) == dtype:
        return contextlib.nullcontext(shared)
    return VLLMServer(smollm2_server(dtype=dtype), log_dir)


def _run(url: str, out: Path) -> None:
    args = ["run", "numerics", "--endpoint", url, "--limit", str(TEXTS), "--concurrency", "1"]
    args += ["-o", str(out), "-q", "--no-report"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output


def _gate(base: Path, cand: Path) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = CliRunner().invoke(app, ["gate", str(base), str(cand), "-o", str(cand / "gate")])
    print(res.output)
    return res.exit_code, json.loads((cand / "gate" / "gate.json").read_text())


def test_bf16_twice_passes_and_float32_fails_on_a_numerics_rule(tmp_path: Path, smollm2_shared: VLLMServer) -> None:
    """The numerics gate on the real vLLM (CPU build, SmolLM2-135M; issue 28's "Done when"): two runs of ``numerics``
    on one bfloat16 server pass the gate; a run on a float32 server fails it on a numerics rule. The servers run one
    at a time (2 cores): the session's shared vLLM (tests/conftest.py's ``smollm2_shared``) is the server of the dtype
    it computes in (bfloat16 on a CPU with AMX or AVX-512-BF16, float32 elsewhere), the other one is started here.

    The runs send one request at a time: on a CPU whose bf16 kernels depend on the batch (Intel AMX), two batched runs
    of one server differ beyond the budgets (its noise floor read top-1 98.4%, mean KL 7.8e-4), and the gate then
    rightly cannot decide; requests computed alone are reproducible on every CPU."""
    t0 = time.monotonic()
    with _server("bfloat16", tmp_path / "bf16-server", smollm2_shared) as srv:
        assert served_dtype(srv) == "bfloat16"
        _run(srv.base_url + "/v1", tmp_path / "bf16")
        _run(srv.base_url + "/v1", tmp_path / "bf16-again")
    with _server("float32", tmp_path / "f32-server", smollm2_shared) as srv:
        assert served_dtype(srv) == "float32"
        _run(srv.base_url + "/v1", tmp_path / "f32")
    print(
        f"\n[numerics gate] 3 runs of {TEXTS} texts (+ noise floor), shared server "
        f"{served_dtype(smollm2_shared)}: {time.monotonic() - t0:.0f} s"
    )
    code, same = _gate(tmp_path / "bf16", tmp_path / "bf16-again")
    numerics = {r["name"]: r for r in same["rules"] if r["kind"] == "numerics"}
    assert code == 0 and same["verdict"] == "pass" and len(numerics) == 4
    assert all(r["verdict"] == "pass" for r in numerics.values())
    code, f32 = _gate(tmp_path / "bf16", tmp_path / "f32")
    failed = {r["name"]: r for r in f32["rules"] if r["kind"] == "numerics" and r["verdict"] == "fail"}
    for r in f32["rules"]:
        if r["kind"] == "numerics":
            print(f"[numerics gate] bf16 vs float32: {r['name']} = {r['observed']:.4g} CI {r['ci']} ({r['verdict']})")
    pair = compare_runs(*(from_run_dir(tmp_path / r).tasks["numerics"].numerics.main for r in ("bf16", "f32")))
    for f in FIGURES:  # docs/benchmarks/archive/numerics.md: how many texts tell float32 from bf16 against a floor of 0
        v = pair.per_text(f)
        need = texts_to_separate(v, 1.0 if f == "top1" else 0.0)
        print(f"[numerics gate] {f}: per text {v.min():.4g}..{v.max():.4g}, texts to separate at 95% power: {need}")
    assert code == 1 and "numerics: mean abs d-logprob" in failed and "numerics: top-1 agreement" in failed
