"""The benchmark figures a newcomer reads: one short page in docs/ (each benchmark of benchmarks/, its command, its
latest figure with date and machine, and the archive entry it comes from) and the dated results archive under
docs/benchmarks/archive/, which writes up every raw result in benchmarks/results/; at the root at most a pointer.
Their links are checked with the README's and docs/' (tests/unit/test_readme_docs.py)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "benchmarks.md"
ARCHIVE = REPO / "docs" / "benchmarks" / "archive"
MAX_PAGE_BYTES = 8_000  # the current figures only: method and history are the archive's
MAX_POINTER_BYTES = 20_000


def test_the_root_holds_at_most_a_pointer_to_the_page() -> None:
    pointer = REPO / "BENCHMARKS.md"
    if pointer.exists():
        assert len(pointer.read_bytes()) < MAX_POINTER_BYTES, "BENCHMARKS.md at the root is a pointer, not the notebook"
        assert "(docs/benchmarks.md)" in pointer.read_text()


def test_the_page_is_short_and_names_every_benchmark_module() -> None:
    text = PAGE.read_text()
    assert len(text.encode()) <= MAX_PAGE_BYTES, f"{PAGE.name}: current figures only; move history to the archive"
    modules = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__")
    unnamed = [m for m in modules if f"benchmarks.{m}" not in text and f"benchmarks/{m}.py" not in text]
    assert not unnamed, f"docs/benchmarks.md does not say what these benchmarks are: {unnamed}"


def test_each_figure_has_its_command_date_and_archive_entry() -> None:
    section = PAGE.read_text().split("\n## The figures\n", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in section.splitlines() if r.startswith("| ") and not r.startswith(("| ---", "| benchmark"))]
    assert len(rows) >= 8
    for row in rows:
        assert re.search(r"\d{4}-\d{2}-\d{2}", row), f"no date: {row[:80]}"
        assert "](benchmarks/archive/" in row, f"no archive entry: {row[:80]}"
        first = row.split(" | ")[0]
        assert "`python -m benchmarks." in first or " same" in first, f"no command: {row[:80]}"


def _with_braces_expanded(text: str) -> str:
    """``a-{1,2}.json`` also as ``a-1.json a-2.json`` (the archive names a series of files that way)."""
    series = re.findall(r"([\w.\-]*)\{([^}]*)\}([\w.\-]*)", text)
    return text + " ".join(pre + alt + post for pre, alts, post in series for alt in alts.split(","))


def test_every_raw_result_is_written_up_in_the_archive() -> None:
    text = _with_braces_expanded("".join(p.read_text() for p in sorted(ARCHIVE.glob("*.md"))))
    results = sorted((REPO / "benchmarks" / "results").iterdir())
    unwritten = [p.name for p in results if p.name not in text and p.name.split(".")[0] + "." not in text]
    assert results and not unwritten, f"raw results no archive entry names: {unwritten}"


def test_the_brace_expansion_sees_a_series_and_a_missing_name() -> None:
    text = _with_braces_expanded("raw: `gsm8k-lease{1,2}.json`")
    assert "gsm8k-lease1.json" in text and "gsm8k-lease2.json" in text and "gsm8k-lease3.json" not in text
