"""Jinja2 environment, inlined assets, Content-Security-Policy and atomic writing of the HTML file.

Safety rules (see the tests in ``tests/unit/test_report.py``):
- autoescape is on for every template; model text reaches templates as ``str`` and is escaped;
- only our own files (vendored Chart.js, report.js, report.css) are inserted unescaped, as ``Markup``;
- data for scripts goes through ``|tojson`` into ``<script type="application/json">`` (never executed);
- the CSP allows exactly the inline script and style blocks we ship, by their sha256 hashes.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from evalkit.contracts import QUANTILES
from evalkit.reporting.formatting import DASH, fmt_int, fmt_ms, fmt_num, fmt_pct, letter

PACKAGE_DIR = Path(__file__).resolve().parent
TEMPLATES = PACKAGE_DIR / "templates"
STATIC = PACKAGE_DIR / "static"

_SOURCEMAP = re.compile(r"^\s*//# sourceMappingURL=\S*\s*$", re.MULTILINE)

# Tests flip this to make undefined template variables errors instead of empty strings.
STRICT_UNDEFINED = False


@dataclass(frozen=True)
class Assets:
    lib_js: Markup
    app_js: Markup
    css: Markup
    csp: str


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def _inline_safe(name: str, text: str) -> str:
    low = text.lower()
    if "</script" in low or "<!--" in low or "</style" in low:
        raise ValueError(f"{name} cannot be inlined: it contains </script, </style or <!--")
    return text


@lru_cache(maxsize=1)
def assets() -> Assets:
    lib = _SOURCEMAP.sub("", (STATIC / "chart.umd.js").read_text(encoding="utf-8")).rstrip() + "\n"
    app = (STATIC / "report.js").read_text(encoding="utf-8")
    css = (STATIC / "report.css").read_text(encoding="utf-8")
    for name, text in (("chart.umd.js", lib), ("report.js", app), ("report.css", css)):
        _inline_safe(name, text)
    # Markup: our own vendored / shipped files, checked above; never model text.
    return Assets(lib_js=Markup(lib), app_js=Markup(app), css=Markup(css), csp=_csp(lib, app, css))


def _csp(lib: str, app: str, css: str) -> str:
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src {_csp_hash(lib)} {_csp_hash(app)}",
            f"style-src {_csp_hash(css)}",
            "img-src data:",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


def with_css(a: Assets, extra_css: str) -> Assets:
    """``a`` with one of our own stylesheets appended to its style block (the CSP hashes the whole block)."""
    css = str(a.css) + _inline_safe("extra stylesheet", extra_css)
    return Assets(a.lib_js, a.app_js, Markup(css), _csp(str(a.lib_js), str(a.app_js), css))


@lru_cache(maxsize=2)
def environment(strict: bool = False) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined if strict else jinja2.Undefined,
    )
    env.filters.update(
        num=fmt_num,
        intc=fmt_int,
        ms=fmt_ms,
        pct=fmt_pct,
        dash=lambda v: DASH if v is None or v == "" else v,
    )
    env.globals["letter"] = letter
    env.globals["quantiles"] = [q for q, _ in QUANTILES]  # the percentile columns of every latency table
    return env


def render_template(name: str, extra_css: str = "", **context: Any) -> str:
    """Render ``name`` with the inlined assets; ``extra_css``: one of our own stylesheets a page section needs
    (appended to the style block)."""
    env = environment(STRICT_UNDEFINED)
    a = with_css(assets(), extra_css) if extra_css else assets()
    return env.get_template(name).render(assets=a, **context)
