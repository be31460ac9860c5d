"""The README is a first screen a newcomer can act on, and the reference lives in docs/: the README stays small,
its first commands are ones evalkit and the bundled test server accept (and, run for real, do what it says), every
relative link in the README and docs/ reaches an existing file and heading, and generated reports stay out of git."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [
    README,
    *sorted((REPO / "docs").rglob("*.md")),  # the benchmarks' archive (docs/benchmarks/archive/) included
    REPO / "reports" / "README.md",
    REPO / "docker" / "README.md",
    REPO / "ARCHITECTURE.md",
    REPO / "BENCHMARKS.md",  # the pointer to docs/benchmarks.md
]
QUICKSTART = "## Try it in a minute"
LINK = re.compile(r"!?\[(?:[^\]]|\][^(])*\]\(([^)\s]+)\)")


def without_code(text: str) -> str:
    """The markdown with fenced blocks and inline code blanked out (links there are not links)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return out


def section(text: str, heading: str) -> str:
    start = text.index("\n" + heading)
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_readme_is_at_most_20000_bytes():
    assert len(README.read_bytes()) <= 20_000


def test_the_first_screen_has_the_fresh_clone_commands_then_the_quickstart():
    text = README.read_text()
    first = section(text, "## ")  # the first section after the title
    assert first.startswith("\n## On a fresh clone")
    assert re.search(r"^make demo\b", first, re.M) and re.search(r"^make test\b", first, re.M)
    assert text.index(QUICKSTART) < text.index("\n## Install")
    assert text[: text.index(QUICKSTART)].count("\n") < 50, "the quickstart starts on the first screen or two"


def test_every_relative_link_reaches_a_file_and_its_heading():
    broken = []
    for page in PAGES:
        for target in LINK.findall(without_code(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_a_broken_link_and_a_broken_anchor(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n[a](missing.md) [b](#nowhere) [c](#top) `[d](in-code.md)`\n")
    found = [t for t in LINK.findall(without_code(page.read_text()))]
    assert found == ["missing.md", "#nowhere", "#top"] and "nowhere" not in anchors(page) and "top" in anchors(page)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {Path(t.partition("#")[0]).name for t in LINK.findall(without_code(README.read_text()))}
    assert {p.name for p in (REPO / "docs").glob("*.md")} <= linked


def test_the_picture_of_the_report_is_a_small_png():
    assert "](docs/img/report.png)" in section(README.read_text(), QUICKSTART)
    png = REPO / "docs" / "img" / "report.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 200_000


def test_gate_and_watch_pages_state_their_outcomes():
    for name in ("gate", "watch"):
        text = (REPO / "docs" / f"{name}.md").read_text()
        assert "\n## Outcomes and exit codes\n" in text, name


def test_the_readme_says_what_a_newcomer_needs_to_know():
    """Before the first command's output: what the install costs, how to stop the test server, and that every
    run is recorded in a history database (and how to turn it off)."""
    quick = section(README.read_text(), QUICKSTART)
    for said in ("about 1 GB", "from a warm pip cache", "kill %1", "history database", "EVALKIT_HISTORY_URL=off"):
        assert said in quick, said
