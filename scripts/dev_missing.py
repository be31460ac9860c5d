"""Print the distributions scripts/test.sh needs that this interpreter lacks: evalkit, its dependencies and the
``dev`` extra of pyproject.toml (names only; versions are pip's business; a dependency whose environment marker
does not hold here, or cannot be checked without ``packaging``, is not needed). Nothing printed: all there.

Usage: python scripts/dev_missing.py [PYPROJECT]
"""

from __future__ import annotations

import importlib.metadata as md
import re
import sys
from pathlib import Path
from types import ModuleType

tomllib: ModuleType | None
if sys.version_info >= (3, 11):
    import tomllib
else:
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None


def dev_requirements(pyproject: Path) -> list[str]:
    """The project's dependencies and its ``dev`` extra (``pytest`` alone on Python 3.10 without tomli: no TOML
    parser to read them with)."""
    if tomllib is None:
        return ["pytest"]
    with pyproject.open("rb") as f:
        project = tomllib.load(f)["project"]
    return [r for r in [*project.get("dependencies", []), *project["optional-dependencies"]["dev"]] if _applies(r)]


def _applies(requirement: str) -> bool:
    """Whether a requirement's environment marker (``; python_version < '3.11'``) holds for this interpreter."""
    if ";" not in requirement:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:
        return False
    return Marker(requirement.split(";", 1)[1]).evaluate()


def missing(requirements: list[str]) -> list[str]:
    out = []
    for req in requirements:
        m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        name = m.group(0) if m else req
        try:
            md.version(name)
        except md.PackageNotFoundError:
            out.append(name)
    return out


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    pyproject = Path(sys.argv[1]) if len(sys.argv) > 1 else root / "pyproject.toml"
    print(" ".join(missing(["evalkit", *dev_requirements(pyproject)])))
