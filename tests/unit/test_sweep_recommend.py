"""The sweep's goodput and cost columns and its recommendation, over test servers of known speed and accuracy:
it names the combination the arithmetic says, the rule each other one lost on, and "none qualifies" (with why)
when the SLOs are out of reach.

Here: those of its tests that run in-process; the others are in tests/integration/test_sweep_recommend.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalkit.errors import ConfigError
from evalkit.sweep import load_spec


def test_the_sweep_file_asks_for_what_the_recommendation_needs(tmp_path: Path) -> None:
    base = "tasks: [gsm8k]\nendpoint: http://127.0.0.1:9\n"
    for extra, says in (
        ("cost_per_gpu_hour: 2\n", "needs gpus_billed"),
        ("goodput: {ttft: 5}\ncost_per_gpu_hour: 2\ngpus_billed: 1\nrecommend: {reference: x}\n", "not a config"),
        ("recommend: {reference: default}\n", "needs goodput"),
        ("goodput: {ttfx: 5}\n", "unknown SLO"),
    ):
        path = tmp_path / "s.yaml"
        path.write_text(base + extra)
        with pytest.raises(ConfigError, match=says):
            load_spec(path)
