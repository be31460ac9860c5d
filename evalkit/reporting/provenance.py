"""Provenance of a run: endpoint, server command line, GPUs, versions and per-task settings."""

from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from evalkit.redact import redact_argv
from evalkit.reporting.formatting import KV, NOT_SET, clamp_text, compact_json
from evalkit.store.reader import ManifestRead, Run, as_dict, as_list, as_num, as_str


def endpoint_host(base_url: Any) -> str | None:
    """scheme://host[:port]/path of the endpoint, without credentials, query or fragment."""
    s = as_str(base_url)
    if not s:
        return None
    try:
        u = urlsplit(s)
        host = u.hostname or ""
        port = f":{u.port}" if u.port else ""
    except ValueError:
        return None
    if not host:
        return None
    if ":" in host:
        host = f"[{host}]"
    scheme = f"{u.scheme}://" if u.scheme else ""
    return f"{scheme}{host}{port}{u.path}"


def argv_str(argv: Any) -> str | None:
    items = as_list(argv)
    if not items:
        return None
    return shlex.join(redact_argv([str(a) for a in items]))  # also for run dirs recorded before redaction


def gpu_summary(gpus: Any) -> str | None:
    names = [as_str(as_dict(g).get("name")) or "GPU" for g in as_list(gpus)]
    if not names:
        return None
    counts = Counter(names)
    return ", ".join(f"{n}× {name}" for name, n in counts.items())


def parse_argv(argv: Any) -> tuple[list[str], dict[str, str]]:
    """(positional arguments, {flag: value}) of a server command line; a bare flag gets "true"."""
    toks = [str(a) for a in as_list(argv)]
    pos: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("-") and len(t) > 1 and not _is_number(t):
            name, eq, val = t.partition("=")
            if not eq:
                if i + 1 < len(toks) and (not toks[i + 1].startswith("-") or _is_number(toks[i + 1])):
                    val = toks[i + 1]
                    i += 1
                else:
                    val = "true"
            flags[name] = val
        else:
            pos.append(t)
        i += 1
    return pos, flags


def _is_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return False
    return True


@dataclass
class TaskProvenance:
    name: str
    version: str | None
    data_sha256: list[KV]
    settings: list[KV]
    clamp: str | None


def endpoints_str(manifest: ManifestRead) -> str | None:
    """The endpoint, or the endpoints of a sharded run (space-separated), without credentials."""
    shards = [endpoint_host(u) for u in manifest.endpoints or []]
    if shards:
        return " ".join(h or "?" for h in shards)
    return endpoint_host(manifest.endpoint.base_url if manifest.endpoint else None)


def kv_cache_str(server: dict[str, Any]) -> str | None:
    """The server's KV cache as it said (``46,592 tokens (364 blocks x 128); gpu_memory_utilization 0.9; prefix
    caching on; cache dtype auto``), None where it said nothing."""
    tokens, blocks, size = (as_num(server.get(k)) for k in ("kv_cache_tokens", "kv_cache_blocks", "block_size"))
    parts = []
    if tokens is not None:
        parts.append(f"{tokens:,.0f} tokens" + (f" ({blocks:,.0f} blocks x {size:,.0f})" if blocks and size else ""))
    own = as_num(server.get("kv_cache_size_tokens"))
    if own is not None and own != tokens:
        parts.append(f"vLLM's kv_cache_size_tokens {own:,.0f}")
    if (util := as_num(server.get("gpu_memory_utilization"))) is not None:
        parts.append(f"gpu_memory_utilization {util:g}")
    if isinstance(server.get("prefix_caching"), bool):
        parts.append("prefix caching " + ("on" if server["prefix_caching"] else "off"))
    if server.get("cache_dtype"):
        parts.append(f"cache dtype {server['cache_dtype']}")
    return "; ".join(parts) or None


def provenance(run: Run) -> tuple[list[KV], list[TaskProvenance]]:
    m = run.manifest_read()
    versions = m.versions
    server = m.server or {}
    rows: list[KV] = [
        KV("Model", m.model),
        KV("Endpoint", endpoints_str(m), mono=True),
        KV("API", m.endpoint.kind if m.endpoint else None),
        KV("Concurrency", as_str(m.concurrency)),
        KV("Started", m.created_at),
        KV("Finished", m.finished_at),
        KV("evalkit", m.evalkit_version),
        KV("Server version", as_str(server.get("version") or server.get("vllm_version"))),
        KV("Server KV cache", kv_cache_str(server)),
        KV("Server max_model_len", as_str(server.get("max_model_len"))),
        KV("Server max_num_seqs", as_str(server.get("max_num_seqs"))),
    ]
    if server.get("dtype_choice") or server.get("dtype"):
        rows.append(KV("Server dtype", as_str(server.get("dtype_choice") or server.get("dtype"))))
    for k, v in versions.items():
        rows.append(KV(f"{k} (client)", as_str(v)))
    if server.get("argv"):
        rows.append(KV("Server command", argv_str(server.get("argv")), mono=True))
        env = as_dict(server.get("env_overrides"))
        if env:
            rows.append(KV("Server env", " ".join(f"{k}={v}" for k, v in env.items()), mono=True))
        rows.append(KV("Launcher", as_str(server.get("launcher"))))
        startup = as_num(server.get("startup_s"))
        rows.append(KV("Server startup", f"{startup:.1f} s" if startup is not None else None))
        for i, g in enumerate(as_list(server.get("gpus"))):
            gd = as_dict(g)
            extra = ", ".join(f"{k} {v}" for k, v in gd.items() if k not in ("name", "memory_total_mib"))
            mem = as_num(gd.get("memory_total_mib"))
            desc = as_str(gd.get("name")) or "GPU"
            if mem is not None:
                desc += f" ({mem:,.0f} MiB)"
            if extra:
                desc += f"; {extra}"
            rows.append(KV(f"GPU {i}", desc))
    elif "server" in m.keys:
        rows.append(KV("Server", "not launched by evalkit (no server flags recorded)"))
    cmd = argv_str(m.command)
    if cmd:
        rows.append(KV("Command", cmd, mono=True))
    rows.append(KV("Run directory", run.path.resolve().name, mono=True))
    tasks: list[TaskProvenance] = []
    for name, t in m.tasks.items():
        sha = [KV(split, h, mono=True) for split, h in t.data_sha256.items()]
        settings = [KV(str(k), compact_json(v) if v is not None else NOT_SET, mono=True) for k, v in t.settings.items()]
        clamp = t.max_tokens_clamp
        tasks.append(
            TaskProvenance(
                name=name,
                version=t.version,
                data_sha256=sha,
                settings=settings,
                clamp=clamp_text(clamp) if clamp else None,
            )
        )
    return rows, tasks
