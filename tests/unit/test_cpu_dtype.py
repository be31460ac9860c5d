"""The dtype the CPU build of vLLM runs fast: float32 on a CPU without AVX-512-BF16 or AMX (bf16 is emulated there:
an 841-token prefill took 20 s in bf16 against 3.5 s in float32 on an AVX2-only EPYC), the model's own (auto) where
bf16 runs in hardware; an explicit dtype wins; the server evalkit starts (``--serve``, ``make demo``, the real-vLLM
tests' config) gets it from that one function, says so and records it. The flags are injected: this machine may
have AMX."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.config.server_config import ServerConfig
from evalkit.server.launch import build_argv, cpu_dtype, cpu_flags, with_cpu_dtype

AVX2_EPYC = {"fpu", "sse4_2", "avx", "avx2", "fma", "f16c"}  # an AMD EPYC with AVX2 only
SAPPHIRE_RAPIDS = AVX2_EPYC | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        (AVX2_EPYC, "float32"),
        (AVX2_EPYC | {"avx512f", "avx512bw"}, "float32"),  # AVX-512 without its bf16 instructions
        (AVX2_EPYC | {"avx512f", "avx512_bf16"}, "auto"),  # Zen 4, Cooper Lake
        (SAPPHIRE_RAPIDS, "auto"),
        (set(), "float32"),
    ],
)
def test_flags_choose_the_dtype(flags: set[str], dtype: str) -> None:
    assert cpu_dtype(flags) == dtype


def test_the_flags_come_from_cpuinfo(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 amx_bf16\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert cpu_flags(str(info)) == {"fpu", "avx2", "amx_bf16"}
    assert cpu_flags(str(tmp_path / "missing")) == frozenset()


def test_the_cpu_build_launches_float32_on_avx2_and_an_explicit_dtype_wins() -> None:
    cfg = ServerConfig(model="m", enforce_eager=True)
    chosen, note = with_cpu_dtype(cfg, AVX2_EPYC, cpu_build=True)
    argv = build_argv(chosen, 8000, launcher="module")
    assert argv[argv.index("--dtype") + 1] == "float32"
    assert note is not None and "--dtype float32" in note and "avx512_bf16" in note
    assert with_cpu_dtype(cfg, SAPPHIRE_RAPIDS, cpu_build=True)[0].dtype == "auto"
    for given in (ServerConfig(model="m", dtype="bfloat16"), ServerConfig(model="m", extra_args=["--dtype=half"])):
        assert with_cpu_dtype(given, AVX2_EPYC, cpu_build=True) == (given, None)
    assert with_cpu_dtype(cfg, AVX2_EPYC, cpu_build=False) == (cfg, None)  # a GPU build chooses its own
