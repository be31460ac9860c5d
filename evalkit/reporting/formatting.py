"""Shared pieces of the report view models: formatting (also Jinja filters), key/value rows, banners and
accuracy metrics.

Templates only loop and print; every missing or malformed field of the store becomes None / "—" here.
Model text is passed as plain ``str`` (autoescaped by Jinja), never as ``Markup``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from evalkit.contracts import CI_METHODS, MetricValue
from evalkit.scoring.estimators import share_interval
from evalkit.store.reader import TaskRead, as_int, as_num, as_str

DASH = "—"
NOT_SET = "not set"  # a setting left to its default (None in the manifest)
TEXT_LIMIT = 3000  # characters kept of one long text (head + tail)
SHORT_LIMIT = 300  # extracted answers, targets, errors in the row header


# ----------------------------------------------------------------------------------------------------------
# Formatting (also registered as Jinja filters)


def letter(i: int) -> str:
    """The label of the ``i``-th run of a comparison: A, B, ... Z, AA, AB, ..."""
    s = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        s = chr(65 + r) + s
    return s


def fmt_num(v: Any, nd: int = 1) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{x:,.{nd}f}"


def fmt_int(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{round(x):,}"


def fmt_ms(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    if abs(x) >= 100:
        return f"{x:,.0f} ms"
    return f"{x:,.1f} ms"


def fmt_pct(v: Any, nd: int = 1) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{100 * x:.{nd}f}%"


def fmt_sig(v: Any) -> str:
    x = as_num(v)
    if x is None:
        return DASH
    return f"{x:.4g}"


def compact_json(v: Any) -> str:
    if isinstance(v, str):
        return v
    try:
        return json.dumps(v, ensure_ascii=False, separators=(", ", ": "), sort_keys=False, default=str)
    except (TypeError, ValueError):
        return str(v)


def short(text: Any, limit: int = SHORT_LIMIT) -> str | None:
    if text is None:
        return None
    s = text if isinstance(text, str) else compact_json(text)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def is_finite(x: Any) -> bool:
    v = as_num(x)
    return v is not None and math.isfinite(v)


# ----------------------------------------------------------------------------------------------------------
# Rows and banners
@dataclass
class KV:
    key: str
    value: str | None
    title: str | None = None  # full value when ``value`` is shortened
    mono: bool = False


@dataclass
class Banner:
    level: str  # "warn" | "info"
    text: str


# ----------------------------------------------------------------------------------------------------------
# Accuracy metrics


@dataclass
class MetricView:
    name: str  # key in summary.json, e.g. "exact_match,strict-match"
    label: str
    value: float | None
    value_str: str
    ci_str: str
    n: int | None
    lo: float | None = None
    hi: float | None = None
    is_fraction: bool = True
    denominator: str = ""  # what the value is a share of, e.g. "19 of 1,319" or "0 of 120 samples (30 problems)"
    note: str = ""  # how the interval was computed, for a tooltip


def metric_label(name: str) -> str:
    metric, _, flt = name.partition(",")
    return f"{metric} · {flt}" if flt else metric


def _denominator(value: float, n: int, clusters: int | None) -> str:
    k = value * n
    count = f"{round(k):,} of {n:,}" if abs(k - round(k)) < 1e-6 else f"n={n:,}"
    if clusters and clusters < n:
        return f"{count} samples ({clusters:,} problems)"
    if clusters and clusters == n:
        return f"{count} problems"
    return count


def metric_view(name: str, m: MetricValue, clusters: int | None = None) -> MetricView:
    """A metric as shown, with the 95% interval the run stored (``ci95``, chosen by scoring/ and named by its
    ``ci_method``). A run dir written before ``ci_method`` was recorded stored a normal interval for every metric;
    a share of those gets the Wilson interval scoring/ now stores (:func:`share_interval`, at the effective sample
    size when its samples come from ``clusters`` problems), so its report reads as a new run's would."""
    value, n, method = as_num(m.value), m.n, m.ci_method
    lo, hi = (as_num(m.ci95[0]), as_num(m.ci95[1])) if m.ci95 is not None else (None, None)
    frac = all(-1e-9 <= x <= 1 + 1e-9 for x in (value, lo, hi) if x is not None)
    denominator = _denominator(value, n, clusters) if frac and value is not None and n else ""
    if method is None and frac and value is not None and n:  # a run dir from before ci_method
        (lo, hi), method = share_interval(value, n, as_num(m.stderr), clusters)
    kind = "Wilson " if method in ("wilson", "wilson-clustered") else ""
    note = CI_METHODS.get(method or "", "")
    if method != m.ci_method:
        note += " (computed by the report: this run dir records no ci_method)"
    f = fmt_pct if frac else fmt_sig
    ci_str = f"{kind}95% CI {f(lo)} – {f(hi)}" if lo is not None and hi is not None else "95% CI " + DASH
    return MetricView(
        name=name,
        label=metric_label(name),
        value=value,
        value_str=f(value),
        ci_str=ci_str,
        n=n,
        lo=lo,
        hi=hi,
        is_fraction=frac,
        denominator=denominator or (f"n={n:,}" if n is not None else "n=" + DASH),
        note=note,
    )


def task_clusters(task: TaskRead) -> int | None:
    """Independent units behind a task's samples (problems of a repeated-sampling task), when recorded."""
    return as_int(task.detail.get("num_problems"))


def metric_views(task: TaskRead) -> list[MetricView]:
    clusters = task_clusters(task)
    return [metric_view(k, v, clusters) for k, v in task.metrics.items()]


def clamp_text(clamp: dict[str, Any]) -> str:
    """A task's ``max_tokens_clamp`` in a sentence: for how many requests max_tokens was lowered, from what to what,
    and to fit what (the parts the record holds)."""
    n = as_int(clamp.get("requests_clamped"))
    asked = clamp.get("requested_max_tokens", clamp.get("requested"))
    low = clamp.get("lowest_max_tokens", clamp.get("clamped_to"))
    length, how = clamp.get("max_model_len"), as_str(clamp.get("prompt_length_from"))
    who = f"for {n:,} request{'' if n == 1 else 's'}" if n is not None else "for some requests"
    span = f", from {asked} to as low as {low}," if asked is not None and low is not None else ""
    fit = f"the server's max_model_len of {length}" if length is not None else "the server's context length"
    how_text = f" (prompt lengths from {how})" if how else ""
    return (
        f"max_tokens was lowered {who}{span} so that prompt and answer fit {fit}{how_text}; those answers may stop "
        "sooner than the others."
    )
