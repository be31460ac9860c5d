"""ARCHITECTURE.md shows one order: its drawing's rows, top to bottom, are the import-linter ``layers`` contract
(pyproject.toml) in its order, and every package of evalkit/ is drawn; its recipes name files that exist."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "ARCHITECTURE.md").read_text()
PKG = REPO / "evalkit"
ROW = re.compile(r"^([\w.]+/?(?: \| [\w.]+/?)*)\s{2,}")  # a row starts at column 1: `tasks/ | requests/   ...`


def drawing() -> str:
    block = re.search(r"^```\n(.*?)^```", DOC, re.M | re.S)
    assert block, "ARCHITECTURE.md has its drawing in a fenced block"
    return block.group(1)


def drawn_layers(text: str) -> list[str]:
    """The drawing's rows as import-linter layers: ``tasks/ | requests/`` → ``evalkit.tasks | evalkit.client``."""
    rows = [m.group(1) for line in text.splitlines() if (m := ROW.match(line))]
    names = [[name.removesuffix("/").removesuffix(".py") for name in row.split(" | ")] for row in rows]
    return [" | ".join(f"evalkit.{name}" for name in row) for row in names]


def contract_layers() -> list[str]:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return layers


def test_the_drawing_rows_are_the_import_layers_in_order() -> None:
    assert drawn_layers(drawing()) == contract_layers()


def test_the_row_reader_sees_a_row_out_of_order() -> None:
    text = "cli/      the command\n   a note\nconfig/ | store/   settings\nserver/   vLLM\n"
    assert drawn_layers(text) == ["evalkit.cli", "evalkit.config | evalkit.store", "evalkit.server"]


def test_every_package_and_module_of_evalkit_is_placed() -> None:
    packages = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    modules = sorted(p.name for p in PKG.glob("*.py") if p.stem not in ("__init__", "__main__"))
    assert not [p for p in packages if f"{p}/" not in drawing()], "a package of evalkit/ missing from the drawing"
    assert not [m for m in modules if m not in DOC], "a module of evalkit/ missing from ARCHITECTURE.md"


def test_the_recipes_name_files_that_exist() -> None:
    recipes = DOC.split("\n## Recipes\n", 1)[1].split("\n## ", 1)[0]
    for heading in ("**Add a task**", "**Add a speed figure**", "**Add a gate rule**"):
        assert heading in recipes
    paths = {t for t in re.findall(r"`([^`\s]+)`", recipes) if "/" in t and "<" not in t and ":" not in t}
    paths |= set(re.findall(r"\b(docs/[\w/.-]+\.md)\b", recipes))
    assert len(paths) >= 15
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"ARCHITECTURE.md's recipes name files that do not exist: {missing}"
