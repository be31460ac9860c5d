"""Whether two runs' servers differ in what they said of themselves (the manifest's ``server``: version, KV cache
capacity, cache settings): a note beside the speed rules, never a verdict (a KV cache a tenth smaller queues
requests sooner, and explains a slower run the speed rules fail)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KV_TOLERANCE = 0.10  # KV capacities further apart than this share of the larger one differ
SETTINGS = ("block_size", "gpu_memory_utilization", "prefix_caching", "cache_dtype", "max_model_len", "max_num_seqs")


def server_differences(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> list[str]:
    """What differs between servers ``a`` and ``b`` (manifest ``server`` blocks), one phrase each; [] where they
    agree or either side did not say (an older run, a server without ``/version`` or ``/metrics``).

    >>> server_differences({"kv_cache_tokens": 845776}, {"kv_cache_tokens": 31920, "prefix_caching": False})
    ['KV cache 845,776 vs 31,920 tokens (96% smaller)']
    """
    a, b = a or {}, b or {}
    out = []
    va, vb = a.get("version") or a.get("vllm_version"), b.get("version") or b.get("vllm_version")
    if va and vb and va != vb:
        out.append(f"version {va} vs {vb}")
    ka, kb = a.get("kv_cache_tokens"), b.get("kv_cache_tokens")
    if isinstance(ka, int) and isinstance(kb, int) and max(ka, kb) > 0:
        gap = abs(ka - kb) / max(ka, kb)
        if gap > KV_TOLERANCE:
            out.append(f"KV cache {ka:,} vs {kb:,} tokens ({gap:.0%} {'smaller' if kb < ka else 'larger'})")
    for key in SETTINGS:
        x, y = a.get(key), b.get(key)
        if x is not None and y is not None and x != y:
            out.append(f"{key} {x} vs {y}")
    return out


def server_note(
    baseline: Mapping[str, Any] | None, candidate: Mapping[str, Any] | None, sides: str = "baseline vs candidate"
) -> str | None:
    """One line for the gate and the comparison page when the servers differ, else None."""
    diff = server_differences(baseline, candidate)
    if not diff:
        return None
    return f"the servers differ ({sides}): " + "; ".join(diff) + "; speed is not like for like"
