"""What a server says of itself, recorded in the manifest's ``server`` for every run (``--endpoint`` as ``--serve``).

:func:`describe_server` reads three things, each bounded and redirect-free (:mod:`evalkit.server.http_reads`,
the one ``/metrics`` scraper :func:`evalkit.server.metrics.scrape`):

- ``GET /version``: the server's version (vLLM: ``{"version": "0.32.0"}``);
- ``GET /metrics``' info series ``vllm:cache_config_info`` (vLLM's ``CacheConfig`` as labels, one series per
  engine): the KV cache's capacity (``kv_cache_tokens`` = ``num_gpu_blocks`` x ``block_size``, e.g. 364 x 128 =
  46,592 on the CPU build; vLLM's own ``kv_cache_size_tokens`` beside it where it states one), the cache settings
  (``gpu_memory_utilization``, ``prefix_caching``, ``cache_dtype``) and the number of engines;
- ``GET /v1/models``: the served model's ``max_model_len`` (vLLM lists it there).

A value the server does not state is None, never guessed. vLLM states no ``max_num_seqs``: the run records the
one it started the server with (``--serve``), else None.

    >>> cache_config(parse_text('vllm:cache_config_info{block_size="128",num_gpu_blocks="364",engine="0"} 1'))
    ... # doctest: +NORMALIZE_WHITESPACE
    {'kv_cache_tokens': 46592, 'kv_cache_blocks': 364, 'block_size': 128, 'kv_cache_size_tokens': None,
     'gpu_memory_utilization': None, 'prefix_caching': None, 'cache_dtype': None, 'engines': 1}
"""

from __future__ import annotations

import json
from typing import Any

from evalkit.config.endpoint import credentials, display_url, server_root
from evalkit.server.http_reads import http_get
from evalkit.server.metrics import Snapshot, parse_text, scrape

CACHE_INFO = "vllm:cache_config_info"
# the keys every manifest's ``server`` holds, in this order (docs/run-dir.md)
SERVER_KEYS = (
    "endpoint", "version", "kv_cache_tokens", "kv_cache_blocks", "block_size", "kv_cache_size_tokens",
    "gpu_memory_utilization", "prefix_caching", "cache_dtype", "engines", "max_model_len", "max_num_seqs",
)  # fmt: skip

__all__ = ["CACHE_INFO", "SERVER_KEYS", "cache_config", "describe_server", "parse_text"]


def _int(labels: dict[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError):
        return None


def _float(labels: dict[str, str], key: str) -> float | None:
    try:
        return float(labels[key])
    except (KeyError, ValueError):
        return None


def cache_config(snap: Snapshot | None) -> dict[str, Any]:
    """The KV cache's capacity and settings from ``vllm:cache_config_info`` (its first engine's series, where
    several engines each have one: data parallel); every value None when the series is absent."""
    rows = snap.get(CACHE_INFO) if snap is not None else []
    labels = min(rows, key=lambda r: r[0].get("engine", ""))[0] if rows else {}
    blocks, size = _int(labels, "num_gpu_blocks"), _int(labels, "block_size")
    prefix = labels.get("enable_prefix_caching")
    return {
        "kv_cache_tokens": blocks * size if blocks is not None and size is not None else None,
        "kv_cache_blocks": blocks,
        "block_size": size,
        "kv_cache_size_tokens": _int(labels, "kv_cache_size_tokens"),
        "gpu_memory_utilization": _float(labels, "gpu_memory_utilization"),
        "prefix_caching": None if prefix is None else prefix == "True",
        "cache_dtype": labels.get("cache_dtype"),
        "engines": len({r[0].get("engine") for r in rows}) if rows else None,
    }


def _json(url: str, headers: dict[str, str], timeout: float) -> Any:
    status, body = http_get(url, headers, timeout)
    if status != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def describe_server(base_url: str, api_key: str | None, model: str | None, timeout: float = 5.0) -> dict[str, Any]:
    """What the server at ``base_url`` (its ``/v1`` URL) says of itself (see the module docstring), under
    :data:`SERVER_KEYS`; ``model``: the served model whose ``max_model_len`` to take from ``/v1/models``."""
    bare, headers = credentials(base_url, api_key)
    root = server_root(bare)
    version = _json(root + "/version", headers, timeout)
    models = _json(bare.rstrip("/") + "/models", headers, timeout)
    entries = models.get("data") if isinstance(models, dict) else None
    entry = next((m for m in entries or [] if isinstance(m, dict) and m.get("id") == model), None)
    max_len = entry.get("max_model_len") if entry is not None else None
    return {
        "endpoint": display_url(base_url),
        "version": str(version["version"]) if isinstance(version, dict) and "version" in version else None,
        **cache_config(scrape(root, timeout, headers=headers)),
        "max_model_len": max_len if isinstance(max_len, int) and not isinstance(max_len, bool) else None,
        "max_num_seqs": None,
    }
