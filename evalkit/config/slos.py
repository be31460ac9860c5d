"""The run's latency SLOs (``--goodput KEY:VALUE``, as ``vllm bench serve --goodput`` takes them) read into
{key: milliseconds}."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

SLO_KEYS = ("ttft", "tpot", "e2el")
"""The latencies an SLO can be given for (milliseconds), as vLLM names them."""


def parse_slos(items: Sequence[str] | Mapping[str, object]) -> dict[str, float]:
    """``["ttft:500", "tpot:20"]`` (or a mapping) as {key: milliseconds}; ValueError naming the bad item and
    the fix."""
    pairs: list[tuple[str, object]] = []
    if isinstance(items, Mapping):
        pairs = list(items.items())
    else:
        for item in items:
            for part in str(item).replace(",", " ").split():
                name, sep, text = part.partition(":")
                if not sep:
                    raise ValueError(f"{part!r} is not KEY:VALUE; give e.g. ttft:500 (milliseconds)")
                pairs.append((name, text))
    out: dict[str, float] = {}
    for key, value in pairs:
        k = str(key).strip().lower()
        if k not in SLO_KEYS:
            raise ValueError(f"unknown SLO {key!r}; the keys are {', '.join(SLO_KEYS)} (milliseconds)")
        try:
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise TypeError
            ms = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"SLO {k}: {value!r} is not a number of milliseconds; give e.g. {k}:500") from None
        if not math.isfinite(ms) or ms < 0:
            raise ValueError(f"SLO {k}: {value!r} must be a finite number of milliseconds >= 0")
        out[k] = ms
    return out


def slos_text(slos: Mapping[str, float]) -> str:
    """The SLOs as the report, the sweep and the gate show them: ``ttft ≤ 500 ms, tpot ≤ 20 ms``."""
    return ", ".join(f"{k} ≤ {v:g} ms" for k, v in slos.items())
