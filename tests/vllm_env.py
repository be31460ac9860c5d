"""Where the real-vLLM tests find vLLM and the model, and the marks that skip them when either is missing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL_DIR = Path(os.environ.get("EVALKIT_VLLM_MODEL") or REPO / ".cache/evalkit/models/smollm2-135m")
NAME = "smollm2-135m"

VLLM_MARKS = [
    pytest.mark.vllm,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed in this environment; run scripts/setup_vllm_cpu.sh",
    ),
    pytest.mark.skipif(
        not (MODEL_DIR / "config.json").is_file(),
        reason=f"no model at {MODEL_DIR}; run scripts/setup_vllm_cpu.sh or set EVALKIT_VLLM_MODEL",
    ),
]
