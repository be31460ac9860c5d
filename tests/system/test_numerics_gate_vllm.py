"""The numerics gate on the real vLLM (CPU build, SmolLM2-135M; issue 28's "Done when"): two runs of ``numerics``
on one bfloat16 server pass the gate; a run on a float32 server fails it on a numerics rule. The servers run one
at a time (2 cores): the session's shared vLLM (tests/conftest.py's ``smollm2_shared``) is the server of the dtype
it computes in (bfloat16 on a CPU with AMX or AVX-512-BF16, float32 elsewhere), the other one is started here.

The runs send one request at a time: on a CPU whose bf16 kernels depend on the batch (Intel AMX), two batched runs
of one server differ beyond the budgets (its noise floor read top-1 98.4%, mean KL 7.8e-4), and the gate then
rightly cannot decide; requests computed alone are reproducible on every CPU.

Needs ``scripts/setup_vllm_cpu.sh`` (see tests/vllm_env.py); one vLLM start of its own (~45-60 s on 2 cores)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

from typer.testing import CliRunner

from evalkit.cli import app
from evalkit.gating import from_run_dir
from evalkit.scoring.numerics import FIGURES, compare_runs, texts_to_separate
from evalkit.server.vllm_process import VLLMServer
from tests.vllm_env import SHARED_MARKS, served_dtype, smollm2_server

pytestmark = SHARED_MARKS
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
