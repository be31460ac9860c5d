"""Texts of server-rendered sample rows (the comparison's flips), cut to a size budget with one limit.
(The run report's sample list is data: :mod:`evalkit.reporting.sample_data`.)

Model text is passed as plain ``str`` (autoescaped by Jinja), never as ``Markup``.
"""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import escape

from evalkit.reporting.analysis import Cut, cut_text, fit_limit
from evalkit.reporting.formatting import TEXT_LIMIT

CUT_NOTE_BYTES = 160  # the note that says a text was cut


@dataclass
class TextRef:
    """A long text as shown: possibly cut, with an optional note (e.g. what was left out before it)."""

    cut: Cut | None = None
    note: str | None = None
    raw: str | None = None  # before cutting (dropped once cut)
    tail_share: float = 0.34

    @property
    def empty(self) -> bool:
        return self.cut is None and self.note is None


class TextPool:
    """Collects the texts of a report's rows, then cuts all of them to fit a budget."""

    def __init__(self) -> None:
        self.refs: list[TextRef] = []

    def ref(self, text: str | None, *, tail_share: float = 0.34) -> TextRef:
        if text is None:
            return TextRef()
        r = TextRef(raw=text, tail_share=tail_share)
        self.refs.append(r)
        return r

    def finish(self, budget: int, max_limit: int = TEXT_LIMIT) -> int:
        """Cut every collected text with one limit chosen so that all of them, HTML-escaped and UTF-8
        encoded, fit ``budget`` bytes (as far as a limit of a few hundred characters allows); returns it."""
        lengths = [len(r.raw or "") for r in self.refs]
        weights = [_html_bytes(r.raw) / len(r.raw) if r.raw else 1.0 for r in self.refs]
        limit = fit_limit(lengths, budget, max_limit, weights=weights, cut_overhead=CUT_NOTE_BYTES)
        for r in self.refs:
            r.cut = cut_text(r.raw, limit, r.tail_share)
            r.raw = None
        return limit


def _html_bytes(text: str) -> int:
    return len(str(escape(text)).encode("utf-8", "replace"))
